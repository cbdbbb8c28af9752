package iam

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cedar-policy/cedar-go/types"
)

// EntityRef names one Cedar entity by type and id, as in Pool::"acme/a100".
// The id is the whole Cedar id: "acme" for a tenant, "<tenant>/<name or id>"
// for anything that lives in a tenant, "deployment" for the System.
type EntityRef struct {
	// Type is the entity type, such as "Pool".
	Type string
	// ID is the entity's id, such as "acme/a100".
	ID string
}

// String formats the reference in Cedar syntax, User::"acme/alice", the form
// audit events, error messages and policies all use.
func (r EntityRef) String() string { return r.uid().String() }

func (r EntityRef) uid() types.EntityUID {
	return types.NewEntityUID(types.EntityType(r.Type), types.String(r.ID))
}

// ParseEntityRef reads a reference in Cedar syntax, User::"acme/alice", such
// as an audit filter a person typed.
func ParseEntityRef(s string) (EntityRef, error) {
	var uid types.EntityUID
	if err := uid.UnmarshalCedar([]byte(strings.TrimSpace(s))); err != nil {
		return EntityRef{}, fmt.Errorf("parse entity %q: want Type::\"id\", as in User::\"acme/alice\": %w", s, err)
	}
	return EntityRef{Type: string(uid.Type), ID: string(uid.ID)}, nil
}

// TenantRef names a tenant: Tenant::"acme".
func TenantRef(name string) EntityRef { return EntityRef{Type: string(typeTenant), ID: name} }

// ScopedRef names an object that lives in a tenant: ScopedRef("Pool",
// "acme", "a100") is Pool::"acme/a100".
func ScopedRef(typ, tenant, id string) EntityRef {
	return EntityRef{Type: typ, ID: tenant + "/" + id}
}

// SystemRef names the deployment as a whole: System::"deployment".
func SystemRef() EntityRef { return EntityRef{Type: string(typeSystem), ID: systemID} }

// Principal is the caller of an API method: a user or a service account of
// one tenant.
type Principal struct {
	// Type is "User" or "ServiceAccount".
	Type string
	// Tenant is the principal's tenant.
	Tenant string
	// Name is the principal's name, unique in its tenant.
	Name string
}

// Ref returns the principal's entity, User::"acme/alice".
func (p Principal) Ref() EntityRef { return ScopedRef(p.Type, p.Tenant, p.Name) }

// String formats the principal in Cedar syntax, User::"acme/alice".
func (p Principal) String() string { return p.Ref().String() }

// Resource is what an API method acts on.
type Resource struct {
	// Type is the entity type, as declared by the method's authorization
	// option: "System", "Tenant", "User", "Pool", ...
	Type string
	// Tenant is the tenant the resource lives in, or the tenant itself when
	// Type is "Tenant"; empty for the System.
	Tenant string
	// ID is the resource's name or id within its tenant; empty for a
	// Tenant and for the System.
	ID string
	// Parents are parents beyond the tenant, which is always one: the Pool
	// of a Node or Reservation. A User's or ServiceAccount's groups come from
	// the directory and need not be listed.
	Parents []EntityRef
	// Attrs are attributes beyond those the engine derives itself (tenant,
	// and name for the types that have one; pool for a Reservation from its
	// Pool parent), such as a Pool's offeredTo. Values are as in
	// Request.Context. An attribute the schema declares but nobody supplied
	// is missing: a policy that reads it fails to evaluate, which never
	// permits and, for a forbid, denies.
	Attrs map[string]any
}

// Ref returns the resource's entity: System::"deployment", Tenant::"acme",
// or Type::"<tenant>/<id>".
func (r Resource) Ref() EntityRef {
	switch types.EntityType(r.Type) {
	case typeSystem:
		return SystemRef()
	case typeTenant:
		return TenantRef(r.tenantName())
	}
	return ScopedRef(r.Type, r.Tenant, r.ID)
}

// String formats the resource in Cedar syntax, as Ref does.
func (r Resource) String() string { return r.Ref().String() }

// tenantName is the name of a Tenant resource: Tenant, or ID when only that
// was set.
func (r Resource) tenantName() string {
	if r.Tenant != "" {
		return r.Tenant
	}
	return r.ID
}

// Request is one authorization question: may Principal perform Action on
// Resource, given Context?
type Request struct {
	// Principal is the caller.
	Principal Principal
	// Action is the Cedar action, compute:<group>:<verb>.
	Action string
	// Resource is what the call acts on.
	Resource Resource
	// Context holds the request's attributes that policies may test, such
	// as gpus and durationHours for compute:reservations:create. Values are
	// string, int, int64, bool, []string, EntityRef or []EntityRef.
	Context map[string]any
}

// Decision is the engine's answer. Treat its slices as read-only.
type Decision struct {
	// Allow is true only when some permit statement matched and no forbid
	// statement matched or failed to evaluate.
	Allow bool
	// Policies are the ids ("tenant/policy#n", n the statement's 0-based
	// index in its document) of the statements that decided: the permits
	// that allowed, or the forbids that denied. Empty for a denial by
	// default, when nothing permitted the call.
	Policies []string
	// Errors describe statements that failed to evaluate and requests the
	// engine refused to evaluate (unknown action, unknown tenant, a context
	// value of an unsupported type), one line each.
	Errors []string
}

// errUnsupportedValue reports a Go value with no Cedar counterpart.
var errUnsupportedValue = errors.New("unsupported value type")

// cedarValue converts a request's Go value to its Cedar value.
func cedarValue(v any) (types.Value, error) {
	switch v := v.(type) {
	case string:
		return types.String(v), nil
	case int:
		return types.Long(v), nil
	case int64:
		return types.Long(v), nil
	case int32:
		return types.Long(v), nil
	case bool:
		return types.Boolean(v), nil
	case []string:
		vs := make([]types.Value, len(v))
		for i, s := range v {
			vs[i] = types.String(s)
		}
		return types.NewSet(vs...), nil
	case EntityRef:
		return v.uid(), nil
	case []EntityRef:
		vs := make([]types.Value, len(v))
		for i, r := range v {
			vs[i] = r.uid()
		}
		return types.NewSet(vs...), nil
	}
	return nil, fmt.Errorf("%w %T", errUnsupportedValue, v)
}

// cedarRecord converts a request's attribute map to a Cedar record.
func cedarRecord(m map[string]any, into types.RecordMap) error {
	for k, v := range m {
		cv, err := cedarValue(v)
		if err != nil {
			return fmt.Errorf("attribute %q: %w", k, err)
		}
		into[types.String(k)] = cv
	}
	return nil
}
