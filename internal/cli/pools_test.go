package cli

import (
	"slices"
	"testing"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestPoolLifecycle creates, lists, updates, offers, unoffers and deletes
// a pool, and checks that the offered tenant sees it in its list.
func TestPoolLifecycle(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)
	admin.do(t, &apiv1.CreateTenantResponse{}, "tenants", "create", "acme")

	pc := &apiv1.CreatePoolResponse{}
	admin.do(t, pc, "pools", "create", "h100", "--description", "H100 nodes")
	if p := pc.GetPool(); p.GetTenant() != "platform" || p.GetName() != "h100" || p.GetDescription() != "H100 nodes" || p.GetCreateTime() == nil {
		t.Fatalf("pools create = %v", p)
	}
	admin.fails(t, "already exists", "pools", "create", "h100")
	admin.fails(t, "is not valid", "pools", "create", "Bad Name")

	pu := &apiv1.UpdatePoolResponse{}
	admin.do(t, pu, "pools", "update", "h100", "--description", "H100 SXM nodes")
	if pu.GetPool().GetDescription() != "H100 SXM nodes" {
		t.Errorf("pools update = %v", pu.GetPool())
	}

	po := &apiv1.OfferPoolResponse{}
	admin.do(t, po, "pools", "offer", "h100", "--to", "acme")
	if !slices.Equal(po.GetPool().GetOfferedTo(), []string{"acme"}) {
		t.Errorf("pools offer: offered_to = %v, want [acme]", po.GetPool().GetOfferedTo())
	}
	admin.do(t, po, "pools", "offer", "h100", "--to", "acme") // again: no change
	admin.fails(t, "not found", "pools", "offer", "h100", "--to", "nosuch")
	pg := &apiv1.GetPoolResponse{}
	admin.do(t, pg, "pools", "get", "h100")
	if p := pg.GetPool(); !slices.Equal(p.GetOfferedTo(), []string{"acme"}) || p.GetDescription() != "H100 SXM nodes" {
		t.Errorf("pools get = %v", p)
	}

	// The offered tenant lists the pool, without its offers.
	pl := &apiv1.ListPoolsResponse{}
	admin.do(t, pl, "pools", "list", "--tenant", "acme")
	if ps := pl.GetPools(); len(ps) != 1 || ps[0].GetTenant() != "platform" || ps[0].GetName() != "h100" || len(ps[0].GetOfferedTo()) != 0 {
		t.Errorf("pools list --tenant acme = %v, want the offered platform/h100 without offers", ps)
	}

	pn := &apiv1.UnofferPoolResponse{}
	admin.do(t, pn, "pools", "unoffer", "h100", "--to", "acme")
	if len(pn.GetPool().GetOfferedTo()) != 0 {
		t.Errorf("pools unoffer: offered_to = %v, want none", pn.GetPool().GetOfferedTo())
	}
	admin.fails(t, "not offered", "pools", "unoffer", "h100", "--to", "acme")
	admin.do(t, pl, "pools", "list", "--tenant", "acme")
	if len(pl.GetPools()) != 0 {
		t.Errorf("pools list --tenant acme after unoffer = %v, want none", pl.GetPools())
	}

	admin.do(t, &apiv1.DeletePoolResponse{}, "pools", "delete", "h100")
	admin.fails(t, "not found", "pools", "get", "h100")
	admin.do(t, pl, "pools", "list")
	if len(pl.GetPools()) != 0 {
		t.Errorf("pools list after delete = %v, want none", pl.GetPools())
	}

	// Node commands reach the API; there is no node here to act on.
	admin.fails(t, "not found", "nodes", "cordon", "n-nosuch")
	admin.fails(t, "not found", "nodes", "uncordon", "n-nosuch")
	admin.fails(t, "not found", "nodes", "drain", "n-nosuch", "--release")
	admin.fails(t, "not found", "nodes", "label", "n-nosuch", "rack=r7")
	admin.fails(t, `"rack": use KEY=VALUE to set a label or KEY- to remove one`, "nodes", "label", "n-nosuch", "rack")
	admin.fails(t, "which the node's inventory sets", "nodes", "label", "n-nosuch", "gpu.count=9")
	admin.fails(t, "usage: better-compute nodes label ID KEY=VALUE", "nodes", "label", "n-nosuch")
	admin.fails(t, "--wait -1s: give a positive duration", "nodes", "drain", "n-nosuch", "--wait", "-1s")
	admin.do(t, &apiv1.CreatePoolResponse{}, "pools", "create", "spare")
	admin.fails(t, "not found", "nodes", "adopt", "n-nosuch", "--pool", "spare")
	admin.fails(t, "--pool is required", "nodes", "adopt", "n-nosuch")
	admin.fails(t, "nothing to update", "pools", "update", "spare")
	admin.fails(t, "--to is required", "pools", "offer", "spare")
}
