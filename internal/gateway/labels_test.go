package gateway

import (
	"maps"
	"slices"
	"testing"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

func TestInventoryLabels(t *testing.T) {
	gpu := func(name string) *agentv1.GPU { return &agentv1.GPU{Name: name} }
	cur := map[string]string{"gpu.model": "a100-80gb", "gpu.count": "8", "memory.totalGiB": "1"}
	got, changed := withInventoryLabels(cur, map[string]*agentv1.Inventory{
		"gpus":   {Gpus: &agentv1.GPUs{Devices: []*agentv1.GPU{gpu("NVIDIA L4"), gpu("NVIDIA H100 80GB HBM3"), gpu("NVIDIA L4")}}},
		"memory": {Memory: &agentv1.Memory{TotalBytes: 2048<<30 + 512<<20}},
	})
	want := map[string]string{"gpu.model": "l4", "gpu.count": "3", "memory.totalGiB": "2048"}
	if !changed || !maps.Equal(got, want) {
		t.Errorf("labels = %v (changed %v), want %v", got, changed, want)
	}
	if cur["gpu.model"] != "a100-80gb" {
		t.Error("withInventoryLabels changed its input")
	}
	// The GPUs gone: no model, a count of 0.
	got, _ = withInventoryLabels(got, map[string]*agentv1.Inventory{"gpus": {}})
	if _, ok := got["gpu.model"]; ok || got["gpu.count"] != "0" {
		t.Errorf("labels without GPUs = %v", got)
	}
	// The same again: unchanged.
	if _, changed := withInventoryLabels(got, map[string]*agentv1.Inventory{"gpus": {}}); changed {
		t.Error("the same report changed the labels")
	}
}

// TestGPUDevices: only GPUs the node can bind become bookable. A GPU
// without a device path (nvidia-smi's minor number N/A) or with a UUID a
// CDI spec cannot carry would fail every spec its node applies once booked.
func TestGPUDevices(t *testing.T) {
	inv := &agentv1.Inventory{Gpus: &agentv1.GPUs{Devices: []*agentv1.GPU{
		{Uuid: "GPU-0a", Index: 0, Name: "NVIDIA H100 80GB HBM3", DevicePath: "/dev/nvidia0"},
		{Uuid: "", Index: 1, Name: "NVIDIA H100 80GB HBM3", DevicePath: "/dev/nvidia1"},
		{Uuid: "GPU-2c", Index: 2, Name: "NVIDIA H100 80GB HBM3"},
		{Uuid: "GPU-3d,GPU-0a", Index: 3, Name: "NVIDIA H100 80GB HBM3", DevicePath: "/dev/nvidia3"},
		{Uuid: "GPU-4e", Index: 4, Name: "NVIDIA L4", DevicePath: "/dev/nvidia4"},
	}}}
	got := gpuDevices("n1", inv)
	var uuids []string
	for _, d := range got {
		uuids = append(uuids, d.UUID)
	}
	if want := []string{"GPU-0a", "GPU-4e"}; !slices.Equal(uuids, want) {
		t.Fatalf("bookable GPUs = %v, want %v", uuids, want)
	}
	if got[1].NodeID != "n1" || got[1].Index != 4 || got[1].ModelKey != "l4" {
		t.Errorf("device = %+v, want n1's index 4, model l4", got[1])
	}
}
