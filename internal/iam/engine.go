package iam

import (
	"cmp"
	"fmt"
	"iter"
	"slices"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// Engine decides requests against one Directory. It is immutable once built,
// so one Engine serves any number of goroutines without locks.
//
// Each tenant's statements are indexed by their action scope and then by
// their principal scope, so a request evaluates only the statements that
// could match it: those naming its action (or any action) and naming its
// principal, one of its groups, its tenant (or any principal). With a
// thousand statements in a tenant, each granting one group one action, a
// request evaluates a handful.
type Engine struct {
	epoch    int64
	entities entities
	policies map[string]*tenantPolicies // by tenant name
}

// statement is one permit or forbid statement of a policy document.
type statement struct {
	id     cedar.PolicyID // "tenant/policy#n"
	policy *cedar.Policy
	forbid bool
	seq    int // order of appearance in the directory, for stable output
}

// tenantPolicies indexes one tenant's statements.
type tenantPolicies struct {
	byAction  map[types.EntityUID]*principalIndex
	anyAction principalIndex
}

// principalIndex indexes statements by the entity their principal scope
// names: `principal == X`, `principal in X` and `principal is T in X` are
// filed under X; unconstrained and `principal is T` ones match anyone.
type principalIndex struct {
	byEntity map[types.EntityUID][]*statement
	any      []*statement
}

func (pi *principalIndex) add(s *statement, scope xast.IsPrincipalScopeNode) {
	var key types.EntityUID
	switch sc := scope.(type) {
	case xast.ScopeTypeEq:
		key = sc.Entity
	case xast.ScopeTypeIn:
		key = sc.Entity
	case xast.ScopeTypeIsIn:
		key = sc.Entity
	default:
		pi.any = append(pi.any, s)
		return
	}
	if pi.byEntity == nil {
		pi.byEntity = make(map[types.EntityUID][]*statement)
	}
	pi.byEntity[key] = append(pi.byEntity[key], s)
}

func (tp *tenantPolicies) add(s *statement) {
	ast := (*xast.Policy)(s.policy.AST())
	var actions []types.EntityUID
	switch sc := ast.Action.(type) {
	case xast.ScopeTypeEq:
		actions = []types.EntityUID{sc.Entity}
	case xast.ScopeTypeIn:
		// The schema declares no action groups, so `action in X` holds
		// exactly when the action is X.
		actions = []types.EntityUID{sc.Entity}
	case xast.ScopeTypeInSet:
		actions = sc.Entities
	default:
		tp.anyAction.add(s, ast.Principal)
		return
	}
	seen := make(map[types.EntityUID]bool, len(actions))
	for _, a := range actions {
		if seen[a] {
			continue // filed once, or the statement would be evaluated twice
		}
		seen[a] = true
		pi := tp.byAction[a]
		if pi == nil {
			pi = &principalIndex{}
			tp.byAction[a] = pi
		}
		pi.add(s, ast.Principal)
	}
}

// NewEngine compiles every policy of d and indexes it. A document that no
// longer parses (it was valid when it was put, but the parser changed since),
// or that is over the limits ValidatePolicy enforces, is skipped and
// reported in the returned errors, with anything else odd about d; none of
// them is fatal, since one tenant's broken policy must not lock every tenant
// out. The engine is always usable.
func NewEngine(d Directory) (*Engine, []error) {
	e := &Engine{
		epoch:    d.Epoch,
		entities: newEntities(d),
		policies: make(map[string]*tenantPolicies),
	}
	var errs []error
	if e.entities.platformErr != nil {
		errs = append(errs, e.entities.platformErr)
	}
	seq := 0
	for _, p := range d.Policies {
		// The API refuses documents over the limits; one that reached the
		// store some other way must not crash every server's reload.
		if len(p.Body) > MaxPolicyBytes {
			errs = append(errs, fmt.Errorf("iam: policy %s/%s is over %d bytes and is skipped", p.Tenant, p.Name, MaxPolicyBytes))
			continue
		}
		if prob, deep := tooDeep(lex(p.Body)); deep {
			errs = append(errs, fmt.Errorf("iam: policy %s/%s is skipped: %s", p.Tenant, p.Name, prob))
			continue
		}
		list, err := cedar.NewPolicyListFromBytes(p.Tenant+"/"+p.Name, []byte(p.Body))
		if err != nil {
			errs = append(errs, fmt.Errorf("iam: policy %s/%s does not parse and is skipped: %w", p.Tenant, p.Name, err))
			continue
		}
		tp := e.policies[p.Tenant]
		if tp == nil {
			tp = &tenantPolicies{byAction: make(map[types.EntityUID]*principalIndex)}
			e.policies[p.Tenant] = tp
		}
		for n, pol := range list {
			tp.add(&statement{
				id:     cedar.PolicyID(fmt.Sprintf("%s/%s#%d", p.Tenant, p.Name, n)),
				policy: pol,
				forbid: pol.Effect() == cedar.Forbid,
				seq:    seq,
			})
			seq++
		}
	}
	return e, errs
}

// Epoch returns the authorization epoch of the directory the engine was
// built from.
func (e *Engine) Epoch() int64 { return e.epoch }

// candidates is the statements one request evaluates; it is the policy
// iterator handed to Cedar.
type candidates []*statement

// All yields the candidates in directory order.
func (c candidates) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, s := range c {
			if !yield(s.id, s.policy) {
				return
			}
		}
	}
}

// collect appends the statements of tp that could apply to action and to a
// principal whose ancestors (itself included) are keys.
func (c candidates) collect(tp *tenantPolicies, action types.EntityUID, keys []types.EntityUID) candidates {
	if tp == nil {
		return c
	}
	for _, pi := range []*principalIndex{tp.byAction[action], &tp.anyAction} {
		if pi == nil {
			continue
		}
		c = append(c, pi.any...)
		if pi.byEntity == nil {
			continue
		}
		for _, k := range keys {
			c = append(c, pi.byEntity[k]...)
		}
	}
	return c
}

// requestEntities answers the evaluator's entity lookups for one request:
// the request's principal and resource first, then the directory.
type requestEntities struct {
	dir       *entities
	principal types.Entity
	resource  types.Entity
}

// Get implements types.EntityGetter.
func (re *requestEntities) Get(uid types.EntityUID) (types.Entity, bool) {
	switch uid {
	case re.principal.UID:
		return re.principal, true
	case re.resource.UID:
		return re.resource, true
	}
	return re.dir.get(uid)
}

func deny(format string, args ...any) Decision {
	return Decision{Errors: []string{fmt.Sprintf(format, args...)}}
}

// Authorize decides r. It never fails: a request it cannot evaluate (an
// unknown action or tenant, a resource type the action does not apply to, a
// context value of an unsupported type) is denied with the reason in Errors.
func (e *Engine) Authorize(r Request) Decision {
	action := types.NewEntityUID(typeAction, types.String(r.Action))
	at, ok := cschema.actions[action]
	switch {
	case !ok:
		return deny("unknown action %q", r.Action)
	case !at.principals[types.EntityType(r.Principal.Type)]:
		return deny("action %q does not apply to principals of type %q", r.Action, r.Principal.Type)
	case !at.resources[types.EntityType(r.Resource.Type)]:
		return deny("action %q does not apply to resources of type %q", r.Action, r.Resource.Type)
	}
	if _, ok := e.entities.tenants[r.Principal.Tenant]; !ok {
		return deny("unknown tenant %q of principal %s", r.Principal.Tenant, r.Principal)
	}
	principal := e.principalEntity(r.Principal)
	resource, err := e.resourceEntity(r.Resource)
	if err != nil {
		return deny("resource %s: %v", r.Resource, err)
	}
	ctx := types.RecordMap{}
	if err := cedarRecord(r.Context, ctx); err != nil {
		return deny("context: %v", err)
	}

	// The principal's ancestors, itself included, are the keys its
	// statements are filed under. Groups are never nested, so its parents
	// are all of them.
	keys := make([]types.EntityUID, 0, principal.Parents.Len()+1)
	keys = append(keys, principal.UID)
	for p := range principal.Parents.All() {
		keys = append(keys, p)
	}
	var cands candidates
	if pt := e.entities.platform; pt != "" {
		cands = cands.collect(e.policies[pt], action, keys)
	}
	if r.Principal.Tenant != e.entities.platform {
		cands = cands.collect(e.policies[r.Principal.Tenant], action, keys)
	}
	if len(cands) == 0 {
		return Decision{}
	}
	slices.SortFunc(cands, func(a, b *statement) int { return cmp.Compare(a.seq, b.seq) })

	req := cedar.Request{Principal: principal.UID, Action: action, Resource: resource.UID, Context: types.NewRecord(ctx)}
	allowed, diag := cedar.Authorize(cands, &requestEntities{dir: &e.entities, principal: principal, resource: resource}, req)
	return decide(bool(allowed), diag, cands)
}

// decide turns Cedar's answer into a Decision, failing closed on forbid
// statements that could not be evaluated: Cedar skips a statement whose
// condition errs, which for a forbid would quietly lift a restriction (a
// ceiling on gpus reading a context value the caller forgot to send).
func decide(allow bool, diag cedar.Diagnostic, cands candidates) Decision {
	var d Decision
	var erredForbids []string
	for _, de := range diag.Errors {
		d.Errors = append(d.Errors, fmt.Sprintf("%s: %s", de.PolicyID, de.Message))
		if i := slices.IndexFunc(cands, func(s *statement) bool { return s.id == de.PolicyID }); i >= 0 && cands[i].forbid {
			erredForbids = append(erredForbids, string(de.PolicyID))
		}
	}
	if len(erredForbids) > 0 {
		var matchedForbids []string
		if !allow {
			for _, r := range diag.Reasons {
				matchedForbids = append(matchedForbids, string(r.PolicyID))
			}
		}
		d.Policies = append(matchedForbids, erredForbids...)
		return d
	}
	d.Allow = allow
	for _, r := range diag.Reasons {
		d.Policies = append(d.Policies, string(r.PolicyID))
	}
	return d
}

// principalEntity builds the caller's entity: its groups and tenant as
// parents, tenant and name as attributes.
func (e *Engine) principalEntity(p Principal) types.Entity {
	uid := scopedUID(types.EntityType(p.Type), p.Tenant, p.Name)
	if m, ok := e.entities.members[p.Tenant+"/"+p.Name]; ok {
		return types.Entity{UID: uid, Parents: m.parents, Attributes: m.attrs}
	}
	return types.Entity{
		UID:        uid,
		Parents:    e.entities.tenantOnly[p.Tenant],
		Attributes: types.NewRecord(types.RecordMap{"tenant": tenantUID(p.Tenant), "name": types.String(p.Name)}),
	}
}

// resourceEntity builds the request's resource: what the directory or the
// resource's id says about it, plus the parents and attributes the caller
// supplied. It builds each map once: this is on every decision's path.
func (e *Engine) resourceEntity(r Resource) (types.Entity, error) {
	t := types.EntityType(r.Type)
	var ent types.Entity
	var attrs types.RecordMap // nil while ent.Attributes stands as it is
	switch t {
	case typeSystem:
		ent = types.Entity{UID: types.NewEntityUID(typeSystem, systemID)}
	case typeTenant:
		name := r.tenantName()
		if name == "" {
			return types.Entity{}, fmt.Errorf("a Tenant resource needs the tenant's name")
		}
		var ok bool
		if ent, ok = e.entities.tenants[name]; !ok {
			ent = tenantEntity(name, false) // a tenant that does not exist is no platform
		}
	default:
		if r.Tenant == "" || r.ID == "" {
			return types.Entity{}, fmt.Errorf("a %s resource needs its tenant and id", r.Type)
		}
		ent.UID = scopedUID(t, r.Tenant, r.ID)
		ent.Parents = e.entities.tenantOnly[r.Tenant]
		if m, ok := e.entities.members[r.Tenant+"/"+r.ID]; ok && (t == typeUser || t == typeServiceAccount) {
			ent.Parents = m.parents
		} else if ent.Parents.Len() == 0 {
			ent.Parents = types.NewEntityUIDSet(tenantUID(r.Tenant)) // a tenant the directory lacks
		}
		attrs = scopedAttrs(t, r.Tenant, r.ID, len(r.Attrs))
	}
	if len(r.Parents) > 0 {
		parents := make([]types.EntityUID, 0, ent.Parents.Len()+len(r.Parents))
		parents = slices.AppendSeq(parents, ent.Parents.All())
		for _, p := range r.Parents {
			parents = append(parents, p.uid())
		}
		ent.Parents = types.NewEntityUIDSet(parents...)
		// A reservation's pool is its Pool parent, unless the caller's
		// attributes say otherwise.
		if cschema.hasAttr(t, "pool") {
			if i := slices.IndexFunc(r.Parents, func(p EntityRef) bool { return types.EntityType(p.Type) == typePool }); i >= 0 {
				if attrs == nil {
					attrs = ent.Attributes.Map()
				}
				attrs["pool"] = r.Parents[i].uid()
			}
		}
	}
	if len(r.Attrs) > 0 && attrs == nil {
		attrs = ent.Attributes.Map()
		if attrs == nil {
			attrs = make(types.RecordMap, len(r.Attrs))
		}
	}
	if attrs != nil {
		if err := cedarRecord(r.Attrs, attrs); err != nil {
			return types.Entity{}, err
		}
		ent.Attributes = types.NewRecord(attrs)
	}
	return ent, nil
}
