package fleetcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

func res(id string, state apiv1.ReservationState, nodes []string, uuids ...string) *apiv1.Reservation {
	return &apiv1.Reservation{Id: id, State: state, NodeIds: nodes, DeviceUuids: uuids}
}

const (
	bound    = apiv1.ReservationState_RESERVATION_STATE_BOUND
	placed   = apiv1.ReservationState_RESERVATION_STATE_PLACED
	released = apiv1.ReservationState_RESERVATION_STATE_RELEASED
)

func TestDoubleBookings(t *testing.T) {
	rs := []*apiv1.Reservation{
		res("r1", bound, []string{"n1"}, "a", "b"),
		res("r2", placed, []string{"n1"}, "b"),
		res("r3", released, []string{"n1"}, "a"), // ended: not a holder
	}
	got := doubleBookings(rs)
	if len(got) != 1 || !strings.Contains(got[0], "GPU b is held by r1 and r2") {
		t.Errorf("doubleBookings = %q", got)
	}
}

func TestSpecMismatches(t *testing.T) {
	rs := []*apiv1.Reservation{
		res("ok", bound, []string{"n1", "n2"}, "a", "b"),
		res("short", bound, []string{"n1"}, "c", "d"),
		res("binding", placed, []string{"n2"}, "e"),
		res("gone", released, []string{"n2"}, "f"),
	}
	specs := map[string][]spec{
		"ok":    {{node: "n2", uuids: []string{"b"}}, {node: "n1", uuids: []string{"a"}}},
		"short": {{node: "n1", uuids: []string{"c"}}},
		"gone":  {{node: "n2", uuids: []string{"f"}}},
		"ghost": {{node: "n1", uuids: []string{"g"}}},
	}
	got := specMismatches(rs, specs)
	want := []string{"bound reservation short", "reservation gone ended", "CDI spec for ghost"}
	if len(got) != len(want) {
		t.Fatalf("specMismatches = %q, want %d lines", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("line %d = %q, want it to mention %q", i, got[i], w)
		}
	}
}

func TestReadSpec(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bettercompute-r1.json")
	body := `{"cdiVersion":"0.6.0","kind":"bettercompute.dev/gpu","devices":[{"name":"r1","containerEdits":{"env":["NVIDIA_VISIBLE_DEVICES=GPU-b,GPU-a"]}}]}`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	id, uuids, err := readSpec(file)
	if err != nil || id != "r1" || strings.Join(uuids, ",") != "GPU-b,GPU-a" {
		t.Errorf("readSpec = %q, %v, %v", id, uuids, err)
	}
	if err := os.WriteFile(file, []byte(`{"devices":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readSpec(file); err == nil {
		t.Error("readSpec accepted a spec without a device")
	}
}
