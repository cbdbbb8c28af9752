package gateway

import (
	"strings"
	"testing"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// queue stores a command for node, due within ttl.
func (b *gwBundle) queue(t *testing.T, node, id string, ttl time.Duration) {
	t.Helper()
	now, err := b.st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.CreateNodeCommand(t.Context(), store.NodeCommand{
		ID: id, NodeID: node, Kind: "diag.nvml", Args: map[string]string{"id": id}, Deadline: now.Add(ttl),
	}); err != nil {
		t.Fatal(err)
	}
}

// command reads a command from the store.
func (b *gwBundle) command(t *testing.T, id string) store.NodeCommand {
	t.Helper()
	c, err := b.st.GetNodeCommand(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantCommand reads the next frame, which must be the command id.
func (f *fakeNode) wantCommand(id string) *agentv1.Command {
	f.t.Helper()
	fr := f.next()
	if fr.GetCommand().GetId() != id {
		f.t.Fatalf("got %v, want Command %s", fr, id)
	}
	return fr.GetCommand()
}

// result sends a command result.
func (f *fakeNode) result(id string, epoch int64, status agentv1.CommandStatus, output string) {
	f.t.Helper()
	f.send(&agentv1.Frame{Kind: &agentv1.Frame_CommandResult{CommandResult: &agentv1.CommandResult{
		Id: id, SessionEpoch: epoch, Status: status, Output: output,
	}}})
}

// wantAck reads the next frame, which must acknowledge id.
func (f *fakeNode) wantAck(id string) {
	f.t.Helper()
	if fr := f.next(); fr.GetResultAck().GetId() != id {
		f.t.Fatalf("got %v, want ResultAck %s", fr, id)
	}
}

func TestCommands(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		other := b.newNode(t, "gpu-02")
		b.queue(t, n.id, "cmd-1", time.Hour)
		b.queue(t, n.id, "cmd-2", time.Hour)
		b.queue(t, other.id, "cmd-other", time.Hour)

		// Queued before the session: delivered after Welcome, in order.
		f, w := b.connect(t, n, nil)
		epoch := w.GetSessionEpoch()
		c1 := f.wantCommand("cmd-1")
		if c1.GetKind() != "diag.nvml" || c1.GetArgs()["id"] != "cmd-1" || c1.GetDeadline() == nil {
			t.Fatalf("command %v", c1)
		}
		f.wantCommand("cmd-2")
		if c := b.command(t, "cmd-1"); c.State != store.CommandSent || c.SessionEpoch != epoch {
			t.Fatalf("cmd-1 after sending: %s on epoch %d", c.State, c.SessionEpoch)
		}

		// Results are stored, bounded, and acknowledged.
		f.result("cmd-1", epoch, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, strings.Repeat("é", 40<<10))
		f.wantAck("cmd-1")
		c := b.command(t, "cmd-1")
		if c.State != store.CommandSucceeded || len(c.Output) > maxResultText || !strings.HasSuffix(c.Output, truncatedMark) ||
			!strings.HasPrefix(c.Output, "éé") {
			t.Fatalf("cmd-1: %s, output of %d bytes ending %q", c.State, len(c.Output), c.Output[len(c.Output)-20:])
		}
		f.send(&agentv1.Frame{Kind: &agentv1.Frame_CommandResult{CommandResult: &agentv1.CommandResult{
			Id: "cmd-2", SessionEpoch: epoch, Status: agentv1.CommandStatus_COMMAND_STATUS_FAILED, Error: "boom",
		}}})
		f.wantAck("cmd-2")
		if c := b.command(t, "cmd-2"); c.State != store.CommandFailed || c.Error != "boom" {
			t.Fatalf("cmd-2: %s %q", c.State, c.Error)
		}

		// A duplicate, an unknown id and another node's command: acked,
		// nothing stored.
		f.result("cmd-1", epoch, agentv1.CommandStatus_COMMAND_STATUS_FAILED, "again")
		f.wantAck("cmd-1")
		f.result("no-such-command", epoch, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "")
		f.wantAck("no-such-command")
		f.result("cmd-other", epoch, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "")
		f.wantAck("cmd-other")
		if c := b.command(t, "cmd-1"); c.State != store.CommandSucceeded {
			t.Fatalf("a duplicate result changed cmd-1 to %s", c.State)
		}
		if c := b.command(t, "cmd-other"); c.State != store.CommandQueued {
			t.Fatalf("gpu-01 finished gpu-02's command: %s", c.State)
		}

		// Queued while connected: Notify delivers it.
		b.queue(t, n.id, "cmd-3", time.Hour)
		b.gw.Notify(n.id)
		f.wantCommand("cmd-3")
		b.gw.Notify("not-connected") // nothing to do

		// A result claiming a later session than its own: protocol error.
		f.result("cmd-3", epoch+1, agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "")
		f.wantClose(agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR)
		eventually(t, readTimeout, "three commands counted", func() bool {
			return b.metric(t, "bettercompute_gateway_commands_sent_total", "") == 3
		})
	})
}

// TestStaleResult: a result older than the session the command was sent on
// is dropped unacknowledged; the node's current one is stored.
func TestStaleResult(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		first, w1 := b.connect(t, n, nil)
		first.send(&agentv1.Frame{Kind: &agentv1.Frame_Close{Close: &agentv1.Close{}}})
		first.wantEnd()
		eventually(t, readTimeout, "the first session ends", func() bool { return !b.gw.Connected(n.id) })
		b.queue(t, n.id, "cmd-1", time.Hour)
		second, w2 := b.connect(t, n, nil)
		second.wantCommand("cmd-1") // sent on the second session's epoch

		second.result("cmd-1", w1.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "stale")
		second.result("probe", w2.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "")
		second.wantAck("probe") // not an ack of the stale cmd-1 first
		if c := b.command(t, "cmd-1"); c.State != store.CommandSent {
			t.Fatalf("after a stale result: %s %q", c.State, c.Output)
		}
		second.result("cmd-1", w2.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "fresh")
		second.wantAck("cmd-1")
		if c := b.command(t, "cmd-1"); c.State != store.CommandSucceeded || c.Output != "fresh" {
			t.Fatalf("after the current result: %s %q", c.State, c.Output)
		}
		if got := b.metric(t, "bettercompute_gateway_command_results_total", "stale"); got != 1 {
			t.Errorf("results{stale} = %v, want 1", got)
		}
	})
}

// TestCommandExpires: a command for a node that stays offline fails
// expired at its deadline and is never sent.
func TestCommandExpires(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		b.queue(t, n.id, "cmd-1", 300*time.Millisecond)
		eventually(t, 3*expireInterval, "cmd-1 expired", func() bool {
			return b.command(t, "cmd-1").State == store.CommandExpired
		})
		b.queue(t, n.id, "cmd-2", time.Hour)
		f, _ := b.connect(t, n, nil)
		f.wantCommand("cmd-2") // and not cmd-1
	})
}

// TestNodeSaysExpiredOrUnknown: a node's result that it got a command too
// late, or crashed while running one, is stored as such and acknowledged,
// and the session goes on (it used to end on a store error, and the node
// sent the result again on every reconnect).
func TestNodeSaysExpiredOrUnknown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		b.queue(t, n.id, "cmd-1", time.Hour)
		b.queue(t, n.id, "cmd-2", time.Hour)
		f, w := b.connect(t, n, nil)
		f.wantCommand("cmd-1")
		f.wantCommand("cmd-2")
		f.result("cmd-1", w.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_EXPIRED, "")
		f.wantAck("cmd-1")
		f.result("cmd-2", w.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_UNKNOWN, "")
		f.wantAck("cmd-2")
		// A NUL in the output, which PostgreSQL's text refuses, is stored
		// as U+FFFD rather than failing the write (and the session).
		b.queue(t, n.id, "cmd-nul", time.Hour)
		b.gw.Notify(n.id)
		f.wantCommand("cmd-nul")
		f.result("cmd-nul", w.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "a\x00b")
		f.wantAck("cmd-nul")
		if c := b.command(t, "cmd-nul"); c.State != store.CommandSucceeded || c.Output != "a\uFFFDb" {
			t.Errorf("cmd-nul: %s %q, want succeeded %q", c.State, c.Output, "a\uFFFDb")
		}
		if c := b.command(t, "cmd-1"); c.State != store.CommandExpired {
			t.Errorf("cmd-1: %s, want expired", c.State)
		}
		if c := b.command(t, "cmd-2"); c.State != store.CommandUnknown {
			t.Errorf("cmd-2: %s, want unknown", c.State)
		}
		b.queue(t, n.id, "cmd-3", time.Hour)
		b.gw.Notify(n.id)
		f.wantCommand("cmd-3") // the same session
	})
}

// TestLateResultReplacesUnknown: a sent command left without a result past
// its deadline is unknown; the node's result, when it comes after all,
// replaces that and is acknowledged, but an unknown result changes nothing.
func TestLateResultReplacesUnknown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		b.queue(t, n.id, "cmd-1", 200*time.Millisecond)
		b.queue(t, n.id, "cmd-2", 200*time.Millisecond)
		f, w := b.connect(t, n, nil)
		f.wantCommand("cmd-1")
		f.wantCommand("cmd-2")
		// The sweep, with a grace this test can wait for.
		eventually(t, 3*time.Second, "both commands unknown", func() bool {
			if _, err := b.st.ExpireCommands(t.Context(), time.Millisecond); err != nil {
				t.Fatal(err)
			}
			return b.command(t, "cmd-1").State == store.CommandUnknown && b.command(t, "cmd-2").State == store.CommandUnknown
		})
		f.result("cmd-1", w.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "late")
		f.wantAck("cmd-1")
		if c := b.command(t, "cmd-1"); c.State != store.CommandSucceeded || c.Output != "late" {
			t.Errorf("cmd-1 after its late result: %s %q, want succeeded %q", c.State, c.Output, "late")
		}
		f.result("cmd-2", w.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_UNKNOWN, "")
		f.wantAck("cmd-2")
		if c := b.command(t, "cmd-2"); c.State != store.CommandUnknown || !strings.Contains(c.Error, "no result by its deadline") {
			t.Errorf("cmd-2 after an unknown result: %s %q, want the deadline's unknown kept", c.State, c.Error)
		}
		if got := b.metric(t, "bettercompute_gateway_command_results_total", "duplicate"); got != 1 {
			t.Errorf("results{duplicate} = %v, want 1 (cmd-2's)", got)
		}
	})
}

// TestRecentCommands: commands the node reported as run are not sent again,
// and their results, sent again, are accepted.
func TestRecentCommands(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		b.queue(t, n.id, "cmd-1", time.Hour)
		b.queue(t, n.id, "cmd-2", time.Hour)
		f, w := b.connect(t, n, &agentv1.Hello{RecentCommandIds: []string{"cmd-0", "cmd-1"}})
		f.wantCommand("cmd-2")
		b.queue(t, n.id, "cmd-3", time.Hour)
		b.gw.Notify(n.id)
		f.wantCommand("cmd-3") // cmd-1 is still skipped
		if c := b.command(t, "cmd-1"); c.State != store.CommandQueued {
			t.Fatalf("cmd-1: %s, want still queued", c.State)
		}
		f.result("cmd-1", w.GetSessionEpoch(), agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED, "ran before")
		f.wantAck("cmd-1")
		if c := b.command(t, "cmd-1"); c.State != store.CommandSucceeded || c.SessionEpoch != w.GetSessionEpoch() {
			t.Fatalf("cmd-1: %s on epoch %d", c.State, c.SessionEpoch)
		}
	})
}

// TestFreshJournal: a node that lost its journal has its in-flight commands
// failed as unknown instead of resent; queued ones are still delivered.
func TestFreshJournal(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{})
		n := b.newNode(t, "gpu-01")
		b.queue(t, n.id, "cmd-1", time.Hour)
		first, _ := b.connect(t, n, nil)
		first.wantCommand("cmd-1")
		b.queue(t, n.id, "cmd-2", time.Hour)
		second, _ := b.connect(t, n, &agentv1.Hello{FreshJournal: true})
		second.wantCommand("cmd-2")
		if c := b.command(t, "cmd-1"); c.State != store.CommandUnknown {
			t.Fatalf("cmd-1 in flight when the journal was lost: %s", c.State)
		}
	})
}

// TestSlowConsumer: a node that does not read has its queue overflow and
// its session closed, without blocking whoever sends.
func TestSlowConsumer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupGateway(t, engine, gwOptions{sendQueue: 4})
		n := b.newNode(t, "gpu-01")
		f, _ := b.connect(t, n, nil)
		s := b.gw.session(n.id)
		big := &agentv1.Frame{Kind: &agentv1.Frame_Command{Command: &agentv1.Command{
			Id: "big", Args: map[string]string{"blob": strings.Repeat("x", 512<<10)},
		}}}
		start := time.Now()
		sent := 0
		for sent < 1000 && s.send(big) {
			sent++
		}
		if sent == 1000 || time.Since(start) > readTimeout {
			t.Fatalf("%d frames queued in %v without overflow", sent, time.Since(start))
		}
		eventually(t, 2*readTimeout, "the session ends as a slow consumer", func() bool {
			return !b.gw.Connected(n.id) && b.metric(t, "bettercompute_gateway_session_closes_total", "slow_consumer") == 1
		})
		_ = f.conn.Close()
	})
}
