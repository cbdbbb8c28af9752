package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// An nvidia-smi that fails while a spec is applied is not a node without
// GPUs: the converger keeps what it bound, does not record the spec, says
// why, and applies it once nvidia-smi works again.
func TestConvergerGPUsUnreadable(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	broken := filepath.Join(t.TempDir(), "broken")
	smi := fakeNvidiaSMI(t, fmt.Sprintf("[ -e '%s' ] && { echo 'Unable to determine the device handle for GPU 0000:07:00.0: Unknown Error' >&2; exit 255; }\n%s",
		broken, catSMIFixture(t)))
	cdi := filepath.Join(t.TempDir(), "cdi")
	n := newTestNodeOn(joinedDir(t, gw), func(c *Config) {
		onFixtureHost(smi)(c)
		c.CDIDir = cdi
	})
	n.conv.retryMin = 50 * time.Millisecond
	runNode(t, n)
	s := gw.session(t)

	const ra, rb = "r-aaaaaaaaaaaaaaaaaaaaaaaaaa", "r-bbbbbbbbbbbbbbbbbbbbbbbbbb"
	const gpu0, gpu1 = "GPU-1d9e4a8c-5b2f-3c71-9e0a-6f3b2c8d4e17", "GPU-7a3c9f12-e84b-1d05-b6a2-0c5e9d3f8a61"
	spec := func(gen int64, rids ...string) *agentv1.Frame {
		ns := &agentv1.NodeSpec{Generation: gen}
		for i, rid := range rids {
			ns.Allocations = append(ns.Allocations, &agentv1.Allocation{ReservationId: rid, GpuUuids: []string{[]string{gpu0, gpu1}[i]}})
		}
		return &agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: ns}}
	}
	applied := func(ok func(*agentv1.SpecApplied) bool) *agentv1.SpecApplied {
		t.Helper()
		return s.next(t, func(f *agentv1.Frame) bool { return f.GetSpecApplied() != nil && ok(f.GetSpecApplied()) }).GetSpecApplied()
	}
	failed := func(sa *agentv1.SpecApplied) bool { return sa.GetError() != "" }
	bound := func(rids ...string) {
		t.Helper()
		for _, rid := range rids {
			if _, err := os.Stat(filepath.Join(cdi, "bettercompute-"+rid+".json")); err != nil {
				t.Errorf("reservation %s is not bound: %v", rid, err)
			}
		}
	}

	_ = s.send(spec(1, ra))
	if sa := applied(func(sa *agentv1.SpecApplied) bool { return sa.GetGeneration() == 1 }); len(sa.GetBound()) != 1 || failed(sa) {
		t.Fatalf("SpecApplied = %v, want generation 1 with %s bound", sa, ra)
	}
	bound(ra)

	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = s.send(spec(2, ra, rb))
	sa := applied(failed)
	if sa.GetGeneration() != 1 || len(sa.GetBound()) != 0 || len(sa.GetRemoved()) != 0 || !strings.Contains(sa.GetError(), "Unknown Error") {
		t.Errorf("SpecApplied = %v; want generation 1 held, nothing bound or removed, and nvidia-smi's error", sa)
	}
	applied(failed) // retried, and still failing
	bound(ra)
	if got := n.Status().SpecGeneration; got != 1 {
		t.Errorf("spec generation %d recorded while the GPUs were unreadable, want 1", got)
	}

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	sa = applied(func(sa *agentv1.SpecApplied) bool { return !failed(sa) })
	if sa.GetGeneration() != 2 || len(sa.GetBound()) != 2 {
		t.Errorf("SpecApplied = %v; want generation 2 with %s and %s bound", sa, ra, rb)
	}
	bound(ra, rb)
	if got := n.Status().SpecGeneration; got != 2 {
		t.Errorf("spec generation %d, want 2", got)
	}
}
