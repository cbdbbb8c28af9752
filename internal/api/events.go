package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/events"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
)

// SessionCookie is the cookie the console keeps its API token in; the
// event stream accepts it in place of an Authorization header, since a
// browser's EventSource cannot send one.
const SessionCookie = "bc_session"

// StreamPath serves the event stream.
const StreamPath = "/v1/events/stream"

// eventKindActions is the action that lets a principal read each kind of
// event, checked on the tenant the events belong to: following events never
// shows more than listing the objects would.
var eventKindActions = map[string]string{
	"node":        "compute:nodes:list",
	"reservation": "compute:reservations:list",
	"policy":      "compute:policies:list",
	"usage":       "compute:usage:list",
}

// Timing of the event stream.
const (
	// streamKeepalive is how often an idle stream sends a comment, so that
	// proxies keep it open and the client notices a dead server.
	streamKeepalive = 15 * time.Second
	// streamReauth is how often a stream checks its caller again: a token
	// revoked or expired, or a policy withdrawn, ends it.
	streamReauth = time.Minute
	// streamRetryMillis is the reconnect delay the stream tells EventSource.
	streamRetryMillis = 2000
)

// eventService lists the event outbox and streams it (StreamPath).
type eventService struct {
	base
	authz *authorizer
	hub   *events.Hub // nil: no stream in this process
}

var _ apiv1connect.EventServiceHandler = (*eventService)(nil)

// typeSelector is a request's types filter: the kinds it reaches, and a
// match on the exact type.
type typeSelector struct {
	all   bool
	kinds map[string]bool // kind.* patterns
	exact map[string]bool // exact types
}

// parseEventTypes reads type patterns: "*", "kind.*" or an exact type.
func parseEventTypes(patterns []string) (typeSelector, error) {
	sel := typeSelector{all: len(patterns) == 0, kinds: map[string]bool{}, exact: map[string]bool{}}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		kind, rest, _ := strings.Cut(p, ".")
		switch {
		case p == "*":
			sel.all = true
		case eventKindActions[kind] == "" || rest == "":
			return sel, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("types: %q is not an event type; use *, a kind (node.*, reservation.*, policy.*, usage.*) or a type such as reservation.bound", p))
		case rest == "*":
			sel.kinds[kind] = true
		default:
			sel.exact[p] = true
		}
	}
	return sel, nil
}

// narrow keeps the readable kinds the selector reaches.
func (s typeSelector) narrow(readable []string) []string {
	out := []string{} // empty, not nil: no kind reads nothing
	for _, k := range readable {
		reached := s.all || s.kinds[k]
		for t := range s.exact {
			reached = reached || strings.HasPrefix(t, k+".")
		}
		if reached {
			out = append(out, k)
		}
	}
	return out
}

// match reports whether an event of the type passes the selector (its
// kind already narrowed).
func (s typeSelector) match(typ string) bool {
	kind, _, _ := strings.Cut(typ, ".")
	return s.all || s.kinds[kind] || s.exact[typ]
}

// readableKinds returns the kinds of events the call's caller may read in
// the call's tenant, decided at the call's authorization epoch.
func (a *authorizer) readableKinds(ctx context.Context, call *Call) ([]string, error) {
	var kinds []string
	for _, k := range store.EventKinds {
		dec, err := a.authz.Authorize(ctx, call.epoch, iam.Request{
			Principal: call.Caller, Action: eventKindActions[k], Resource: call.Resource,
		})
		if err != nil {
			return nil, fmt.Errorf("authorize reading %s events: %w", k, err)
		}
		if dec.Allow {
			kinds = append(kinds, k)
		}
	}
	return kinds, nil
}

// eventFilter is the store filter for the call: its tenant (or all), the
// kinds it may read and asked for.
func (s *eventService) eventFilter(ctx context.Context, call *Call, allTenants bool, sel typeSelector, after int64, limit int) (store.EventFilter, error) {
	readable, err := s.authz.readableKinds(ctx, call)
	if err != nil {
		return store.EventFilter{}, err
	}
	f := store.EventFilter{After: after, Tenant: call.tenant(), AllTenants: allTenants, Kinds: sel.narrow(readable), Limit: limit}
	if allTenants {
		f.Tenant = ""
	}
	return f, nil
}

// pruned reports whether events after seq after were pruned: the reader
// missed some and must start over.
func (s *eventService) pruned(ctx context.Context, after int64) (bool, error) {
	if after <= 0 {
		return false, nil
	}
	b, err := s.store.EventBounds(ctx)
	if err != nil {
		return false, err
	}
	return b.Oldest > 0 && after < b.Oldest-1, nil
}

func (s *eventService) ListEvents(ctx context.Context, req *connect.Request[apiv1.ListEventsRequest]) (*connect.Response[apiv1.ListEventsResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	size, err := pageOf(call, m.GetAllTenants(), m.GetPageSize())
	if err != nil {
		return nil, err
	}
	if m.GetAfterSeq() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("after_seq is negative; pass 0, or next_after_seq from the previous page"))
	}
	sel, err := parseEventTypes(m.GetTypes())
	if err != nil {
		return nil, err
	}
	f, err := s.eventFilter(ctx, call, m.GetAllTenants(), sel, m.GetAfterSeq(), size)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListEventsResponse{NextAfterSeq: m.GetAfterSeq()}
	if res.Resync, err = s.pruned(ctx, m.GetAfterSeq()); err != nil {
		return nil, err
	}
	// Exact types are matched here, so a page is read until it is full or
	// the outbox ends.
	for len(res.Events) < size {
		evs, err := s.store.ListEvents(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			f.After, res.NextAfterSeq = e.Seq, e.Seq
			if sel.match(e.Type) {
				res.Events = append(res.Events, eventProto(e))
				if len(res.Events) == size {
					break
				}
			}
		}
		if len(evs) < f.Limit {
			break
		}
	}
	return connect.NewResponse(res), nil
}

func eventProto(e store.Event) *apiv1.Event {
	return &apiv1.Event{Seq: e.Seq, Type: e.Type, Tenant: e.Tenant, Subject: e.Subject, Data: e.Data, CreateTime: ts(e.CreatedAt)}
}

// streamEvent is an event as the stream's data line carries it.
type streamEvent struct {
	Seq     int64             `json:"seq"`
	Type    string            `json:"type"`
	Tenant  string            `json:"tenant"`
	Subject string            `json:"subject"`
	Time    string            `json:"time"`
	Data    map[string]string `json:"data"`
}

// stream serves StreamPath: the events the caller may read, as
// server-sent events, authorized exactly as ListEvents with the same
// query (tenant, all_tenants, types as repeated or comma-separated
// parameters). It starts after Last-Event-ID (or the after parameter),
// catching up from the store, or at the newest event when neither is
// given, then follows the hub. It never skips an event silently: a
// reconnect from a pruned seq, or a client that falls too far behind, gets
// a resync event and the stream ends.
func (s *eventService) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	errs := connect.NewErrorWriter()
	fail := func(err error) { _ = errs.Write(w, r, err) }

	q := r.URL.Query()
	var types []string
	for _, v := range q["types"] {
		types = append(types, strings.Split(v, ",")...)
	}
	allTenants := q.Get("all_tenants") == "true"
	msg := &apiv1.ListEventsRequest{Tenant: q.Get("tenant"), AllTenants: allTenants, Types: types}
	header := r.Header.Clone()
	if header.Get("Authorization") == "" {
		if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
			header.Set("Authorization", "Bearer "+c.Value)
		}
	}
	call, err := s.authz.admit(ctx, apiv1connect.EventServiceListEventsProcedure, header, msg)
	if err != nil {
		fail(err)
		return
	}
	if _, err := pageOf(call, allTenants, 0); err != nil {
		fail(err)
		return
	}
	sel, err := parseEventTypes(types)
	if err != nil {
		fail(err)
		return
	}
	after := int64(-1) // from now: the newest event when the stream starts
	if v := cmp.Or(r.Header.Get("Last-Event-ID"), q.Get("after")); v != "" {
		after, err = strconv.ParseInt(v, 10, 64)
		if err != nil || after < 0 {
			fail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("Last-Event-ID or after is %q: give the id of the last event seen, a seq of 0 or more", v)))
			return
		}
	}
	f, err := s.eventFilter(ctx, call, allTenants, sel, max(after, 0), 500)
	if err != nil {
		fail(err)
		return
	}
	sub, err := s.hub.Subscribe(ctx)
	if err != nil {
		fail(connect.NewError(connect.CodeUnavailable, err))
		return
	}
	defer sub.Close()
	pruned, err := s.pruned(ctx, after)
	if err != nil {
		fail(err)
		return
	}
	if after < 0 {
		// From now: the store's newest event, which the hub may not have
		// read yet; the events up to it are skipped, not delivered.
		b, err := s.store.EventBounds(ctx)
		if err != nil {
			fail(err)
			return
		}
		after, f.After = b.Latest, b.Latest
	}

	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's write timeout
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(format string, args ...any) bool {
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	resync := func(why string) { send("event: resync\ndata: {\"reason\":%q}\n\n", why) }
	if !send("retry: %d\n\n", streamRetryMillis) {
		return
	}
	if pruned {
		resync("events after the one you last saw were pruned; reload and follow from now")
		return
	}
	// The position the stream starts from, as an id without an event: a
	// client that reconnects before any event arrives resumes from here
	// instead of from a later "now".
	if !send("id: %d\n\n", after) {
		return
	}
	visible := func(e store.Event) bool {
		return (allTenants || e.Tenant == f.Tenant) && slices.Contains(f.Kinds, e.Kind) && sel.match(e.Type)
	}
	emit := func(e store.Event) bool {
		b, err := json.Marshal(streamEvent{
			Seq: e.Seq, Type: e.Type, Tenant: e.Tenant, Subject: e.Subject,
			Time: e.CreatedAt.Format(time.RFC3339Nano), Data: e.Data,
		})
		if err != nil {
			return false
		}
		return send("id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
	}

	// Catch up from the store to where the subscription starts, then
	// follow it: every event once, in order.
	for caughtUp := f.After >= sub.Start; !caughtUp; {
		evs, err := s.store.ListEvents(ctx, f)
		if err != nil {
			s.logger.ErrorContext(ctx, "event stream: catch up", "request_id", call.RequestID, "err", err)
			return
		}
		caughtUp = len(evs) < f.Limit
		for _, e := range evs {
			if e.Seq > sub.Start {
				caughtUp = true // the subscription delivers the rest
				break
			}
			f.After = e.Seq
			if sel.match(e.Type) && !emit(e) {
				return
			}
		}
	}
	cursor := max(sub.Start, after)
	keepalive := time.NewTicker(streamKeepalive)
	defer keepalive.Stop()
	reauth := time.NewTicker(streamReauth)
	defer reauth.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if !send(": keepalive\n\n") {
				return
			}
		case <-reauth.C:
			again, err := s.authz.admit(ctx, apiv1connect.EventServiceListEventsProcedure, header, msg)
			if err == nil {
				f2, ferr := s.eventFilter(ctx, again, allTenants, sel, 0, 1)
				if ferr == nil {
					f.Kinds = f2.Kinds
				}
			}
			if err != nil {
				b, _ := json.Marshal(map[string]string{"reason": err.Error()})
				send("event: unauthorized\ndata: %s\n\n", b)
				return
			}
		case e, ok := <-sub.C:
			if !ok {
				if sub.Overflowed() {
					resync("this stream fell too far behind; reload and follow from now")
				}
				return
			}
			if e.Seq <= cursor {
				continue
			}
			cursor = e.Seq
			if visible(e) && !emit(e) {
				return
			}
		}
	}
}
