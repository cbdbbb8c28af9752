package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestDrainAndLabel: drain cordons and lists a node's reservations, or
// releases them (each audited in its own tenant); labels are the
// operator's, outside the inventory's namespaces, and bad input changes
// nothing.
func TestDrainAndLabel(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		ctx := context.Background()
		if _, err := f.store.CreatePool(ctx, store.Pool{Tenant: "platform", Name: "shared"}); err != nil {
			t.Fatal(err)
		}
		if err := f.store.OfferPool(ctx, "platform", "shared", "acme"); err != nil {
			t.Fatal(err)
		}
		f.gpuNode("n-drain", "platform", "shared", 4)
		mine := f.reserve("platform", "platform", "shared", 1)
		theirs := f.reserve("acme", "platform", "shared", 2)
		admin := f.tokens["platform/admin"]
		const (
			drain = "/bettercompute.api.v1.NodeService/DrainNode"
			label = "/bettercompute.api.v1.NodeService/LabelNode"
		)
		ids := func(res result) []string {
			var out []string
			list, _ := res.body["reservations"].([]any)
			for _, r := range list {
				m := r.(map[string]any)
				out = append(out, m["id"].(string)+"/"+m["state"].(string))
			}
			return out
		}

		// Without release: cordoned, and both reservations listed, active.
		res := f.call(drain, admin, map[string]any{"id": "n-drain"})
		if res.code != "ok" || res.body["node"].(map[string]any)["cordoned"] != true || len(ids(res)) != 2 {
			t.Fatalf("drain = %s %v", res.code, res.body)
		}
		for _, s := range ids(res) {
			if !strings.HasSuffix(s, "RESERVATION_STATE_PLACED") {
				t.Errorf("drain without release changed %s", s)
			}
		}
		// acme cannot drain the platform's node: it does not exist for acme.
		if res := f.call(drain, f.tokens["acme/alice"], map[string]any{"id": "n-drain", "release": true}); res.code != "not_found" {
			t.Errorf("acme draining the platform's node: %s %s", res.code, res.msg)
		}
		// With release: both end, and acme's log shows its reservation's end.
		res = f.call(drain, admin, map[string]any{"id": "n-drain", "release": true})
		if res.code != "ok" || len(ids(res)) != 2 {
			t.Fatalf("drain --release = %s %v", res.code, res.body)
		}
		for _, id := range []string{mine, theirs} {
			if r, err := f.store.GetReservation(ctx, id); err != nil || r.State != store.ReservationReleased {
				t.Errorf("%s after the drain: %v, %v", id, r.State, err)
			}
		}
		evs, err := f.store.ListAuditEvents(ctx, store.AuditFilter{Tenant: "acme", Resource: `Reservation::"acme/` + theirs + `"`, Limit: 10})
		if err != nil || len(evs) != 1 || !strings.Contains(evs[0].Reason, "drain of node n-drain") || evs[0].Principal != `User::"platform/admin"` {
			t.Errorf("acme's audit of the drain: %+v, %v", evs, err)
		}
		// Drained again: nothing left to list.
		if res := f.call(drain, admin, map[string]any{"id": "n-drain", "release": true}); res.code != "ok" || len(ids(res)) != 0 {
			t.Errorf("a second drain = %s %v", res.code, ids(res))
		}

		// Labels.
		res = f.call(label, admin, map[string]any{"id": "n-drain", "set": map[string]any{"rack": "r7", "zone": "a"}})
		if got := res.body["node"].(map[string]any)["labels"]; res.code != "ok" || len(got.(map[string]any)) != 2 {
			t.Fatalf("label = %s %v", res.code, res.body)
		}
		res = f.call(label, admin, map[string]any{"id": "n-drain", "remove": []string{"zone", "missing"}})
		if got := res.body["node"].(map[string]any)["labels"].(map[string]any); res.code != "ok" || len(got) != 1 || got["rack"] != "r7" {
			t.Errorf("label --remove = %s %v", res.code, res.body)
		}
		for name, req := range map[string]map[string]any{
			"gpu.":                 {"id": "n-drain", "set": map[string]any{"gpu.count": "9"}},
			"not valid":            {"id": "n-drain", "set": map[string]any{"Bad Key": "x"}},
			"nothing to change":    {"id": "n-drain"},
			"both set and removed": {"id": "n-drain", "set": map[string]any{"rack": "r8"}, "remove": []string{"rack"}},
			"memory.":              {"id": "n-drain", "remove": []string{"memory.totalGiB"}},
		} {
			if res := f.call(label, admin, req); res.code != "invalid_argument" || !strings.Contains(res.msg, name) {
				t.Errorf("label %v: %s %q, want invalid_argument saying %q", req, res.code, res.msg, name)
			}
		}
		if n, err := f.store.GetNode(ctx, "n-drain"); err != nil || len(n.Labels) != 1 || n.Labels["rack"] != "r7" {
			t.Errorf("labels after refused changes: %v, %v", n.Labels, err)
		}
	})
}
