package gateway

import (
	"context"
	"maps"
	"slices"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/store"
)

// expireInterval is how often queued commands past their deadline fail.
const expireInterval = time.Second

// resultGrace is how long after a sent command's deadline the gateway waits
// for its result before calling it unknown. bcd starts a command only
// before its deadline and stops it 5 minutes later; the extra minute covers
// clock skew and a slow report. A result that comes later still replaces
// unknown.
const resultGrace = 6 * time.Minute

// reconcileInterval is how often the gateway looks in the store for what
// other processes changed for its nodes: a revocation must close a session
// within a second, and a command or a placement reach its node about as
// fast.
const reconcileInterval = 500 * time.Millisecond

// heartbeatLoop is the one ticker of all sessions: each interval it sends
// every session a heartbeat and ends the sessions silent for
// SilentIntervals intervals; a session whose reader is busy handling a
// frame is not silent, since its node's frames wait on the gateway. A shared ticker instead of a read deadline per
// session keeps timers out of the per-session cost; the price is that a
// silent session ends between 3 and 4 intervals after its last frame.
func (g *Gateway) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	var seq uint64
	var live []*session // reused across ticks
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seq++
		// One frame for every session: frames are never changed once
		// queued, and marshalling only reads them. Its seq increments
		// per heartbeat on each session, as the protocol asks.
		hb := &agentv1.Frame{Kind: &agentv1.Frame_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: seq}}}
		cutoff := time.Now().Add(-SilentIntervals * g.interval).UnixNano()
		g.mu.Lock()
		live = slices.AppendSeq(live[:0], maps.Values(g.sessions))
		g.mu.Unlock()
		for _, s := range live {
			if s.lastHeard.Load() < cutoff && !s.handling.Load() {
				g.log.Info("gateway: node silent; ending its session", "node", s.nodeID, "intervals", SilentIntervals)
				s.mu.Lock()
				if !s.closing {
					s.closing, s.closeReason = true, "silent"
				}
				s.mu.Unlock()
				_ = s.conn.Close()
				continue
			}
			s.send(hb)
		}
		clear(live) // drop the pointers until the next tick
	}
}

// livenessLoop writes the store's side of liveness once per interval: one
// TouchNodes for every node heard from since the last one, then one
// MarkUnreachable for the nodes (of any gateway) silent for SilentIntervals
// intervals by the store's clock.
func (g *Gateway) livenessLoop(ctx context.Context) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The clock is read before the batch is written: a slow write
		// then cannot make the nodes it just stamped look silent.
		now, err := g.st.Now(ctx)
		if err != nil {
			g.log.Error("gateway: read the store's clock", "err", err)
			continue
		}
		if !g.flushHeard(ctx) {
			// Our nodes' last-seen times did not advance: marking them
			// now would blame them for the store's failure.
			continue
		}
		gone, err := g.st.MarkUnreachable(ctx, now.Add(-SilentIntervals*g.interval))
		if err != nil {
			g.log.Error("gateway: mark silent nodes unreachable", "err", err)
			continue
		}
		for _, id := range gone {
			g.log.Info("gateway: node unreachable", "node", id)
		}
	}
}

// flushHeard writes the heard batch with one TouchNodes; on failure the
// ids go back into the next batch and it reports false.
func (g *Gateway) flushHeard(ctx context.Context) bool {
	g.heardMu.Lock()
	batch := g.heard
	if len(batch) == 0 {
		g.heardMu.Unlock()
		return true
	}
	g.heard = make(map[string]struct{}, len(batch))
	g.heardMu.Unlock()

	ids := slices.Sorted(maps.Keys(batch)) // sorted: a stable lock order for the update
	back, err := g.st.TouchNodes(ctx, ids)
	if err != nil {
		g.log.Error("gateway: record heartbeats", "nodes", len(ids), "err", err)
		g.heardMu.Lock()
		maps.Copy(g.heard, batch)
		g.heardMu.Unlock()
		return false
	}
	for _, id := range back {
		g.log.Info("gateway: node ready again", "node", id)
	}
	return true
}

// expireLoop fails, every second, the queued commands whose deadline
// passed by the store's clock (a command for a node that stayed offline),
// and sets to unknown the sent ones without a result by their deadline
// plus resultGrace (their node went away and has not come back).
func (g *Gateway) expireLoop(ctx context.Context) {
	t := time.NewTicker(expireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		expired, err := g.st.ExpireCommands(ctx, resultGrace)
		if err != nil {
			g.log.Error("gateway: expire commands", "err", err)
			continue
		}
		for _, c := range expired {
			if c.State == store.CommandUnknown {
				g.log.Warn("gateway: no result from the node by the command's deadline; it is unknown", "node", c.NodeID, "command", c.ID, "kind", c.Kind)
				continue
			}
			g.log.Info("gateway: command expired before its node took it", "node", c.NodeID, "command", c.ID, "kind", c.Kind)
		}
	}
}

// reconcileLoop runs reconcile twice a second.
func (g *Gateway) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(reconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.reconcile(ctx); err != nil && ctx.Err() == nil {
			g.log.Error("gateway: reconcile the sessions with the store", "err", err)
		}
	}
}

// reconcile acts on what other control-plane processes sharing the store
// changed for the nodes whose sessions this gateway holds: Notify and
// Revoke reach only this process's sessions. It compares the store with
// the sessions, not a log of changes, so nothing is missed however late a
// change commits: a node revoked or deleted loses its session; a node
// whose spec generation is not the one its session holds, or that has
// commands to send, gets a dispatch. Two queries, whatever the number of
// sessions.
func (g *Gateway) reconcile(ctx context.Context) error {
	g.mu.Lock()
	ids := slices.Collect(maps.Keys(g.sessions))
	g.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	states, err := g.st.NodeSyncStates(ctx, ids)
	if err != nil {
		return err
	}
	pending, err := g.st.NodesWithPendingCommands(ctx)
	if err != nil {
		return err
	}
	exists := make(map[string]bool, len(states))
	for _, st := range states {
		exists[st.ID] = true
		s := g.session(st.ID)
		switch {
		case s == nil:
		case st.State == store.NodeRevoked:
			g.log.Info("gateway: closing the session of a node revoked elsewhere", "node", st.ID)
			g.Revoke(st.ID)
		case st.SpecGeneration != s.specHeld.Load():
			s.kickDispatch()
		}
	}
	for _, id := range ids {
		if !exists[id] {
			g.log.Info("gateway: closing the session of a node deleted elsewhere", "node", id)
			g.Revoke(id)
		}
	}
	for _, id := range pending {
		if s := g.session(id); s != nil {
			s.kickDispatch()
		}
	}
	return nil
}
