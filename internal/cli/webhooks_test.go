package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/webhooks"
)

// TestWebhooksCommands registers a real receiver through the CLI, sends it
// a test event, lets the server's worker deliver a policy change to it, and
// reads the delivery log back.
func TestWebhooksCommands(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)

	var (
		mu     sync.Mutex
		secret store.WebhookSecret
		types  []string // verified deliveries' types, in order
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts, _ := strconv.ParseInt(r.Header.Get(webhooks.HeaderTimestamp), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		if !webhooks.Verify(secret, r.Header.Get(webhooks.HeaderID), ts, body, r.Header.Get(webhooks.HeaderSignature)) {
			t.Errorf("delivery %s does not verify", body)
		}
		_, typ, _ := strings.Cut(string(body), `"type":"`)
		typ, _, _ = strings.Cut(typ, `"`)
		types = append(types, typ)
	}))
	t.Cleanup(recv.Close)

	admin.fails(t, "needs --events", "webhooks", "create", "--url", recv.URL)
	admin.fails(t, "needs --url", "webhooks", "create", "--events", "*")
	admin.fails(t, `event pattern "nodes.*"`, "webhooks", "create", "--url", recv.URL, "--events", "nodes.*")
	admin.fails(t, `scheme "ftp"`, "webhooks", "create", "--url", "ftp://example.com/", "--events", "*")

	out := admin.table(t, "webhooks", "create", "--url", recv.URL+"/in", "--events", "policy.*, node.ready")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	mu.Lock()
	secret = store.WebhookSecret(lines[len(lines)-1])
	mu.Unlock()
	if !strings.HasPrefix(string(secret), "whsec_") || !strings.Contains(out, "shown only this once") || !strings.Contains(out, "policy.*,node.ready") {
		t.Fatalf("webhooks create printed:\n%s", out)
	}
	list := &apiv1.ListWebhooksResponse{}
	admin.do(t, list, "webhooks", "list")
	if len(list.GetWebhooks()) != 1 {
		t.Fatalf("webhooks list = %v, want the one made", list)
	}
	id := list.GetWebhooks()[0].GetId()
	if out := admin.table(t, "webhooks", "list"); !strings.Contains(out, id) || !strings.Contains(out, "active") || !strings.Contains(out, "FAILED ATTEMPTS") {
		t.Errorf("webhooks list table:\n%s", out)
	}
	if out := admin.table(t, "webhooks", "get", id, "-o", "json"); strings.Contains(out, string(secret)) || !strings.Contains(out, recv.URL) {
		t.Errorf("webhooks get shows the secret, or not the webhook:\n%s", out)
	}

	if out := admin.table(t, "webhooks", "test", id); !strings.Contains(out, "true") || !strings.Contains(out, "200") {
		t.Errorf("webhooks test printed:\n%s", out)
	}

	// A rotated secret is shown once; the receiver, switched to it, still
	// verifies every delivery, and get says until when the old one is valid.
	admin.fails(t, "--keep-previous -1h is out of range: give 0 (drop the old secret now) to 7d", "webhooks", "rotate-secret", id, "--keep-previous", "-1h")
	if err := admin.fails(t, "--keep-previous 8d is out of range", "webhooks", "rotate-secret", id, "--keep-previous", "8d"); ExitCode(err) != 2 {
		t.Errorf("webhooks rotate-secret --keep-previous 8d exits %d, want 2", ExitCode(err))
	}
	admin.fails(t, "use a number of days", "webhooks", "rotate-secret", id, "--keep-previous", "soon")
	admin.fails(t, "not found", "webhooks", "rotate-secret", "wh_0000000000000000")
	out = admin.table(t, "webhooks", "rotate-secret", id, "--keep-previous", "2h")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	rotated := store.WebhookSecret(lines[len(lines)-1])
	if !strings.HasPrefix(string(rotated), "whsec_") || rotated == secret || !strings.Contains(out, "shown only this once") ||
		!strings.Contains(out, "The old secret keeps signing deliveries until") {
		t.Fatalf("webhooks rotate-secret printed:\n%s", out)
	}
	mu.Lock()
	secret = rotated
	mu.Unlock()
	if out := admin.table(t, "webhooks", "get", id); !strings.Contains(out, "valid until") || strings.Contains(out, string(rotated)) {
		t.Errorf("webhooks get after a rotation:\n%s", out)
	}

	// A policy change reaches the receiver through the server's worker.
	admin.do(t, &apiv1.PutPolicyResponse{}, "policies", "put", "hooked", writeFile(t, "p.cedar", "permit(principal, action, resource);"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds := &apiv1.ListWebhookDeliveriesResponse{}
		admin.do(t, ds, "webhooks", "deliveries", id)
		if len(ds.GetDeliveries()) == 2 {
			if d := ds.GetDeliveries()[0]; !d.GetDelivered() || d.GetEventType() != "policy.changed" || d.GetEventSeq() == 0 {
				t.Errorf("newest delivery = %v, want the policy change delivered", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the delivery log is %v, want the test and the policy change", ds)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mu.Lock()
	if strings.Join(types, " ") != "webhook.test policy.changed" {
		t.Errorf("receiver got %v, want the test, then the policy change", types)
	}
	mu.Unlock()
	if out := admin.table(t, "webhooks", "deliveries", id, "--limit", "1"); !strings.Contains(out, "policy.changed") || !strings.Contains(out, "--page-token") {
		t.Errorf("webhooks deliveries --limit 1:\n%s", out)
	}
	admin.fails(t, "--limit", "webhooks", "deliveries", id, "--limit", "5000")

	if out := admin.table(t, "webhooks", "rotate-secret", id, "--keep-previous", "0"); !strings.Contains(out, "The old secret no longer signs") {
		t.Errorf("webhooks rotate-secret --keep-previous 0 printed:\n%s", out)
	}
	if out := admin.table(t, "webhooks", "get", id); !regexp.MustCompile(`(?m)^previous secret\s+-$`).MatchString(out) {
		t.Errorf("webhooks get after dropping the old secret:\n%s", out)
	}

	if out := admin.table(t, "webhooks", "enable", id); !strings.Contains(out, "active") {
		t.Errorf("webhooks enable printed:\n%s", out)
	}
	if out := admin.table(t, "webhooks", "delete", id); !strings.Contains(out, "deleted") {
		t.Errorf("webhooks delete printed:\n%s", out)
	}
	admin.fails(t, "not found", "webhooks", "get", id)
}

// TestPreviousSecretCell: get shows until when a rotated secret is valid,
// or that it expired, never the secret.
func TestPreviousSecretCell(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		until *timestamppb.Timestamp
		want  string
	}{
		{nil, "-"},
		{timestamppb.New(now.Add(time.Hour)), "valid until 2025-01-02T16:04:05Z"},
		{timestamppb.New(now.Add(-time.Hour)), "expired 2025-01-02T14:04:05Z"},
	} {
		if got := previousSecretCell(&apiv1.Webhook{PreviousSecretExpireTime: tc.until}, now); got != tc.want {
			t.Errorf("previousSecretCell(%v) = %q, want %q", tc.until, got, tc.want)
		}
	}
}
