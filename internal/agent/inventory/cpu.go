package inventory

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// cpu reads the processors from /proc/cpuinfo, with the topology from sysfs
// where cpuinfo lacks it (some architectures and hypervisors), and the NUMA
// nodes from sysfs.
func (h *host) cpu() *agentv1.CPU {
	procs := parseCPUInfo(h.read("/proc/cpuinfo"))
	if len(procs) == 0 || slices.ContainsFunc(procs, func(p cpuProc) bool { return !p.topology }) {
		procs = h.sysfsTopology(procs)
	}
	c := &agentv1.CPU{NumaNodes: h.numaNodes()}
	sockets := map[string]bool{}
	cores := map[[2]string]bool{}
	for _, p := range procs {
		if c.Model == "" {
			c.Model = p.model
		}
		if p.topology {
			sockets[p.pkg] = true
			cores[[2]string{p.pkg, p.core}] = true
		}
	}
	c.Threads = int32(len(procs))
	c.Sockets = int32(len(sockets))
	c.Cores = int32(len(cores))
	return c
}

// cpuProc is one logical CPU.
type cpuProc struct {
	id        string
	model     string
	pkg, core string // physical package and core ids, when topology
	topology  bool
}

// parseCPUInfo reads /proc/cpuinfo: one blank-line-separated block per
// logical CPU, "key<TAB>: value" lines.
func parseCPUInfo(s string) []cpuProc {
	var procs []cpuProc
	var cur *cpuProc
	var hasPkg, hasCore bool
	flush := func() {
		if cur != nil {
			cur.topology = hasPkg && hasCore
			procs = append(procs, *cur)
		}
		cur, hasPkg, hasCore = nil, false, false
	}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "processor" {
			flush()
			cur = &cpuProc{id: v}
			continue
		}
		if cur == nil {
			continue
		}
		switch k {
		case "model name", "Model", "cpu model":
			if cur.model == "" {
				cur.model = v
			}
		case "physical id":
			cur.pkg, hasPkg = v, true
		case "core id":
			cur.core, hasCore = v, true
		}
	}
	flush()
	return procs
}

// sysfsTopology fills the topology of each logical CPU from
// /sys/devices/system/cpu/cpuN/topology. With no cpuinfo it makes the list
// from the cpuN directories; the model then stays unknown.
func (h *host) sysfsTopology(procs []cpuProc) []cpuProc {
	if len(procs) == 0 {
		dirs, err := filepath.Glob(h.path("/sys/devices/system/cpu/cpu[0-9]*"))
		if err != nil || len(dirs) == 0 {
			h.log.Debug("inventory: no CPUs in sysfs")
			return nil
		}
		for _, d := range dirs {
			procs = append(procs, cpuProc{id: strings.TrimPrefix(filepath.Base(d), "cpu")})
		}
		slices.SortFunc(procs, func(a, b cpuProc) int { return cmp.Compare(atoi(a.id), atoi(b.id)) })
	}
	for i := range procs {
		p := &procs[i]
		if p.topology {
			continue
		}
		dir := "/sys/devices/system/cpu/cpu" + p.id + "/topology/"
		pkg, okPkg := h.readInt(dir + "physical_package_id")
		core, okCore := h.readInt(dir + "core_id")
		if okPkg && okCore {
			p.pkg, p.core, p.topology = strconv.FormatInt(pkg, 10), strconv.FormatInt(core, 10), true
		}
	}
	return procs
}

// numaNodes reads /sys/devices/system/node/nodeN: its CPU list and its
// MemTotal. A kernel without NUMA has none.
func (h *host) numaNodes() []*agentv1.NUMANode {
	dirs, err := filepath.Glob(h.path("/sys/devices/system/node/node[0-9]*"))
	if err != nil {
		return nil
	}
	var nodes []*agentv1.NUMANode
	for _, d := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		base := fmt.Sprintf("/sys/devices/system/node/node%d/", id)
		n := &agentv1.NUMANode{Id: int32(id), Cpus: h.read(base + "cpulist")}
		// "Node 0 MemTotal:       263784448 kB"
		for line := range strings.Lines(h.read(base + "meminfo")) {
			f := strings.Fields(line)
			if len(f) >= 4 && f[2] == "MemTotal:" {
				n.MemoryBytes = kib(f[3], f[4:])
			}
		}
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *agentv1.NUMANode) int { return cmp.Compare(a.Id, b.Id) })
	return nodes
}

// memory reads MemTotal from /proc/meminfo and the huge page pools from
// /sys/kernel/mm/hugepages.
func (h *host) memory() *agentv1.Memory {
	m := &agentv1.Memory{}
	for line := range strings.Lines(h.read("/proc/meminfo")) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			m.TotalBytes = kib(f[1], f[2:])
		}
	}
	entries, err := os.ReadDir(h.path("/sys/kernel/mm/hugepages"))
	if err != nil {
		h.log.Debug("inventory: no huge page pools", "err", err)
		return m
	}
	for _, e := range entries {
		// hugepages-2048kB
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		size, okKB := strings.CutSuffix(size, "kB")
		n, err := strconv.ParseInt(size, 10, 64)
		if !ok || !okKB || err != nil || n <= 0 {
			continue
		}
		dir := "/sys/kernel/mm/hugepages/" + e.Name() + "/"
		total, _ := h.readInt(dir + "nr_hugepages")
		free, _ := h.readInt(dir + "free_hugepages")
		m.HugePages = append(m.HugePages, &agentv1.HugePages{PageSizeBytes: n << 10, Total: total, Free: free})
	}
	slices.SortFunc(m.HugePages, func(a, b *agentv1.HugePages) int { return cmp.Compare(a.PageSizeBytes, b.PageSizeBytes) })
	return m
}

// kib converts a meminfo value ("263784448" followed by "kB") to bytes; a
// value without a unit is taken as bytes, and a bad one is 0.
func kib(v string, unit []string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	if len(unit) > 0 && strings.EqualFold(unit[0], "kB") {
		if n > math.MaxInt64>>10 {
			return 0
		}
		return n << 10
	}
	return n
}

// atoi is strconv.Atoi with -1 for what is not a number.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
