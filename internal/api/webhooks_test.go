package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/api"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// webhookIn makes a webhook of tenant t, straight in the store, and names
// it in a request. Its URL is loopback, which the fixture's server refuses
// to dial, so a test send fails fast without leaving the machine.
func webhookIn(f *fixture, t string) map[string]any {
	f.t.Helper()
	id := "wh_" + t + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := f.store.CreateWebhook(context.Background(), store.Webhook{
		ID: id, Tenant: t, URL: "http://127.0.0.1:9/hook", Events: []string{"*"}, Secret: webhooks.NewSecret(),
	}); err != nil {
		f.t.Fatal(err)
	}
	return in(t, "id", id)
}

// withWebhooks returns f's API served by a second server whose webhook
// calls use worker: the fixture's own refuses private receivers, and tests
// need loopback ones, as dev allows.
func withWebhooks(t *testing.T, f *fixture, worker *webhooks.Worker) *fixture {
	t.Helper()
	mux := http.NewServeMux()
	if err := api.Mount(mux, api.Config{Store: f.store, Started: time.Now(), Webhooks: worker}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(requestid.Middleware(mux))
	t.Cleanup(srv.Close)
	open := *f
	open.url = srv.URL
	return &open
}

// TestWebhooksAPI manages a webhook through the API, against a real
// receiver, on a server that allows private targets as dev does.
func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		const svc = "/bettercompute.api.v1.WebhookService/"
		alice := f.tokens["acme/alice"]

		// The fixture's server refuses private targets, and says how to
		// allow them.
		res := f.call(svc+"CreateWebhook", alice, map[string]any{"url": "http://127.0.0.1:9/", "events": []string{"*"}})
		if res.code != "invalid_argument" || !strings.Contains(res.msg, "loopback") || !strings.Contains(res.msg, "--webhooks-allow-private") {
			t.Errorf("CreateWebhook(loopback) = %s (%s), want invalid_argument naming the flag", res.code, res.msg)
		}

		worker := &webhooks.Worker{Store: f.store, Sealer: f.authority.Sealer(), URLs: webhooks.URLChecker{AllowPrivate: true}}
		open := withWebhooks(t, f, worker)

		var (
			mu     sync.Mutex
			secret store.WebhookSecret
			got    []string // verified webhook-ids
		)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			ts, _ := strconv.ParseInt(r.Header.Get(webhooks.HeaderTimestamp), 10, 64)
			mu.Lock()
			defer mu.Unlock()
			if !webhooks.Verify(secret, r.Header.Get(webhooks.HeaderID), ts, body, r.Header.Get(webhooks.HeaderSignature)) {
				t.Errorf("delivery %s does not verify with the secret CreateWebhook returned", body)
			}
			got = append(got, r.Header.Get(webhooks.HeaderID))
		}))
		t.Cleanup(recv.Close)

		for _, bad := range []struct {
			req  map[string]any
			want string
		}{
			{map[string]any{"url": "ftp://" + recv.Listener.Addr().String(), "events": []string{"*"}}, `scheme "ftp"`},
			{map[string]any{"url": recv.URL, "events": []string{"nodes.*"}}, `event pattern "nodes.*"`},
			{map[string]any{"url": recv.URL}, "name the events"},
		} {
			res := open.call(svc+"CreateWebhook", alice, bad.req)
			if res.code != "invalid_argument" || !strings.Contains(res.msg, bad.want) || strings.Contains(res.msg, "\n") {
				t.Errorf("CreateWebhook(%v) = %s (%s), want invalid_argument about %s", bad.req, res.code, res.msg, bad.want)
			}
		}

		res = open.call(svc+"CreateWebhook", alice, map[string]any{"url": recv.URL + "/in", "events": []string{"policy.*"}})
		if res.code != "ok" {
			t.Fatalf("CreateWebhook = %s (%s)", res.code, res.msg)
		}
		hook := res.body["webhook"].(map[string]any)
		id := hook["id"].(string)
		mu.Lock()
		secret = store.WebhookSecret(res.body["secret"].(string))
		mu.Unlock()
		if !strings.HasPrefix(string(secret), "whsec_") || hook["state"] != "active" || hook["tenant"] != "acme" || hook["url"] != recv.URL+"/in" {
			t.Errorf("CreateWebhook = %v, want an active acme webhook and a whsec_ secret", res.body)
		}
		// The store holds the secret sealed: a copy of the database alone
		// cannot sign deliveries.
		stored, err := f.store.GetWebhook(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Secret == secret || strings.Contains(string(stored.Secret), strings.TrimPrefix(string(secret), "whsec_")) || !strings.HasPrefix(string(stored.Secret), "sealed:v1:") {
			t.Errorf("the store holds the secret as %q, want it sealed", string(stored.Secret))
		}
		for _, m := range []string{"GetWebhook", "ListWebhooks"} {
			res := open.call(svc+m, alice, map[string]any{"id": id})
			if res.code != "ok" || strings.Contains(strings.ToLower(jsonOf(res.body)), "secret") || !strings.Contains(jsonOf(res.body), id) {
				t.Errorf("%s = %s %v, want the webhook without its secret", m, res.code, res.body)
			}
		}

		res = open.call(svc+"TestWebhook", alice, map[string]any{"id": id})
		if d, _ := res.body["delivery"].(map[string]any); res.code != "ok" || d["delivered"] != true || d["httpStatus"] != float64(200) || d["eventType"] != "webhook.test" {
			t.Errorf("TestWebhook = %s %v, want a delivered webhook.test", res.code, res.body)
		}
		// Events after creation go out through the worker.
		for _, name := range []string{"p1", "p2"} {
			if _, err := f.store.PutPolicy(t.Context(), store.Policy{Tenant: "acme", Name: name, Body: "permit(principal, action, resource);"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := worker.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(got) != 3 || !strings.HasPrefix(got[0], "evt_test_") || !strings.HasPrefix(got[1], "evt_") {
			t.Errorf("receiver got %v, want the test and two policy events", got)
		}
		mu.Unlock()

		// The log pages newest first.
		var types []string
		token := ""
		for range 5 {
			res := open.call(svc+"ListWebhookDeliveries", alice, map[string]any{"id": id, "pageSize": 2, "pageToken": token})
			if res.code != "ok" {
				t.Fatalf("ListWebhookDeliveries = %s (%s)", res.code, res.msg)
			}
			ds, _ := res.body["deliveries"].([]any)
			for _, d := range ds {
				types = append(types, d.(map[string]any)["eventType"].(string))
			}
			token, _ = res.body["nextPageToken"].(string)
			if token == "" {
				break
			}
		}
		if strings.Join(types, " ") != "policy.changed policy.changed webhook.test" {
			t.Errorf("deliveries = %v, want two policy.changed then the test", types)
		}
		if res := open.call(svc+"ListWebhookDeliveries", alice, map[string]any{"id": id, "pageToken": "bogus"}); res.code != "invalid_argument" {
			t.Errorf("ListWebhookDeliveries(bogus token) = %s, want invalid_argument", res.code)
		}

		if res := open.call(svc+"EnableWebhook", alice, map[string]any{"id": id}); res.code != "ok" {
			t.Errorf("EnableWebhook = %s (%s)", res.code, res.msg)
		}
		if res := open.call(svc+"GetWebhook", f.tokens["globex/carol"], map[string]any{"tenant": "acme", "id": id}); res.code != "not_found" {
			t.Errorf("globex's admin getting acme's webhook = %s, want not_found", res.code)
		}
		if res := open.call(svc+"DeleteWebhook", alice, map[string]any{"id": id}); res.code != "ok" {
			t.Errorf("DeleteWebhook = %s (%s)", res.code, res.msg)
		}
		if res := open.call(svc+"GetWebhook", alice, map[string]any{"id": id}); res.code != "not_found" {
			t.Errorf("GetWebhook after delete = %s, want not_found", res.code)
		}
	})
}

// TestWebhookNeedsSealer: a server without the key file's sealer refuses
// to create a webhook rather than store its secret plain.
func TestWebhookNeedsSealer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, store.EngineSQLite)
	bare := withWebhooks(t, f, &webhooks.Worker{Store: f.store, URLs: webhooks.URLChecker{AllowPrivate: true}})
	res := bare.call("/bettercompute.api.v1.WebhookService/CreateWebhook", f.tokens["acme/alice"], map[string]any{"url": "http://127.0.0.1:9/", "events": []string{"*"}})
	if res.code == "ok" {
		t.Fatalf("CreateWebhook without a sealer = ok %v, want an error", res.body)
	}
	ws, err := f.store.ListWebhooks(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if !strings.HasPrefix(string(w.Secret), "sealed:v1:") && w.URL == "http://127.0.0.1:9/" {
			t.Fatalf("webhook %s was stored with its secret plain", w.ID)
		}
	}
}

// TestWebhookURLCredentials: a URL with a user name or password is
// refused and nothing is stored; a token in the query is kept, since many
// receivers take one there, but never reaches the log or the delivery
// log's errors.
func TestWebhookURLCredentials(t *testing.T) {
	t.Parallel()
	f := newFixture(t, store.EngineSQLite)
	const svc = "/bettercompute.api.v1.WebhookService/"
	alice := f.tokens["acme/alice"]
	for _, u := range []string{"https://u:hunter2@93.184.215.14/hook", "https://hunter2@93.184.215.14/hook", "https://@93.184.215.14/hook"} {
		res := f.call(svc+"CreateWebhook", alice, map[string]any{"url": u, "events": []string{"reservation.*"}})
		if res.code != "invalid_argument" || !strings.Contains(res.msg, "user name or password") || strings.Contains(res.msg, "hunter2") || strings.Contains(res.msg, "\n") {
			t.Errorf("CreateWebhook(%s) = %s (%s), want invalid_argument about the user name or password, without them", u, res.code, res.msg)
		}
	}
	if ws, err := f.store.ListWebhooks(t.Context(), "acme"); err != nil || len(ws) != 0 {
		t.Fatalf("after the refusals the store holds %v, %v; want no webhook", ws, err)
	}

	var (
		mu  sync.Mutex
		log bytes.Buffer
	)
	worker := &webhooks.Worker{
		Store: f.store, Sealer: f.authority.Sealer(), URLs: webhooks.URLChecker{AllowPrivate: true},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil)),
	}
	open := withWebhooks(t, f, worker)
	// A port nothing listens on: the client's error names the URL.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/hook"
	_ = l.Close()
	res := open.call(svc+"CreateWebhook", alice, map[string]any{"url": closed + "?token=hunter2", "events": []string{"policy.*"}})
	if res.code != "ok" || res.body["webhook"].(map[string]any)["url"] != closed+"?token=hunter2" {
		t.Fatalf("CreateWebhook(a token in the query) = %s %v, want it made as given", res.code, res.body)
	}
	id := res.body["webhook"].(map[string]any)["id"].(string)
	res = open.call(svc+"TestWebhook", alice, map[string]any{"id": id})
	if d, _ := res.body["delivery"].(map[string]any); res.code != "ok" || d["delivered"] == true || !strings.Contains(d["error"].(string), closed) || strings.Contains(d["error"].(string), "hunter2") {
		t.Errorf("TestWebhook = %s %v, want a failed delivery naming %s without its query", res.code, res.body, closed)
	}
	if _, err := f.store.PutPolicy(t.Context(), store.Policy{Tenant: "acme", Name: "p1", Body: "permit(principal, action, resource);"}); err != nil {
		t.Fatal(err)
	}
	if err := worker.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), closed) || strings.Contains(log.String(), "hunter2") {
		t.Errorf("the worker logged %q, want the failed delivery's URL without its query", log.String())
	}
}

// lockedWriter serializes writes to a buffer the test reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
