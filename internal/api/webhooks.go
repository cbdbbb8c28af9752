package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// maxWebhooksPerTenant bounds how many webhooks one tenant has: each is a
// stream of outbound requests the control plane makes.
const maxWebhooksPerTenant = 50

// webhookService manages webhooks; the worker (internal/webhooks) delivers
// them, and sends the test events.
type webhookService struct {
	base
	worker *webhooks.Worker
	// authz is the API's authorizer, which also decides which kinds of
	// events a webhook's creator may list, as the events API does.
	authz *authorizer
}

// checkEventScope refuses patterns that reach a kind of event the caller
// may not list in the call's tenant, as the events API decides it: the
// worker sends every matching event to the URL, and following events must
// never show more than listing would. The refusal is audited as a denial.
// The check holds at creation only; docs/webhooks.md says what a later
// loss of permission does.
func (s *webhookService) checkEventScope(ctx context.Context, call *Call, patterns []string) error {
	readable, err := s.authz.readableKinds(ctx, call)
	if err != nil {
		return err
	}
	for _, p := range patterns {
		sel, err := parseEventTypes([]string{p})
		if err != nil {
			return err
		}
		var missing []string
		for _, k := range sel.narrow(store.EventKinds) {
			if !slices.Contains(readable, k) {
				missing = append(missing, eventKindActions[k])
			}
		}
		if len(missing) > 0 {
			msg := fmt.Sprintf("events %q need %s on tenant %s, which you may not perform", p, strings.Join(missing, ", "), call.tenant())
			s.authz.audit(ctx, call, call.auditTenant(), call.Method.Authorization.GetAction(), "permission_denied: "+msg, nil)
			call.audited = true // the denial is the call's record
			return connect.NewError(connect.CodePermissionDenied, errors.New(msg))
		}
	}
	return nil
}

var _ apiv1connect.WebhookServiceHandler = (*webhookService)(nil)

func (s *webhookService) CreateWebhook(ctx context.Context, req *connect.Request[apiv1.CreateWebhookRequest]) (*connect.Response[apiv1.CreateWebhookResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	patterns, err := webhooks.CheckPatterns(m.GetEvents())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := s.checkEventScope(ctx, callFrom(ctx), patterns); err != nil {
		return nil, err
	}
	// Resolved before the transaction: a slow DNS answer must not hold it.
	url, err := s.worker.URLs.CheckURL(ctx, m.GetUrl())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	id := newWebhookID()
	callFrom(ctx).AuditResource = resourceFor(typeWebhook, tenant, id).String()
	// The row keeps the secret sealed for this id; the caller sees it once,
	// in this answer.
	secret := webhooks.NewSecret()
	sealed, err := s.worker.SealSecret(id, secret)
	if err != nil {
		return nil, err
	}
	var w store.Webhook
	err = s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		existing, err := q.ListWebhooks(ctx, tenant)
		if err != nil {
			return err
		}
		if len(existing) >= maxWebhooksPerTenant {
			return connect.NewError(connect.CodeResourceExhausted, errors.New("tenant "+tenant+" has "+strconv.Itoa(len(existing))+" webhooks, the most it may have; delete one first"))
		}
		w, err = q.CreateWebhook(ctx, store.Webhook{ID: id, Tenant: tenant, URL: url, Events: patterns, Secret: sealed})
		return notFoundAs(err, typeTenant, tenant, tenant)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateWebhookResponse{Webhook: webhookProto(w), Secret: string(secret)}), nil
}

// newWebhookID returns a new webhook id: wh_ and 16 hex digits.
func newWebhookID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "wh_" + hex.EncodeToString(b)
}

// getWebhook reads a webhook by id and answers not_found unless it belongs
// to the call's tenant: an id alone must not reach across tenants.
func getWebhook(ctx context.Context, q store.Querier, tenant, id string) (store.Webhook, error) {
	w, err := q.GetWebhook(ctx, id)
	if err == nil && w.Tenant != tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Webhook{}, notFoundAs(err, typeWebhook, tenant, id)
	}
	return w, nil
}

func (s *webhookService) ListWebhooks(ctx context.Context, _ *connect.Request[apiv1.ListWebhooksRequest]) (*connect.Response[apiv1.ListWebhooksResponse], error) {
	ws, err := s.store.ListWebhooks(ctx, callFrom(ctx).tenant())
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListWebhooksResponse{}
	for _, w := range ws {
		res.Webhooks = append(res.Webhooks, webhookProto(w))
	}
	return connect.NewResponse(res), nil
}

func (s *webhookService) GetWebhook(ctx context.Context, req *connect.Request[apiv1.GetWebhookRequest]) (*connect.Response[apiv1.GetWebhookResponse], error) {
	w, err := getWebhook(ctx, s.store, callFrom(ctx).tenant(), req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetWebhookResponse{Webhook: webhookProto(w)}), nil
}

func (s *webhookService) DeleteWebhook(ctx context.Context, req *connect.Request[apiv1.DeleteWebhookRequest]) (*connect.Response[apiv1.DeleteWebhookResponse], error) {
	tenant, id := callFrom(ctx).tenant(), req.Msg.GetId()
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := getWebhook(ctx, q, tenant, id); err != nil {
			return err
		}
		return notFoundAs(q.DeleteWebhook(ctx, id), typeWebhook, tenant, id)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeleteWebhookResponse{}), nil
}

func (s *webhookService) EnableWebhook(ctx context.Context, req *connect.Request[apiv1.EnableWebhookRequest]) (*connect.Response[apiv1.EnableWebhookResponse], error) {
	tenant, id := callFrom(ctx).tenant(), req.Msg.GetId()
	var w store.Webhook
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := getWebhook(ctx, q, tenant, id); err != nil {
			return err
		}
		var err error
		w, err = q.EnableWebhook(ctx, id)
		return notFoundAs(err, typeWebhook, tenant, id)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.EnableWebhookResponse{Webhook: webhookProto(w)}), nil
}

// defaultKeepPrevious is how long a rotated secret keeps signing when the
// caller does not say: a day is time to roll the new secret out to
// receivers, and little for a leaked one to be of use.
const defaultKeepPrevious = 24 * time.Hour

// RotateWebhookSecret replaces a webhook's secret without a gap: the old
// one keeps signing beside the new for keep_previous. The old secret is
// opened and sealed again as the previous one inside the transaction, and
// the update is a compare-and-set on the secret read, so a concurrent
// rotation cannot make this one keep a secret that is already gone.
func (s *webhookService) RotateWebhookSecret(ctx context.Context, req *connect.Request[apiv1.RotateWebhookSecretRequest]) (*connect.Response[apiv1.RotateWebhookSecretResponse], error) {
	m := req.Msg
	keep := defaultKeepPrevious
	if kp := m.GetKeepPrevious(); kp != nil {
		// The store counts in microseconds, so a keep under one is 0 there:
		// truncated here, the answer says the old secret was dropped.
		keep = kp.AsDuration().Truncate(time.Microsecond)
		if kp.CheckValid() != nil || keep < 0 || keep > store.MaxKeepPrevious {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("keep_previous %v is out of range: give 0s (drop the old secret now) to 168h (7 days), or leave it unset for 24h", keep))
		}
	}
	tenant, id := callFrom(ctx).tenant(), m.GetId()
	secret := webhooks.NewSecret()
	var w store.Webhook
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		old, err := getWebhook(ctx, q, tenant, id)
		if err != nil {
			return err
		}
		rot, err := s.worker.SealRotation(old, secret, keep)
		if err != nil {
			return err
		}
		w, err = q.RotateWebhookSecret(ctx, rot)
		if errors.Is(err, store.ErrConflict) {
			return connect.NewError(connect.CodeAborted, errors.New("webhook "+id+"'s secret was rotated by another call at the same moment; rotate again to get a secret of your own"))
		}
		return notFoundAs(err, typeWebhook, tenant, id)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.RotateWebhookSecretResponse{Webhook: webhookProto(w), Secret: string(secret)}), nil
}

// TestWebhook sends while the caller waits: the answer is the receiver's.
// The request leaves the control plane, so it is audited like a change;
// the audit event is written after the send, since an HTTP request must not
// run inside a transaction.
func (s *webhookService) TestWebhook(ctx context.Context, req *connect.Request[apiv1.TestWebhookRequest]) (*connect.Response[apiv1.TestWebhookResponse], error) {
	w, err := getWebhook(ctx, s.store, callFrom(ctx).tenant(), req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	d, err := s.worker.Test(ctx, w)
	if err != nil {
		return nil, err
	}
	if err := s.mutate(ctx, func(context.Context, store.Querier) error { return nil }); err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.TestWebhookResponse{Delivery: deliveryProto(d)}), nil
}

func (s *webhookService) ListWebhookDeliveries(ctx context.Context, req *connect.Request[apiv1.ListWebhookDeliveriesRequest]) (*connect.Response[apiv1.ListWebhookDeliveriesResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	size, err := pageOf(call, false, m.GetPageSize())
	if err != nil {
		return nil, err
	}
	if _, err := getWebhook(ctx, s.store, call.tenant(), m.GetId()); err != nil {
		return nil, err
	}
	f := store.WebhookDeliveryFilter{WebhookID: m.GetId(), Limit: size + 1}
	if t := m.GetPageToken(); t != "" {
		if f.Before, err = decodeDeliveryToken(t); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token is not one this server issued; pass next_page_token from the previous page"))
		}
	}
	ds, err := s.store.ListWebhookDeliveries(ctx, f)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListWebhookDeliveriesResponse{}
	if len(ds) > size {
		ds = ds[:size]
		res.NextPageToken = encodeDeliveryToken(ds[size-1].ID)
	}
	for _, d := range ds {
		res.Deliveries = append(res.Deliveries, deliveryProto(d))
	}
	return connect.NewResponse(res), nil
}

// Delivery page tokens are the id of the last attempt seen, opaque to
// callers.
const deliveryTokenPrefix = "d:"

func encodeDeliveryToken(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(deliveryTokenPrefix + strconv.FormatInt(id, 10)))
}

func decodeDeliveryToken(t string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil {
		return 0, err
	}
	s, ok := strings.CutPrefix(string(b), deliveryTokenPrefix)
	if !ok {
		return 0, errors.New("not a delivery token")
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("not a delivery token")
	}
	return id, nil
}

// webhookProto is a webhook without its secrets: the current one is shown
// only when it is made or rotated, the previous one never.
func webhookProto(w store.Webhook) *apiv1.Webhook {
	p := &apiv1.Webhook{
		Id: w.ID, Tenant: w.Tenant, Url: w.URL, Events: w.Events, State: string(w.State),
		Cursor: w.Cursor, Attempts: int32(w.Attempts), CreateTime: ts(w.CreatedAt),
	}
	if !w.FailingSince.IsZero() {
		p.FailingSince = ts(w.FailingSince)
	}
	if !w.NextAttemptAt.IsZero() {
		p.NextAttemptTime = ts(w.NextAttemptAt)
	}
	if !w.PreviousUntil.IsZero() {
		p.PreviousSecretExpireTime = ts(w.PreviousUntil)
	}
	return p
}

func deliveryProto(d store.WebhookDelivery) *apiv1.WebhookDelivery {
	return &apiv1.WebhookDelivery{
		Id: d.ID, WebhookId: d.WebhookID, EventSeq: d.EventSeq, EventType: d.EventType,
		Attempt: int32(d.Attempt), HttpStatus: int32(d.HTTPStatus), Error: d.Error,
		Duration: durationpb.New(d.Duration), CreateTime: ts(d.CreatedAt), Delivered: d.Delivered(),
	}
}
