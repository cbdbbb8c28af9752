package gateway

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/capacity/catalog"
)

// Inventory labels: what a node's hardware says about it, for selecting
// and reading nodes without opening their inventory.
const (
	labelGPUModel = "gpu.model"       // the catalog key of most of its GPUs
	labelGPUCount = "gpu.count"       // how many GPUs it has
	labelCPUCount = "cpu.count"       // logical CPUs
	labelNUMA     = "numa.nodes"      // NUMA nodes
	labelMemory   = "memory.totalGiB" // RAM, in whole GiB
)

// labelSections are the sections inventory labels come from.
var labelSections = map[string]bool{"gpus": true, "cpu": true, "memory": true}

// withInventoryLabels returns cur updated from the decoded sections (by
// name; only those that arrived with content), and whether it changed. A
// section sets all of its labels each time, so a label it no longer gives
// (no GPUs now) is removed.
func withInventoryLabels(cur map[string]string, sections map[string]*agentv1.Inventory) (map[string]string, bool) {
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]string{}
	}
	if inv, ok := sections["gpus"]; ok {
		devices := inv.GetGpus().GetDevices()
		out[labelGPUCount] = strconv.Itoa(len(devices))
		delete(out, labelGPUModel)
		if m := commonModel(devices); m != "" {
			out[labelGPUModel] = m
		}
	}
	if inv, ok := sections["cpu"]; ok {
		out[labelCPUCount] = strconv.Itoa(int(inv.GetCpu().GetThreads()))
		out[labelNUMA] = strconv.Itoa(len(inv.GetCpu().GetNumaNodes()))
	}
	if inv, ok := sections["memory"]; ok {
		out[labelMemory] = strconv.FormatInt(inv.GetMemory().GetTotalBytes()>>30, 10)
	}
	return out, !maps.Equal(out, cur)
}

// commonModel is the catalog key most of the GPUs have (the lower key on
// a tie), or "" without GPUs.
func commonModel(devices []*agentv1.GPU) string {
	count := map[string]int{}
	for _, d := range devices {
		count[catalog.Lookup(d.GetName()).Key]++
	}
	keys := slices.Collect(maps.Keys(count))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(count[b], count[a]), cmp.Compare(a, b)) })
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}
