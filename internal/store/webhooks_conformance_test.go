package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestWebhooksConformance runs every WebhookQuerier method on both engines:
// webhooks' records, the claim and cursor that keep delivery in order and
// single, the retry bookkeeping, and the delivery log.
func TestWebhooksConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			run  func(ctx context.Context, t *testing.T, s *store.Store)
		}{
			{"Records", exerciseWebhookRecords},
			{"Delivery", exerciseWebhookDelivery},
			{"Race", exerciseWebhookRace},
			{"Log", exerciseWebhookLog},
			{"Rotate", exerciseWebhookRotate},
			{"RotateRace", exerciseWebhookRotateRace},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, ctx := setup(t, engine)
				tc.run(ctx, t, s)
			})
		}
	})
}

const testSecret = store.WebhookSecret("whsec_c2VjcmV0LWJ5dGVzLWZvci10ZXN0cy1vbmx5")

func newWebhook(id, tenant string, events ...string) store.Webhook {
	return store.Webhook{ID: id, Tenant: tenant, URL: "https://example.com/" + id, Events: events, Secret: testSecret}
}

// policyEvent writes one policy.changed event in tenant and returns the
// newest seq.
func policyEvent(ctx context.Context, t *testing.T, s *store.Store, tenant, name string) int64 {
	t.Helper()
	must(s.PutPolicy(ctx, store.Policy{Tenant: tenant, Name: name, Body: "permit(principal, action, resource);"}))(t)
	return must(s.EventBounds(ctx))(t).Latest
}

func exerciseWebhookRecords(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	latest := policyEvent(ctx, t, s, "acme", "p0")
	if latest == 0 {
		t.Fatal("no event after a policy change")
	}
	before := must(s.Now(ctx))(t)
	w1 := must(s.CreateWebhook(ctx, newWebhook("wh1", "acme", "reservation.*", "node.ready")))(t)
	checkStamped(t, "CreateWebhook", before, must(s.Now(ctx))(t), w1.CreatedAt, w1.CreatedAt)
	if w1.Cursor != latest || w1.State != store.WebhookActive || w1.Attempts != 0 || !w1.FailingSince.IsZero() ||
		!w1.NextAttemptAt.IsZero() || w1.Secret != testSecret || !slices.Equal(w1.Events, []string{"reservation.*", "node.ready"}) ||
		w1.URL != "https://example.com/wh1" || w1.Tenant != "acme" {
		t.Errorf("CreateWebhook = %+v, want active at cursor %d with what was given", w1, latest)
	}
	// The secret never shows in print or logs.
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, w1); strings.Contains(out, string(testSecret)) {
			t.Errorf("Sprintf(%q, webhook) shows the secret: %s", f, out)
		}
	}
	if got := must(s.GetWebhook(ctx, "wh1"))(t); !webhooksEqual(got, w1) {
		t.Errorf("GetWebhook = %+v, want %+v", got, w1)
	}
	must(s.CreateWebhook(ctx, newWebhook("wh2", "acme", "*")))(t)
	must(s.CreateWebhook(ctx, newWebhook("wh3", "globex", "*")))(t)
	_, err := s.CreateWebhook(ctx, newWebhook("wh1", "globex", "*"))
	wantIs(t, "CreateWebhook(taken id)", err, store.ErrConflict)
	_, err = s.CreateWebhook(ctx, newWebhook("wh9", "nope", "*"))
	wantIs(t, "CreateWebhook(missing tenant)", err, store.ErrNotFound)
	for _, bad := range []store.Webhook{
		newWebhook("x1", "acme"),
		newWebhook("x2", "acme", "a,b"),
		{ID: "x3", Tenant: "acme", URL: "https://example.com", Events: []string{"*"}},
	} {
		if _, err := s.CreateWebhook(ctx, bad); err == nil {
			t.Errorf("CreateWebhook(%+v) succeeded, want refused", bad)
		}
	}
	var ids []string
	for _, w := range must(s.ListWebhooks(ctx, "acme"))(t) {
		ids = append(ids, w.ID)
	}
	if !slices.Equal(ids, []string{"wh1", "wh2"}) {
		t.Errorf("ListWebhooks(acme) = %v, want wh1 wh2", ids)
	}
	_, err = s.GetWebhook(ctx, "nope")
	wantIs(t, "GetWebhook(missing)", err, store.ErrNotFound)
	_, err = s.EnableWebhook(ctx, "nope")
	wantIs(t, "EnableWebhook(missing)", err, store.ErrNotFound)
	wantIs(t, "DeleteWebhook(missing)", s.DeleteWebhook(ctx, "nope"), store.ErrNotFound)
	must(struct{}{}, s.DeleteWebhook(ctx, "wh2"))(t)
	_, err = s.GetWebhook(ctx, "wh2")
	wantIs(t, "GetWebhook(deleted)", err, store.ErrNotFound)
	// A deleted tenant takes its webhooks with it.
	must(struct{}{}, s.DeleteTenant(ctx, "globex"))(t)
	_, err = s.GetWebhook(ctx, "wh3")
	wantIs(t, "GetWebhook(of a deleted tenant)", err, store.ErrNotFound)
}

func webhooksEqual(a, b store.Webhook) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.URL == b.URL && slices.Equal(a.Events, b.Events) &&
		a.Secret == b.Secret && a.State == b.State && a.Cursor == b.Cursor && a.Attempts == b.Attempts &&
		a.FailingSince.Equal(b.FailingSince) && a.NextAttemptAt.Equal(b.NextAttemptAt) && a.CreatedAt.Equal(b.CreatedAt) &&
		a.PreviousSecret == b.PreviousSecret && a.PreviousUntil.Equal(b.PreviousUntil)
}

func dueIDs(ctx context.Context, t *testing.T, s *store.Store, now time.Time) []string {
	t.Helper()
	var ids []string
	for _, w := range must(s.DueWebhooks(ctx, now, 100))(t) {
		ids = append(ids, w.ID)
	}
	return ids
}

func exerciseWebhookDelivery(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	w := must(s.CreateWebhook(ctx, newWebhook("wh1", "acme", "*")))(t)
	now := must(s.Now(ctx))(t)
	if got := dueIDs(ctx, t, s, now); len(got) != 0 {
		t.Errorf("DueWebhooks without events = %v, want none", got)
	}
	policyEvent(ctx, t, s, "globex", "g")
	if got := dueIDs(ctx, t, s, must(s.Now(ctx))(t)); len(got) != 0 {
		t.Errorf("DueWebhooks with another tenant's event = %v, want none", got)
	}
	seq := policyEvent(ctx, t, s, "acme", "a")
	now = must(s.Now(ctx))(t)
	if got := dueIDs(ctx, t, s, now); !slices.Equal(got, []string{"wh1"}) {
		t.Errorf("DueWebhooks with an event = %v, want wh1", got)
	}

	// One owner's claim keeps others out until it is released or runs out.
	until := now.Add(time.Minute)
	claim := func(owner string, cursor int64, until time.Time) bool {
		t.Helper()
		return must(s.ClaimWebhook(ctx, "wh1", owner, cursor, until))(t)
	}
	if !claim("a", w.Cursor, until) {
		t.Fatal("ClaimWebhook(a) = false, want the claim")
	}
	if claim("b", w.Cursor, until) {
		t.Error("ClaimWebhook(b) while a holds it = true")
	}
	if got := dueIDs(ctx, t, s, now); len(got) != 0 {
		t.Errorf("DueWebhooks while claimed = %v, want none", got)
	}
	if !claim("a", w.Cursor, until) {
		t.Error("ClaimWebhook(a) renewing = false")
	}
	if claim("a", w.Cursor+1, until) {
		t.Error("ClaimWebhook at a cursor that is not the webhook's = true")
	}
	must(struct{}{}, s.ReleaseWebhook(ctx, "wh1", "b"))(t) // not b's: changes nothing
	if claim("b", w.Cursor, until) {
		t.Error("ClaimWebhook(b) after b released a's claim = true")
	}
	must(struct{}{}, s.ReleaseWebhook(ctx, "wh1", "a"))(t)
	if !claim("b", w.Cursor, now.Add(-time.Second)) {
		t.Error("ClaimWebhook(b) after a released = false")
	}
	if !claim("a", w.Cursor, until) {
		t.Error("ClaimWebhook(a) after b's claim ran out = false")
	}

	// A failed attempt waits; enough of them make the webhook failing.
	next := now.Add(time.Hour)
	f1 := must(s.FailWebhookAttempt(ctx, "wh1", w.Cursor, next, false))(t)
	if f1.Attempts != 1 || f1.FailingSince.IsZero() || !f1.NextAttemptAt.Equal(next) || f1.State != store.WebhookActive {
		t.Errorf("FailWebhookAttempt = %+v, want one attempt, failing since now, next at %v", f1, next)
	}
	must(struct{}{}, s.ReleaseWebhook(ctx, "wh1", "a"))(t)
	if got := dueIDs(ctx, t, s, now); len(got) != 0 {
		t.Errorf("DueWebhooks before the next attempt = %v, want none", got)
	}
	if got := dueIDs(ctx, t, s, next); !slices.Equal(got, []string{"wh1"}) {
		t.Errorf("DueWebhooks at the next attempt = %v, want wh1", got)
	}
	f2 := must(s.FailWebhookAttempt(ctx, "wh1", w.Cursor, next, true))(t)
	if f2.Attempts != 2 || !f2.FailingSince.Equal(f1.FailingSince) || f2.State != store.WebhookFailing {
		t.Errorf("FailWebhookAttempt(failing) = %+v, want two attempts since %v, failing", f2, f1.FailingSince)
	}
	_, err := s.FailWebhookAttempt(ctx, "wh1", w.Cursor+5, next, false)
	wantIs(t, "FailWebhookAttempt(another cursor)", err, store.ErrNotFound)
	if got := dueIDs(ctx, t, s, next.Add(time.Hour)); len(got) != 0 {
		t.Errorf("DueWebhooks with the webhook failing = %v, want none", got)
	}
	if claim("a", w.Cursor, until) {
		t.Error("ClaimWebhook of a failing webhook = true")
	}
	e := must(s.EnableWebhook(ctx, "wh1"))(t)
	if e.State != store.WebhookActive || e.Attempts != 0 || !e.FailingSince.IsZero() || !e.NextAttemptAt.IsZero() || e.Cursor != w.Cursor {
		t.Errorf("EnableWebhook = %+v, want active from scratch at cursor %d", e, w.Cursor)
	}

	// The cursor moves only forward, only from where it is.
	if must(s.AdvanceWebhook(ctx, "wh1", w.Cursor+1, seq))(t) {
		t.Error("AdvanceWebhook from a cursor that is not the webhook's = true")
	}
	if must(s.AdvanceWebhook(ctx, "wh1", w.Cursor, w.Cursor))(t) {
		t.Error("AdvanceWebhook to where it is = true")
	}
	must(s.FailWebhookAttempt(ctx, "wh1", w.Cursor, next, false))(t)
	if !must(s.AdvanceWebhook(ctx, "wh1", w.Cursor, seq))(t) {
		t.Fatal("AdvanceWebhook = false, want moved")
	}
	a := must(s.GetWebhook(ctx, "wh1"))(t)
	if a.Cursor != seq || a.Attempts != 0 || !a.FailingSince.IsZero() || !a.NextAttemptAt.IsZero() {
		t.Errorf("after AdvanceWebhook = %+v, want cursor %d, retries cleared", a, seq)
	}
	if must(s.AdvanceWebhook(ctx, "wh1", w.Cursor, seq))(t) {
		t.Error("AdvanceWebhook from the old cursor again = true")
	}
	if got := dueIDs(ctx, t, s, next); len(got) != 0 {
		t.Errorf("DueWebhooks with every event handled = %v, want none", got)
	}
}

// exerciseWebhookRace advances one webhook from one cursor from many
// goroutines at once: exactly one moves it.
func exerciseWebhookRace(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	w := must(s.CreateWebhook(ctx, newWebhook("wh1", "acme", "*")))(t)
	seq := policyEvent(ctx, t, s, "acme", "a")
	var moved, claimed atomic.Int32
	var wg sync.WaitGroup
	until := must(s.Now(ctx))(t).Add(time.Minute)
	for i := range 8 {
		wg.Go(func() {
			ok, err := s.ClaimWebhook(ctx, "wh1", fmt.Sprint("owner", i), w.Cursor, until)
			if err != nil {
				t.Error(err)
			}
			if ok {
				claimed.Add(1)
			}
			ok, err = s.AdvanceWebhook(ctx, "wh1", w.Cursor, seq)
			if err != nil {
				t.Error(err)
			}
			if ok {
				moved.Add(1)
			}
		})
	}
	wg.Wait()
	if claimed.Load() != 1 || moved.Load() != 1 {
		t.Errorf("of 8 racing workers %d claimed and %d advanced, want 1 and 1", claimed.Load(), moved.Load())
	}
}

func exerciseWebhookLog(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreateWebhook(ctx, newWebhook("wh1", "acme", "*")))(t)
	must(s.CreateWebhook(ctx, newWebhook("wh2", "acme", "*")))(t)
	before := must(s.Now(ctx))(t)
	var logged []store.WebhookDelivery
	for i := range 5 {
		d := store.WebhookDelivery{
			WebhookID: "wh1", EventSeq: int64(10 + i), EventType: "policy.changed", Attempt: i + 1,
			HTTPStatus: 500, Error: "HTTP 500", Duration: 1500 * time.Microsecond,
		}
		if i == 4 {
			d.HTTPStatus, d.Error = 204, ""
		}
		got := must(s.InsertWebhookDelivery(ctx, d))(t)
		checkStamped(t, "InsertWebhookDelivery", before, must(s.Now(ctx))(t), got.CreatedAt, got.CreatedAt)
		d.ID, d.CreatedAt = got.ID, got.CreatedAt
		if got != d || got.ID == 0 {
			t.Errorf("InsertWebhookDelivery = %+v, want %+v", got, d)
		}
		logged = append(logged, got)
	}
	if logged[3].Delivered() || !logged[4].Delivered() {
		t.Error("Delivered() is wrong for a 500 or a 204")
	}
	must(s.InsertWebhookDelivery(ctx, store.WebhookDelivery{WebhookID: "wh2", EventType: "webhook.test", Attempt: 1, HTTPStatus: 200}))(t)
	page1 := must(s.ListWebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: "wh1", Limit: 3}))(t)
	page2 := must(s.ListWebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: "wh1", Before: page1[len(page1)-1].ID, Limit: 3}))(t)
	var seqs []int64
	for _, d := range append(page1, page2...) {
		seqs = append(seqs, d.EventSeq)
	}
	if !slices.Equal(seqs, []int64{14, 13, 12, 11, 10}) {
		t.Errorf("ListWebhookDeliveries pages = %v, want 14..10, newest first", seqs)
	}
	if _, err := s.ListWebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: "wh1"}); err == nil {
		t.Error("ListWebhookDeliveries without a limit succeeded")
	}
	// Deleting a webhook deletes its log, and only its.
	if err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error { return q.DeleteWebhook(ctx, "wh1") }); err != nil {
		t.Fatal(err)
	}
	if got := must(s.ListWebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: "wh1", Limit: 10}))(t); len(got) != 0 {
		t.Errorf("deliveries of a deleted webhook = %v, want none", got)
	}
	if got := must(s.ListWebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: "wh2", Limit: 10}))(t); len(got) != 1 {
		t.Errorf("deliveries of wh2 = %v, want its one", got)
	}
}
