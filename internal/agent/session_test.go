package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/pki"
)

// runningNode is a Node running in the background of a test.
type runningNode struct {
	*Node
	cancel context.CancelFunc
	done   chan error
}

// startNode runs an agent on dir (already joined) with fake hardware.
func startNode(t *testing.T, dir string, edit func(*Config)) *runningNode {
	t.Helper()
	return runNode(t, newTestNodeOn(dir, edit))
}

// newTestNodeOn is the agent startNode runs, for a test that sets more
// than its Config before it runs.
func newTestNodeOn(dir string, edit func(*Config)) *Node {
	cfg := Config{DataDir: dir, FakeHW: inventory.GenerateFakeHW("test", 0, 2, "")}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if edit != nil {
		edit(&cfg)
	}
	return NewNode(cfg)
}

// onFixtureHost makes an agent read its inventory as on a real host: the
// inventory tests' host tree, and nvidia-smi at smi (none when smi names
// no file).
func onFixtureHost(smi string) func(*Config) {
	return func(c *Config) {
		c.FakeHW, c.InventoryRoot, c.NvidiaSMI = nil, "inventory/testdata/hosts/two-socket", smi
	}
}

// smiFixture is an nvidia-smi -q -x output of the inventory's tests: eight
// A100s, GPU-59ca1f07-... first.
const smiFixture = "inventory/testdata/nvidia-smi/a100-sxm4-80gb-x8-driver-535.129.03.xml"

// fakeNvidiaSMI writes an nvidia-smi stand-in that runs the shell script
// body, and returns its path.
func fakeNvidiaSMI(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// catSMIFixture is the shell line that prints smiFixture.
func catSMIFixture(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs(smiFixture)
	if err != nil {
		t.Fatal(err)
	}
	return "exec cat '" + abs + "'"
}

// runNode runs n in the background until the test ends.
func runNode(t *testing.T, n *Node) *runningNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningNode{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- n.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run and returns its error.
func (r *runningNode) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
		return nil
	}
}

func command(id, kind string, args map[string]string) *agentv1.Frame {
	return &agentv1.Frame{Kind: &agentv1.Frame_Command{Command: &agentv1.Command{
		Id: id, Kind: kind, Args: args, Deadline: timestamppb.New(time.Now().Add(time.Minute)),
	}}}
}

func ack(id string) *agentv1.Frame {
	return &agentv1.Frame{Kind: &agentv1.Frame_ResultAck{ResultAck: &agentv1.ResultAck{Id: id}}}
}

func TestSessionHelloReportHeartbeats(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	n := startNode(t, dir, func(c *Config) { c.ReportInterval = 200 * time.Millisecond })

	s := gw.session(t)
	h := s.hello
	if h.GetNodeId() != "n-test1" || h.GetProtocolVersion() != agentv1.ProtocolVersion_PROTOCOL_VERSION_1 ||
		!slices.Equal(h.GetCapabilities(), []string{"fakehw"}) || !h.GetFreshJournal() || h.GetBootId() == "" {
		t.Errorf("hello = %v", h)
	}
	first := s.next(t, isReport).GetStatusReport()
	if len(first.GetSections()) != len(inventory.SectionNames) {
		t.Errorf("%d sections, want %d", len(first.GetSections()), len(inventory.SectionNames))
	}
	for _, sec := range first.GetSections() {
		if len(sec.GetContent()) == 0 || len(sec.GetHash()) == 0 {
			t.Errorf("first report: section %s without content or hash", sec.GetName())
		}
	}
	inv, err := inventory.Merge(first.GetSections())
	if err != nil || len(inv.GetGpus().GetDevices()) != 2 {
		t.Errorf("merged inventory: %v GPUs, %v", len(inv.GetGpus().GetDevices()), err)
	}
	s.next(t, isHeartbeat)
	// The periodic report sends hashes only: nothing changed.
	later := s.next(t, isReport).GetStatusReport()
	for _, sec := range later.GetSections() {
		if len(sec.GetContent()) != 0 || len(sec.GetHash()) == 0 {
			t.Errorf("periodic report: section %s has content %d bytes, hash %d bytes", sec.GetName(), len(sec.GetContent()), len(sec.GetHash()))
		}
	}
	st := n.Status()
	if st.State != "connected" || st.SessionEpoch != s.epoch || st.NodeID != "n-test1" || st.LastHeartbeatSent.IsZero() {
		t.Errorf("status = %+v", st)
	}
	waitFor(t, "a heartbeat received", func() bool { return !n.Status().LastHeartbeatReceived.IsZero() })
}

// A command runs once: its result is resent until acknowledged, across a
// reconnect and a restart, and the same id sent again never runs again.
func TestCommandAtMostOnce(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	n := startNode(t, dir, nil)

	s1 := gw.session(t)
	s1.next(t, isReport) // the session's first
	_ = s1.send(command("c1", kindInventoryRefresh, nil))
	// inventory.refresh sends a full report, then its result.
	for _, sec := range s1.next(t, isReport).GetStatusReport().GetSections() {
		if len(sec.GetContent()) == 0 {
			t.Errorf("refresh report: section %s without content", sec.GetName())
		}
	}
	r := s1.next(t, isResult).GetCommandResult()
	if r.GetId() != "c1" || r.GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED || r.GetSessionEpoch() != s1.epoch || r.GetOutput() == "" {
		t.Fatalf("result = %v", r)
	}
	s1.conn.Close() // lost before the ack

	s2 := gw.session(t)
	if s2.hello.GetFreshJournal() || !slices.Contains(s2.hello.GetRecentCommandIds(), "c1") {
		t.Errorf("second hello = %v", s2.hello)
	}
	r = s2.next(t, func(f *agentv1.Frame) bool { return isResult(f) || isReport(f) }).GetCommandResult()
	if r.GetId() != "c1" || r.GetSessionEpoch() != s2.epoch {
		t.Fatalf("first frame after Welcome: result %v, want c1's resent on epoch %d", r, s2.epoch)
	}
	_ = s2.send(command("c1", kindInventoryRefresh, nil)) // sent again: answered from the journal
	if r := s2.next(t, isResult).GetCommandResult(); r.GetId() != "c1" {
		t.Fatalf("result = %v", r)
	}
	_ = s2.send(ack("c1"))
	waitFor(t, "the ack journaled", func() bool { return n.Status().JournalUnacked == 0 })
	_ = s2.send(command("c1", kindInventoryRefresh, nil)) // acknowledged: ignored
	_ = s2.send(command("c2", "no.such.kind", nil))
	r = s2.next(t, isResult).GetCommandResult()
	if r.GetId() != "c2" || r.GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_FAILED {
		t.Errorf("after the ack, the next result is %v, want c2's failure", r)
	}

	// A restart keeps the journal: nothing is fresh, c1 and c2 are known.
	if err := n.stop(t); err != nil {
		t.Fatal(err)
	}
	startNode(t, dir, nil)
	s3 := gw.session(t)
	if s3.hello.GetFreshJournal() || !slices.Equal(s3.hello.GetRecentCommandIds(), []string{"c1", "c2"}) {
		t.Errorf("hello after restart = %v", s3.hello)
	}
}

func TestCommandExpired(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	startNode(t, joinedDir(t, gw), nil)
	s := gw.session(t)
	f := command("late", kindNodeReboot, nil)
	f.GetCommand().Deadline = timestamppb.New(time.Now().Add(-time.Second))
	_ = s.send(f)
	r := s.next(t, isResult).GetCommandResult()
	if r.GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_EXPIRED {
		t.Errorf("result = %v", r)
	}
}

// A deleted journal makes the next start report a fresh journal, and
// nothing it ran before is run again by the node on its own.
func TestFreshJournalAfterLoss(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	n := startNode(t, dir, nil)
	s := gw.session(t)
	_ = s.send(command("c1", kindInventoryRefresh, nil))
	s.next(t, isResult)
	_ = n.stop(t)
	if err := os.Remove(filepath.Join(dir, journalFile)); err != nil {
		t.Fatal(err)
	}
	startNode(t, dir, nil)
	s = gw.session(t)
	if !s.hello.GetFreshJournal() || len(s.hello.GetRecentCommandIds()) != 0 {
		t.Errorf("hello = %v", s.hello)
	}
}

func TestRevokedStops(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	gw.helloReply = func(*agentv1.Hello) *agentv1.Frame {
		return closeFrame(agentv1.CloseReason_CLOSE_REASON_REVOKED, "revoked by alice")
	}
	n := NewNode(Config{DataDir: dir})
	done := make(chan error, 1)
	go func() { done <- n.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRevoked) {
			t.Errorf("Run: %v, want ErrRevoked", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a revoked node kept running")
	}
}

func TestSupersededReconnects(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	startNode(t, joinedDir(t, gw), nil)
	s1 := gw.session(t)
	_ = s1.send(closeFrame(agentv1.CloseReason_CLOSE_REASON_SUPERSEDED, "a newer session"))
	s1.ended(t)
	if s2 := gw.session(t); s2.epoch <= s1.epoch {
		t.Errorf("epoch %d after %d", s2.epoch, s1.epoch)
	}
}

// A slow inventory at session start (nvidia-smi on a sick host) holds
// neither heartbeats nor commands: the session outlives a gateway's
// silence limit through it, on the same epoch, and the report follows
// once the inventory is read.
func TestSlowFirstInventory(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	gw.interval = 200 * time.Millisecond
	gw.silence = 3 * gw.interval
	const slow = 2 * time.Second // over 3 times the silence limit
	smi := fakeNvidiaSMI(t, fmt.Sprintf("sleep %g\n%s", slow.Seconds(), catSMIFixture(t)))
	startNode(t, joinedDir(t, gw), onFixtureHost(smi))
	s := gw.session(t)
	start := time.Now()
	_ = s.send(command("c1", "no.such.kind", nil)) // answered at once, if read
	heartbeats, results := 0, 0
	var rep *agentv1.StatusReport
	for rep == nil {
		f := s.next(t, func(f *agentv1.Frame) bool { return isHeartbeat(f) || isResult(f) || isReport(f) })
		switch {
		case isHeartbeat(f):
			heartbeats++
		case isResult(f):
			results++
		default:
			rep = f.GetStatusReport()
		}
	}
	if took := time.Since(start); took < slow-gw.interval {
		t.Fatalf("the first report came after %v; nvidia-smi takes %v", took, slow)
	}
	if heartbeats < 3 || results != 1 {
		t.Errorf("before the first report: %d heartbeats and %d results, want at least 3 and c1's", heartbeats, results)
	}
	inv, err := inventory.Merge(rep.GetSections())
	if err != nil || len(inv.GetGpus().GetDevices()) != 8 {
		t.Errorf("the first report: %d GPUs, want 8 (%v)", len(inv.GetGpus().GetDevices()), err)
	}
	s.next(t, isHeartbeat) // still up after the report
	select {
	case s2 := <-gw.sessions:
		t.Errorf("the node opened session %d: session %d ended during the slow inventory", s2.epoch, s.epoch)
	default:
	}
}

// A frame of a kind this bcd does not know (a newer gateway's addition)
// decodes to no kind; it is ignored, and the session stays up and working.
func TestUnknownFrameKindIgnored(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	startNode(t, joinedDir(t, gw), nil)
	s := gw.session(t)
	s.next(t, isReport)
	// A message-typed member of the kind oneof under a number this build
	// lacks, as a newer gateway would send it.
	future := &agentv1.Frame{}
	raw := protowire.AppendTag(nil, 1000, protowire.BytesType)
	raw = protowire.AppendBytes(raw, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7))
	future.ProtoReflect().SetUnknown(raw)
	for _, f := range []*agentv1.Frame{{}, future} {
		if err := s.send(f); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.send(command("c1", kindInventoryRefresh, nil))
	if r := s.next(t, isResult).GetCommandResult(); r.GetId() != "c1" || r.GetSessionEpoch() != s.epoch {
		t.Errorf("result = %v, want c1's on epoch %d", r, s.epoch)
	}
	select {
	case s2 := <-gw.sessions:
		t.Errorf("the node opened session %d: it ended %d over an unknown frame", s2.epoch, s.epoch)
	default:
	}
}

// The gateway going silent for 3 intervals ends the session.
func TestSilentGateway(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	n := startNode(t, joinedDir(t, gw), nil)
	s := gw.session(t)
	waitFor(t, "the session", func() bool { return n.Status().State == "connected" })
	s.wmu.Lock() // the gateway stops writing (its heartbeats block here)
	defer s.wmu.Unlock()
	if s2 := gw.session(t); s2.epoch != s.epoch+1 {
		t.Errorf("next session epoch %d", s2.epoch)
	}
	found := false
	for _, l := range n.ring.tail("n-test1", 100) {
		found = found || strings.Contains(l, "the gateway was silent for 3 heartbeat intervals (150ms)")
	}
	if !found {
		t.Errorf("the log does not say why the session ended: %q", n.ring.tail("n-test1", 100))
	}
}

// The devices converger binds the spec's allocations as CDI specs, reports
// each with a claim signed by the node's key for the session, unbinds what
// leaves the spec, and reports what it holds again on the next session.
func TestDevicesConverger(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	cdi := filepath.Join(t.TempDir(), "cdi")
	n := startNode(t, dir, func(c *Config) { c.CDIDir = cdi })
	s := gw.session(t)
	gpu0, gpu1 := inventory.FakeGPUUUID("test", 0, 0), inventory.FakeGPUUUID("test", 0, 1)
	const rid = "r-aaaaaaaaaaaaaaaaaaaaaaaaaa"
	// Two specs in a row: the converger may apply only the newer.
	_ = s.send(&agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: &agentv1.NodeSpec{Generation: 4}}})
	_ = s.send(&agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: &agentv1.NodeSpec{Generation: 5, Allocations: []*agentv1.Allocation{
		{ReservationId: rid, GpuUuids: []string{gpu0, gpu1}},
	}}}})
	var sa *agentv1.SpecApplied
	for sa == nil || sa.GetGeneration() != 5 {
		sa = specApplied(t, s)
	}
	want := []string{gpu0, gpu1}
	slices.Sort(want)
	checkClaim(t, s, sa, rid, want...)
	spec, err := os.ReadFile(filepath.Join(cdi, "bettercompute-"+rid+".json"))
	if err != nil {
		t.Fatalf("no CDI spec: %v", err)
	}
	for _, u := range want {
		if !strings.Contains(string(spec), u) {
			t.Errorf("the CDI spec does not name %s:\n%s", u, spec)
		}
	}
	if got := n.Status().SpecGeneration; got != 5 {
		t.Errorf("status spec generation %d, want 5", got)
	}

	// A new session: the node holds generation 5 and reports its claim
	// again, signed for the new session.
	s.conn.Close()
	s2 := gw.session(t)
	if s2.hello.GetSpecGeneration() != 5 {
		t.Errorf("hello spec generation %d, want 5", s2.hello.GetSpecGeneration())
	}
	checkClaim(t, s2, specApplied(t, s2), rid, want...)

	// A GPU the node does not have: not bound, and said so.
	_ = s2.send(&agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: &agentv1.NodeSpec{Generation: 6, Allocations: []*agentv1.Allocation{
		{ReservationId: rid, GpuUuids: []string{gpu0, gpu1}},
		{ReservationId: "r-bbbbbbbbbbbbbbbbbbbbbbbbbb", GpuUuids: []string{"GPU-not-here"}},
	}}}})
	sa = specApplied(t, s2)
	if sa.GetGeneration() != 6 || !strings.Contains(sa.GetError(), "GPU-not-here are not on this node") || len(sa.GetBound()) != 1 {
		t.Errorf("SpecApplied = %v; want generation 6, one bound, and the missing GPU named", sa)
	}

	// Released: the spec and env file go, and the node says so.
	_ = s2.send(&agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: &agentv1.NodeSpec{Generation: 7}}})
	sa = specApplied(t, s2)
	if sa.GetGeneration() != 7 || !slices.Equal(sa.GetRemoved(), []string{rid}) || len(sa.GetBound()) != 0 {
		t.Errorf("SpecApplied = %v; want generation 7 with %s removed", sa, rid)
	}
	if left, _ := filepath.Glob(filepath.Join(cdi, "bettercompute-*")); len(left) != 0 {
		t.Errorf("files left after the release: %v", left)
	}
}

// specApplied waits for the next SpecApplied on s.
func specApplied(t *testing.T, s *gwSession) *agentv1.SpecApplied {
	t.Helper()
	return s.next(t, func(f *agentv1.Frame) bool { return f.GetSpecApplied() != nil }).GetSpecApplied()
}

// checkClaim checks that sa binds one allocation, reservation rid on the
// GPUs want, with a claim for session s signed with the key of the
// certificate s was opened with, as the gateway verifies it.
func checkClaim(t *testing.T, s *gwSession, sa *agentv1.SpecApplied, rid string, want ...string) {
	t.Helper()
	pub := s.conn.ConnectionState().PeerCertificates[0].PublicKey
	if len(sa.GetBound()) != 1 {
		t.Fatalf("SpecApplied bound %d allocations, want 1: %v", len(sa.GetBound()), sa)
	}
	b := sa.GetBound()[0]
	if err := pki.VerifyAllocationClaim(pub, b.GetClaim(), b.GetSignature()); err != nil {
		t.Errorf("the claim does not verify with the session's certificate: %v", err)
	}
	var c agentv1.AllocationClaim
	if err := proto.Unmarshal(b.GetClaim(), &c); err != nil {
		t.Fatal(err)
	}
	if c.GetNodeId() != "n-test1" || c.GetSessionEpoch() != s.epoch || c.GetReservationId() != rid ||
		!slices.Equal(c.GetGpuUuids(), want) || c.GetCdiDevice() != "bettercompute.dev/gpu="+rid {
		t.Errorf("claim = %v; want node n-test1, epoch %d, %s with %v", &c, s.epoch, rid, want)
	}
}

func TestFakeReboot(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	hw := inventory.GenerateFakeHW("test", 0, 1, "")
	hw.AllowReboot = true
	startNode(t, dir, func(c *Config) { c.FakeHW = hw })
	s1 := gw.session(t)
	_ = s1.send(command("r1", kindNodeReboot, nil))
	if r := s1.next(t, isResult).GetCommandResult(); r.GetStatus() != agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED {
		t.Fatalf("result = %v", r)
	}
	s1.ended(t)
	start := time.Now()
	s2 := gw.session(t)
	if d := time.Since(start); d < time.Second {
		t.Errorf("back after %v, want about %v", d, fakeRebootDelay)
	}
	if s2.hello.GetBootId() == s1.hello.GetBootId() || s2.hello.GetBootId() == "" {
		t.Errorf("boot id %q after %q", s2.hello.GetBootId(), s1.hello.GetBootId())
	}
}

// At 60% of its lifetime the node renews its certificate, proving
// possession of the current key, and the next connection presents the new
// one. The live session keeps the old one: allocation claims sent on it
// are signed with the old key, which the gateway verifies them against,
// and those re-sent on the next session with the new key.
func TestRenewal(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	gw.ttl = 3 * time.Second
	dir := joinedDir(t, gw)
	before, _ := os.ReadFile(filepath.Join(dir, certFile))
	n := startNode(t, dir, func(c *Config) { c.CDIDir = filepath.Join(t.TempDir(), "cdi") })
	s1 := gw.session(t)
	waitFor(t, "a renewal", func() bool {
		gw.mu.Lock()
		defer gw.mu.Unlock()
		return gw.renews > 0
	})
	waitFor(t, "the new certificate in use", func() bool {
		after, _ := os.ReadFile(filepath.Join(dir, certFile))
		return string(after) != string(before) && n.id.Load().cert.Leaf.SerialNumber.String() != s1.serial
	})
	const rid = "r-aaaaaaaaaaaaaaaaaaaaaaaaaa"
	gpu := inventory.FakeGPUUUID("test", 0, 0)
	_ = s1.send(&agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: &agentv1.NodeSpec{Generation: 1, Allocations: []*agentv1.Allocation{
		{ReservationId: rid, GpuUuids: []string{gpu}},
	}}}})
	checkClaim(t, s1, specApplied(t, s1), rid, gpu)
	s1.conn.Close()
	s2 := gw.session(t)
	if s2.serial == s1.serial {
		t.Error("the next session presented the old certificate")
	}
	checkClaim(t, s2, specApplied(t, s2), rid, gpu)
	if _, err := loadIdentity(dir, nil); err != nil {
		t.Errorf("the saved identity: %v", err)
	}
	if st := n.Status(); !st.CertificateNotAfter.After(time.Now()) {
		t.Errorf("status not-after %v", st.CertificateNotAfter)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGPUsReadableCondition: GPUs nvidia-smi cannot read are reported as
// none, with a GPUsReadable condition that says why; once it reads them
// again, they and the condition come back.
func TestGPUsReadableCondition(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	smi := fakeNvidiaSMI(t, fmt.Sprintf("if [ -e '%s' ]; then echo 'Unable to determine the device handle for GPU0000:07:00.0: Unknown Error' >&2; exit 15; fi\n%s", broken, catSMIFixture(t)))
	startNode(t, joinedDir(t, gw), onFixtureHost(smi))
	s := gw.session(t)

	check := func(what string, rep *agentv1.StatusReport, wantGPUs int, wantOK bool, wantMsg string) {
		t.Helper()
		inv, err := inventory.Merge(rep.GetSections())
		if err != nil || len(inv.GetGpus().GetDevices()) != wantGPUs {
			t.Errorf("%s: %d GPUs reported (%v), want %d", what, len(inv.GetGpus().GetDevices()), err, wantGPUs)
		}
		var cond *agentv1.Condition
		for _, c := range rep.GetConditions() {
			if c.GetType() == "GPUsReadable" {
				cond = c
			}
		}
		if cond == nil || cond.GetOk() != wantOK || !strings.Contains(cond.GetMessage(), wantMsg) || cond.GetSince() == nil {
			t.Errorf("%s: GPUsReadable = %v, want ok %v with a message holding %q", what, cond, wantOK, wantMsg)
		}
	}
	check("nvidia-smi failing", s.next(t, isReport).GetStatusReport(), 0, false, "Unknown Error")

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	_ = s.send(command("c1", kindInventoryRefresh, nil))
	check("nvidia-smi working again", s.next(t, isReport).GetStatusReport(), 8, true, "")
}
