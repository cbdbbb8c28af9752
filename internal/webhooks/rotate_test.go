package webhooks_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// signed is one request as a receiver saw it: what it would verify.
type signed struct {
	id, header string
	ts         int64
	body       []byte
}

// recorder is a real HTTP endpoint that takes every request and keeps
// what it needs to verify it later, against whichever secret.
type recorder struct {
	srv *httptest.Server
	mu  sync.Mutex // guards got
	got []signed
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ts, _ := strconv.ParseInt(req.Header.Get(webhooks.HeaderTimestamp), 10, 64)
		r.mu.Lock()
		r.got = append(r.got, signed{id: req.Header.Get(webhooks.HeaderID), header: req.Header.Get(webhooks.HeaderSignature), ts: ts, body: body})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// last returns the newest request, failing the test when there is none.
func (r *recorder) last(t *testing.T) signed {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		t.Fatal("the receiver got nothing")
	}
	return r.got[len(r.got)-1]
}

// rotate replaces webhook id's secret as the API does and returns the new
// one.
func rotate(t *testing.T, w *webhooks.Worker, s *store.Store, id string, keep time.Duration) store.WebhookSecret {
	t.Helper()
	secret := webhooks.NewSecret()
	rot, err := w.SealRotation(getHookID(t, s, id), secret, keep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RotateWebhookSecret(t.Context(), rot); err != nil {
		t.Fatal(err)
	}
	return secret
}

// checkSigned checks that req verifies with each of accept and with none
// of refuse, and that its header is one v1 signature per accepted secret,
// in that order (the current secret's first).
func checkSigned(t *testing.T, when string, req signed, accept, refuse []store.WebhookSecret) {
	t.Helper()
	var want []string
	for _, s := range accept {
		if !webhooks.Verify(s, req.id, req.ts, req.body, req.header) {
			t.Errorf("%s: a receiver verifying with a valid secret refuses %s", when, req.id)
		}
		sig := must(webhooks.Sign(s, req.id, req.ts, req.body))(t)
		want = append(want, sig)
	}
	for _, s := range refuse {
		if webhooks.Verify(s, req.id, req.ts, req.body, req.header) {
			t.Errorf("%s: a receiver verifying with a secret no longer valid accepts %s", when, req.id)
		}
	}
	if got := req.header; got != strings.Join(want, " ") {
		t.Errorf("%s: webhook-signature = %q, want %q", when, got, strings.Join(want, " "))
	}
}

// TestRotationOverlap: after a rotation every delivery, and every test
// send, carries the new secret's signature and the old one's, so a
// receiver verifying with either accepts it; once the old one expires,
// only the new one's.
func TestRotationOverlap(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		// The setup's receiver verifies with one secret; this test needs
		// a webhook, wh2 of globex, to a receiver that verifies later.
		w, b := setup(t, engine, "*")
		recv := newRecorder(t)
		s0 := webhooks.NewSecret()
		if _, err := b.store.CreateWebhook(t.Context(), store.Webhook{ID: "wh2", Tenant: "globex", URL: recv.srv.URL, Events: []string{"*"}, Secret: must(w.SealSecret("wh2", s0))(t)}); err != nil {
			t.Fatal(err)
		}
		hook := func() store.Webhook { return getHookID(t, b.store, "wh2") }
		rotateWH2 := func(keep time.Duration) store.WebhookSecret { return rotate(t, w, b.store, "wh2", keep) }

		s1 := rotateWH2(time.Hour)
		policies(t, b.store, "globex", "g1")
		runOnce(t, w)
		checkSigned(t, "delivery during the overlap", recv.last(t), []store.WebhookSecret{s1, s0}, nil)
		must(w.Test(t.Context(), hook()))(t)
		checkSigned(t, "test send during the overlap", recv.last(t), []store.WebhookSecret{s1, s0}, nil)

		// A second rotation keeps only the secret it replaced; this one
		// expires soon.
		const keep = 300 * time.Millisecond
		s2 := rotateWH2(keep)
		policies(t, b.store, "globex", "g2")
		runOnce(t, w)
		checkSigned(t, "delivery after a second rotation", recv.last(t), []store.WebhookSecret{s2, s1}, []store.WebhookSecret{s0})
		time.Sleep(keep + 100*time.Millisecond)
		policies(t, b.store, "globex", "g3")
		runOnce(t, w)
		checkSigned(t, "delivery after the old secret expired", recv.last(t), []store.WebhookSecret{s2}, []store.WebhookSecret{s1, s0})

		// Keep 0 drops the old secret at once.
		s3 := rotateWH2(0)
		must(w.Test(t.Context(), hook()))(t)
		checkSigned(t, "test send after a rotation keeping nothing", recv.last(t), []store.WebhookSecret{s3}, []store.WebhookSecret{s2})
		if h := hook(); h.PreviousSecret != "" || !h.PreviousUntil.IsZero() {
			t.Errorf("after a rotation keeping nothing the webhook = %+v, want no previous secret", h)
		}
	})
}

// TestRotatedSecretsSealedApart: both secrets are sealed at rest, the
// previous one for a name of its own, so that neither sealed value opens
// in the other's column: the worker refuses the webhook and sends nothing.
// A plain secret from before sealing is rotated into sealed ones.
func TestRotatedSecretsSealedApart(t *testing.T) {
	t.Parallel()
	w, b := setup(t, store.EngineSQLite, "*")
	s0 := b.recv.secret
	s1 := rotate(t, w, b.store, "wh1", time.Hour)
	h := getHook(t, b.store)
	for _, v := range []store.WebhookSecret{h.Secret, h.PreviousSecret} {
		if !strings.HasPrefix(string(v), "sealed:v1:") || strings.Contains(string(v), strings.TrimPrefix(string(s0), "whsec_")) ||
			strings.Contains(string(v), strings.TrimPrefix(string(s1), "whsec_")) {
			t.Fatalf("the store holds a secret as %q, want it sealed", string(v))
		}
	}

	// The previous secret's sealed value copied into the secret column.
	swapped := store.WebhookRotation{ID: "wh1", Old: h.Secret, Secret: h.PreviousSecret}
	must(b.store.RotateWebhookSecret(t.Context(), swapped))(t)
	policies(t, b.store, "acme", "p1")
	if err := w.RunOnce(t.Context()); err == nil || !strings.Contains(err.Error(), "open the signing secret") {
		t.Errorf("RunOnce with the previous secret as the current one = %v, want it refused", err)
	}
	// The current secret's sealed value copied into the previous column.
	swapped = store.WebhookRotation{ID: "wh1", Old: h.PreviousSecret, Secret: h.Secret, Previous: h.Secret, Keep: time.Hour}
	must(b.store.RotateWebhookSecret(t.Context(), swapped))(t)
	if _, err := w.Test(t.Context(), getHook(t, b.store)); err == nil || !strings.Contains(err.Error(), "open the previous signing secret") {
		t.Errorf("a test send with the current secret as the previous one = %v, want it refused", err)
	}
	if n := b.recv.hitCount(); n != 0 {
		t.Fatalf("the receiver was sent %d requests signed with swapped secrets", n)
	}

	// A plain secret, from before sealing, comes out of a rotation sealed
	// and still signs as the previous one.
	plain := webhooks.NewSecret()
	if _, err := b.store.CreateWebhook(t.Context(), store.Webhook{ID: "wh2", Tenant: "globex", URL: b.recv.srv.URL, Events: []string{"*"}, Secret: plain}); err != nil {
		t.Fatal(err)
	}
	rot := must(w.SealRotation(getHookID(t, b.store, "wh2"), webhooks.NewSecret(), time.Hour))(t)
	if !strings.HasPrefix(string(rot.Previous), "sealed:v1:") || !strings.HasPrefix(string(rot.Secret), "sealed:v1:") || rot.Old != plain {
		t.Errorf("rotating a plain secret = %+v, want both secrets sealed", rot)
	}
}
