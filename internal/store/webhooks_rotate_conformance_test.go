package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// The secrets here stand for sealed ones: the store keeps them as given.
const (
	rotatedSecret  = store.WebhookSecret("sealed:v1:bmV3")
	previousSecret = store.WebhookSecret("sealed:v1:cHJldmlvdXM=")
)

// exerciseWebhookRotate: a rotation replaces the secret, keeps the old one
// as previous until the store's now plus Keep, and leaves cursor, retries
// and log alone; a stale, bad or missing one changes nothing.
func exerciseWebhookRotate(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	w := must(s.CreateWebhook(ctx, newWebhook("wh1", "acme", "*")))(t)
	if w.PreviousSecret != "" || !w.PreviousUntil.IsZero() {
		t.Errorf("CreateWebhook = %+v, want no previous secret", w)
	}
	policyEvent(ctx, t, s, "acme", "a")
	failed := must(s.FailWebhookAttempt(ctx, "wh1", w.Cursor, must(s.Now(ctx))(t).Add(time.Hour), false))(t)
	must(s.InsertWebhookDelivery(ctx, store.WebhookDelivery{WebhookID: "wh1", EventType: "webhook.test", Attempt: 1, HTTPStatus: 200}))(t)

	before := must(s.Now(ctx))(t)
	r := must(s.RotateWebhookSecret(ctx, store.WebhookRotation{ID: "wh1", Old: testSecret, Secret: rotatedSecret, Previous: previousSecret, Keep: time.Hour}))(t)
	after := must(s.Now(ctx))(t)
	want := failed
	want.Secret, want.PreviousSecret, want.PreviousUntil = rotatedSecret, previousSecret, r.PreviousUntil
	if !webhooksEqual(r, want) {
		t.Errorf("RotateWebhookSecret = %+v, want %+v: only the secrets changed", r, want)
	}
	checkStamped(t, "RotateWebhookSecret's expiry less an hour", before, after, r.PreviousUntil.Add(-time.Hour), r.PreviousUntil.Add(-time.Hour))
	if got := must(s.GetWebhook(ctx, "wh1"))(t); !webhooksEqual(got, r) {
		t.Errorf("GetWebhook after rotating = %+v, want %+v", got, r)
	}
	if ds := must(s.ListWebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: "wh1", Limit: 10}))(t); len(ds) != 1 {
		t.Errorf("after rotating the log has %d attempts, want its 1", len(ds))
	}

	// A rotation from a secret that is no longer stored, or a bad one,
	// writes nothing.
	_, err := s.RotateWebhookSecret(ctx, store.WebhookRotation{ID: "wh1", Old: testSecret, Secret: "sealed:v1:b3RoZXI=", Previous: "sealed:v1:eA==", Keep: time.Hour})
	wantIs(t, "RotateWebhookSecret(stale old secret)", err, store.ErrConflict)
	_, err = s.RotateWebhookSecret(ctx, store.WebhookRotation{ID: "nope", Old: testSecret, Secret: rotatedSecret})
	wantIs(t, "RotateWebhookSecret(missing)", err, store.ErrNotFound)
	for _, bad := range []store.WebhookRotation{
		{ID: "wh1", Old: rotatedSecret, Secret: "sealed:v1:eA==", Previous: previousSecret, Keep: -time.Second},
		{ID: "wh1", Old: rotatedSecret, Secret: "sealed:v1:eA==", Previous: previousSecret, Keep: store.MaxKeepPrevious + time.Second},
		{ID: "wh1", Old: rotatedSecret, Secret: "sealed:v1:eA==", Keep: time.Hour},
		{ID: "wh1", Old: rotatedSecret, Keep: 0},
		{ID: "wh1", Secret: "sealed:v1:eA=="},
	} {
		if _, err := s.RotateWebhookSecret(ctx, bad); err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			t.Errorf("RotateWebhookSecret(%+v) = %v, want refused as invalid", bad, err)
		}
	}
	if got := must(s.GetWebhook(ctx, "wh1"))(t); !webhooksEqual(got, r) {
		t.Errorf("after refused rotations webhook = %+v, want it unchanged: %+v", got, r)
	}

	// The longest keep is allowed; Keep 0 drops the previous secret,
	// whatever Previous says.
	long := must(s.RotateWebhookSecret(ctx, store.WebhookRotation{ID: "wh1", Old: rotatedSecret, Secret: testSecret, Previous: previousSecret, Keep: store.MaxKeepPrevious}))(t)
	if d := long.PreviousUntil.Sub(must(s.Now(ctx))(t)); d <= store.MaxKeepPrevious-time.Minute || d > store.MaxKeepPrevious {
		t.Errorf("a rotation keeping the old secret %v keeps it %v", store.MaxKeepPrevious, d)
	}
	dropped := must(s.RotateWebhookSecret(ctx, store.WebhookRotation{ID: "wh1", Old: testSecret, Secret: rotatedSecret, Previous: previousSecret}))(t)
	if dropped.Secret != rotatedSecret || dropped.PreviousSecret != "" || !dropped.PreviousUntil.IsZero() {
		t.Errorf("RotateWebhookSecret(keep 0) = %+v, want the new secret and no previous one", dropped)
	}
}

// exerciseWebhookRotateRace rotates one webhook from one secret from many
// goroutines at once: exactly one applies, the others conflict.
func exerciseWebhookRotateRace(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreateWebhook(ctx, newWebhook("wh1", "acme", "*")))(t)
	var applied, conflicted atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			secret := store.WebhookSecret("sealed:v1:" + string(rune('a'+i)))
			_, err := s.RotateWebhookSecret(ctx, store.WebhookRotation{ID: "wh1", Old: testSecret, Secret: secret, Previous: previousSecret, Keep: time.Hour})
			switch {
			case err == nil:
				applied.Add(1)
			case errors.Is(err, store.ErrConflict):
				conflicted.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if applied.Load() != 1 || conflicted.Load() != 7 {
		t.Errorf("of 8 racing rotations %d applied and %d conflicted, want 1 and 7", applied.Load(), conflicted.Load())
	}
}
