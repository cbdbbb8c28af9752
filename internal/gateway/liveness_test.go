package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
	"github.com/better-compute/better-compute/internal/wire"
)

// keepAlive sends a heartbeat every period until ctx ends, from its own
// goroutine, and reports write errors when it returns.
func (f *fakeNode) keepAlive(ctx context.Context, period time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		hb := &agentv1.Frame{Kind: &agentv1.Frame_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1}}}
		for {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-t.C:
			}
			if err := wire.WriteFrame(f.conn, hb); err != nil {
				done <- err
				return
			}
		}
	}()
	return done
}

func TestHeartbeatBatching(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		const interval = 200 * time.Millisecond
		b := setupGateway(t, engine, gwOptions{interval: interval})
		ids := []string{"gpu-01", "gpu-02", "gpu-03", "gpu-04"}
		nodes := make([]*fakeNode, len(ids))
		stops := make([]context.CancelFunc, len(ids))
		opened := map[string]time.Time{}
		for i, id := range ids {
			nodes[i], _ = b.connect(t, b.newNode(t, id), nil)
			opened[id] = b.node(t, id).LastSeenAt
			ctx, cancel := context.WithCancel(t.Context())
			stops[i] = cancel
			nodes[i].keepAlive(ctx, interval/2)
			t.Cleanup(cancel)
		}

		// Ten intervals of four chatty nodes: at most one TouchNodes per
		// interval, each carrying the nodes heard.
		calls := len(b.counted.touchCalls())
		start := time.Now()
		time.Sleep(10 * interval)
		got := b.counted.touchCalls()[calls:]
		if maxCalls := int(time.Since(start)/interval) + 1; len(got) > maxCalls || len(got) < 3 {
			t.Fatalf("%d TouchNodes calls in %v, want 3 to %d", len(got), time.Since(start), maxCalls)
		}
		full := 0
		for _, call := range got {
			if !slices.IsSorted(call) || len(slices.Compact(slices.Clone(call))) != len(call) {
				t.Fatalf("TouchNodes(%v): want sorted unique ids", call)
			}
			if slices.Equal(call, ids) {
				full++
			}
		}
		if full == 0 {
			t.Fatalf("no TouchNodes call carried all four nodes: %v", got)
		}
		for _, id := range ids {
			if n := b.node(t, id); n.State != store.NodeReady || !n.LastSeenAt.After(opened[id]) {
				t.Fatalf("%s: %s, last seen %v (opened %v)", id, n.State, n.LastSeenAt, opened[id])
			}
		}

		// gpu-01 falls silent, gpu-02 is killed: within a few intervals
		// both are unreachable and the silent one's session is ended; the
		// others stay ready.
		stops[0]()
		_ = nodes[1].conn.Close()
		eventually(t, 30*interval, "gpu-01 and gpu-02 unreachable", func() bool {
			return b.node(t, "gpu-01").State == store.NodeUnreachable && b.node(t, "gpu-02").State == store.NodeUnreachable
		})
		nodes[0].wantEnd()
		if b.gw.Connected("gpu-01") {
			t.Fatal("the silent node's session is still open")
		}
		for _, id := range ids[2:] {
			if n := b.node(t, id); n.State != store.NodeReady {
				t.Fatalf("%s is %s while it speaks", id, n.State)
			}
		}
		if got := b.metric(t, "bettercompute_gateway_session_closes_total", "silent"); got != 1 {
			t.Errorf("closes{silent} = %v, want 1", got)
		}

		// Marked unreachable while speaking (as another gateway's worker
		// might): the next batch makes them ready again.
		if _, err := b.st.MarkUnreachable(t.Context(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*interval, "speaking nodes ready again", func() bool {
			return b.node(t, "gpu-03").State == store.NodeReady && b.node(t, "gpu-04").State == store.NodeReady
		})
		// A node that comes back is ready at once.
		b.connect(t, b.identity(t, b.authority, "gpu-01"), nil)
		if n := b.node(t, "gpu-01"); n.State != store.NodeReady {
			t.Fatalf("gpu-01 after reconnecting: %s", n.State)
		}
	})
}

// section is an inventory section as bcd sends it.
func section(name string, inv *agentv1.Inventory) *agentv1.InventorySection {
	content, err := proto.MarshalOptions{Deterministic: true}.Marshal(inv)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(content)
	return &agentv1.InventorySection{Name: name, Hash: sum[:], Content: content}
}

func TestStatusReport(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		f, _ := b.connect(t, n, nil)
		ctx := t.Context()

		host := section("host", &agentv1.Inventory{Host: &agentv1.Host{Hostname: "gpu-01", Kernel: "6.8"}})
		gpus := section("gpus", &agentv1.Inventory{Gpus: &agentv1.GPUs{DriverVersion: "550.54", Devices: []*agentv1.GPU{
			{Index: 0, Uuid: "GPU-00000000-0000-0000-0000-000000000001", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, DevicePath: "/dev/nvidia0"},
			{Index: 1, Uuid: "GPU-00000000-0000-0000-0000-000000000002", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, DevicePath: "/dev/nvidia1"},
			{Index: 2, Name: "NVIDIA H100 80GB HBM3"}, // no UUID: not bookable
		}}})
		since := timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: &agentv1.StatusReport{
			Sections: []*agentv1.InventorySection{host, gpus},
			Conditions: []*agentv1.Condition{
				{Type: "GPUHealthy", Ok: true, Since: since},
				{Type: "CertificateValid", Ok: false, Message: "expires soon", Since: since},
			},
		}}})
		sections := func() map[string]store.InventorySection {
			list, err := b.st.ListInventorySections(ctx, n.id)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]store.InventorySection{}
			for _, s := range list {
				out[s.Name] = s
			}
			return out
		}
		eventually(t, readTimeout, "two sections stored", func() bool { return len(sections()) == 2 })
		got := sections()
		if !bytes.Equal(got["host"].Content, host.Content) || !bytes.Equal(got["gpus"].Hash, gpus.Hash) {
			t.Fatalf("stored %+v", got)
		}
		// Every reported GPU the node can bind became a bookable device of its model.
		devs, err := b.st.ListNodeDevices(ctx, n.id)
		if err != nil || len(devs) != 2 || devs[0].ModelKey != "h100-sxm" || devs[1].UUID != "GPU-00000000-0000-0000-0000-000000000002" {
			t.Fatalf("devices after the report: %+v, %v", devs, err)
		}
		var conds []json.RawMessage
		if err := json.Unmarshal(b.node(t, n.id).Conditions, &conds); err != nil || len(conds) != 2 {
			t.Fatalf("stored conditions %q: %v", b.node(t, n.id).Conditions, err)
		}
		var c agentv1.Condition
		if err := protojson.Unmarshal(conds[1], &c); err != nil || c.GetType() != "CertificateValid" || c.GetOk() ||
			c.GetMessage() != "expires soon" || !c.GetSince().AsTime().Equal(since.AsTime()) {
			t.Fatalf("condition %s: %v", conds[1], err)
		}

		if l := b.node(t, n.id).InventoryLabels; !maps.Equal(l, map[string]string{"gpu.model": "h100-sxm", "gpu.count": "3"}) {
			t.Errorf("inventory labels after the gpus section = %v", l)
		}

		// host unchanged (no content), cpu new: host stays as stored.
		cpu := section("cpu", &agentv1.Inventory{Cpu: &agentv1.CPU{Model: "EPYC", Threads: 224, NumaNodes: []*agentv1.NUMANode{{Id: 0}, {Id: 1}}}})
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: &agentv1.StatusReport{
			Sections: []*agentv1.InventorySection{{Name: "host", Hash: host.Hash}, cpu},
		}}})
		eventually(t, readTimeout, "cpu stored", func() bool { return len(sections()) == 3 })
		want := map[string]string{"gpu.model": "h100-sxm", "gpu.count": "3", "cpu.count": "224", "numa.nodes": "2"}
		if l := b.node(t, n.id).InventoryLabels; !maps.Equal(l, want) {
			t.Errorf("inventory labels after the cpu section = %v, want %v", l, want)
		}
		if now := sections(); !now["host"].UpdatedAt.Equal(got["host"].UpdatedAt) || !bytes.Equal(now["host"].Content, host.Content) {
			t.Fatalf("host changed by a section without content: %+v", now["host"])
		}
		if string(b.node(t, n.id).Conditions) != "[]" {
			t.Fatalf("conditions after a report without any: %q", b.node(t, n.id).Conditions)
		}

		// The last NIC gone: empty content with the hash of no bytes is a
		// section that is empty now, not one that is unchanged.
		nics := section("nics", &agentv1.Inventory{Nics: []*agentv1.NIC{{Name: "eth0"}}})
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: &agentv1.StatusReport{Sections: []*agentv1.InventorySection{nics}}}})
		eventually(t, readTimeout, "nics stored", func() bool { return len(sections()["nics"].Content) > 0 })
		noNICs := section("nics", &agentv1.Inventory{})
		if len(noNICs.Content) != 0 {
			t.Fatalf("an inventory without NICs encodes as %x, want no bytes", noNICs.Content)
		}
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: &agentv1.StatusReport{Sections: []*agentv1.InventorySection{noNICs}}}})
		eventually(t, readTimeout, "nics stored empty", func() bool {
			sec, ok := sections()["nics"]
			return ok && len(sec.Content) == 0 && bytes.Equal(sec.Hash, noNICs.Hash)
		})

		// A hash that is not the content's: protocol error, nothing stored.
		bad := section("disks", &agentv1.Inventory{Disks: []*agentv1.Disk{{Name: "nvme0n1"}}})
		bad.Hash[0] ^= 0xff
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: &agentv1.StatusReport{
			Sections: []*agentv1.InventorySection{cpu, bad},
		}}})
		f.wantClose(agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR)
		if _, ok := sections()["disks"]; ok {
			t.Fatal("a section with a bad hash was stored")
		}
		if got := b.metric(t, "bettercompute_gateway_refusals_total", refusedProtocol); got != 1 {
			t.Errorf("refusals{protocol_error} = %v, want 1", got)
		}
		if s := fmt.Sprint(validSectionName("GPUs"), validSectionName(""), validSectionName("pcie")); s != "false false true" {
			t.Errorf("validSectionName: %s", s)
		}
	})
}

// A report the store takes many heartbeat intervals to take in keeps the
// reader away from the node's heartbeats; that silence is the gateway's,
// and the session stays open.
func TestSlowStoreIsNotSilence(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{interval: 100 * time.Millisecond})
		n := b.newNode(t, "gpu-01")
		f, _ := b.connect(t, n, nil)
		b.counted.slowTx.Store(int64(time.Second)) // 10 intervals
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: &agentv1.StatusReport{
			Sections: []*agentv1.InventorySection{section("host", &agentv1.Inventory{Host: &agentv1.Host{Hostname: "gpu-01"}})},
		}}})
		stop := time.After(1500 * time.Millisecond)
		for beat := time.Tick(50 * time.Millisecond); ; {
			select {
			case <-beat:
				f.heartbeat()
				continue
			case <-stop:
			}
			break
		}
		b.counted.slowTx.Store(0)
		if got := b.metric(t, "bettercompute_gateway_session_closes_total", "silent"); got != 0 {
			t.Errorf("the gateway ended %v sessions as silent while the node kept sending heartbeats", got)
		}
		f.heartbeat() // the session is still up
		if !b.gw.Connected(n.id) {
			t.Error("the session ended while the store was slow")
		}
	})
}
