package api_test

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

// TestRotateWebhookSecretAPI rotates a webhook's secret through the API:
// the new secret is shown once, the old one keeps signing test sends for
// keep_previous (24h unless given), 0 drops it, and bad input changes
// nothing.
func TestRotateWebhookSecretAPI(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		const svc = "/bettercompute.api.v1.WebhookService/"
		alice := f.tokens["acme/alice"]
		open := withWebhooks(t, f, &webhooks.Worker{Store: f.store, Sealer: f.authority.Sealer(), URLs: webhooks.URLChecker{AllowPrivate: true}})

		// The receiver keeps the last request, to verify it with any secret.
		var (
			mu               sync.Mutex
			lastID, lastSigs string
			lastTS           int64
			lastBody         []byte
		)
		recv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			lastID, lastSigs, lastBody = r.Header.Get(webhooks.HeaderID), r.Header.Get(webhooks.HeaderSignature), body
			lastTS, _ = strconv.ParseInt(r.Header.Get(webhooks.HeaderTimestamp), 10, 64)
		}))
		t.Cleanup(recv.Close)
		// testSend sends webhook.test and reports whether a receiver
		// verifying with each of secrets accepts it.
		testSend := func(id string, secrets ...string) []bool {
			t.Helper()
			if res := open.call(svc+"TestWebhook", alice, map[string]any{"id": id}); res.code != "ok" {
				t.Fatalf("TestWebhook = %s (%s)", res.code, res.msg)
			}
			mu.Lock()
			defer mu.Unlock()
			var ok []bool
			for _, s := range secrets {
				ok = append(ok, webhooks.Verify(store.WebhookSecret(s), lastID, lastTS, lastBody, lastSigs))
			}
			return ok
		}

		res := open.call(svc+"CreateWebhook", alice, map[string]any{"url": recv.URL, "events": []string{"*"}})
		if res.code != "ok" {
			t.Fatalf("CreateWebhook = %s (%s)", res.code, res.msg)
		}
		id, s0 := res.body["webhook"].(map[string]any)["id"].(string), res.body["secret"].(string)
		created, err := f.store.GetWebhook(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}

		for _, bad := range []struct {
			req        map[string]any
			code, want string
		}{
			{map[string]any{"id": id, "keepPrevious": "-1s"}, "invalid_argument", "0s (drop the old secret now) to 168h (7 days)"},
			{map[string]any{"id": id, "keepPrevious": "604801s"}, "invalid_argument", "0s (drop the old secret now) to 168h (7 days)"},
			{map[string]any{"id": "wh_0000000000000000"}, "not_found", "wh_0000000000000000"},
		} {
			res := open.call(svc+"RotateWebhookSecret", alice, bad.req)
			if res.code != bad.code || !strings.Contains(res.msg, bad.want) || strings.Contains(res.msg, "\n") {
				t.Errorf("RotateWebhookSecret(%v) = %s (%s), want %s saying %q", bad.req, res.code, res.msg, bad.code, bad.want)
			}
		}
		if got, err := f.store.GetWebhook(t.Context(), id); err != nil || got.Secret != created.Secret || got.PreviousSecret != "" {
			t.Fatalf("after refused rotations the webhook = %+v (%v), want it unchanged", got, err)
		}

		before := time.Now()
		res = open.call(svc+"RotateWebhookSecret", alice, map[string]any{"id": id})
		if res.code != "ok" {
			t.Fatalf("RotateWebhookSecret = %s (%s)", res.code, res.msg)
		}
		s1, _ := res.body["secret"].(string)
		hook := res.body["webhook"].(map[string]any)
		until, _ := time.Parse(time.RFC3339Nano, hook["previousSecretExpireTime"].(string))
		if !strings.HasPrefix(s1, "whsec_") || s1 == s0 || hook["id"] != id || hook["cursor"] != strconv.FormatInt(created.Cursor, 10) {
			t.Errorf("RotateWebhookSecret = %v, want the same webhook and a new whsec_ secret", res.body)
		}
		if d := until.Sub(before); d < 24*time.Hour-time.Minute || d > 24*time.Hour+time.Minute {
			t.Errorf("the old secret is kept until %v, %v from now; want 24h by default", until, d)
		}
		if e := f.lastAudit(); e.Action != "compute:webhooks:rotate" || e.Decision != "allow" || e.Reason != "ok" {
			t.Errorf("last audit event = %+v, want the allowed rotation", e)
		}
		stored, err := f.store.GetWebhook(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []store.WebhookSecret{stored.Secret, stored.PreviousSecret} {
			for _, plain := range []string{s0, s1} {
				if !strings.HasPrefix(string(v), "sealed:v1:") || strings.Contains(string(v), strings.TrimPrefix(plain, "whsec_")) {
					t.Errorf("the store holds a secret as %q, want it sealed", string(v))
				}
			}
		}
		got := open.call(svc+"GetWebhook", alice, map[string]any{"id": id})
		if body := jsonOf(got.body); strings.Contains(body, strings.TrimPrefix(s0, "whsec_")) || strings.Contains(body, strings.TrimPrefix(s1, "whsec_")) ||
			!strings.Contains(body, "previousSecretExpireTime") {
			t.Errorf("GetWebhook = %s, want until when the old secret is valid and neither secret", body)
		}
		if ok := testSend(id, s1, s0); !ok[0] || !ok[1] {
			t.Errorf("during the overlap a receiver verifying with the new, the old secret accepts: %v; want both", ok)
		}

		res = open.call(svc+"RotateWebhookSecret", alice, map[string]any{"id": id, "keepPrevious": "0s"})
		s2, _ := res.body["secret"].(string)
		if hook, _ := res.body["webhook"].(map[string]any); res.code != "ok" || hook["previousSecretExpireTime"] != nil || s2 == s1 {
			t.Fatalf("RotateWebhookSecret(keep 0) = %s %v, want a new secret and no old one", res.code, res.body)
		}
		if ok := testSend(id, s2, s1); !ok[0] || ok[1] {
			t.Errorf("after dropping the old secret a receiver verifying with the new, the old accepts: %v; want only the new", ok)
		}
	})
}
