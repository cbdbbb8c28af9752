package api

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/internal/iam"
)

// Call is what the authorizer established about one admitted call. Handlers
// read it instead of re-deriving the caller or the target tenant.
type Call struct {
	// Method is the API method called.
	Method Method
	// Caller is the authenticated principal.
	Caller iam.Principal
	// Platform reports whether the caller belongs to the platform tenant,
	// which sees every tenant.
	Platform bool
	// Resource is what the call acts on; Resource.Tenant is the request's
	// tenant with the caller's own filled in when the request left it empty.
	Resource iam.Resource
	// Decision is the policy decision that admitted the call.
	Decision iam.Decision
	// TokenID and TokenExpires are the API token the caller presented.
	TokenID      string
	TokenExpires time.Time
	// RequestID matches the X-Request-Id response header.
	RequestID string
	// AuditResource, when a handler sets it, names the resource in the audit
	// event instead of Resource: a create records what it created.
	AuditResource string

	// epoch is the authorization epoch the call was decided at: further
	// decisions for the same call (which events it may read) use it too.
	epoch int64

	// extendTo is the new end of a reservation an extension asks for,
	// as the policy decision saw it.
	extendTo time.Time

	// audited is set once the call's audit event is written.
	audited bool
}

type callKey struct{}

func withCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// callFrom returns the admitted call ctx belongs to. Handlers run only after
// admission, so a missing call is a wiring bug and panics loudly in tests.
func callFrom(ctx context.Context) *Call {
	c, ok := ctx.Value(callKey{}).(*Call)
	if !ok {
		panic("api: handler ran without an admitted call")
	}
	return c
}

// tenant is the tenant the call targets.
func (c *Call) tenant() string { return c.Resource.Tenant }
