package gateway

import (
	"crypto/tls"
	"sync"
	"sync/atomic"
	"time"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/wire"
)

// session is one node's live connection.
//
// Writing. Frames to the node are appended to queue (bounded by the
// gateway's SendQueue) by whoever produces them: the reader (Welcome,
// ResultAck), the heartbeat ticker, a command dispatch, Revoke. A writer
// goroutine drains the queue and exits when it is empty, so an idle session
// has no writer goroutine and no buffer: the memory that scales with
// sessions is the TLS connection, the reader's stack and this struct, about
// 300 bytes. Producers never block on a slow node: enqueueing is a mutex
// and an append, and a node whose queue overflows is closed as a slow
// consumer. The writer sets a write deadline per batch, so a stalled peer
// holds a writer for at most 3 heartbeat intervals.
//
// Closing. closeWith queues a Close frame as the last frame; the writer
// writes it and then closes the connection, which ends the reader. The
// reader's exit (teardown) is the one place a session ends: it marks the
// session done, waits for its writer and dispatcher, and unregisters it.
type session struct {
	g      *Gateway
	conn   *tls.Conn
	nodeID string
	epoch  int64
	// ran holds the ids the node reported in Hello.recent_command_ids,
	// which are never sent again; nil when none. After Hello only the
	// dispatch touches it (dispatches run one at a time), and it shrinks
	// to the ids still pending after the first full dispatch (usually
	// none), so that reconnected nodes do not each keep their journal's
	// tail here.
	ran map[string]struct{}
	// specHeld is the spec generation the node holds or was sent; set
	// from Hello, then written only by the dispatch, and read by the
	// reconcile sweep.
	specHeld atomic.Int64

	// lastHeard is when a frame was last read, in Unix nanoseconds by this
	// process's clock (a local deadline, not a stored time).
	lastHeard atomic.Int64
	// handling is set while the reader handles a frame: the session is
	// not silent then, whatever lastHeard says.
	handling atomic.Bool
	// registered is set once, under g.mu, when the session became its
	// node's live session; it decides whether teardown lowers the gauge.
	registered bool

	mu            sync.Mutex       // guards the fields below
	queue         []*agentv1.Frame // frames waiting for the writer
	writing       bool             // a writer goroutine is draining queue
	closing       bool             // Close is queued or the connection ends: sends are dropped
	closeReason   string           // why it ended, for metrics; set with closing
	done          bool             // the reader has exited: no goroutine may start
	wantSend      bool             // a dispatch was asked for and has not started
	dispatching   bool             // a dispatch goroutine is running
	resumeOnDrain bool             // a dispatch paused on a full queue: the writer kicks it when drained
	wg            sync.WaitGroup   // the writer and dispatch goroutines; Add under mu while !done
}

// send queues f for the node. It reports false when the session is closing
// (f is dropped). A full queue closes the session as a slow consumer.
func (s *session) send(f *agentv1.Frame) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if len(s.queue) >= s.g.sendQueue {
		s.closeLocked(agentv1.CloseReason_CLOSE_REASON_SLOW_CONSUMER, "the node reads too slowly; reconnect", "slow_consumer")
		// The writer is stuck on this node: make its current write give
		// up soon, so that the Close goes out or the connection ends.
		_ = s.conn.SetWriteDeadline(time.Now().Add(closeGrace))
		return false
	}
	s.queue = append(s.queue, f)
	s.startWriterLocked()
	return true
}

// closeWith ends the session with a Close frame saying why. It returns at
// once; the writer sends the frame and closes the connection.
func (s *session) closeWith(reason agentv1.CloseReason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	s.closeLocked(reason, message, closeLabel(reason))
}

// closeLocked queues Close as the last frame: behind what is queued, or
// instead of it when the queue is full. s.mu is held.
func (s *session) closeLocked(reason agentv1.CloseReason, message, label string) {
	s.closing = true
	s.closeReason = label
	f := &agentv1.Frame{Kind: &agentv1.Frame_Close{Close: &agentv1.Close{Reason: reason, Message: message}}}
	if len(s.queue) >= s.g.sendQueue {
		s.queue = s.queue[:0]
	}
	s.queue = append(s.queue, f)
	s.startWriterLocked()
}

// startWriterLocked starts the writer unless it runs or the session is
// done. s.mu is held.
func (s *session) startWriterLocked() {
	if s.writing || s.done {
		return
	}
	s.writing = true
	s.wg.Add(1)
	go s.writeLoop()
}

// writeLoop writes queued frames until the queue is empty, then exits;
// when the session is closing it then closes the connection.
func (s *session) writeLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		batch, closing := s.queue, s.closing
		s.queue = nil
		if len(batch) == 0 {
			s.writing = false
			if s.resumeOnDrain {
				s.resumeOnDrain = false
				s.kickDispatchLocked()
			}
			s.mu.Unlock()
			if closing {
				_ = s.conn.Close()
			}
			return
		}
		s.mu.Unlock()

		wait := SilentIntervals * s.g.interval
		if closing {
			wait = closeGrace
		}
		_ = s.conn.SetWriteDeadline(time.Now().Add(wait))
		for _, f := range batch {
			if err := wire.WriteFrame(s.conn, f); err != nil {
				s.g.log.Debug("gateway: write", "node", s.nodeID, "err", err)
				s.mu.Lock()
				if !s.closing {
					s.closing, s.closeReason = true, "write_failed"
				}
				s.queue, s.writing = nil, false
				s.mu.Unlock()
				_ = s.conn.Close()
				return
			}
		}
	}
}

// teardown ends the session after its reader exits: no goroutine starts
// any more, the connection is closed once the writer is done with it, and
// the session leaves the gateway. It runs once, on the reader's goroutine.
func (s *session) teardown() {
	s.mu.Lock()
	s.done = true
	if !s.closing {
		s.closing, s.closeReason = true, "disconnected"
	}
	writing := s.writing
	s.mu.Unlock()
	if writing {
		// Let the writer finish the Close frame, briefly.
		_ = s.conn.SetWriteDeadline(time.Now().Add(closeGrace))
	} else {
		_ = s.conn.Close()
	}
	s.wg.Wait()
	_ = s.conn.Close()
	s.g.unregister(s)
}

// closeLabel is the metrics label of a close reason.
func closeLabel(r agentv1.CloseReason) string {
	switch r {
	case agentv1.CloseReason_CLOSE_REASON_SUPERSEDED:
		return "superseded"
	case agentv1.CloseReason_CLOSE_REASON_REVOKED:
		return "revoked"
	case agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR:
		return "protocol_error"
	case agentv1.CloseReason_CLOSE_REASON_SHUTDOWN:
		return "shutdown"
	case agentv1.CloseReason_CLOSE_REASON_SLOW_CONSUMER:
		return "slow_consumer"
	case agentv1.CloseReason_CLOSE_REASON_UNSUPPORTED_VERSION:
		return "unsupported_version"
	default:
		return "other"
	}
}
