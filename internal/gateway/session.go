package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/wire"
)

const (
	// keepReadBuf is the largest read buffer a session keeps between
	// frames: heartbeats and results fit, and the rare large status
	// report's buffer goes back to the garbage collector instead of
	// staying with every session that ever sent one.
	keepReadBuf = 1 << 10
	// maxRecentCommands bounds the Hello.recent_command_ids the gateway
	// remembers (the newest). Older ids may be sent again, which is safe:
	// the node journals every id and never runs one twice.
	maxRecentCommands = 1024
	// maxHelloString bounds Hello's bcd version and boot id.
	maxHelloString = 256
)

// protocolError is a peer's breach of the session protocol: the session
// closes with Close{reason} and the refusal is counted.
type protocolError struct {
	reason agentv1.CloseReason
	label  string // the refusal's metric label
	msg    string
}

func (e *protocolError) Error() string { return e.msg }

// errProtocol is a protocol error with CLOSE_REASON_PROTOCOL_ERROR.
func errProtocol(format string, args ...any) error {
	return &protocolError{reason: agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, label: refusedProtocol, msg: fmt.Sprintf(format, args...)}
}

// errNodeClosed ends the read loop when the node sends Close.
var errNodeClosed = errors.New("the node closed the session")

// runSession opens a session on a handshaken connection that negotiated
// wire.ALPN, reads frames until it ends, and tears it down. stop cancels
// the handshake phase's close-on-shutdown; openSession calls it once the
// session is registered.
func (g *Gateway) runSession(ctx context.Context, tc *tls.Conn, state tls.ConnectionState, stop func() bool) {
	s, err := g.openSession(ctx, tc, state, stop)
	stop()
	if err != nil {
		remote := tc.RemoteAddr()
		var pe *protocolError
		if errors.As(err, &pe) {
			g.refuse(pe.label, remote, "", err)
			// Best effort: say why before hanging up.
			_ = tc.SetWriteDeadline(time.Now().Add(closeGrace))
			_ = wire.WriteFrame(tc, &agentv1.Frame{Kind: &agentv1.Frame_Close{Close: &agentv1.Close{Reason: pe.reason, Message: pe.msg}}})
		}
		_ = tc.Close()
		return
	}
	if s == nil { // refused and counted, or shutting down
		return
	}
	// The reader runs on a fresh goroutine: this one's stack grew deep in
	// the handshake's cryptography, and an idle session should not keep
	// that stack for its whole life.
	g.wg.Go(func() {
		g.readLoop(ctx, s)
		s.teardown()
	})
}

// openSession checks the client certificate and the Hello, begins the
// session in the store and registers it. A protocolError says what to tell
// the node; other errors are counted and logged here. It returns nil, nil
// when the session was refused after it was created (it is torn down).
func (g *Gateway) openSession(ctx context.Context, tc *tls.Conn, state tls.ConnectionState, stop func() bool) (*session, error) {
	remote := tc.RemoteAddr()
	if len(state.PeerCertificates) == 0 {
		return nil, &protocolError{reason: agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, label: refusedNoClientCert,
			msg: "the session protocol needs the node's client certificate; run bcd join first"}
	}
	certNode, err := g.authority.NodeID(state.PeerCertificates[0])
	if err != nil {
		return nil, &protocolError{reason: agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, label: refusedBadClientCert, msg: err.Error()}
	}
	hello, err := readHello(tc)
	if err != nil {
		var pe *protocolError
		if !errors.As(err, &pe) {
			g.refuse(refusedNoHello, remote, certNode, err)
		}
		return nil, err
	}
	if hello.GetProtocolVersion() != agentv1.ProtocolVersion_PROTOCOL_VERSION_1 {
		return nil, &protocolError{reason: agentv1.CloseReason_CLOSE_REASON_UNSUPPORTED_VERSION, label: refusedVersion,
			msg: fmt.Sprintf("protocol version %d is not supported; this gateway speaks %d", hello.GetProtocolVersion(), agentv1.ProtocolVersion_PROTOCOL_VERSION_1)}
	}
	if hello.GetNodeId() != certNode {
		return nil, &protocolError{reason: agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, label: refusedNodeMismatch,
			msg: fmt.Sprintf("Hello names node %q but the certificate is node %q's", hello.GetNodeId(), certNode)}
	}
	if len(hello.GetBcdVersion()) > maxHelloString || len(hello.GetBootId()) > maxHelloString {
		return nil, errProtocol("Hello's bcd version or boot id is longer than %d bytes", maxHelloString)
	}
	if hasControl(hello.GetBcdVersion()) || hasControl(hello.GetBootId()) {
		return nil, errProtocol("Hello's bcd version %q or boot id %q holds a control character", hello.GetBcdVersion(), hello.GetBootId())
	}

	// Bulk: after a restart every node starts its session at once; they
	// share transactions, and an API call does not wait behind all of them.
	var node store.Node
	err = g.st.InSharedTx(store.Bulk(ctx), func(ctx context.Context, q store.Querier) error {
		var err error
		node, err = q.BeginSession(ctx, certNode, hello.GetBcdVersion(), hello.GetBootId())
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, &protocolError{reason: agentv1.CloseReason_CLOSE_REASON_REVOKED, label: refusedRevoked,
			msg: "the node is revoked or no longer exists; join it again"}
	}
	if err != nil {
		g.refuse(refusedInternal, remote, certNode, err)
		return nil, fmt.Errorf("begin session: %w", err)
	}
	if hello.GetFreshJournal() {
		var failed []store.NodeCommand
		err := g.st.InSharedTx(store.Bulk(ctx), func(ctx context.Context, q store.Querier) error {
			var err error
			failed, err = q.FailInFlightCommands(ctx, certNode)
			return err
		})
		if err != nil {
			g.refuse(refusedInternal, remote, certNode, err)
			return nil, fmt.Errorf("fail in-flight commands: %w", err)
		}
		if len(failed) > 0 {
			g.log.Info("gateway: node lost its journal; in-flight commands failed as unknown", "node", certNode, "commands", len(failed))
		}
	}
	now, err := g.st.Now(ctx)
	if err != nil {
		g.refuse(refusedInternal, remote, certNode, err)
		return nil, fmt.Errorf("read the store's clock: %w", err)
	}
	_ = tc.SetDeadline(time.Time{}) // from here on, the liveness loop watches the session

	s := &session{g: g, conn: tc, nodeID: certNode, epoch: node.SessionEpoch}
	s.specHeld.Store(hello.GetSpecGeneration())
	if ids := hello.GetRecentCommandIds(); len(ids) > 0 {
		// The journal's tail is oldest first: keep the newest.
		ids = ids[max(0, len(ids)-maxRecentCommands):]
		s.ran = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			s.ran[id] = struct{}{}
		}
	}
	s.lastHeard.Store(time.Now().UnixNano())
	// Welcome is the first frame; the writer starts once the session is
	// registered, so no heartbeat or command can overtake it.
	s.queue = append(s.queue, &agentv1.Frame{Kind: &agentv1.Frame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch:      s.epoch,
		ServerTime:        timestamppb.New(now),
		HeartbeatInterval: durationpb.New(g.interval),
		ProtocolVersion:   agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
	}}})
	if reason, ok := g.register(s); !ok {
		if reason == agentv1.CloseReason_CLOSE_REASON_REVOKED {
			g.refuse(refusedRevoked, remote, certNode, errors.New("revoked while its session opened"))
		}
		s.queue = nil // not Welcome: the session was never shared, so no lock
		s.closeWith(reason, "refused: "+closeLabel(reason))
		s.teardown()
		return nil, nil
	}
	// Registered: Serve's shutdown now closes it with a Close frame, so
	// ctx ending must no longer cut the connection (before the writer
	// starts, so that no node sees Welcome and then a bare hang-up).
	stop()
	s.mu.Lock()
	s.startWriterLocked()
	s.mu.Unlock()
	g.log.Debug("gateway: session open", "node", s.nodeID, "epoch", s.epoch, "remote", remote.String(), "bcd_version", hello.GetBcdVersion())
	s.kickDispatch()
	return s, nil
}

// readHello reads the first frame, which must be a Hello.
func readHello(c net.Conn) (*agentv1.Hello, error) {
	f, _, err := wire.ReadFrame(c, nil)
	if err != nil {
		if isProtocolReadError(err) {
			return nil, errProtocol("bad first frame: %v", err)
		}
		return nil, fmt.Errorf("no Hello: %w", err)
	}
	hello := f.GetHello()
	if hello == nil {
		return nil, errProtocol("the first frame must be Hello, not %s", frameKind(f))
	}
	return hello, nil
}

// isProtocolReadError reports whether a ReadFrame error is the peer's
// fault (too large, not protobuf) rather than the connection ending.
func isProtocolReadError(err error) bool {
	return errors.Is(err, wire.ErrFrameTooLarge) || errors.Is(err, proto.Error)
}

// register makes s its node's live session, superseding an older one. It
// refuses s (with the reason to close it) when a newer session of the node
// is already registered, the node was just revoked, or the gateway is
// shutting down.
func (g *Gateway) register(s *session) (agentv1.CloseReason, bool) {
	g.mu.Lock()
	if g.stopping {
		g.mu.Unlock()
		return agentv1.CloseReason_CLOSE_REASON_SHUTDOWN, false
	}
	if at, ok := g.revoked[s.nodeID]; ok && time.Since(at) <= revokedMemory {
		g.mu.Unlock()
		return agentv1.CloseReason_CLOSE_REASON_REVOKED, false
	}
	old := g.sessions[s.nodeID]
	if old != nil && old.epoch > s.epoch {
		g.mu.Unlock()
		return agentv1.CloseReason_CLOSE_REASON_SUPERSEDED, false
	}
	g.sessions[s.nodeID] = s
	s.registered = true
	g.mu.Unlock()
	g.metrics.sessions.Inc()
	if old != nil {
		old.closeWith(agentv1.CloseReason_CLOSE_REASON_SUPERSEDED, "a newer session of this node replaced this one")
	}
	return 0, true
}

// unregister removes s from the gateway, if it is still its node's session.
func (g *Gateway) unregister(s *session) {
	g.mu.Lock()
	if g.sessions[s.nodeID] == s {
		delete(g.sessions, s.nodeID)
	}
	registered := s.registered
	g.mu.Unlock()
	s.mu.Lock()
	reason := s.closeReason
	s.mu.Unlock()
	g.metrics.closes.WithLabelValues(reason).Inc()
	if registered {
		g.metrics.sessions.Dec()
	}
	g.log.Debug("gateway: session closed", "node", s.nodeID, "epoch", s.epoch, "reason", reason)
}

// readLoop reads and handles the node's frames until the session ends.
func (g *Gateway) readLoop(ctx context.Context, s *session) {
	var buf []byte
	for {
		f, next, err := wire.ReadFrame(s.conn, buf)
		if err != nil {
			if isProtocolReadError(err) {
				err = errProtocol("bad frame: %v", err)
			} else {
				g.log.Debug("gateway: read", "node", s.nodeID, "err", err)
				return
			}
		} else {
			buf = next
			if cap(buf) > keepReadBuf {
				buf = nil
			}
			s.lastHeard.Store(time.Now().UnixNano())
			g.markHeard(s.nodeID)
			if f.GetHeartbeat() != nil {
				err = nil // nothing to do: hearing it was the point
			} else {
				// Store work runs deep (SQLite); keep it off the
				// reader's stack, which idles for the session's life.
				// While the store keeps this reader busy, the node's
				// heartbeats wait unread in the connection: that silence
				// is the gateway's and must not count against the node,
				// or a loaded gateway would end live sessions.
				s.handling.Store(true)
				wire.OffStack(func() { err = g.handleFrame(ctx, s, f) })
				s.lastHeard.Store(time.Now().UnixNano())
				s.handling.Store(false)
			}
		}
		var pe *protocolError
		switch {
		case err == nil:
			continue
		case errors.As(err, &pe):
			g.refuse(pe.label, s.conn.RemoteAddr(), s.nodeID, err)
			s.closeWith(pe.reason, pe.msg)
		case errors.Is(err, errNodeClosed):
			s.mu.Lock()
			if !s.closing {
				s.closing, s.closeReason = true, "node_closed"
			}
			s.mu.Unlock()
		default:
			// The store failed: end the session, so that the node
			// reconnects and sends everything again.
			g.log.Error("gateway: session ends on a store error", "node", s.nodeID, "err", err)
			s.mu.Lock()
			if !s.closing {
				s.closing, s.closeReason = true, "internal_error"
			}
			s.mu.Unlock()
		}
		return
	}
}

// handleFrame acts on one frame from the node.
func (g *Gateway) handleFrame(ctx context.Context, s *session, f *agentv1.Frame) error {
	switch k := f.GetKind().(type) {
	case *agentv1.Frame_Heartbeat:
		return nil
	case *agentv1.Frame_StatusReport:
		return g.storeStatus(ctx, s, k.StatusReport)
	case *agentv1.Frame_CommandResult:
		return g.storeResult(ctx, s, k.CommandResult)
	case *agentv1.Frame_SpecApplied:
		return g.storeSpecApplied(ctx, s, k.SpecApplied)
	case *agentv1.Frame_Close:
		g.log.Info("gateway: node closed its session", "node", s.nodeID, "reason", k.Close.GetReason().String(), "message", k.Close.GetMessage())
		return errNodeClosed
	case nil:
		// A kind this build does not know (a newer node's addition):
		// additive protocol changes must be safe to ignore.
		return nil
	default:
		return errProtocol("a node does not send %s frames", frameKind(f))
	}
}

// frameKind names a frame's kind for messages.
func frameKind(f *agentv1.Frame) string {
	if f.GetKind() == nil {
		return "empty"
	}
	return string(f.ProtoReflect().WhichOneof(f.ProtoReflect().Descriptor().Oneofs().ByName("kind")).Name())
}

// markHeard adds nodeID to the next TouchNodes batch.
func (g *Gateway) markHeard(nodeID string) {
	g.heardMu.Lock()
	g.heard[nodeID] = struct{}{}
	g.heardMu.Unlock()
}

// hasControl reports whether a node's one-line text (a hostname, a version,
// a boot id) holds a control character: never in what a host reports, and
// a NUL would fail the store's write as an internal error, not the node's.
func hasControl(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }
