package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/store"
)

const (
	// dispatchBatch is how many pending commands one store read loads.
	dispatchBatch = 100
	// maxResultText bounds a result's output and error as stored.
	maxResultText = 64 << 10
	// truncatedMark ends a result text cut to maxResultText.
	truncatedMark = "\n[truncated]"
)

// kickDispatch asks for the node's pending commands (and a newer spec) to
// be sent. At most one dispatch goroutine runs per session; a kick while it
// runs makes it run once more.
func (s *session) kickDispatch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kickDispatchLocked()
}

// kickDispatchLocked is kickDispatch with s.mu held.
func (s *session) kickDispatchLocked() {
	if s.done || s.closing {
		return
	}
	s.wantSend = true
	if s.dispatching {
		return
	}
	s.dispatching = true
	s.wg.Add(1)
	go s.dispatchLoop()
}

// dispatchLoop runs dispatch while kicks arrive.
func (s *session) dispatchLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if !s.wantSend || s.closing {
			s.dispatching = false
			s.mu.Unlock()
			return
		}
		s.wantSend = false
		s.mu.Unlock()
		if err := s.g.dispatch(s.g.ctx, s); err != nil {
			// The node is sent the rest on the next kick: a Notify, or
			// its next session.
			s.g.log.Error("gateway: dispatch", "node", s.nodeID, "err", err)
		}
	}
}

// roomToDispatch reports whether the send queue is less than half full;
// when it is not, the writer kicks the dispatch again once it has drained
// the queue, so that a burst of commands waits for the node instead of
// overflowing its queue.
func (s *session) roomToDispatch() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) < max(1, s.g.sendQueue/2) {
		return true
	}
	s.resumeOnDrain = true
	return false
}

// dispatch sends the node a newer spec, if any, and its pending commands:
// each is marked sent on this session's epoch, then queued. Commands the
// node said it ran (Hello.recent_command_ids) are skipped.
func (g *Gateway) dispatch(ctx context.Context, s *session) error {
	node, err := g.st.GetNode(ctx, s.nodeID)
	if err != nil {
		return fmt.Errorf("read node: %w", err)
	}
	// specHeld is touched only here, and dispatches run one at a time. A
	// generation other than the node's, newer or (after a restore of the
	// store) older, is sent: the spec is always complete.
	if node.SpecGeneration != s.specHeld.Load() {
		spec, err := g.nodeSpec(ctx, node)
		if err != nil {
			return err
		}
		if !s.send(&agentv1.Frame{Kind: &agentv1.Frame_NodeSpec{NodeSpec: spec}}) {
			return nil
		}
		s.specHeld.Store(node.SpecGeneration)
	}

	var stillRan map[string]struct{} // the ran ids still pending
	for {
		cmds, err := g.st.PendingNodeCommands(ctx, s.nodeID, s.epoch, dispatchBatch)
		if err != nil {
			return fmt.Errorf("load pending commands: %w", err)
		}
		sent := 0
		for _, c := range cmds {
			if _, ran := s.ran[c.ID]; ran {
				if stillRan == nil {
					stillRan = map[string]struct{}{}
				}
				stillRan[c.ID] = struct{}{}
				continue
			}
			if !s.roomToDispatch() {
				return nil
			}
			if err := g.st.MarkCommandSent(ctx, c.ID, s.epoch); errors.Is(err, store.ErrConflict) {
				continue // finished or expired meanwhile
			} else if err != nil {
				return fmt.Errorf("mark command %s sent: %w", c.ID, err)
			}
			if !s.send(commandFrame(c)) {
				return nil // closing: the command stays sent (see the package comment)
			}
			g.metrics.commands.Inc()
			sent++
		}
		if len(cmds) < dispatchBatch {
			break
		}
		if sent == 0 {
			return nil // a full batch of ran ids: keep s.ran whole
		}
	}
	// Every command the node could have run existed when its session
	// began, and this pass saw all of them that are still pending: the
	// other ran ids can never come up again, so forget them.
	s.ran = stillRan
	return nil
}

// commandFrame is c as the node receives it.
func commandFrame(c store.NodeCommand) *agentv1.Frame {
	cmd := &agentv1.Command{Id: c.ID, Kind: c.Kind, Args: c.Args}
	if !c.Deadline.IsZero() {
		cmd.Deadline = timestamppb.New(c.Deadline)
	}
	return &agentv1.Frame{Kind: &agentv1.Frame_Command{Command: cmd}}
}

// storeResult records a command result and acknowledges it. A result for a
// command that does not exist, is another node's, or already finished is
// only acknowledged, so the node forgets it; but a result that says more
// than unknown replaces a stored unknown. A result refused as older than the
// command's session (the command was sent again on a newer session) is
// dropped unacknowledged: the node keeps it and sends it again on its
// newest session, where it is accepted.
func (g *Gateway) storeResult(ctx context.Context, s *session, r *agentv1.CommandResult) error {
	if r.GetId() == "" {
		return errProtocol("a CommandResult without a command id")
	}
	if r.GetSessionEpoch() > s.epoch {
		return errProtocol("a CommandResult for session epoch %d on session epoch %d", r.GetSessionEpoch(), s.epoch)
	}
	cmd, err := g.st.GetNodeCommand(ctx, r.GetId())
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && cmd.NodeID != s.nodeID):
		if err == nil {
			g.log.Warn("gateway: a node sent a result for another node's command", "node", s.nodeID, "command", r.GetId())
		}
		g.metrics.results.WithLabelValues("unknown_command").Inc()
		s.send(ackFrame(r.GetId()))
		return nil
	case err != nil:
		return fmt.Errorf("read command %s: %w", r.GetId(), err)
	}
	state, errText := resultState(r)
	// A result for a finished command is a duplicate, except the node's
	// late word on a command the deadline made unknown.
	if finished(cmd.State) && (cmd.State != store.CommandUnknown || state == store.CommandUnknown) {
		g.metrics.results.WithLabelValues("duplicate").Inc()
		s.send(ackFrame(r.GetId()))
		return nil
	}
	_, err = g.st.FinishCommand(ctx, r.GetId(), r.GetSessionEpoch(), state, storable(r.GetOutput(), maxResultText), storable(errText, maxResultText))
	if errors.Is(err, store.ErrConflict) {
		g.metrics.results.WithLabelValues("stale").Inc()
		g.log.Debug("gateway: result refused: older than the command's session, or finished meanwhile",
			"node", s.nodeID, "command", r.GetId(), "result_epoch", r.GetSessionEpoch(), "command_epoch", cmd.SessionEpoch)
		return nil
	}
	if err != nil {
		g.metrics.results.WithLabelValues("error").Inc()
		return fmt.Errorf("finish command %s: %w", r.GetId(), err)
	}
	g.metrics.results.WithLabelValues("stored").Inc()
	s.send(ackFrame(r.GetId()))
	return nil
}

// ackFrame acknowledges a stored result.
func ackFrame(id string) *agentv1.Frame {
	return &agentv1.Frame{Kind: &agentv1.Frame_ResultAck{ResultAck: &agentv1.ResultAck{Id: id}}}
}

// finished reports whether a command state is final.
func finished(s store.CommandState) bool {
	switch s {
	case store.CommandSucceeded, store.CommandFailed, store.CommandExpired, store.CommandUnknown:
		return true
	}
	return false
}

// resultState maps a result's status to the stored state. A status this
// build does not know counts as a failure, saying so in the error.
func resultState(r *agentv1.CommandResult) (store.CommandState, string) {
	switch r.GetStatus() {
	case agentv1.CommandStatus_COMMAND_STATUS_SUCCEEDED:
		return store.CommandSucceeded, r.GetError()
	case agentv1.CommandStatus_COMMAND_STATUS_FAILED:
		return store.CommandFailed, r.GetError()
	case agentv1.CommandStatus_COMMAND_STATUS_EXPIRED:
		return store.CommandExpired, r.GetError()
	case agentv1.CommandStatus_COMMAND_STATUS_UNKNOWN:
		return store.CommandUnknown, r.GetError()
	default:
		return store.CommandFailed, fmt.Sprintf("the node reported status %s; %s", r.GetStatus(), r.GetError())
	}
}

// storable is a node's text as the store can keep it: NUL bytes, which a
// PostgreSQL text column refuses (the store error would end the session,
// and the node would send the same result again on the next), become
// U+FFFD; then it is cut to n bytes. Protobuf has already refused invalid
// UTF-8.
func storable(s string, n int) string {
	return truncate(strings.ReplaceAll(s, "\x00", "\uFFFD"), n)
}

// truncate cuts s to at most n bytes at a character boundary, marking
// the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(truncatedMark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncatedMark
}
