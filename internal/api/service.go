package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/internal/store"
)

// base is what every service handler shares: the store and the log.
type base struct {
	store  *store.Store
	logger *slog.Logger
}

// mutate runs fn and the audit event that records it in one transaction, so
// a change is never without its record nor a record without its change. A
// change that fails is still recorded, in its own transaction, with why.
//
// Concurrent calls share a transaction (store.InSharedTx), each in its own
// savepoint: one commit for many, and placements in one pool queue behind
// each other instead of failing on each other's serialization conflicts.
func (b *base) mutate(ctx context.Context, fn func(ctx context.Context, q store.Querier) error) error {
	call := callFrom(ctx)
	call.audited = true
	err := b.store.InSharedTx(ctx, func(ctx context.Context, q store.Querier) error {
		if err := fn(ctx, q); err != nil {
			return err
		}
		_, err := q.InsertAuditEvent(ctx, call.auditEvent("ok"))
		return err
	})
	if err != nil {
		if _, aerr := b.store.InsertAuditEvent(context.WithoutCancel(ctx), call.auditEvent("failed: "+outcome(err))); aerr != nil {
			b.logger.ErrorContext(ctx, "write audit event", "request_id", call.RequestID, "err", aerr)
		}
	}
	return err
}

// auditEvent records an admitted call with the given outcome.
func (c *Call) auditEvent(reason string) store.AuditEvent {
	res := c.AuditResource
	if res == "" {
		res = c.Resource.String()
	}
	return store.AuditEvent{
		Tenant:    c.auditTenant(),
		Principal: c.Caller.String(),
		Action:    c.Method.Authorization.GetAction(),
		Resource:  res,
		Decision:  "allow",
		Policies:  c.Decision.Policies,
		Reason:    reason,
		RequestID: c.RequestID,
	}
}

// auditTenant is the tenant whose log records the call: the resource's,
// except that a customer's use of another tenant's shared pool is recorded
// in the customer's own log (where its admins look), and a call on the
// deployment as a whole in the caller's.
func (c *Call) auditTenant() string {
	t := c.Resource.Tenant
	if t == "" || (!c.Platform && t != c.Caller.Tenant) {
		return c.Caller.Tenant
	}
	return t
}

// outcome names how a call failed, as the code the caller will see.
func outcome(err error) string {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code().String()
	case errors.Is(err, store.ErrNotFound):
		return connect.CodeNotFound.String()
	case errors.Is(err, store.ErrConflict):
		return connect.CodeAlreadyExists.String()
	}
	return connect.CodeInternal.String()
}

// Names are keys that policies refer to, so they are short, lowercase and
// free of anything Cedar or a shell would need to quote.
var (
	tenantNamePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)
	objectNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)
)

// checkName validates a name of the given kind for a create call.
func checkName(kind, name string, tenant bool) error {
	p, rule := objectNamePattern, "1 to 64 lowercase letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
	if tenant {
		p, rule = tenantNamePattern, "1 to 40 lowercase letters, digits or '-', starting with a letter"
	}
	if !p.MatchString(name) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s name %q is not valid: use %s", kind, name, rule))
	}
	return nil
}

// checkLen bounds a free-text field.
func checkLen(field, s string, max int) error {
	if len(s) > max {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is %d bytes long; the limit is %d", field, len(s), max))
	}
	return nil
}

// notFoundAs maps a store ErrNotFound to the not_found answer for r, and
// passes other errors through.
func notFoundAs(err error, typ, tenant, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFoundEntity(typ, tenant, id)
	}
	return err
}

func notFoundEntity(typ, tenant, id string) error {
	return notFound(resourceFor(typ, tenant, id))
}

// alreadyExists maps a store ErrConflict to already_exists for the named object.
func alreadyExists(err error, what string) error {
	if errors.Is(err, store.ErrConflict) {
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", what))
	}
	return err
}
