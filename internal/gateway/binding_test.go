package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/devices"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// seedGPUs adopts the node into pool "gpu" of the test tenant with n GPUs.
func (b *gwBundle) seedGPUs(t *testing.T, nodeID string, n int) {
	t.Helper()
	ctx := t.Context()
	if _, err := b.st.GetPool(ctx, gwTestTenant, "gpu"); err != nil {
		if _, err := b.st.CreatePool(ctx, store.Pool{Tenant: gwTestTenant, Name: "gpu"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.st.AdoptNode(ctx, nodeID, gwTestTenant, "gpu"); err != nil {
		t.Fatal(err)
	}
	var devs []store.Device
	for i := range n {
		devs = append(devs, store.Device{UUID: fmt.Sprintf("GPU-%s-%d", nodeID, i), NodeID: nodeID, Index: i, ModelKey: "h100-sxm", ModelName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30})
	}
	if _, err := b.st.SyncNodeDevices(ctx, nodeID, devs); err != nil {
		t.Fatal(err)
	}
}

// place reserves n GPUs of pool "gpu" on the store.
func (b *gwBundle) place(t *testing.T, id string, n int) store.Reservation {
	t.Helper()
	var r store.Reservation
	err := b.st.InTx(t.Context(), func(ctx context.Context, q store.Querier) error {
		var err error
		r, err = q.PlaceReservation(ctx, store.Placement{
			ID: id, Tenant: gwTestTenant, Principal: "alice", PoolTenant: gwTestTenant, Pool: "gpu",
			GPUs: n, SameNode: true, EndsAt: time.Now().Add(time.Hour), RequestHash: []byte(id),
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wantSpec reads frames until a NodeSpec.
func (f *fakeNode) wantSpec() *agentv1.NodeSpec {
	f.t.Helper()
	for {
		if s := f.next().GetNodeSpec(); s != nil {
			return s
		}
	}
}

// claim builds an AllocationBound signed with key.
func claim(t *testing.T, key *ecdsa.PrivateKey, c *agentv1.AllocationClaim) *agentv1.AllocationBound {
	t.Helper()
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := pki.SignAllocationClaim(key, raw)
	if err != nil {
		t.Fatal(err)
	}
	return &agentv1.AllocationBound{Claim: raw, Signature: sig}
}

func (b *gwBundle) reservation(t *testing.T, id string) store.Reservation {
	t.Helper()
	r, err := b.st.GetReservation(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBinding: a placement reaches its node as a NodeSpec; the node's
// signed claim binds it (and is audited); forged or wrong claims are
// refused and audited and bind nothing; a release reaches the node too.
func TestBinding(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		f, w := b.connect(t, n, nil)
		epoch := w.GetSessionEpoch()
		b.seedGPUs(t, n.id, 4)
		r := b.place(t, "r-aaaaaaaaaaaaaaaaaaaaaaaaaa", 2)
		b.gw.Notify(n.id)
		spec := f.wantSpec()
		if len(spec.GetAllocations()) != 1 || spec.GetAllocations()[0].GetReservationId() != r.ID ||
			!slices.Equal(spec.GetAllocations()[0].GetGpuUuids(), r.DeviceUUIDs) || spec.GetGeneration() != b.node(t, n.id).SpecGeneration {
			t.Fatalf("NodeSpec = %v; want generation %d with %s on %v", spec, b.node(t, n.id).SpecGeneration, r.ID, r.DeviceUUIDs)
		}
		key := n.cert.PrivateKey.(*ecdsa.PrivateKey)
		good := &agentv1.AllocationClaim{
			NodeId: n.id, SessionEpoch: epoch, ReservationId: r.ID, GpuUuids: r.DeviceUUIDs,
			CdiDevice: "bettercompute.dev/gpu=" + r.ID, SpecGeneration: spec.GetGeneration(),
		}
		forger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		wrong := func(edit func(c *agentv1.AllocationClaim)) *agentv1.AllocationClaim {
			c := proto.CloneOf(good)
			edit(c)
			return c
		}
		bad := map[string]*agentv1.AllocationBound{
			"the signature does not match":                     claim(t, forger, good),
			"not this session's":                               claim(t, key, wrong(func(c *agentv1.AllocationClaim) { c.SessionEpoch-- })),
			`names node "gpu-02"`:                              claim(t, key, wrong(func(c *agentv1.AllocationClaim) { c.NodeId = "gpu-02" })),
			"the reservation holds":                            claim(t, key, wrong(func(c *agentv1.AllocationClaim) { c.GpuUuids = c.GpuUuids[:1] })),
			`names CDI device "bettercompute.dev/gpu=nothing"`: claim(t, key, wrong(func(c *agentv1.AllocationClaim) { c.CdiDevice = "bettercompute.dev/gpu=nothing" })),
			"malformed":                                        {Claim: []byte{0xff, 0xff}, Signature: []byte{1}},
		}
		var forged []*agentv1.AllocationBound
		for _, c := range bad {
			forged = append(forged, c)
		}
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_SpecApplied{SpecApplied: &agentv1.SpecApplied{Generation: spec.GetGeneration(), Bound: forged}}})
		eventually(t, 5*time.Second, "the refusals", func() bool {
			return b.metric(t, "bettercompute_gateway_allocation_claims_total", claimRefused) == float64(len(bad))
		})
		if got := b.reservation(t, r.ID); got.State != store.ReservationPlaced {
			t.Fatalf("after forged claims the reservation is %s, want placed", got.State)
		}
		events, err := b.st.ListAuditEvents(ctx, store.AuditFilter{Tenant: gwTestTenant, Action: bindAction, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for want := range bad {
			found := false
			for _, e := range events {
				found = found || (e.Decision == "deny" && e.Resource == `Node::"fleet/gpu-01"` && strings.Contains(e.Reason, want))
			}
			if !found {
				t.Errorf("no deny audit event saying %q in %+v", want, events)
			}
		}

		// The node's own claim binds it, once; sent again it is held.
		for range 2 {
			f.send(&agentv1.Frame{Kind: &agentv1.Frame_SpecApplied{SpecApplied: &agentv1.SpecApplied{Generation: spec.GetGeneration(), Bound: []*agentv1.AllocationBound{claim(t, key, good)}}}})
		}
		eventually(t, 5*time.Second, "the binding", func() bool { return b.metric(t, "bettercompute_gateway_allocation_claims_total", claimHeld) == 1 })
		if got := b.reservation(t, r.ID); got.State != store.ReservationBound || got.BoundAt.IsZero() {
			t.Fatalf("reservation %s, bound at %v; want bound", got.State, got.BoundAt)
		}
		if got := b.metric(t, "bettercompute_gateway_allocation_claims_total", claimBound); got != 1 {
			t.Errorf("bound claims = %v, want 1", got)
		}
		events, err = b.st.ListAuditEvents(ctx, store.AuditFilter{Tenant: gwTestTenant, Action: bindAction, Resource: `Reservation::"fleet/` + r.ID + `"`, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || events[0].Decision != "allow" || events[0].Resource != `Reservation::"fleet/`+r.ID+`"` || !strings.Contains(events[0].Reason, "node gpu-01 bound it") {
			t.Errorf("allow audit events = %+v; want one for the binding", events)
		}

		// A release reaches the node as a spec without the allocation.
		if _, err := b.st.ReleaseReservation(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		b.gw.Notify(n.id)
		if spec := f.wantSpec(); len(spec.GetAllocations()) != 0 {
			t.Errorf("NodeSpec after release = %v, want no allocations", spec)
		}
		// A claim for it now is stale, not refused.
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_SpecApplied{SpecApplied: &agentv1.SpecApplied{Bound: []*agentv1.AllocationBound{claim(t, key, good)}}}})
		eventually(t, 5*time.Second, "the stale claim", func() bool { return b.metric(t, "bettercompute_gateway_allocation_claims_total", claimStale) == 1 })
	})
}

// TestCheckClaimOrder: a claim's GPUs match the booking whatever order
// either side sorted them in (the node byte by byte, PostgreSQL by its
// collation), and a different set still does not.
func TestCheckClaimOrder(t *testing.T) {
	a := store.NodeAllocation{ReservationID: "r-1", DeviceUUIDs: []string{"GPU-a1", "GPU-B2"}}
	claim := &agentv1.AllocationClaim{GpuUuids: []string{"GPU-B2", "GPU-a1"}, CdiDevice: devices.DeviceName("r-1")}
	if err := checkClaim(claim, a); err != nil {
		t.Errorf("the same GPUs in another order: %v", err)
	}
	claim.GpuUuids = []string{"GPU-B2", "GPU-a3"}
	if err := checkClaim(claim, a); err == nil {
		t.Error("a claim of other GPUs passed")
	}
}

// TestChangesElsewhere: what another control-plane process does for a node
// connected here (it cannot Notify this gateway) reaches the node within a
// second or so: a placement's spec, a queued command, and a revocation
// whose transaction commits long after it was stamped.
func TestChangesElsewhere(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		f, _ := b.connect(t, n, nil)
		b.seedGPUs(t, n.id, 2)

		start := time.Now()
		r := b.place(t, "r-bbbbbbbbbbbbbbbbbbbbbbbbbb", 1) // no Notify
		if spec := f.wantSpec(); len(spec.GetAllocations()) != 1 || spec.GetAllocations()[0].GetReservationId() != r.ID {
			t.Fatalf("NodeSpec = %v, want %s", spec, r.ID)
		}
		t.Logf("a placement elsewhere reached the node in %v", time.Since(start))

		start = time.Now()
		b.queue(t, n.id, "cmd-elsewhere", time.Hour) // no Notify
		for {
			if c := f.next().GetCommand(); c != nil {
				if c.GetId() != "cmd-elsewhere" {
					t.Fatalf("command %s, want cmd-elsewhere", c.GetId())
				}
				break
			}
		}
		t.Logf("a command queued elsewhere reached the node in %v", time.Since(start))

		// A revocation whose transaction stays open 1.5 s after stamping
		// revoked_at: a sweep for recent revocations missed it for good.
		err := b.st.InTx(t.Context(), func(ctx context.Context, q store.Querier) error {
			if _, err := q.RevokeNode(ctx, n.id); err != nil {
				return err
			}
			time.Sleep(1500 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		for {
			fr := f.next()
			if c := fr.GetClose(); c != nil {
				if c.GetReason() != agentv1.CloseReason_CLOSE_REASON_REVOKED {
					t.Fatalf("Close %v, want REVOKED", c)
				}
				break
			}
		}
		t.Logf("a slow revocation elsewhere closed the session %v after it committed", time.Since(committed))
	})
}
