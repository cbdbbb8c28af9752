package api_test

import (
	"testing"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestAdoptAndCordon adopts a node into a pool, cordons and uncordons it,
// and checks that a pool with a node cannot be deleted and that another
// tenant's pool is not found.
func TestAdoptAndCordon(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		alice := f.tokens["acme/alice"]
		const node = "/bettercompute.api.v1.NodeService/"
		const pool = "/bettercompute.api.v1.PoolService/"

		res := f.call(node+"AdoptNode", alice, map[string]any{"id": "n-acme-1", "pool": "main"})
		if res.code != "ok" {
			t.Fatalf("AdoptNode: %s (%s)", res.code, res.msg)
		}
		if n := res.body["node"].(map[string]any); n["pool"] != "main" {
			t.Errorf("AdoptNode: node = %v, want pool main", n)
		}
		if res := f.call(node+"AdoptNode", alice, map[string]any{"id": "n-acme-1", "pool": "nosuch"}); res.code != "not_found" {
			t.Errorf("AdoptNode into a missing pool: %s (%s), want not_found", res.code, res.msg)
		}
		if res := f.call(node+"AdoptNode", alice, map[string]any{"id": "n-acme-1", "pool": "Bad Pool"}); res.code != "invalid_argument" {
			t.Errorf("AdoptNode into a bad name: %s (%s), want invalid_argument", res.code, res.msg)
		}

		res = f.call(node+"CordonNode", alice, map[string]any{"id": "n-acme-1"})
		if n, _ := res.body["node"].(map[string]any); res.code != "ok" || n["cordoned"] != true {
			t.Errorf("CordonNode: %s (%s) %v, want the node cordoned", res.code, res.msg, res.body)
		}
		if e := f.lastAudit(); e.Action != "compute:nodes:cordon" || e.Reason != "ok" {
			t.Errorf("CordonNode audit event = %+v", e)
		}
		res = f.call(node+"GetNode", alice, map[string]any{"id": "n-acme-1"})
		if n, _ := res.body["node"].(map[string]any); n["cordoned"] != true {
			t.Errorf("GetNode after cordon = %v", res.body)
		}
		res = f.call(node+"UncordonNode", alice, map[string]any{"id": "n-acme-1"})
		if n, _ := res.body["node"].(map[string]any); res.code != "ok" || n["cordoned"] != nil {
			t.Errorf("UncordonNode: %s (%s) %v, want the node uncordoned", res.code, res.msg, res.body)
		}

		if res := f.call(pool+"DeletePool", alice, map[string]any{"name": "main"}); res.code != "failed_precondition" {
			t.Errorf("DeletePool with a node: %s (%s), want failed_precondition", res.code, res.msg)
		}
		if res := f.call(pool+"GetPool", alice, map[string]any{"tenant": "globex", "name": "main"}); res.code != "not_found" {
			t.Errorf("GetPool of another tenant: %s (%s), want not_found", res.code, res.msg)
		}
	})
}
