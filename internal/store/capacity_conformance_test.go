package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestCapacityConformance runs every CapacityQuerier method on both
// engines: pools and offers, adoption and cordoning, devices, and the
// reservation lifecycle with the bookings that refuse double-booking.
func TestCapacityConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			run  func(ctx context.Context, t *testing.T, s *store.Store)
		}{
			{"Pools", exercisePools},
			{"Adoption", exerciseAdoption},
			{"Devices", exerciseDevices},
			{"DeviceOwner", exerciseDeviceOwner},
			{"Placement", exercisePlacement},
			{"Idempotency", exercisePlacementIdempotency},
			{"Lifecycle", exerciseReservationLifecycle},
			{"Expiry", exerciseReservationExpiry},
			{"ListReservations", exerciseListReservations},
			{"NodeAllocations", exerciseNodeAllocations},
			{"FreeCounts", exerciseFreeCounts},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, ctx := setup(t, engine)
				tc.run(ctx, t, s)
			})
		}
	})
}

func exercisePools(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreateTenant(ctx, store.Tenant{Name: "initech"}))(t)
	before := must(s.Now(ctx))(t)
	p := must(s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "a100", Description: "the A100s"}))(t)
	checkStamped(t, "CreatePool", before, must(s.Now(ctx))(t), p.CreatedAt, p.UpdatedAt)
	if p.Tenant != "acme" || p.Name != "a100" || p.Description != "the A100s" {
		t.Errorf("CreatePool = %+v", p)
	}
	_, err := s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "a100"})
	wantIs(t, "CreatePool(taken)", err, store.ErrConflict)
	_, err = s.CreatePool(ctx, store.Pool{Tenant: "nobody", Name: "a100"})
	wantIs(t, "CreatePool(missing tenant)", err, store.ErrNotFound)
	must(s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "h100"}))(t)
	must(s.CreatePool(ctx, store.Pool{Tenant: "globex", Name: "l4"}))(t)

	if got := must(s.GetPool(ctx, "acme", "a100"))(t); got != p {
		t.Errorf("GetPool = %+v, want %+v", got, p)
	}
	_, err = s.GetPool(ctx, "globex", "a100")
	wantIs(t, "GetPool(other tenant)", err, store.ErrNotFound)
	if got := poolNames(must(s.ListPools(ctx, "acme"))(t)); !slices.Equal(got, []string{"acme/a100", "acme/h100"}) {
		t.Errorf("ListPools(acme) = %v", got)
	}

	up := must(s.UpdatePool(ctx, "acme", "a100", "renamed"))(t)
	if up.Description != "renamed" || !up.CreatedAt.Equal(p.CreatedAt) || up.UpdatedAt.Before(p.UpdatedAt) {
		t.Errorf("UpdatePool = %+v, from %+v", up, p)
	}
	_, err = s.UpdatePool(ctx, "acme", "nope", "x")
	wantIs(t, "UpdatePool(missing)", err, store.ErrNotFound)

	// Offers: idempotent, listed both ways, never a tenant's own pool in
	// ListPoolsOfferedTo.
	for range 2 {
		if err := s.OfferPool(ctx, "acme", "a100", "globex"); err != nil {
			t.Fatalf("OfferPool: %v", err)
		}
	}
	must(struct{}{}, s.OfferPool(ctx, "acme", "a100", "initech"))(t)
	must(struct{}{}, s.OfferPool(ctx, "acme", "a100", "acme"))(t)
	must(struct{}{}, s.OfferPool(ctx, "globex", "l4", "acme"))(t)
	wantIs(t, "OfferPool(missing pool)", s.OfferPool(ctx, "acme", "nope", "globex"), store.ErrNotFound)
	wantIs(t, "OfferPool(missing tenant)", s.OfferPool(ctx, "acme", "a100", "nobody"), store.ErrNotFound)
	offers := must(s.ListPoolOffers(ctx, "acme", "a100"))(t)
	want := []store.PoolOffer{{"acme", "a100", "acme"}, {"acme", "a100", "globex"}, {"acme", "a100", "initech"}}
	if !slices.Equal(offers, want) {
		t.Errorf("ListPoolOffers = %v, want %v", offers, want)
	}
	if got := poolNames(must(s.ListPoolsOfferedTo(ctx, "globex"))(t)); !slices.Equal(got, []string{"acme/a100"}) {
		t.Errorf("ListPoolsOfferedTo(globex) = %v", got)
	}
	if got := poolNames(must(s.ListPoolsOfferedTo(ctx, "acme"))(t)); !slices.Equal(got, []string{"globex/l4"}) {
		t.Errorf("ListPoolsOfferedTo(acme) = %v", got)
	}
	must(struct{}{}, s.UnofferPool(ctx, "acme", "a100", "initech"))(t)
	wantIs(t, "UnofferPool(again)", s.UnofferPool(ctx, "acme", "a100", "initech"), store.ErrNotFound)
	if got := must(s.ListPoolsOfferedTo(ctx, "initech"))(t); len(got) != 0 {
		t.Errorf("ListPoolsOfferedTo(initech) after UnofferPool = %v", got)
	}

	// A pool with an adopted node, or an active reservation, stays.
	createNodes(ctx, t, s, "acme", "n1")
	must(s.AdoptNode(ctx, "n1", "acme", "h100"))(t)
	wantIs(t, "DeletePool(node adopted)", s.DeletePool(ctx, "acme", "h100"), store.ErrConflict)
	wantIs(t, "DeletePool(missing)", s.DeletePool(ctx, "acme", "nope"), store.ErrNotFound)
	must(struct{}{}, s.DeletePool(ctx, "acme", "a100"))(t)
	_, err = s.GetPool(ctx, "acme", "a100")
	wantIs(t, "GetPool(deleted)", err, store.ErrNotFound)
	if got := must(s.ListPoolsOfferedTo(ctx, "globex"))(t); len(got) != 0 {
		t.Errorf("ListPoolsOfferedTo(globex) after DeletePool = %v; its offers should go with it", got)
	}
}

func poolNames(ps []store.Pool) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Tenant + "/" + p.Name
	}
	return out
}

func exerciseAdoption(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	must(s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "a100"}))(t)
	must(s.CreatePool(ctx, store.Pool{Tenant: "globex", Name: "l4"}))(t)
	createNodes(ctx, t, s, "acme", "n1")

	_, err := s.AdoptNode(ctx, "nope", "acme", "a100")
	wantIs(t, "AdoptNode(missing node)", err, store.ErrNotFound)
	_, err = s.AdoptNode(ctx, "n1", "acme", "nope")
	wantIs(t, "AdoptNode(missing pool)", err, store.ErrNotFound)
	_, err = s.AdoptNode(ctx, "n1", "globex", "l4")
	wantIs(t, "AdoptNode(another tenant's pool)", err, store.ErrConflict)
	n := must(s.AdoptNode(ctx, "n1", "acme", "a100"))(t)
	if n.Pool != "a100" || n.Cordoned {
		t.Errorf("AdoptNode = pool %q, cordoned %t; want a100, false", n.Pool, n.Cordoned)
	}
	if n := must(s.SetNodeCordoned(ctx, "n1", true))(t); !n.Cordoned {
		t.Errorf("SetNodeCordoned(true) = %+v", n)
	}
	if n := must(s.GetNode(ctx, "n1"))(t); !n.Cordoned || n.Pool != "a100" {
		t.Errorf("GetNode after cordon = %+v", n)
	}
	if n := must(s.SetNodeCordoned(ctx, "n1", false))(t); n.Cordoned {
		t.Errorf("SetNodeCordoned(false) = %+v", n)
	}
	_, err = s.SetNodeCordoned(ctx, "nope", true)
	wantIs(t, "SetNodeCordoned(missing)", err, store.ErrNotFound)
}

// gpus returns n devices of a node, of model.
func gpus(nodeID, model string, n int) []store.Device {
	out := make([]store.Device, n)
	for i := range out {
		out[i] = store.Device{
			UUID: fmt.Sprintf("GPU-%s-%d", nodeID, i), Index: i, ModelKey: model,
			ModelName: "NVIDIA " + strings.ToUpper(model), MemoryBytes: 80 << 30,
		}
	}
	return out
}

// seedPool creates tenants acme and globex, pool acme/gpu, and per entry of
// sizes a ready node n<i> of acme adopted into it with that many GPUs of
// model.
func seedPool(ctx context.Context, t *testing.T, s *store.Store, model string, sizes ...int) {
	t.Helper()
	for _, name := range []string{"acme", "globex"} {
		must(s.CreateTenant(ctx, store.Tenant{Name: name}))(t)
	}
	must(s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "gpu"}))(t)
	for i, size := range sizes {
		id := fmt.Sprintf("n%d", i+1)
		must(s.CreateNode(ctx, store.Node{
			ID: id, Tenant: "acme", Hostname: id, MachineID: id, CertSerial: id, CertPublicKey: []byte(id),
			CertNotAfter: time.Now().Add(time.Hour).Truncate(time.Microsecond),
		}))(t)
		must(s.BeginSession(ctx, id, "v1", "boot"))(t)
		must(s.AdoptNode(ctx, id, "acme", "gpu"))(t)
		if _, err := s.SyncNodeDevices(ctx, id, gpus(id, model, size)); err != nil {
			t.Fatal(err)
		}
	}
}

func exerciseDevices(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 3)
	got := must(s.ListNodeDevices(ctx, "n1"))(t)
	want := gpus("n1", "h100-sxm", 3)
	if len(got) != 3 {
		t.Fatalf("ListNodeDevices = %v, want 3", got)
	}
	for i := range got {
		if got[i].UUID != want[i].UUID || got[i].NodeID != "n1" || got[i].Index != i || got[i].ModelKey != "h100-sxm" ||
			got[i].ModelName != want[i].ModelName || got[i].MemoryBytes != want[i].MemoryBytes || got[i].UpdatedAt.IsZero() {
			t.Errorf("ListNodeDevices[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	_, err := s.SyncNodeDevices(ctx, "nope", nil)
	wantIs(t, "SyncNodeDevices(missing node)", err, store.ErrNotFound)

	// GPU 0 is booked; a report without GPUs 0 and 1 deletes 1 but keeps 0
	// (and its booking), and an update of 2 is kept.
	r := must(s.PlaceReservation(ctx, placement("r1", 1)))(t)
	if !slices.Equal(r.DeviceUUIDs, []string{"GPU-n1-0"}) {
		t.Fatalf("PlaceReservation = %v, want GPU-n1-0", r.DeviceUUIDs)
	}
	upd := gpus("n1", "h100-sxm", 3)[2:]
	upd[0].MemoryBytes = 1
	must(s.SyncNodeDevices(ctx, "n1", upd))(t)
	got = must(s.ListNodeDevices(ctx, "n1"))(t)
	if len(got) != 2 || got[0].UUID != "GPU-n1-0" || got[1].UUID != "GPU-n1-2" || got[1].MemoryBytes != 1 {
		t.Errorf("ListNodeDevices after sync = %+v; want GPU-n1-0 (booked) and GPU-n1-2 updated", got)
	}
	if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); !maps.Equal(free, map[string]int{"h100-sxm": 1}) {
		t.Errorf("FreeDevices = %v, want one h100-sxm", free)
	}
	checkBookings(ctx, t, s)
}

// placement asks acme/gpu for n GPUs of any model, for an hour.
func placement(id string, n int) store.Placement {
	return store.Placement{
		ID: id, Tenant: "globex", Principal: "alice", PoolTenant: "acme", Pool: "gpu", GPUs: n,
		EndsAt: time.Now().Add(time.Hour).Truncate(time.Microsecond),
	}
}

func checkBookings(ctx context.Context, t testing.TB, s *store.Store) {
	t.Helper()
	v, err := store.BookingViolations(ctx, s)
	if err != nil {
		t.Fatalf("BookingViolations: %v", err)
	}
	if len(v) > 0 {
		t.Errorf("booking invariant broken:\n%s", strings.Join(v, "\n"))
	}
}

func exercisePlacement(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 8, 3, 4)
	must(s.SyncNodeDevices(ctx, "n3", gpus("n3", "l4", 4)))(t)

	// n1 has 8 h100-sxm, n2 3, n3 4 l4. SameNode takes the node with the
	// fewest free GPUs that fits.
	p := placement("r1", 2)
	p.SameNode = true
	r := must(s.PlaceReservation(ctx, p))(t)
	if r.NodeID != "n2" || !slices.Equal(r.DeviceUUIDs, []string{"GPU-n2-0", "GPU-n2-1"}) ||
		r.State != store.ReservationPlaced || r.GPUs != 2 {
		t.Errorf("PlaceReservation(2, same node) = %+v; want 2 GPUs on n2", r)
	}
	p = placement("r2", 3)
	p.SameNode, p.ModelKey = true, "h100-sxm"
	r = must(s.PlaceReservation(ctx, p))(t)
	if r.NodeID != "n1" || !slices.Equal(r.DeviceUUIDs, []string{"GPU-n1-0", "GPU-n1-1", "GPU-n1-2"}) || r.ModelKey != "h100-sxm" {
		t.Errorf("PlaceReservation(3 h100, same node) = %+v; want 3 on n1", r)
	}
	if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); !maps.Equal(free, map[string]int{"h100-sxm": 6, "l4": 4}) {
		t.Errorf("FreeDevices = %v", free)
	}
	if free := must(s.FreeDevices(ctx, "acme", "gpu", "l4"))(t); !maps.Equal(free, map[string]int{"l4": 4}) {
		t.Errorf("FreeDevices(l4) = %v", free)
	}

	// Too many: ErrExhausted, saying what is free.
	p = placement("r3", 9)
	p.ModelKey = "h100-sxm"
	_, err := s.PlaceReservation(ctx, p)
	wantIs(t, "PlaceReservation(9 h100)", err, store.ErrExhausted)
	if err == nil || !strings.Contains(err.Error(), "pool acme/gpu has 6 free GPUs of model h100-sxm; 9 asked") {
		t.Errorf("PlaceReservation(9 h100) = %v; want it to say what is free", err)
	}
	p = placement("r3", 6)
	p.SameNode = true
	_, err = s.PlaceReservation(ctx, p)
	wantIs(t, "PlaceReservation(6 on one node)", err, store.ErrExhausted)
	if err == nil || !strings.Contains(err.Error(), "at most 5 on one node") {
		t.Errorf("PlaceReservation(6 on one node) = %v; want it to say at most 5 on one node", err)
	}

	// Across nodes: the smallest first (n2's last one, then n3's).
	r = must(s.PlaceReservation(ctx, placement("r4", 4)))(t)
	if r.NodeID != "" || !slices.Equal(r.DeviceUUIDs, []string{"GPU-n2-2", "GPU-n3-0", "GPU-n3-1", "GPU-n3-2"}) {
		t.Errorf("PlaceReservation(4 across nodes) = %+v", r)
	}

	// A cordoned or unreachable node gets nothing new.
	must(s.SetNodeCordoned(ctx, "n1", true))(t)
	if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); !maps.Equal(free, map[string]int{"l4": 1}) {
		t.Errorf("FreeDevices with n1 cordoned = %v, want one l4", free)
	}
	_, err = s.PlaceReservation(ctx, placement("r5", 2))
	wantIs(t, "PlaceReservation(n1 cordoned)", err, store.ErrExhausted)
	must(s.SetNodeCordoned(ctx, "n1", false))(t)
	must(s.MarkUnreachable(ctx, must(s.Now(ctx))(t).Add(time.Second)))(t)
	_, err = s.PlaceReservation(ctx, placement("r5", 1))
	wantIs(t, "PlaceReservation(nodes unreachable)", err, store.ErrExhausted)

	// Bad input.
	_, err = s.PlaceReservation(ctx, placement("r6", 0))
	if err == nil {
		t.Error("PlaceReservation(0 GPUs) succeeded")
	}
	p = placement("r6", 1)
	p.Pool = "nope"
	_, err = s.PlaceReservation(ctx, p)
	wantIs(t, "PlaceReservation(missing pool)", err, store.ErrNotFound)
	checkBookings(ctx, t, s)
}

func exercisePlacementIdempotency(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4)
	p := placement("r1", 2)
	p.IdempotencyKey, p.RequestHash = "k1", []byte("hash 1")
	r1 := must(s.PlaceReservation(ctx, p))(t)
	if r1.IdempotencyKey != "k1" || string(r1.RequestHash) != "hash 1" {
		t.Errorf("PlaceReservation = %+v", r1)
	}
	p.ID = "r2" // a retry: a new id, the same key and request
	r2 := must(s.PlaceReservation(ctx, p))(t)
	if r2.ID != "r1" || !slices.Equal(r2.DeviceUUIDs, r1.DeviceUUIDs) {
		t.Errorf("PlaceReservation(retry) = %+v, want %+v", r2, r1)
	}
	if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); free["h100-sxm"] != 2 {
		t.Errorf("FreeDevices after a retry = %v, want 2 free", free)
	}
	p.RequestHash = []byte("hash 2")
	_, err := s.PlaceReservation(ctx, p)
	wantIs(t, "PlaceReservation(key reused)", err, store.ErrConflict)
	if err == nil || !strings.Contains(err.Error(), "idempotency key reused with a different request") {
		t.Errorf("PlaceReservation(key reused) = %v", err)
	}
	// Keys are per tenant.
	p.Tenant, p.ID = "acme", "r3"
	must(s.PlaceReservation(ctx, p))(t)
	checkBookings(ctx, t, s)
}

func exerciseReservationLifecycle(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4)
	before := must(s.Now(ctx))(t)
	p := placement("r1", 2)
	p.SameNode = true
	r := must(s.PlaceReservation(ctx, p))(t)
	checkStamped(t, "PlaceReservation", before, must(s.Now(ctx))(t), r.CreatedAt, r.CreatedAt)
	if r.Tenant != "globex" || r.Principal != "alice" || r.PoolTenant != "acme" || r.Pool != "gpu" ||
		!r.EndsAt.Equal(p.EndsAt) || !r.BoundAt.IsZero() || !r.ReleasedAt.IsZero() || !r.Active() {
		t.Errorf("PlaceReservation = %+v", r)
	}
	got := must(s.GetReservation(ctx, "r1"))(t)
	if !slices.Equal(got.DeviceUUIDs, r.DeviceUUIDs) || !got.CreatedAt.Equal(r.CreatedAt) || got.State != store.ReservationPlaced {
		t.Errorf("GetReservation = %+v, want %+v", got, r)
	}
	_, err := s.GetReservation(ctx, "nope")
	wantIs(t, "GetReservation(missing)", err, store.ErrNotFound)

	_, err = s.BindReservation(ctx, "r1", "n2")
	wantIs(t, "BindReservation(other node)", err, store.ErrConflict)
	_, err = s.BindReservation(ctx, "nope", "n1")
	wantIs(t, "BindReservation(missing)", err, store.ErrNotFound)
	b := must(s.BindReservation(ctx, "r1", "n1"))(t)
	if b.State != store.ReservationBound || b.BoundAt.Before(r.CreatedAt) || len(b.DeviceUUIDs) != 2 {
		t.Errorf("BindReservation = %+v", b)
	}
	_, err = s.BindReservation(ctx, "r1", "n1")
	wantIs(t, "BindReservation(bound)", err, store.ErrConflict)

	later := p.EndsAt.Add(time.Hour)
	e := must(s.ExtendReservation(ctx, "r1", later))(t)
	if !e.EndsAt.Equal(later) || e.State != store.ReservationBound {
		t.Errorf("ExtendReservation = %+v", e)
	}
	_, err = s.ExtendReservation(ctx, "nope", later)
	wantIs(t, "ExtendReservation(missing)", err, store.ErrNotFound)

	rel := must(s.ReleaseReservation(ctx, "r1"))(t)
	if rel.State != store.ReservationReleased || rel.ReleasedAt.IsZero() || rel.Active() {
		t.Errorf("ReleaseReservation = %+v", rel)
	}
	if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); free["h100-sxm"] != 4 {
		t.Errorf("FreeDevices after release = %v, want all 4", free)
	}
	_, err = s.ReleaseReservation(ctx, "r1")
	wantIs(t, "ReleaseReservation(released)", err, store.ErrConflict)
	_, err = s.ExtendReservation(ctx, "r1", later)
	wantIs(t, "ExtendReservation(released)", err, store.ErrConflict)
	_, err = s.ReleaseReservation(ctx, "nope")
	wantIs(t, "ReleaseReservation(missing)", err, store.ErrNotFound)
	// History keeps the GPUs it held.
	if got := must(s.GetReservation(ctx, "r1"))(t); !slices.Equal(got.DeviceUUIDs, r.DeviceUUIDs) {
		t.Errorf("GetReservation(released).DeviceUUIDs = %v, want %v", got.DeviceUUIDs, r.DeviceUUIDs)
	}
	checkBookings(ctx, t, s)
	// The pool can go once nothing in it is active and no node is in it.
	must(struct{}{}, s.DeleteNode(ctx, "n1"))(t)
	must(struct{}{}, s.DeletePool(ctx, "acme", "gpu"))(t)
}

func exerciseReservationExpiry(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4)
	now := must(s.Now(ctx))(t)
	p := placement("r1", 1)
	p.EndsAt = now.Add(-time.Second).Truncate(time.Microsecond)
	must(s.PlaceReservation(ctx, p))(t)
	must(s.PlaceReservation(ctx, placement("r2", 1)))(t)
	// Past its end by the store's clock, it can no longer be extended.
	_, err := s.ExtendReservation(ctx, "r1", now.Add(time.Hour))
	wantIs(t, "ExtendReservation(past its end)", err, store.ErrConflict)

	exp := must(s.ExpireReservations(ctx))(t)
	if len(exp) != 1 || exp[0].ID != "r1" || exp[0].State != store.ReservationExpired || exp[0].ReleasedAt.IsZero() ||
		len(exp[0].DeviceUUIDs) != 1 {
		t.Errorf("ExpireReservations = %+v, want r1 expired", exp)
	}
	if exp := must(s.ExpireReservations(ctx))(t); len(exp) != 0 {
		t.Errorf("ExpireReservations again = %+v, want none", exp)
	}
	if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); free["h100-sxm"] != 3 {
		t.Errorf("FreeDevices after expiry = %v, want 3", free)
	}
	_, err = s.ReleaseReservation(ctx, "r1")
	wantIs(t, "ReleaseReservation(expired)", err, store.ErrConflict)
	wantIs(t, "DeletePool(active reservation)", s.DeletePool(ctx, "acme", "gpu"), store.ErrConflict)
	checkBookings(ctx, t, s)
}

func exerciseListReservations(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 2, 2)
	for i, tenant := range []string{"globex", "acme", "globex"} {
		p := placement(fmt.Sprintf("r%d", i+1), 1)
		p.Tenant, p.SameNode = tenant, true
		must(s.PlaceReservation(ctx, p))(t)
	}
	must(s.BindReservation(ctx, "r1", must(s.GetReservation(ctx, "r1"))(t).NodeID))(t)
	ids := func(f store.ReservationFilter) []string {
		t.Helper()
		rs := must(s.ListReservations(ctx, f))(t)
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.ID
			if len(r.DeviceUUIDs) != 1 {
				t.Errorf("ListReservations: %s has devices %v", r.ID, r.DeviceUUIDs)
			}
		}
		return out
	}
	for _, tc := range []struct {
		f    store.ReservationFilter
		want []string
	}{
		{store.ReservationFilter{Limit: 10}, []string{"r3", "r2", "r1"}},
		{store.ReservationFilter{Limit: 2}, []string{"r3", "r2"}},
		{store.ReservationFilter{Tenant: "globex", Limit: 10}, []string{"r3", "r1"}},
		{store.ReservationFilter{PoolTenant: "acme", Pool: "gpu", Limit: 10}, []string{"r3", "r2", "r1"}},
		{store.ReservationFilter{Pool: "other", Limit: 10}, []string{}},
		{store.ReservationFilter{State: store.ReservationBound, Limit: 10}, []string{"r1"}},
		{store.ReservationFilter{NodeID: "n2", Limit: 10}, nil},
	} {
		got := ids(tc.f)
		if tc.want == nil { // by node: whatever placement chose, consistently
			for _, id := range got {
				if r := must(s.GetReservation(ctx, id))(t); r.NodeID != tc.f.NodeID {
					t.Errorf("ListReservations(%+v) has %s on %s", tc.f, id, r.NodeID)
				}
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ListReservations(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
	_, err := s.ListReservations(ctx, store.ReservationFilter{})
	if err == nil {
		t.Error("ListReservations(no limit) succeeded")
	}
}

// openConcurrent opens a store whose InTx gives a placement that loses
// races enough attempts to get through a storm of them.
func openConcurrent(t *testing.T, engine store.Engine) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), storetest.URL(t, engine), store.Options{MaxTxAttempts: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// place runs PlaceReservation in its own transaction as a caller would:
// InTx retries lost races, and the caller retries ErrConflict (a booking
// that collided with a concurrent one).
func place(ctx context.Context, s *store.Store, p store.Placement) (store.Reservation, error) {
	for {
		var r store.Reservation
		err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
			var err error
			r, err = q.PlaceReservation(ctx, p)
			return err
		})
		if !errors.Is(err, store.ErrConflict) {
			return r, err
		}
	}
}

// TestPlaceReservationStorm is the concurrency test: 1,000
// concurrent placements of one GPU against 64 GPUs on 8 ready nodes book
// every GPU exactly once and refuse the rest with ErrExhausted.
func TestPlaceReservationStorm(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		s := openConcurrent(t, engine)
		seedPool(ctx, t, s, "h100-sxm", 8, 8, 8, 8, 8, 8, 8, 8)

		const n = 1000
		// SQLite serves one writer at a time, and its busy handler sleeps
		// up to 100ms between tries for the write lock: 1,000 connections
		// waiting on it leave it idle most of the time (about 25s under
		// -race). In flight, bounded to 32, it stays busy; PostgreSQL's pool
		// bounds it already (pgxpool's default of max(4, CPUs) connections).
		inFlight := make(chan struct{}, 32)
		var wg sync.WaitGroup
		var placed, exhausted atomic.Int64
		var mu sync.Mutex
		holder := map[string]string{}
		errs := make(chan error, n)
		start := time.Now()
		for i := range n {
			wg.Go(func() {
				if engine == store.EngineSQLite {
					inFlight <- struct{}{}
					defer func() { <-inFlight }()
				}
				r, err := place(ctx, s, placement(fmt.Sprintf("r%04d", i), 1))
				switch {
				case errors.Is(err, store.ErrExhausted):
					exhausted.Add(1)
				case err != nil:
					errs <- err
				default:
					placed.Add(1)
					mu.Lock()
					defer mu.Unlock()
					for _, u := range r.DeviceUUIDs {
						if prev, ok := holder[u]; ok {
							errs <- fmt.Errorf("GPU %s booked by %s and %s", u, prev, r.ID)
						}
						holder[u] = r.ID
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		t.Logf("%s: %d placements in %v: %d placed, %d exhausted", engine, n, time.Since(start), placed.Load(), exhausted.Load())
		if placed.Load() != 64 || exhausted.Load() != n-64 || len(holder) != 64 {
			t.Errorf("placed %d, exhausted %d, GPUs held %d; want 64, %d, 64", placed.Load(), exhausted.Load(), len(holder), n-64)
		}
		if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); len(free) != 0 {
			t.Errorf("FreeDevices after the storm = %v, want none", free)
		}
		checkBookings(ctx, t, s)
	})
}

// TestReservationChurn places, extends and releases concurrently in rounds
// (run it with -race) and checks the booking invariant after each round.
func TestReservationChurn(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		s := openConcurrent(t, engine)
		seedPool(ctx, t, s, "h100-sxm", 4, 4)
		var seq atomic.Int64
		for round := range 5 {
			active := must(s.ListReservations(ctx, store.ReservationFilter{State: store.ReservationPlaced, Limit: 1000}))(t)
			var wg sync.WaitGroup
			for w := range 12 {
				wg.Go(func() {
					switch w % 3 {
					case 0, 1: // place 1 to 3 GPUs
						p := placement(fmt.Sprintf("c%d", seq.Add(1)), 1+w%3)
						if _, err := place(ctx, s, p); err != nil && !errors.Is(err, store.ErrExhausted) {
							t.Errorf("round %d: place: %v", round, err)
						}
					case 2: // extend one and release another
						if len(active) == 0 {
							return
						}
						r := active[w%len(active)]
						err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
							_, err := q.ExtendReservation(ctx, r.ID, r.EndsAt.Add(time.Minute))
							return err
						})
						if err != nil && !errors.Is(err, store.ErrConflict) {
							t.Errorf("round %d: extend: %v", round, err)
						}
						r = active[(w+1)%len(active)]
						if _, err := s.ReleaseReservation(ctx, r.ID); err != nil && !errors.Is(err, store.ErrConflict) {
							t.Errorf("round %d: release: %v", round, err)
						}
					}
				})
			}
			wg.Wait()
			checkBookings(ctx, t, s)
		}
	})
}

// exerciseNodeAllocations checks what a node must hold, and that its spec
// generation moves whenever one of its GPUs is booked or freed, whichever
// statement does it, and only then.
func exerciseNodeAllocations(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 2, 2)
	gen := func(node string) int64 { return must(s.GetNode(ctx, node))(t).SpecGeneration }
	g1, g2 := gen("n1"), gen("n2")

	// Fewest free first: n1 and n2 tie, n1 sorts first.
	r1 := must(s.PlaceReservation(ctx, placement("r1", 2)))(t)
	if !slices.Equal(r1.NodeIDs, []string{"n1"}) || !maps.Equal(r1.ModelGPUs, map[string]int{"h100-sxm": 2}) {
		t.Errorf("PlaceReservation = nodes %v, models %v; want [n1], 2 h100-sxm", r1.NodeIDs, r1.ModelGPUs)
	}
	if gen("n1") <= g1 || gen("n2") != g2 {
		t.Errorf("generations after placing on n1 = %d, %d; want n1 > %d, n2 = %d", gen("n1"), gen("n2"), g1, g2)
	}
	g1 = gen("n1")
	got := must(s.NodeAllocations(ctx, "n1"))(t)
	want := []store.NodeAllocation{{ReservationID: "r1", State: store.ReservationPlaced, DeviceUUIDs: []string{"GPU-n1-0", "GPU-n1-1"}}}
	if !slices.EqualFunc(got, want, equalAllocation) {
		t.Errorf("NodeAllocations(n1) = %+v, want %+v", got, want)
	}
	if got := must(s.NodeAllocations(ctx, "n2"))(t); len(got) != 0 {
		t.Errorf("NodeAllocations(n2) = %+v, want none", got)
	}

	// Binding and extending change nothing the node holds.
	must(s.BindReservation(ctx, "r1", "n1"))(t)
	must(s.ExtendReservation(ctx, "r1", time.Now().Add(2*time.Hour)))(t)
	if gen("n1") != g1 {
		t.Errorf("generation moved on bind or extend: %d, want %d", gen("n1"), g1)
	}
	want[0].State = store.ReservationBound
	if got := must(s.NodeAllocations(ctx, "n1"))(t); !slices.EqualFunc(got, want, equalAllocation) {
		t.Errorf("NodeAllocations(n1) after bind = %+v, want %+v", got, want)
	}

	// A reservation spanning both nodes: each node holds its part, and
	// the reservation names both nodes.
	r2 := must(s.PlaceReservation(ctx, placement("r2", 2)))(t)
	if !slices.Equal(r2.NodeIDs, []string{"n2"}) {
		t.Fatalf("r2 on %v, want n2", r2.NodeIDs)
	}
	must(s.ReleaseReservation(ctx, "r1"))(t)
	if gen("n1") <= g1 {
		t.Errorf("generation did not move on release: %d", gen("n1"))
	}
	must(s.ReleaseReservation(ctx, "r2"))(t)
	r3 := must(s.PlaceReservation(ctx, store.Placement{
		ID: "r3", Tenant: "acme", Principal: "alice", PoolTenant: "acme", Pool: "gpu", GPUs: 3,
		EndsAt: time.Now().Add(time.Hour), RequestHash: []byte("r3"),
	}))(t)
	if !slices.Equal(r3.NodeIDs, []string{"n1", "n2"}) || r3.NodeID != "" {
		t.Errorf("r3 = node %q, nodes %v; want spanning n1 and n2", r3.NodeID, r3.NodeIDs)
	}
	if got := must(s.GetReservation(ctx, "r3"))(t); !slices.Equal(got.NodeIDs, r3.NodeIDs) || !maps.Equal(got.ModelGPUs, r3.ModelGPUs) {
		t.Errorf("GetReservation = nodes %v, models %v; want %v, %v", got.NodeIDs, got.ModelGPUs, r3.NodeIDs, r3.ModelGPUs)
	}
	var held int
	for _, n := range []string{"n1", "n2"} {
		for _, a := range must(s.NodeAllocations(ctx, n))(t) {
			if a.ReservationID != "r3" {
				t.Errorf("NodeAllocations(%s) holds %s, want only r3", n, a.ReservationID)
			}
			for _, u := range a.DeviceUUIDs {
				if !strings.HasPrefix(u, "GPU-"+n+"-") {
					t.Errorf("NodeAllocations(%s) lists %s of another node", n, u)
				}
			}
			held += len(a.DeviceUUIDs)
		}
	}
	if held != 3 {
		t.Errorf("nodes hold %d GPUs of r3, want 3", held)
	}

	// Expiry frees and moves the generation too.
	g1 = gen("n1")
	must(s.ExtendReservation(ctx, "r3", time.Now().Add(-time.Second)))(t)
	if got := must(s.ExpireReservations(ctx))(t); len(got) != 1 {
		t.Fatalf("ExpireReservations = %d, want 1", len(got))
	}
	if gen("n1") <= g1 {
		t.Errorf("generation did not move on expiry: %d", gen("n1"))
	}
	if got := must(s.NodeAllocations(ctx, "n1"))(t); len(got) != 0 {
		t.Errorf("NodeAllocations(n1) after expiry = %+v, want none", got)
	}
}

func equalAllocation(a, b store.NodeAllocation) bool {
	return a.ReservationID == b.ReservationID && a.State == b.State && slices.Equal(a.DeviceUUIDs, b.DeviceUUIDs)
}

// exerciseFreeCounts moves GPUs between nodes and models, removes booked
// and free ones, cordons, adopts elsewhere and loses nodes, checking after
// each step that the free counts placement reads match the GPUs and their
// bookings (checkBookings) and that placement sees what FreeDevices says.
func exerciseFreeCounts(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4, 4)
	step := func(what string, want map[string]int) {
		t.Helper()
		checkBookings(ctx, t, s)
		if got := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); !maps.Equal(got, want) {
			t.Errorf("%s: FreeDevices = %v, want %v", what, got, want)
		}
	}
	step("seeded", map[string]int{"h100-sxm": 8})
	r := must(s.PlaceReservation(ctx, placement("r1", 3)))(t)
	step("3 booked", map[string]int{"h100-sxm": 5})

	// n1's GPU 3 moves to n2 (unbooked), GPU 0 becomes an l4 (booked: it
	// stays booked and uncounted), and GPU 1 (booked) leaves the inventory.
	n1 := gpus("n1", "h100-sxm", 4)
	n1[0].ModelKey = "l4"
	moved := n1[3]
	moved.NodeID = "n2"
	must(s.SyncNodeDevices(ctx, "n1", []store.Device{n1[0], n1[2]}))(t)
	must(s.SyncNodeDevices(ctx, "n2", append(gpus("n2", "h100-sxm", 4), moved)))(t)
	step("GPUs moved", map[string]int{"h100-sxm": 5})

	// The release frees GPU 0 as an l4 on n1, and GPU 1, whose row was
	// kept while booked, until the next inventory report drops it.
	must(s.ReleaseReservation(ctx, r.ID))(t)
	step("released", map[string]int{"h100-sxm": 7, "l4": 1})
	// The migration's backfill counts this history as the triggers did.
	must(struct{}{}, store.RecountNodeFree(ctx, s))(t)
	step("recounted", map[string]int{"h100-sxm": 7, "l4": 1})
	must(s.SyncNodeDevices(ctx, "n1", []store.Device{n1[0], n1[2]}))(t)
	step("the gone GPU dropped", map[string]int{"h100-sxm": 6, "l4": 1})

	// Cordoned, unreachable, or adopted elsewhere: not counted, and not
	// placed on.
	must(s.SetNodeCordoned(ctx, "n2", true))(t)
	step("n2 cordoned", map[string]int{"h100-sxm": 1, "l4": 1})
	p := placement("r2", 2)
	p.ModelKey = "h100-sxm"
	_, err := s.PlaceReservation(ctx, p)
	wantIs(t, "PlaceReservation(2 h100, n2 cordoned)", err, store.ErrExhausted)
	if err != nil && !strings.Contains(err.Error(), "has 1 free GPUs of model h100-sxm; 2 asked") {
		t.Errorf("the exhausted error does not say what is free: %v", err)
	}
	must(s.SetNodeCordoned(ctx, "n2", false))(t)
	step("n2 uncordoned", map[string]int{"h100-sxm": 6, "l4": 1})
	must(s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "other"}))(t)
	must(s.AdoptNode(ctx, "n1", "acme", "other"))(t)
	step("n1 adopted elsewhere", map[string]int{"h100-sxm": 5})
	if got := must(s.FreeDevices(ctx, "acme", "other", ""))(t); !maps.Equal(got, map[string]int{"h100-sxm": 1, "l4": 1}) {
		t.Errorf("FreeDevices(other) = %v", got)
	}
	if _, err := s.MarkUnreachable(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	step("every node unreachable", map[string]int{})
	must(s.BeginSession(ctx, "n2", "v1", "boot"))(t)
	step("n2 back", map[string]int{"h100-sxm": 5})
	must(struct{}{}, s.DeleteNode(ctx, "n2"))(t)
	step("n2 deleted", map[string]int{})
}
