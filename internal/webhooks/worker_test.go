package webhooks_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// receiver is a real HTTP endpoint that verifies every request's signature
// and records what it accepted, in order.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret store.WebhookSecret
	status atomic.Int32 // what it answers; 204 when 0

	mu       sync.Mutex // guards hits, accepted
	hits     []string   // webhook-id of every request
	accepted []delivered
}

// delivered is one accepted request, decoded.
type delivered struct {
	id   string
	body struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      struct {
			Seq     int64             `json:"seq"`
			Tenant  string            `json:"tenant"`
			Subject string            `json:"subject"`
			Data    map[string]string `json:"data"`
		} `json:"data"`
	}
}

func newReceiver(t *testing.T, secret store.WebhookSecret) *receiver {
	r := &receiver{t: t, secret: secret}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		r.t.Error(err)
		return
	}
	id := req.Header.Get(webhooks.HeaderID)
	ts, err := strconv.ParseInt(req.Header.Get(webhooks.HeaderTimestamp), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		r.t.Errorf("webhook-timestamp %q is not now", req.Header.Get(webhooks.HeaderTimestamp))
	}
	if !webhooks.Verify(r.secret, id, ts, body, req.Header.Get(webhooks.HeaderSignature)) {
		r.t.Errorf("request %s: signature %q does not verify", id, req.Header.Get(webhooks.HeaderSignature))
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("request %s: %s with content type %q, want a JSON POST", id, req.Method, req.Header.Get("Content-Type"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hits = append(r.hits, id)
	status := int(r.status.Load())
	if status == 0 {
		status = http.StatusNoContent
	}
	if status < 300 {
		var d delivered
		d.id = id
		if err := json.Unmarshal(body, &d.body); err != nil {
			r.t.Errorf("request %s: body %s: %v", id, body, err)
		}
		r.accepted = append(r.accepted, d)
	}
	w.WriteHeader(status)
}

// subjects returns the subjects of the accepted events, in order.
func (r *receiver) subjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range r.accepted {
		out = append(out, d.body.Data.Subject)
	}
	return out
}

func (r *receiver) hitCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hits)
}

type bundle struct {
	store   *store.Store
	recv    *receiver
	hook    store.Webhook
	keyFile string // the deployment's, which sealed hook's secret
}

// sealer loads the Authority of st with keyFile, as a server process does,
// and returns its sealer.
func sealer(t *testing.T, st *store.Store, keyFile string) *pki.Sealer {
	t.Helper()
	a, err := pki.LoadOrCreate(t.Context(), st, keyFile, "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	return a.Sealer()
}

// setup opens a store on engine with tenants acme and globex, a receiver
// and acme's webhook to it for patterns, its secret sealed as the API
// seals it.
func setup(t *testing.T, engine store.Engine, patterns ...string) (*webhooks.Worker, bundle) {
	t.Helper()
	ctx := t.Context()
	s := storetest.Open(t, engine)
	for _, tn := range []string{"acme", "globex"} {
		if _, err := s.CreateTenant(ctx, store.Tenant{Name: tn}); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(t.TempDir(), "ca.key")
	w := &webhooks.Worker{
		Store: s, Sealer: sealer(t, s, keyFile), URLs: webhooks.URLChecker{AllowPrivate: true},
		BackoffBase: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Timeout: 5 * time.Second,
	}
	secret := webhooks.NewSecret()
	recv := newReceiver(t, secret)
	sealed, err := w.SealSecret("wh1", secret)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.CreateWebhook(ctx, store.Webhook{ID: "wh1", Tenant: "acme", URL: recv.srv.URL + "/hook", Events: patterns, Secret: sealed})
	if err != nil {
		t.Fatal(err)
	}
	return w, bundle{store: s, recv: recv, hook: h, keyFile: keyFile}
}

// policies changes policies named names in tenant, one event each.
func policies(t *testing.T, s *store.Store, tenant string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := s.PutPolicy(t.Context(), store.Policy{Tenant: tenant, Name: n, Body: "permit(principal, action, resource);"}); err != nil {
			t.Fatal(err)
		}
	}
}

func runOnce(t *testing.T, w *webhooks.Worker) {
	t.Helper()
	if err := w.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func getHook(t *testing.T, s *store.Store) store.Webhook {
	t.Helper()
	return getHookID(t, s, "wh1")
}

func deliveries(t *testing.T, s *store.Store) []store.WebhookDelivery {
	t.Helper()
	ds, err := s.ListWebhookDeliveries(t.Context(), store.WebhookDeliveryFilter{WebhookID: "wh1", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(ds)
	return ds
}

func TestDeliversInOrder(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		w, b := setup(t, engine, "policy.*")
		policies(t, b.store, "acme", "p1", "p2")
		policies(t, b.store, "globex", "other") // not acme's: never sent
		policies(t, b.store, "acme", "p3", "p4", "p5")
		latest := must(b.store.EventBounds(t.Context()))(t).Latest
		runOnce(t, w)

		if got, want := b.recv.subjects(), []string{"p1", "p2", "p3", "p4", "p5"}; !slices.Equal(got, want) {
			t.Fatalf("receiver got %v, want %v", got, want)
		}
		b.recv.mu.Lock()
		for _, d := range b.recv.accepted {
			bd := d.body
			if d.id != fmt.Sprintf("evt_%d", bd.Data.Seq) || bd.Type != "policy.changed" || bd.Data.Tenant != "acme" ||
				bd.Data.Data["change"] != "created" || bd.Timestamp.IsZero() || bd.Data.Seq <= b.hook.Cursor {
				t.Errorf("delivery %s = %+v, want policy.changed of acme after seq %d", d.id, bd, b.hook.Cursor)
			}
		}
		b.recv.mu.Unlock()
		if h := getHook(t, b.store); h.Cursor != latest || h.Attempts != 0 {
			t.Errorf("after delivering, webhook = %+v, want cursor %d", h, latest)
		}
		ds := deliveries(t, b.store)
		if len(ds) != 5 {
			t.Fatalf("delivery log has %d attempts, want 5", len(ds))
		}
		for _, d := range ds {
			if !d.Delivered() || d.HTTPStatus != http.StatusNoContent || d.Attempt != 1 || d.EventType != "policy.changed" {
				t.Errorf("logged %+v, want a delivered first attempt", d)
			}
		}
		// Nothing new: the next sweep sends nothing.
		runOnce(t, w)
		if n := b.recv.hitCount(); n != 5 {
			t.Errorf("receiver hit %d times after an idle sweep, want 5", n)
		}
	})
}

func TestSkipsWhatDoesNotMatch(t *testing.T) {
	t.Parallel()
	w, b := setup(t, store.EngineSQLite, "node.ready")
	policies(t, b.store, "acme", "p1", "p2")
	latest := must(b.store.EventBounds(t.Context()))(t).Latest
	runOnce(t, w)
	if n := b.recv.hitCount(); n != 0 {
		t.Errorf("receiver hit %d times for events it did not ask for", n)
	}
	if h := getHook(t, b.store); h.Cursor != latest {
		t.Errorf("cursor = %d, want %d: unmatched events are passed over", h.Cursor, latest)
	}
}

func TestReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		w, b := setup(t, engine, "*")
		b.recv.status.Store(http.StatusServiceUnavailable)
		policies(t, b.store, "acme", "p1", "p2", "p3")
		for range 3 {
			runOnce(t, w)
			time.Sleep(50 * time.Millisecond) // past the backoff
		}
		b.recv.mu.Lock()
		hits := slices.Clone(b.recv.hits)
		b.recv.mu.Unlock()
		// Head of line: only the first event was tried, once per sweep,
		// with the same id every time.
		if len(hits) != 3 || hits[0] != hits[1] || hits[1] != hits[2] {
			t.Fatalf("while down the receiver saw %v, want the first event three times", hits)
		}
		h := getHook(t, b.store)
		if h.Cursor != b.hook.Cursor || h.Attempts != 3 || h.FailingSince.IsZero() || h.State != store.WebhookActive {
			t.Errorf("while down webhook = %+v, want cursor %d, 3 attempts, active", h, b.hook.Cursor)
		}
		ds := deliveries(t, b.store)
		for i, d := range ds {
			if d.Delivered() || d.HTTPStatus != http.StatusServiceUnavailable || d.Attempt != i+1 || !strings.Contains(d.Error, "503") {
				t.Errorf("logged attempt %d = %+v, want a 503 failure", i+1, d)
			}
		}

		b.recv.status.Store(http.StatusOK)
		runOnce(t, w)
		if got, want := b.recv.subjects(), []string{"p1", "p2", "p3"}; !slices.Equal(got, want) {
			t.Errorf("once up the receiver got %v, want %v", got, want)
		}
		if h := getHook(t, b.store); h.Attempts != 0 || !h.FailingSince.IsZero() || !h.NextAttemptAt.IsZero() {
			t.Errorf("once delivered webhook = %+v, want its retries cleared", h)
		}
		if ds := deliveries(t, b.store); len(ds) != 6 || ds[3].Attempt != 4 || ds[4].Attempt != 1 {
			t.Errorf("log = %+v, want 3 failures, then attempt 4 of p1 and first attempts of p2 and p3", ds)
		}
	})
}

func TestFailingPastTheBound(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		w, b := setup(t, engine, "policy.*")
		w.RetryFor = 150 * time.Millisecond
		b.recv.status.Store(http.StatusInternalServerError)
		policies(t, b.store, "acme", "p1", "p2")
		deadline := time.Now().Add(10 * time.Second)
		for getHook(t, b.store).State != store.WebhookFailing {
			if time.Now().After(deadline) {
				t.Fatalf("webhook still %+v after 10s of failures", getHook(t, b.store))
			}
			runOnce(t, w)
			time.Sleep(30 * time.Millisecond)
		}
		h := getHook(t, b.store)
		if h.Cursor != b.hook.Cursor || h.NextAttemptAt.Sub(h.FailingSince) < w.RetryFor {
			t.Errorf("failing webhook = %+v, want its cursor kept and %v of retries", h, w.RetryFor)
		}
		// Failing: no more attempts, however long.
		hits := b.recv.hitCount()
		for range 3 {
			time.Sleep(50 * time.Millisecond)
			runOnce(t, w)
		}
		if n := b.recv.hitCount(); n != hits {
			t.Errorf("a failing webhook was tried %d more times", n-hits)
		}
		// Enabled, with the receiver back: everything, in order.
		b.recv.status.Store(http.StatusOK)
		if _, err := b.store.EnableWebhook(t.Context(), "wh1"); err != nil {
			t.Fatal(err)
		}
		policies(t, b.store, "acme", "p3")
		runOnce(t, w)
		if got, want := b.recv.subjects(), []string{"p1", "p2", "p3"}; !slices.Equal(got, want) {
			t.Errorf("after enable the receiver got %v, want %v", got, want)
		}
	})
}

// TestWorkersRace runs two workers, as two processes would, on one store:
// every event is delivered once, in order.
func TestWorkersRace(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		w1, b := setup(t, engine, "*")
		w2 := &webhooks.Worker{Store: b.store, Sealer: sealer(t, b.store, b.keyFile), URLs: webhooks.URLChecker{AllowPrivate: true}}
		var want []string
		for i := range 4 {
			names := []string{fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("c", i)}
			want = append(want, names...)
			policies(t, b.store, "acme", names...)
			var wg sync.WaitGroup
			for _, w := range []*webhooks.Worker{w1, w2} {
				wg.Go(func() {
					if err := w.RunOnce(t.Context()); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
		}
		runOnce(t, w1) // whatever a claim held off
		if got := b.recv.subjects(); !slices.Equal(got, want) {
			t.Errorf("receiver got %v, want each once in order: %v", got, want)
		}
	})
}

func TestDialRefusesPrivate(t *testing.T) {
	t.Parallel()
	w, b := setup(t, store.EngineSQLite, "*")
	w.URLs.AllowPrivate = false // the webhook was stored pointing at loopback
	policies(t, b.store, "acme", "p1")
	runOnce(t, w)
	if n := b.recv.hitCount(); n != 0 {
		t.Fatalf("the loopback receiver was reached %d times", n)
	}
	ds := deliveries(t, b.store)
	if len(ds) != 1 || ds[0].Delivered() || !strings.Contains(ds[0].Error, "loopback") || !strings.Contains(ds[0].Error, "--webhooks-allow-private") {
		t.Errorf("log = %+v, want one attempt refused as loopback", ds)
	}
}

func TestTestSend(t *testing.T) {
	t.Parallel()
	w, b := setup(t, store.EngineSQLite, "node.ready")
	res, err := w.Test(t.Context(), b.hook)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Delivered() || res.EventType != webhooks.TestEventType || res.ID == 0 || res.HTTPStatus != http.StatusNoContent {
		t.Errorf("Test = %+v, want a logged, delivered webhook.test", res)
	}
	b.recv.mu.Lock()
	defer b.recv.mu.Unlock()
	if len(b.recv.accepted) != 1 || b.recv.accepted[0].body.Type != webhooks.TestEventType || !strings.HasPrefix(b.recv.accepted[0].id, "evt_test_") {
		t.Errorf("receiver got %+v, want one webhook.test", b.recv.accepted)
	}
	if h := getHook(t, b.store); h.Cursor != b.hook.Cursor {
		t.Errorf("a test send moved the cursor to %d", h.Cursor)
	}
}

// TestSecretSealedAtRest: the row holds the secret sealed, not the secret,
// and deliveries still verify against the secret the receiver was given.
func TestSecretSealedAtRest(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		w, b := setup(t, engine, "*")
		stored := string(getHook(t, b.store).Secret)
		plain := string(b.recv.secret)
		if stored == plain || strings.Contains(stored, strings.TrimPrefix(plain, "whsec_")) || !strings.HasPrefix(stored, "sealed:v1:") {
			t.Fatalf("the store holds the secret as %q, want it sealed", stored)
		}
		policies(t, b.store, "acme", "p1")
		runOnce(t, w) // the receiver verifies every signature
		if got := b.recv.subjects(); !slices.Equal(got, []string{"p1"}) {
			t.Fatalf("receiver got %v, want [p1]", got)
		}
	})
}

// TestPlainSecretStillRead: a row written before secrets were sealed holds
// the whsec_ value itself, and is delivered with it.
func TestPlainSecretStillRead(t *testing.T) {
	t.Parallel()
	w, b := setup(t, store.EngineSQLite, "*")
	secret := webhooks.NewSecret()
	recv := newReceiver(t, secret)
	if _, err := b.store.CreateWebhook(t.Context(), store.Webhook{ID: "wh2", Tenant: "globex", URL: recv.srv.URL, Events: []string{"*"}, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	policies(t, b.store, "globex", "g1")
	runOnce(t, w)
	if got := recv.subjects(); !slices.Equal(got, []string{"g1"}) {
		t.Fatalf("receiver got %v, want [g1]", got)
	}
}

// TestSealedSecretBoundToItsRow: a sealed secret copied into another
// webhook's row does not open there, and nothing is sent with it; nor does
// a worker without the sealer send anything.
func TestSealedSecretBoundToItsRow(t *testing.T) {
	t.Parallel()
	w, b := setup(t, store.EngineSQLite, "*")
	recv := newReceiver(t, b.recv.secret)
	if _, err := b.store.CreateWebhook(t.Context(), store.Webhook{ID: "wh2", Tenant: "globex", URL: recv.srv.URL, Events: []string{"*"}, Secret: b.hook.Secret}); err != nil {
		t.Fatal(err)
	}
	policies(t, b.store, "globex", "g1")
	err := w.RunOnce(t.Context())
	if err == nil || !strings.Contains(err.Error(), "wh2") || !strings.Contains(err.Error(), "open the signing secret") {
		t.Fatalf("RunOnce = %v, want wh2's secret refused", err)
	}
	if strings.Contains(err.Error(), strings.TrimPrefix(string(b.recv.secret), "whsec_")) {
		t.Fatalf("the error shows the secret: %v", err)
	}
	if _, err := w.Test(t.Context(), getHookID(t, b.store, "wh2")); err == nil {
		t.Fatal("a test send went out with another row's secret")
	}
	if n := recv.hitCount(); n != 0 {
		t.Fatalf("the receiver was sent %d requests signed with a secret that does not open", n)
	}

	bare := &webhooks.Worker{Store: b.store, URLs: webhooks.URLChecker{AllowPrivate: true}}
	if _, err := bare.SealSecret("wh3", webhooks.NewSecret()); err == nil {
		t.Fatal("SealSecret without a sealer succeeded")
	}
	if _, err := bare.Test(t.Context(), b.hook); err == nil {
		t.Fatal("a worker without the sealer sent a test with a sealed secret")
	}
}

func getHookID(t *testing.T, s *store.Store, id string) store.Webhook {
	t.Helper()
	h, err := s.GetWebhook(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	w := &webhooks.Worker{}
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, webhooks.Backoff(w, n))
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 600, 600}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Errorf("backoff = %v, want %v", got, want)
	}
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestPrunedBeforeDelivery: events pruned while the webhook was behind are
// not skipped silently: the delivery log says which were lost, and
// delivery goes on from the oldest event kept.
func TestPrunedBeforeDelivery(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		w, b := setup(t, engine, "*")
		b.recv.status.Store(http.StatusServiceUnavailable)
		policies(t, b.store, "acme", "p1", "p2")
		runOnce(t, w) // p1 fails: the webhook is behind
		if _, err := b.store.PruneEvents(t.Context(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		policies(t, b.store, "acme", "p3")
		b.recv.status.Store(http.StatusOK)
		time.Sleep(50 * time.Millisecond) // past the backoff
		runOnce(t, w)

		if got := b.recv.subjects(); !slices.Equal(got, []string{"p3"}) {
			t.Errorf("the receiver got %v, want p3 alone (p1 and p2 were pruned)", got)
		}
		var gap *store.WebhookDelivery
		for _, d := range deliveries(t, b.store) {
			if d.EventType == "webhook.gap" {
				gap = &d
			}
		}
		bounds, err := b.store.EventBounds(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if gap == nil || gap.Delivered() || gap.EventSeq != bounds.Oldest-1 ||
			!strings.Contains(gap.Error, fmt.Sprintf("events %d to %d were pruned", b.hook.Cursor+1, bounds.Oldest-1)) {
			t.Errorf("the delivery log's gap entry = %+v, want the pruned range %d to %d", gap, b.hook.Cursor+1, bounds.Oldest-1)
		}
		if h := getHook(t, b.store); h.Cursor != bounds.Latest {
			t.Errorf("cursor %d, want %d: delivery went on after the gap", h.Cursor, bounds.Latest)
		}
	})
}
