// Package inventory reads what a node has: host identity from procfs and
// /etc, CPUs, NUMA nodes, memory, disks and NICs from procfs and sysfs, and
// GPUs from `nvidia-smi -q -x`. A fakehw description (FakeHW) can replace the
// hardware edge, and nothing else, so that simulated nodes report hardware
// they do not have while keeping the real host's identity.
//
// The inventory travels to the control plane by section (Sections), each
// with a hash, so an unchanged section is not resent; the control plane
// rebuilds a node's inventory from the sections it stored (Merge).
package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// Options says where Collect and HealthSummary read the host from.
type Options struct {
	// Root prefixes /proc, /sys and /etc; tests point it at a fixture tree.
	// "" means "/". Interface addresses are read only when it is "/".
	Root string
	// NvidiaSMI is the path of nvidia-smi; "" looks it up in PATH. A missing
	// binary means the host has no GPUs, not an error.
	NvidiaSMI string
	// FakeHW, when set, replaces the hardware edge (CPU, memory, NUMA,
	// disks, NICs, GPUs). Host identity still comes from the real host,
	// except what FakeHW sets (hostname, machine id).
	FakeHW *FakeHW
	// Logger receives what could not be read on an odd host (each such read
	// degrades to an empty field). nil discards.
	Logger *slog.Logger
	// SkipGPUs leaves Collect's GPUs unset, for a caller that reads them
	// with GPUs, which tells GPUs that could not be read from none.
	SkipGPUs bool
}

// Collect reads the node's inventory. A read that fails on an odd host leaves
// its field empty rather than failing the inventory; only a Root that is not
// a readable directory, or a context already done, fails it. Collect may run
// concurrently, and does not modify o.FakeHW.
func Collect(ctx context.Context, o Options) (*agentv1.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("error collecting inventory: %w", err)
	}
	h, err := newHost(o)
	if err != nil {
		return nil, err
	}
	inv := &agentv1.Inventory{Host: h.identity()}
	if o.FakeHW != nil {
		o.FakeHW.apply(inv)
		if o.SkipGPUs {
			inv.Gpus = nil
		}
		return inv, nil
	}
	inv.Cpu = h.cpu()
	inv.Memory = h.memory()
	inv.Disks = h.disks()
	inv.Nics = h.nics()
	if !o.SkipGPUs {
		inv.Gpus = h.gpus(ctx, o.NvidiaSMI)
	}
	return inv, nil
}

// GPUs reads only the node's GPUs, as Collect does, except that GPUs it
// cannot read are an error rather than none: an nvidia-smi that fails or
// prints what cannot be read. Binding devices needs the difference, since
// a hiccup must not look like every GPU gone. A host without nvidia-smi
// truly has no GPUs (no error), and FakeHW's are its own.
func GPUs(ctx context.Context, o Options) (*agentv1.GPUs, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("error reading GPUs: %w", err)
	}
	if o.FakeHW != nil {
		return o.FakeHW.gpus(), nil
	}
	h, err := newHost(o)
	if err != nil {
		return nil, err
	}
	return h.readGPUs(ctx, o.NvidiaSMI)
}

// host reads one host's files under root.
type host struct {
	root string // "/" or a fixture tree
	log  *slog.Logger
}

func newHost(o Options) (*host, error) {
	root := o.Root
	if root == "" {
		root = "/"
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("error reading inventory root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("error reading inventory root: %s is not a directory", root)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &host{root: root, log: log}, nil
}

// live reports whether the host is the machine this process runs on, so that
// facts that only exist there (interface addresses) may be asked of it.
func (h *host) live() bool { return filepath.Clean(h.root) == "/" }

// path maps an absolute host path under the root.
func (h *host) path(p string) string { return filepath.Join(h.root, p) }

// read returns a file's content with surrounding space trimmed, or "" (and a
// debug line) when it cannot be read.
func (h *host) read(p string) string {
	b, err := os.ReadFile(h.path(p))
	if err != nil {
		h.log.Debug("inventory: unreadable", "path", p, "err", err)
		return ""
	}
	// Protobuf strings must be UTF-8; sysfs model strings need not be.
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD")
}

// readInt returns a file's integer content and whether it was one.
func (h *host) readInt(p string) (int64, bool) {
	s := h.read(p)
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		h.log.Debug("inventory: not an integer", "path", p, "value", s)
		return 0, false
	}
	return n, true
}

// identity reads who the host is.
func (h *host) identity() *agentv1.Host {
	return &agentv1.Host{
		Hostname:  h.read("/proc/sys/kernel/hostname"),
		MachineId: h.read("/etc/machine-id"),
		BootId:    h.read("/proc/sys/kernel/random/boot_id"),
		Kernel:    h.read("/proc/sys/kernel/osrelease"),
		Os:        h.osName(),
		Arch:      runtime.GOARCH,
	}
}

// osName is PRETTY_NAME from os-release(5), which lives in /etc or, failing
// that, /usr/lib.
func (h *host) osName() string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		for line := range strings.Lines(h.read(p)) {
			v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME=")
			if !ok {
				continue
			}
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}
