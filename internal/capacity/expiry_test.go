package capacity_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/capacity"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestExpirer: a reservation past its end by the store's clock is expired
// by the worker and its GPUs are free again; a live one is untouched.
func TestExpirer(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := context.Background()
		st := seedNode(t, engine)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}

		now, err := st.Now(ctx)
		must(err)
		place := func(id string, ends time.Time) {
			must(st.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				_, err := q.PlaceReservation(ctx, store.Placement{ID: id, Tenant: "acme", Principal: `User::"acme/a"`, PoolTenant: "acme", Pool: "gpu", GPUs: 2, EndsAt: ends})
				return err
			}))
		}
		place("r-short", now.Add(200*time.Millisecond))
		place("r-long", now.Add(time.Hour))

		var seen []store.Reservation
		e := &capacity.Expirer{Store: st, OnExpired: func(rs []store.Reservation) { seen = append(seen, rs...) }}
		got, err := e.RunOnce(ctx, slog.New(slog.DiscardHandler))
		if err != nil || len(got) != 0 {
			t.Fatalf("before the end: expired %v, %v", got, err)
		}
		time.Sleep(300 * time.Millisecond)
		got, err = e.RunOnce(ctx, slog.New(slog.DiscardHandler))
		if err != nil || len(got) != 1 || got[0].ID != "r-short" || len(seen) != 1 {
			t.Fatalf("after the end: expired %v (told %v), %v; want r-short", got, seen, err)
		}
		if r, err := st.GetReservation(ctx, "r-long"); err != nil || r.State != store.ReservationBound && r.State != store.ReservationPlaced {
			t.Errorf("r-long: %+v, %v", r, err)
		}
		free, err := st.FreeDevices(ctx, "acme", "gpu", "")
		if err != nil || free["h100-sxm"] != 2 {
			t.Errorf("free after expiry = %v, %v; want 2 h100-sxm", free, err)
		}
	})
}

// seedNode opens a store with tenant acme, its pool gpu, and node n1 in it,
// ready, with 4 H100s (GPU-0 to GPU-3).
func seedNode(t *testing.T, engine store.Engine) *store.Store {
	t.Helper()
	ctx := context.Background()
	st := storetest.Open(t, engine)
	_, err := st.CreateTenant(ctx, store.Tenant{Name: "acme", DisplayName: "acme"})
	if err == nil {
		_, err = st.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "gpu"})
	}
	if err == nil {
		_, err = st.CreateNode(ctx, store.Node{ID: "n1", Tenant: "acme", Hostname: "n1", CertSerial: "1", CertPublicKey: []byte{1}, CertNotAfter: time.Now().Add(time.Hour)})
	}
	if err == nil {
		_, err = st.BeginSession(ctx, "n1", "test", "boot")
	}
	if err == nil {
		_, err = st.AdoptNode(ctx, "n1", "acme", "gpu")
	}
	if err == nil {
		var devs []store.Device
		for i := range 4 {
			devs = append(devs, store.Device{UUID: fmt.Sprintf("GPU-%d", i), NodeID: "n1", Index: i, ModelKey: "h100-sxm"})
		}
		_, err = st.SyncNodeDevices(ctx, "n1", devs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}
