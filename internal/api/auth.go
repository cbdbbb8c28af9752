package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
)

// authorizer is the one place a call is admitted, in this order: the method
// must declare its permission; the caller must present a valid API token;
// the request must name its resource; the resource must belong to the
// caller's tenant (unless the caller is the platform), else the call answers
// not_found exactly as for a missing object; and Cedar must permit it
// (except compute:self:read, a caller asking who it is). Every
// refusal is written to the audit log. Anything unexpected denies.
type authorizer struct {
	methods map[string]Method // read-only after construction
	store   *store.Store
	authz   *iam.Authorizer
	logger  *slog.Logger
}

var _ connect.Interceptor = (*authorizer)(nil)

// touchEvery bounds how often a token's last use is written: once a minute
// is precise enough to tell a live token from a dead one, and keeps reads
// from turning into writes.
const touchEvery = time.Minute

// admit decides one call. msg is the request (nil for a stream, whose
// messages arrive later).
func (a *authorizer) admit(ctx context.Context, procedure string, header http.Header, msg proto.Message) (*Call, error) {
	call := &Call{RequestID: requestid.From(ctx)}
	m, ok := a.methods[procedure]
	if !ok || m.Authorization == nil || m.Authorization.GetAction() == "" {
		a.audit(ctx, call, "", procedure, "permission_denied: the method declares no authorization", nil)
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("this method declares no authorization and is denied"))
	}
	call.Method = m
	action := m.Authorization.GetAction()

	caller, auth, err := a.authenticate(ctx, header)
	if err != nil {
		a.audit(ctx, call, "", action, "unauthenticated: "+err.Error(), nil)
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	platform, epoch := auth.Platform, auth.Epoch
	call.Caller, call.Platform, call.epoch = caller, platform, epoch
	call.TokenID, call.TokenExpires = auth.Token.ID, auth.Token.ExpiresAt

	// Bad input is refused before anything reads it, and a refused
	// mutation is audited like any other.
	refuse := func(err error) (*Call, error) {
		if m.Mutating {
			a.audit(ctx, call, caller.Tenant, action, "invalid_argument: "+err.Error(), nil)
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if msg != nil {
		if err := checkRequest(msg.ProtoReflect()); err != nil {
			return refuse(err)
		}
	}
	res, err := resolveResource(m, msg, caller)
	if err != nil {
		return refuse(err)
	}
	call.Resource = res

	var offeredTo []string
	if res.Type == typePool {
		offers, err := a.store.ListPoolOffers(ctx, res.Tenant, res.ID)
		if err != nil {
			return nil, fmt.Errorf("authorize %s: %w", procedure, err)
		}
		refs := make([]iam.EntityRef, len(offers))
		for i, o := range offers {
			offeredTo = append(offeredTo, o.Tenant)
			refs[i] = iam.TenantRef(o.Tenant)
		}
		res.Attrs = map[string]any{"offeredTo": refs}
		call.Resource = res
	}
	if !platform && !a.visible(res, caller, action, offeredTo, msg) {
		// Recorded in the caller's tenant: the other tenant must not learn
		// of the caller either.
		a.audit(ctx, call, caller.Tenant, action, "not_found: another tenant's resource", nil)
		return nil, notFound(res)
	}

	if action == actionSelfRead {
		// Knowing oneself needs no policy: a token's holder learns only
		// what the token already is. Nothing else skips Cedar.
		call.Decision = iam.Decision{Allow: true}
		return call, nil
	}

	rc, err := a.requestContext(ctx, call, msg)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			a.audit(ctx, call, caller.Tenant, action, "not_found: another tenant's resource", nil)
		}
		return nil, err
	}
	dec, err := a.authz.Authorize(ctx, epoch, iam.Request{
		Principal: caller,
		Action:    action,
		Resource:  res,
		Context:   rc,
	})
	if err != nil {
		return nil, fmt.Errorf("authorize %s: %w", procedure, err) // the error boundary logs it and answers internal
	}
	call.Decision = dec
	if !dec.Allow {
		reason := "permission_denied: no policy permits it"
		if len(dec.Policies) > 0 {
			reason = "permission_denied: forbidden by " + strings.Join(dec.Policies, ", ")
		}
		a.audit(ctx, call, call.auditTenant(), action, reason, dec.Policies)
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s may not %s on %s: %s", caller.String(), action, res.String(), strings.TrimPrefix(reason, "permission_denied: ")))
	}
	return call, nil
}

// authenticate checks the bearer token and returns whom it acts as and what
// the store read with it: the token, whether its tenant is the platform,
// and the authorization epoch.
func (a *authorizer) authenticate(ctx context.Context, header http.Header) (iam.Principal, store.TokenAuth, error) {
	v := header.Get("Authorization")
	if v == "" {
		return iam.Principal{}, store.TokenAuth{}, errors.New("no API token: send one as 'Authorization: Bearer bc_...' (the CLI reads BETTER_COMPUTE_TOKEN or its context)")
	}
	raw, ok := strings.CutPrefix(v, "Bearer ")
	if !ok {
		return iam.Principal{}, store.TokenAuth{}, errors.New("the Authorization header is not 'Bearer <token>'")
	}
	id, hash, err := iam.ParseToken(strings.TrimSpace(raw))
	if err != nil {
		return iam.Principal{}, store.TokenAuth{}, err
	}
	auth, err := a.store.AuthenticateToken(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !iam.TokenHashEqual(auth.Token.SecretHash, hash)) {
		return iam.Principal{}, store.TokenAuth{}, errors.New("unknown API token (it may have belonged to a deleted principal); create a new one")
	}
	if err != nil {
		return iam.Principal{}, store.TokenAuth{}, fmt.Errorf("authenticate: %w", err)
	}
	t := auth.Token
	switch {
	case !t.RevokedAt.IsZero():
		return iam.Principal{}, store.TokenAuth{}, fmt.Errorf("API token %s was revoked at %s; create a new one", t.ID, t.RevokedAt.Format(time.RFC3339))
	case !auth.Now.Before(t.ExpiresAt):
		return iam.Principal{}, store.TokenAuth{}, fmt.Errorf("API token %s expired at %s; create a new one", t.ID, t.ExpiresAt.Format(time.RFC3339))
	}
	if auth.Now.Sub(t.LastUsedAt) >= touchEvery {
		if err := a.store.TouchToken(ctx, t.ID); err != nil {
			a.logger.WarnContext(ctx, "record token use", "token", t.ID, "err", err)
		}
	}
	typ := typeUser
	if auth.Kind == store.PrincipalServiceAccount {
		typ = typeServiceAccount
	}
	return iam.Principal{Type: typ, Tenant: t.Tenant, Name: t.Principal}, auth, nil
}

// resolveResource names the entity a request acts on from the method's
// declared resource type and id field. A request's empty tenant field means
// the caller's own tenant.
func resolveResource(m Method, msg proto.Message, caller iam.Principal) (iam.Resource, error) {
	str := func(field string) string {
		if msg == nil || field == "" {
			return ""
		}
		r := msg.ProtoReflect()
		fd := r.Descriptor().Fields().ByName(protoreflect.Name(field))
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
			return ""
		}
		return r.Get(fd).String()
	}
	tenant := str("tenant")
	if tenant == "" {
		tenant = caller.Tenant
	}
	a := m.Authorization
	if pt := str("pool_tenant"); pt != "" && a.GetResource() == typePool {
		tenant = pt
	}
	switch a.GetResource() {
	case typeSystem:
		return iam.Resource{Type: typeSystem}, nil
	case typeTenant:
		if f := a.GetResourceIdField(); f != "" {
			name := str(f)
			if name == "" {
				return iam.Resource{}, fmt.Errorf("%s is required: name the tenant", f)
			}
			return iam.Resource{Type: typeTenant, Tenant: name}, nil
		}
		return iam.Resource{Type: typeTenant, Tenant: tenant}, nil
	default:
		f := a.GetResourceIdField()
		id := str(f)
		if id == "" {
			return iam.Resource{}, fmt.Errorf("%s is required: name the %s", f, strings.ToLower(a.GetResource()))
		}
		return iam.Resource{Type: a.GetResource(), Tenant: tenant, ID: id}, nil
	}
}

// visible reports whether a customer caller may know of res: it is in the
// caller's tenant, or it is another tenant's pool offered to the caller's
// (offeredTo) and the action reserves from it. A request that names a pool
// of another tenant must still act for the caller's own tenant.
func (a *authorizer) visible(res iam.Resource, caller iam.Principal, action string, offeredTo []string, msg proto.Message) bool {
	if res.Type == typePool {
		if t := stringField(msg, "tenant"); t != "" && t != caller.Tenant {
			return false
		}
	}
	if res.Tenant == "" || res.Tenant == caller.Tenant {
		return true
	}
	return res.Type == typePool && action == actionReserve && slices.Contains(offeredTo, caller.Tenant)
}

// actionSelfRead is the one action every authenticated caller may perform
// on its own tenant without a policy: WhoAmI.
const actionSelfRead = "compute:self:read"

// actionReserve is the one action that reaches another tenant's pool, when
// that pool is offered to the caller's tenant.
const actionReserve = "compute:reservations:create"

// stringField returns msg's string field name, or "" when it has none.
func stringField(msg proto.Message, name string) string {
	if msg == nil {
		return ""
	}
	r := msg.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return r.Get(fd).String()
}

// requestContext is the request's attributes that policies may test, in the
// Cedar context. Identity methods have none; reserving and extending give
// what they ask for, hours rounded up. For an extension it reads the
// reservation, which must belong to the call's tenant (else not_found), and
// records the new end in call for the handler, so that the end the policy
// saw is the end written.
func (a *authorizer) requestContext(ctx context.Context, call *Call, msg proto.Message) (map[string]any, error) {
	switch m := msg.(type) {
	case *apiv1.CreateReservationRequest:
		now, err := a.store.Now(ctx)
		if err != nil {
			return nil, err
		}
		d := m.GetDuration().AsDuration()
		if m.GetUntil() != nil {
			d = m.GetUntil().AsTime().Sub(now)
		}
		return map[string]any{
			"gpus":          int64(m.GetGpus()),
			"durationHours": ceilHours(d),
			"gpuModel":      m.GetModel(),
			"pool":          call.Resource.Tenant + "/" + m.GetPool(),
		}, nil
	case *apiv1.ExtendReservationRequest:
		r, err := a.store.GetReservation(ctx, m.GetId())
		if errors.Is(err, store.ErrNotFound) || (err == nil && r.Tenant != call.Resource.Tenant) {
			return nil, notFound(call.Resource)
		}
		if err != nil {
			return nil, err
		}
		end := r.EndsAt.Add(m.GetDuration().AsDuration())
		if m.GetUntil() != nil {
			end = m.GetUntil().AsTime()
		}
		call.extendTo = end
		return map[string]any{
			"gpus":               int64(r.GPUs),
			"durationHours":      ceilHours(end.Sub(r.EndsAt)),
			"totalDurationHours": ceilHours(end.Sub(r.CreatedAt)),
			"gpuModel":           r.ModelKey,
			"pool":               r.PoolTenant + "/" + r.Pool,
		}, nil
	}
	return nil, nil
}

// ceilHours is d in whole hours, rounded up; 0 for a negative d.
func ceilHours(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Hour - 1) / time.Hour)
}

// notFound is the answer for a resource that does not exist or that the
// caller may not know exists; the two are indistinguishable on purpose.
func notFound(r iam.Resource) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s not found", r.String()))
}

// audit records a refused call in its own transaction; the refusal stands
// even if recording it fails.
func (a *authorizer) audit(ctx context.Context, call *Call, tenant, action, reason string, policies []string) {
	if tenant == "" {
		// A refusal of a deployment-wide action belongs to the caller's tenant.
		tenant = call.Caller.Tenant
	}
	e := store.AuditEvent{
		Tenant:    tenant,
		Action:    action,
		Decision:  "deny",
		Policies:  policies,
		Reason:    reason,
		RequestID: call.RequestID,
	}
	if call.Caller.Name != "" {
		e.Principal = call.Caller.String()
	}
	if call.Resource.Type != "" {
		e.Resource = call.Resource.String()
	}
	if _, err := a.store.InsertAuditEvent(context.WithoutCancel(ctx), e); err != nil {
		a.logger.ErrorContext(ctx, "write audit event", "request_id", call.RequestID, "err", err)
	}
}

// auditFailure records a mutating call that failed before its handler wrote
// an audit event (bad input refused up front), so that every mutating call
// leaves one, whatever the handler does.
func (a *authorizer) auditFailure(ctx context.Context, call *Call, err error) {
	if err == nil || !call.Method.Mutating || call.audited {
		return
	}
	if _, aerr := a.store.InsertAuditEvent(context.WithoutCancel(ctx), call.auditEvent("failed: "+outcome(err))); aerr != nil {
		a.logger.ErrorContext(ctx, "write audit event", "request_id", call.RequestID, "err", aerr)
	}
}

// WrapUnary admits unary calls.
func (a *authorizer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		msg, _ := req.Any().(proto.Message)
		call, err := a.admit(ctx, req.Spec().Procedure, req.Header(), msg)
		if err != nil {
			return nil, err
		}
		res, err := next(withCall(ctx, call), req)
		a.auditFailure(ctx, call, err)
		if !call.Method.Mutating && connect.CodeOf(err) == connect.CodePermissionDenied {
			// A read the policies allowed but the handler refused (a
			// customer asking for all_tenants) is a denial too.
			a.audit(ctx, call, call.auditTenant(), call.Method.Authorization.GetAction(), "permission_denied: "+errorMessage(err), nil)
		}
		return res, err
	}
}

// WrapStreamingClient leaves client streams alone: the server only handles.
func (a *authorizer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler admits streaming calls on their headers.
func (a *authorizer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		call, err := a.admit(ctx, conn.Spec().Procedure, conn.RequestHeader(), nil)
		if err != nil {
			return err
		}
		err = next(withCall(ctx, call), conn)
		a.auditFailure(ctx, call, err)
		return err
	}
}

// errorMessage is err's message without Connect's code prefix.
func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}
