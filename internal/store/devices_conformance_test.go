package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
)

// exerciseDeviceOwner: a node reporting another live node's GPU UUID does
// not take it, nor its booking; once the holder is revoked, the GPU moves
// to the node that has it now (re-installed hardware joining again).
func exerciseDeviceOwner(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 2, 2)
	r := must(s.PlaceReservation(ctx, placement("r1", 2)))(t) // n1's or n2's two GPUs
	holder, other := r.NodeID, "n1"
	if holder == "n1" {
		other = "n2"
	}
	stolen := gpus(holder, "h100-sxm", 2)
	claim := append(gpus(other, "h100-sxm", 2), stolen...)
	for i := range claim {
		claim[i].Index = i
	}
	taken := must(s.SyncNodeDevices(ctx, other, claim))(t)
	if !slices.Equal(taken, []string{stolen[0].UUID, stolen[1].UUID}) {
		t.Errorf("SyncNodeDevices(%s with %s's GPUs) taken = %v, want %s's two", other, holder, taken, holder)
	}
	if got := must(s.ListNodeDevices(ctx, holder))(t); len(got) != 2 {
		t.Errorf("%s's GPUs after %s reported them: %+v; want both still %s's", holder, other, got, holder)
	}
	if got := must(s.ListNodeDevices(ctx, other))(t); len(got) != 2 {
		t.Errorf("%s's GPUs: %+v; want only its own two", other, got)
	}
	if allocs := must(s.NodeAllocations(ctx, holder))(t); len(allocs) != 1 || len(allocs[0].DeviceUUIDs) != 2 {
		t.Errorf("%s's allocations = %+v; want r1 with both GPUs", holder, allocs)
	}
	checkBookings(ctx, t, s)

	must(s.ReleaseReservation(ctx, r.ID))(t)
	must(s.RevokeNode(ctx, holder))(t)
	if taken := must(s.SyncNodeDevices(ctx, other, claim))(t); len(taken) != 0 {
		t.Errorf("after %s was revoked, taken = %v; want none", holder, taken)
	}
	if got := must(s.ListNodeDevices(ctx, other))(t); len(got) != 4 {
		t.Errorf("%s's GPUs after %s was revoked: %+v; want all four", other, holder, got)
	}
	checkBookings(ctx, t, s)
}
