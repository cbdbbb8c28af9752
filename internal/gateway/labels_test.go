package gateway

import (
	"maps"
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
