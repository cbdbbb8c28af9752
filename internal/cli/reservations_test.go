package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/store"
)

// seedGPUNode makes a ready node of tenant with gpus GPUs, adopted into pool,
// through the server's store.
func seedGPUNode(t *testing.T, storeURL, id, tenant, pool string, gpus int) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.CreateNode(ctx, store.Node{ID: id, Tenant: tenant, Hostname: id, CertSerial: "1", CertPublicKey: []byte{1}, CertNotAfter: time.Now().Add(time.Hour)})
	if err == nil {
		_, err = st.BeginSession(ctx, id, "test", "boot-1")
	}
	if err == nil {
		_, err = st.AdoptNode(ctx, id, tenant, pool)
	}
	if err == nil {
		var devs []store.Device
		for i := range gpus {
			devs = append(devs, store.Device{UUID: fmt.Sprintf("GPU-%s-%d", id, i), NodeID: id, Index: i, ModelKey: "h100-sxm", ModelName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30})
		}
		_, err = st.SyncNodeDevices(ctx, id, devs)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestReservationLifecycle reserves GPUs of a seeded node, gets, lists,
// extends and releases the reservation, and checks that too large a
// reservation fails saying what is free.
func TestReservationLifecycle(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)
	storeURL := admin.storeURL
	admin.do(t, &apiv1.CreatePoolResponse{}, "pools", "create", "gpu")
	seedGPUNode(t, storeURL, "n-gpu-1", "platform", "gpu", 4)

	rc := &apiv1.CreateReservationResponse{}
	admin.do(t, rc, "reservations", "create", "--pool", "gpu", "--gpus", "2", "--duration", "1h", "--model", "h100-sxm")
	r := rc.GetReservation()
	if r.GetState() != apiv1.ReservationState_RESERVATION_STATE_PLACED || r.GetGpus() != 2 || len(r.GetDeviceUuids()) != 2 ||
		r.GetNodeId() != "n-gpu-1" || r.GetPool() != "gpu" || r.GetId() == "" {
		t.Fatalf("reservations create = %v", r)
	}
	id := r.GetId()
	if until := time.Until(r.GetEndTime().AsTime()); until < 50*time.Minute || until > 70*time.Minute {
		t.Errorf("reservations create --duration 1h: ends in %v", until)
	}

	rg := &apiv1.GetReservationResponse{}
	admin.do(t, rg, "reservations", "get", id)
	if g := rg.GetReservation(); g.GetId() != id || !slices.Equal(g.GetDeviceUuids(), r.GetDeviceUuids()) {
		t.Errorf("reservations get = %v, want %v", g, r)
	}
	out := admin.table(t, "reservations", "get", id)
	for _, want := range append([]string{"PLACED", "platform/gpu", "n-gpu-1"}, r.GetDeviceUuids()...) {
		if !strings.Contains(out, want) {
			t.Errorf("reservations get table lacks %q:\n%s", want, out)
		}
	}

	rl := &apiv1.ListReservationsResponse{}
	admin.do(t, rl, "reservations", "list")
	if rs := rl.GetReservations(); len(rs) != 1 || rs[0].GetId() != id {
		t.Errorf("reservations list = %v, want %s", rs, id)
	}
	out = admin.table(t, "reservations", "list")
	if !strings.Contains(out, "ID") || !strings.Contains(out, id) || !strings.Contains(out, "PLACED") {
		t.Errorf("reservations list table:\n%s", out)
	}

	re := &apiv1.ExtendReservationResponse{}
	admin.do(t, re, "reservations", "extend", id, "--duration", "1d")
	if until := time.Until(re.GetReservation().GetEndTime().AsTime()); until < 23*time.Hour || until > 25*time.Hour {
		t.Errorf("reservations extend --duration 1d: ends in %v", until)
	}
	end := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	admin.do(t, re, "reservations", "extend", id, "--until", end.Format(time.RFC3339))
	if got := re.GetReservation().GetEndTime().AsTime(); !got.Equal(end) {
		t.Errorf("reservations extend --until %v: ends %v", end, got)
	}

	admin.fails(t, "has 2 free GPUs", "reservations", "create", "--pool", "gpu", "--gpus", "3", "--duration", "1h")
	err := admin.fails(t, "resource exhausted", "reservations", "create", "--pool", "gpu", "--gpus", "3", "--duration", "1h")
	if got := ExitCode(err); got == 2 {
		t.Errorf("an exhausted pool exits %d, the usage code", got)
	}

	rr := &apiv1.ReleaseReservationResponse{}
	admin.do(t, rr, "reservations", "release", id)
	if rr.GetReservation().GetState() != apiv1.ReservationState_RESERVATION_STATE_RELEASED {
		t.Errorf("reservations release = %v", rr.GetReservation())
	}
	// Its GPUs are free again: all 4 fit.
	admin.do(t, rc, "reservations", "create", "--pool", "gpu", "--gpus", "4", "--until", time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339), "--same-node")
	if len(rc.GetReservation().GetDeviceUuids()) != 4 {
		t.Errorf("reservations create 4 after release = %v", rc.GetReservation())
	}
	admin.fails(t, "not found", "reservations", "get", "r-nosuch")
}

func TestReservationUsageErrors(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"reservations", "create", "--gpus", "1", "--duration", "1h"}, "--pool is required"},
		{[]string{"reservations", "create", "--pool", "p", "--duration", "1h"}, "--gpus 0 is out of range"},
		{[]string{"reservations", "create", "--pool", "p", "--gpus", "-1", "--duration", "1h"}, "--gpus -1 is out of range"},
		{[]string{"reservations", "create", "--pool", "p", "--gpus", "1"}, "--duration or --until is required"},
		{[]string{"reservations", "create", "--pool", "p", "--gpus", "1", "--duration", "1h", "--until", "2030-01-01T00:00:00Z"}, "not both"},
		{[]string{"reservations", "create", "--pool", "p", "--gpus", "1", "--duration", "soon"}, `--duration "soon" is not a positive duration`},
		{[]string{"reservations", "create", "--pool", "p", "--gpus", "1", "--duration", "0s"}, `--duration "0s" is not a positive duration`},
		{[]string{"reservations", "create", "--pool", "p", "--gpus", "1", "--until", "tomorrow"}, `--until "tomorrow" is not an RFC 3339 time`},
		{[]string{"reservations", "create", "extra", "--pool", "p", "--gpus", "1", "--duration", "1h"}, "accepts 0 arg(s), received 1"},
		{[]string{"reservations", "extend", "r-1"}, "--duration or --until is required"},
		{[]string{"reservations", "extend", "r-1", "--duration", "1h", "--until", "2030-01-01T00:00:00Z"}, "not both"},
		{[]string{"reservations", "extend", "r-1", "--until", "1h"}, `--until "1h" is not an RFC 3339 time`},
		{[]string{"reservations", "extend", "--duration", "1h"}, "accepts 1 arg(s), received 0"},
		{[]string{"reservations", "get"}, "accepts 1 arg(s), received 0"},
		{[]string{"reservations", "release"}, "accepts 1 arg(s), received 0"},
		{[]string{"reservations", "list", "extra"}, "accepts 0 arg(s), received 1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			err := e.fails(t, tt.want, tt.args...)
			if got := ExitCode(err); got != 2 {
				t.Errorf("exit code = %d, want 2", got)
			}
		})
	}
}
