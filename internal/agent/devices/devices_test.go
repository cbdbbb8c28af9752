package devices

import (
	"maps"
	"strings"
	"testing"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		allocs []Allocation
		err    string
	}{
		{"id with slash", []Allocation{{ReservationID: "r-aaaaaaaaaaaaa/aaaaaaaaaaaa", GPUs: gpus(0)}}, "invalid reservation id"},
		{"id with dots", []Allocation{{ReservationID: "../../etc/passwd", GPUs: gpus(0)}}, "invalid reservation id"},
		{"empty id", []Allocation{{GPUs: gpus(0)}}, "invalid reservation id"},
		{"id too short", []Allocation{{ReservationID: "r-aaaa", GPUs: gpus(0)}}, "invalid reservation id"},
		{"upper case id", []Allocation{{ReservationID: "r-AAAAAAAAAAAAAAAAAAAAAAAAAA", GPUs: gpus(0)}}, "invalid reservation id"},
		{"id twice", []Allocation{{ReservationID: resA, GPUs: gpus(0)}, {ReservationID: resA, GPUs: gpus(1)}}, "listed twice"},
		{"no GPUs", []Allocation{{ReservationID: resA}}, "has no GPUs"},
		{"nil GPU", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{nil}}}, "GPU 0: missing"},
		{"GPU without UUID", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{{DevicePath: "/dev/nvidia0"}}}}, "GPU 0: no UUID"},
		{"GPU without device path", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{{Uuid: "GPU-1"}}}}, "GPU-1 has no device path"},
		{"UUID with comma", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{{Uuid: "GPU-1,GPU-2", DevicePath: "/dev/nvidia0"}}}}, "invalid UUID"},
		{"UUID with newline", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{{Uuid: "GPU-1\nX=1", DevicePath: "/dev/nvidia0"}}}}, "invalid UUID"},
		{"relative device path", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{{Uuid: "GPU-1", DevicePath: "nvidia0"}}}}, "invalid device path"},
		{"unclean device path", []Allocation{{ReservationID: resA, GPUs: []*agentv1.GPU{{Uuid: "GPU-1", DevicePath: "/dev/../etc/shadow"}}}}, "invalid device path"},
		{"GPU in two reservations", []Allocation{{ReservationID: resA, GPUs: gpus(0)}, {ReservationID: resB, GPUs: gpus(0)}}, "also in reservation"},
		// One bad allocation after a good one: nothing written at all.
		{"good then bad", []Allocation{{ReservationID: resA, GPUs: gpus(0)}, {ReservationID: "r-bad/id", GPUs: gpus(1)}}, "invalid reservation id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := setup(t)
			// An existing binding must survive a bad Sync as well.
			mustSync(t, w, Allocation{ReservationID: resB, GPUs: gpus(5)})
			before := dirState(t, w.Dir)
			ch, err := w.Sync(tt.allocs)
			if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Sync error = %v, want one line containing %q", err, tt.err)
			}
			if !ch.Empty() {
				t.Fatalf("changes = %+v, want none", ch)
			}
			if after := dirState(t, w.Dir); !maps.Equal(before, after) {
				t.Fatalf("files changed:\n%v\n%v", before, after)
			}
		})
	}
}

func TestDeviceName(t *testing.T) {
	t.Parallel()
	if got, want := DeviceName(resA), "bettercompute.dev/gpu="+resA; got != want {
		t.Fatalf("DeviceName = %q, want %q", got, want)
	}
}
