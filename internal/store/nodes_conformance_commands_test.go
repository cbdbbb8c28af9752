package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// The command queue's part of TestNodeConformance.

// newCommand returns a command record for node, due within ttl of the
// store's clock (already past when ttl is negative), to the microsecond both
// engines keep.
func newCommand(ctx context.Context, t *testing.T, q store.Querier, id, node string, ttl time.Duration) store.NodeCommand {
	t.Helper()
	return store.NodeCommand{
		ID: id, NodeID: node, Kind: "reboot", Args: map[string]string{"reason": "test " + id},
		Deadline: must(q.Now(ctx))(t).Add(ttl).Truncate(time.Microsecond),
	}
}

// createCommands creates commands for node due within ttl, 2ms apart so
// that SQLite's millisecond clock orders them.
func createCommands(ctx context.Context, t *testing.T, q store.Querier, node string, ttl time.Duration, ids ...string) {
	t.Helper()
	for _, id := range ids {
		time.Sleep(2 * time.Millisecond)
		must(q.CreateNodeCommand(ctx, newCommand(ctx, t, q, id, node, ttl)))(t)
	}
}

// markSent marks the commands ids sent on epoch.
func markSent(ctx context.Context, t *testing.T, q store.Querier, epoch int64, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := q.MarkCommandSent(ctx, id, epoch); err != nil {
			t.Fatalf("MarkCommandSent(%s): %v", id, err)
		}
	}
}

func commandsEqual(a, b store.NodeCommand) bool {
	return a.ID == b.ID && a.NodeID == b.NodeID && a.Kind == b.Kind && maps.Equal(a.Args, b.Args) &&
		a.IdempotencyKey == b.IdempotencyKey && a.State == b.State && a.Output == b.Output &&
		a.Error == b.Error && a.SessionEpoch == b.SessionEpoch && a.CreatedAt.Equal(b.CreatedAt) &&
		a.Deadline.Equal(b.Deadline) && a.SentAt.Equal(b.SentAt) && a.FinishedAt.Equal(b.FinishedAt)
}

func commandIDs(cs []store.NodeCommand) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

func exerciseCommands(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1", "n2")

	before := must(s.Now(ctx))(t)
	want := newCommand(ctx, t, s, "c1", "n1", time.Hour)
	want.IdempotencyKey = "k1"
	c1 := must(s.CreateNodeCommand(ctx, want))(t)
	checkStamped(t, "CreateNodeCommand", before, must(s.Now(ctx))(t), c1.CreatedAt, c1.CreatedAt)
	want.CreatedAt, want.State = c1.CreatedAt, store.CommandQueued
	if !commandsEqual(c1, want) || c1.SessionEpoch != 0 || !c1.SentAt.IsZero() || !c1.FinishedAt.IsZero() {
		t.Errorf("CreateNodeCommand = %+v, want %+v", c1, want)
	}
	if got := must(s.GetNodeCommand(ctx, "c1"))(t); !commandsEqual(got, c1) {
		t.Errorf("GetNodeCommand = %+v, want %+v", got, c1)
	}
	if got := must(s.GetNodeCommandByKey(ctx, "n1", "k1"))(t); !commandsEqual(got, c1) {
		t.Errorf("GetNodeCommandByKey = %+v, want %+v", got, c1)
	}

	noArgs := newCommand(ctx, t, s, "c2", "n1", time.Hour)
	noArgs.Args = nil
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	if got := must(s.CreateNodeCommand(ctx, noArgs))(t); got.Args != nil {
		t.Errorf("CreateNodeCommand(no args) Args = %v, want nil", got.Args)
	}
	createCommands(ctx, t, s, "n1", time.Hour, "c3")
	createCommands(ctx, t, s, "n1", -time.Second, "past")
	// The same key on another node is another command.
	other := newCommand(ctx, t, s, "o1", "n2", time.Hour)
	other.IdempotencyKey = "k1"
	must(s.CreateNodeCommand(ctx, other))(t)

	sameKey := newCommand(ctx, t, s, "c9", "n1", time.Hour)
	sameKey.IdempotencyKey = "k1"
	for _, tc := range []struct {
		name string
		cmd  store.NodeCommand
		want error
	}{
		{"taken idempotency key", sameKey, store.ErrConflict},
		{"taken id", newCommand(ctx, t, s, "c1", "n2", time.Hour), store.ErrConflict},
		{"missing node", newCommand(ctx, t, s, "x1", "missing", time.Hour), store.ErrNotFound},
	} {
		_, err := s.CreateNodeCommand(ctx, tc.cmd)
		wantIs(t, "CreateNodeCommand("+tc.name+")", err, tc.want)
	}
	_, err := s.GetNodeCommand(ctx, "missing")
	wantIs(t, "GetNodeCommand(missing)", err, store.ErrNotFound)
	for _, k := range [][2]string{{"n1", ""}, {"n1", "k2"}, {"missing", "k1"}} {
		_, err := s.GetNodeCommandByKey(ctx, k[0], k[1])
		wantIs(t, fmt.Sprintf("GetNodeCommandByKey(%s, %q)", k[0], k[1]), err, store.ErrNotFound)
	}

	for _, tc := range []struct {
		node  string
		limit int
		want  string
	}{
		{"n1", 10, "[past c3 c2 c1]"},
		{"n1", 2, "[past c3]"},
		{"n2", 10, "[o1]"},
		{"missing", 10, "[]"},
	} {
		if got := commandIDs(must(s.ListNodeCommands(ctx, tc.node, tc.limit))(t)); fmt.Sprint(got) != tc.want {
			t.Errorf("ListNodeCommands(%s, %d) = %v, want %s", tc.node, tc.limit, got, tc.want)
		}
	}

	// Pending: queued, or sent on an older session and unfinished, and not
	// past the deadline, oldest first.
	markSent(ctx, t, s, 1, "c2")
	for _, tc := range []struct {
		epoch int64
		limit int
		want  string
	}{{1, 10, "[c1 c3]"}, {1, 1, "[c1]"}, {2, 10, "[c1 c2 c3]"}} {
		if got := commandIDs(must(s.PendingNodeCommands(ctx, "n1", tc.epoch, tc.limit))(t)); fmt.Sprint(got) != tc.want {
			t.Errorf("PendingNodeCommands(n1, epoch %d, %d) = %v, want %s", tc.epoch, tc.limit, got, tc.want)
		}
	}
	// The deadline is by the store's clock.
	createCommands(ctx, t, s, "n2", 200*time.Millisecond, "brief")
	if got := commandIDs(must(s.PendingNodeCommands(ctx, "n2", 1, 10))(t)); fmt.Sprint(got) != "[o1 brief]" {
		t.Errorf("PendingNodeCommands(n2) = %v, want [o1 brief]", got)
	}
	time.Sleep(250 * time.Millisecond)
	if got := commandIDs(must(s.PendingNodeCommands(ctx, "n2", 1, 10))(t)); fmt.Sprint(got) != "[o1]" {
		t.Errorf("PendingNodeCommands(n2) past brief's deadline = %v, want [o1]", got)
	}

	for _, limit := range []int{0, -1} {
		if _, err := s.ListNodeCommands(ctx, "n1", limit); err == nil {
			t.Errorf("ListNodeCommands(limit %d) = nil error, want one", limit)
		}
		if _, err := s.PendingNodeCommands(ctx, "n1", 1, limit); err == nil {
			t.Errorf("PendingNodeCommands(limit %d) = nil error, want one", limit)
		}
	}
}

func exerciseCommandResults(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1")
	createCommands(ctx, t, s, "n1", time.Hour, "c1", "c2", "c3")

	before := must(s.Now(ctx))(t)
	if err := s.MarkCommandSent(ctx, "c1", 3); err != nil {
		t.Fatalf("MarkCommandSent: %v", err)
	}
	sent := must(s.GetNodeCommand(ctx, "c1"))(t)
	if sent.State != store.CommandSent || sent.SessionEpoch != 3 || sent.SentAt.Before(before) || !sent.FinishedAt.IsZero() {
		t.Errorf("after MarkCommandSent GetNodeCommand = %+v, want sent on epoch 3 at or after %v", sent, before)
	}
	wantIs(t, "MarkCommandSent(sent on this epoch)", s.MarkCommandSent(ctx, "c1", 3), store.ErrConflict)
	wantIs(t, "MarkCommandSent(sent on a later epoch)", s.MarkCommandSent(ctx, "c1", 2), store.ErrConflict)
	// An unfinished command is resent on a newer session (the old one may
	// have died with its frame).
	if err := s.MarkCommandSent(ctx, "c3", 1); err != nil {
		t.Fatalf("MarkCommandSent(c3, 1): %v", err)
	}
	if err := s.MarkCommandSent(ctx, "c3", 2); err != nil {
		t.Fatalf("MarkCommandSent on a newer epoch: %v", err)
	}
	wantIs(t, "MarkCommandSent(missing)", s.MarkCommandSent(ctx, "missing", 4), store.ErrNotFound)

	// A result from a session older than the one it was sent on is refused.
	_, err := s.FinishCommand(ctx, "c1", 2, store.CommandSucceeded, "stale", "")
	wantIs(t, "FinishCommand(older epoch)", err, store.ErrConflict)
	if got := must(s.GetNodeCommand(ctx, "c1"))(t); !commandsEqual(got, sent) {
		t.Errorf("after a refused FinishCommand GetNodeCommand = %+v, want %+v", got, sent)
	}
	before = must(s.Now(ctx))(t)
	done := must(s.FinishCommand(ctx, "c1", 3, store.CommandSucceeded, "all good", ""))(t)
	want := sent
	want.State, want.Output, want.FinishedAt = store.CommandSucceeded, "all good", done.FinishedAt
	if !commandsEqual(done, want) || done.FinishedAt.Before(before) || done.FinishedAt.Location() != time.UTC {
		t.Errorf("FinishCommand = %+v, want %+v finished at or after %v", done, want, before)
	}
	if got := must(s.GetNodeCommand(ctx, "c1"))(t); !commandsEqual(got, done) {
		t.Errorf("after FinishCommand GetNodeCommand = %+v, want %+v", got, done)
	}
	_, err = s.FinishCommand(ctx, "c1", 3, store.CommandFailed, "", "again")
	wantIs(t, "FinishCommand(finished)", err, store.ErrConflict)
	_, err = s.FinishCommand(ctx, "missing", 3, store.CommandFailed, "", "x")
	wantIs(t, "FinishCommand(missing)", err, store.ErrNotFound)

	// A queued command finishes too, when MarkCommandSent lost the race
	// with the node's answer: it was sent on the answer's session.
	failed := must(s.FinishCommand(ctx, "c2", 5, store.CommandFailed, "partial", "boom"))(t)
	if failed.State != store.CommandFailed || failed.SessionEpoch != 5 || failed.Output != "partial" ||
		failed.Error != "boom" || failed.SentAt.IsZero() || failed.FinishedAt.IsZero() {
		t.Errorf("FinishCommand(queued) = %+v, want failed on epoch 5, sent and finished", failed)
	}
	wantIs(t, "MarkCommandSent(finished)", s.MarkCommandSent(ctx, "c2", 5), store.ErrConflict)

	// Only a result finishes a command.
	for _, state := range []store.CommandState{store.CommandQueued, store.CommandSent, "bogus"} {
		_, err = s.FinishCommand(ctx, "c3", 1, state, "", "")
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			t.Errorf("FinishCommand(%s) = %v, want an error that is neither ErrConflict nor ErrNotFound", state, err)
		}
	}
	if got := must(s.GetNodeCommand(ctx, "c3"))(t); got.State != store.CommandSent || !got.FinishedAt.IsZero() {
		t.Errorf("after FinishCommand(not a result) GetNodeCommand = %+v, want still sent and unfinished", got)
	}
	// The node's word that it got the command too late, or crashed while
	// running it, is a result too.
	createCommands(ctx, t, s, "n1", time.Hour, "too-late", "crashed")
	markSent(ctx, t, s, 4, "too-late", "crashed")
	for id, state := range map[string]store.CommandState{"too-late": store.CommandExpired, "crashed": store.CommandUnknown} {
		c := must(s.FinishCommand(ctx, id, 4, state, "", "the node says so"))(t)
		if c.State != state || c.Error != "the node says so" || c.FinishedAt.IsZero() {
			t.Errorf("FinishCommand(%s, %s) = %+v, want %s, finished, with the node's error", id, state, c, state)
		}
	}
}

func exerciseExpireAndFailCommands(ctx context.Context, t *testing.T, s *store.Store) {
	seedTenants(ctx, t, s)
	createNodes(ctx, t, s, "acme", "n1", "n2")
	createCommands(ctx, t, s, "n1", -time.Second, "late1", "sent-late")
	createCommands(ctx, t, s, "n2", -time.Second, "late2")
	createCommands(ctx, t, s, "n1", time.Hour, "live", "sent1", "sent2", "done")
	createCommands(ctx, t, s, "n2", time.Hour, "sent-n2")
	markSent(ctx, t, s, 1, "sent-late", "sent1", "sent2", "done", "sent-n2")
	must(s.FinishCommand(ctx, "done", 1, store.CommandSucceeded, "", ""))(t)

	// Only queued commands past their deadline expire, on every node; a
	// sent one waits for its result for the grace after its deadline.
	before := must(s.Now(ctx))(t)
	expired := must(s.ExpireCommands(ctx, time.Hour))(t)
	if got := commandIDs(expired); fmt.Sprint(got) != "[late1 late2]" {
		t.Errorf("ExpireCommands = %v, want [late1 late2]", got)
	}
	for _, c := range expired {
		if c.State != store.CommandExpired || c.FinishedAt.Before(before) || c.Error == "" {
			t.Errorf("ExpireCommands returned %+v, want expired, finished at or after %v, with an error", c, before)
		}
		if got := must(s.GetNodeCommand(ctx, c.ID))(t); !commandsEqual(got, c) {
			t.Errorf("after ExpireCommands GetNodeCommand = %+v, want %+v", got, c)
		}
	}
	if got := must(s.ExpireCommands(ctx, time.Hour))(t); len(got) != 0 {
		t.Errorf("ExpireCommands again = %v, want none", commandIDs(got))
	}
	_, err := s.FinishCommand(ctx, "late1", 1, store.CommandSucceeded, "", "")
	wantIs(t, "FinishCommand(expired)", err, store.ErrConflict)

	// The node lost its journal: what was in flight on it is unknown.
	failed := must(s.FailInFlightCommands(ctx, "n1"))(t)
	if got := commandIDs(failed); fmt.Sprint(got) != "[sent-late sent1 sent2]" {
		t.Errorf("FailInFlightCommands(n1) = %v, want [sent-late sent1 sent2]", got)
	}
	for _, c := range failed {
		if c.State != store.CommandUnknown || c.FinishedAt.IsZero() ||
			c.Error != "the node lost its journal; whether it ran is unknown" {
			t.Errorf("FailInFlightCommands returned %+v, want unknown, finished, with the journal error", c)
		}
	}
	if got := must(s.FailInFlightCommands(ctx, "n1"))(t); len(got) != 0 {
		t.Errorf("FailInFlightCommands(n1) again = %v, want none", commandIDs(got))
	}
	for id, state := range map[string]store.CommandState{
		"live": store.CommandQueued, "done": store.CommandSucceeded, "sent-n2": store.CommandSent,
	} {
		if got := must(s.GetNodeCommand(ctx, id))(t); got.State != state {
			t.Errorf("GetNodeCommand(%s).State = %s, want %s", id, got.State, state)
		}
	}
	if got := must(s.FailInFlightCommands(ctx, "missing"))(t); len(got) != 0 {
		t.Errorf("FailInFlightCommands(missing) = %v, want none", commandIDs(got))
	}

	// Nodes with commands to send: n1's live one is queued; sent-n2 was
	// sent on n2's epoch 1, older than n2's session now.
	if got := fmt.Sprint(must(s.NodesWithPendingCommands(ctx))(t)); got != "[n1]" {
		t.Errorf("NodesWithPendingCommands = %s, want [n1]", got)
	}
	must(s.BeginSession(ctx, "n2", "v1", "boot"))(t)
	must(s.BeginSession(ctx, "n2", "v1", "boot"))(t)
	if got := fmt.Sprint(must(s.NodesWithPendingCommands(ctx))(t)); got != "[n1 n2]" {
		t.Errorf("NodesWithPendingCommands after n2's new session = %s, want [n1 n2]", got)
	}

	// A sent command with no result by its deadline plus the grace is
	// unknown; a late result replaces that, once, and unknown does not.
	createCommands(ctx, t, s, "n2", -time.Second, "silent")
	markSent(ctx, t, s, 1, "silent")
	before = must(s.Now(ctx))(t)
	unknown := must(s.ExpireCommands(ctx, time.Millisecond))(t)
	if got := commandIDs(unknown); fmt.Sprint(got) != "[silent]" {
		t.Fatalf("ExpireCommands(grace 1ms) = %v, want [silent]", got)
	}
	if c := unknown[0]; c.State != store.CommandUnknown || c.FinishedAt.Before(before) ||
		c.Error != "its node sent no result by its deadline; whether it ran is unknown" {
		t.Errorf("ExpireCommands returned %+v, want unknown, finished at or after %v, saying no result came", c, before)
	}
	_, err = s.FinishCommand(ctx, "silent", 1, store.CommandUnknown, "", "started, result lost")
	wantIs(t, "FinishCommand(unknown over unknown)", err, store.ErrConflict)
	_, err = s.FinishCommand(ctx, "silent", 0, store.CommandSucceeded, "late", "")
	wantIs(t, "FinishCommand(unknown, an older session)", err, store.ErrConflict)
	late := must(s.FinishCommand(ctx, "silent", 2, store.CommandSucceeded, "late", ""))(t)
	if late.State != store.CommandSucceeded || late.Output != "late" || late.Error != "" || late.SessionEpoch != 1 {
		t.Errorf("FinishCommand(unknown, late) = %+v, want succeeded with its output, still on epoch 1", late)
	}
	_, err = s.FinishCommand(ctx, "silent", 2, store.CommandFailed, "", "again")
	wantIs(t, "FinishCommand(after the late result)", err, store.ErrConflict)
	if got := must(s.GetNodeCommand(ctx, "sent-n2"))(t); got.State != store.CommandSent {
		t.Errorf("sent-n2, within its deadline, is %s after ExpireCommands; want sent", got.State)
	}
}
