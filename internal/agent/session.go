package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/version"
	"github.com/better-compute/better-compute/internal/wire"
)

const (
	// dialTimeout bounds the TCP connect and the TLS handshake.
	dialTimeout = 10 * time.Second
	// welcomeTimeout bounds the wait for the gateway's answer to Hello.
	welcomeTimeout = 15 * time.Second
	// writeTimeout bounds one frame write: a gateway that stops reading
	// for this long is as good as gone.
	writeTimeout = 10 * time.Second
	// defaultHeartbeat is used when a Welcome names no interval.
	defaultHeartbeat = 10 * time.Second
	// minHeartbeat and maxHeartbeat bound what a Welcome may ask for.
	minHeartbeat = 10 * time.Millisecond
	maxHeartbeat = 5 * time.Minute
	// keepReadBuf is the largest read buffer a session keeps between
	// frames; a larger frame's buffer is dropped after use, so ten
	// thousand simulated agents do not each pin their largest frame.
	keepReadBuf = 4 << 10
)

// closeError is a Close frame from the gateway.
type closeError struct {
	reason  agentv1.CloseReason
	message string
}

func (e *closeError) Error() string {
	return fmt.Sprintf("the gateway closed the session: %s: %s", e.reason, e.message)
}

// session is one live connection to a gateway, after its Welcome.
type session struct {
	n        *Node
	conn     *tls.Conn
	id       *identity // the one dialed with, whose key signs claims sent on it
	epoch    int64
	interval time.Duration
	ctx      context.Context // ends with the session
	cancel   context.CancelFunc

	wmu   sync.Mutex  // serializes frame writes on conn; guards seq
	seq   uint64      // heartbeats sent
	timer *time.Timer // the next heartbeat; set before the reader starts

	rmu        sync.Mutex        // one report at a time; guards the three below
	hashes     map[string][]byte // section hashes the gateway got on this session
	lastReport time.Time
	reporting  bool // a periodic report is being collected
}

// runSession dials addr, says Hello, and on Welcome serves the session
// until it ends. lasted is how long it was established (0: no Welcome).
func (n *Node) runSession(ctx context.Context, addr string) (lasted time.Duration, err error) {
	n.mu.Lock()
	n.state, n.gateway = "connecting", addr
	n.mu.Unlock()

	// A renewal may swap the node's identity while the session lives; the
	// gateway verifies allocation claims against the certificate the
	// session was opened with, so the session keeps this one.
	id := n.id.Load()
	var conn *tls.Conn
	wire.OffStack(func() { conn, err = n.dial(ctx, addr, id) })
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	// Closing the connection is how the reader learns that ctx ended.
	stop := context.AfterFunc(ctx, func() {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = wire.WriteFrame(conn, closeFrame(agentv1.CloseReason_CLOSE_REASON_SHUTDOWN, "bcd is stopping"))
		_ = conn.Close()
	})
	defer stop()

	hello, err := n.hello()
	if err != nil {
		return 0, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := wire.WriteFrame(conn, hello); err != nil {
		return 0, fmt.Errorf("send Hello to %s: %w", addr, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(welcomeTimeout))
	f, _, err := wire.ReadFrame(conn, nil)
	if err != nil {
		return 0, fmt.Errorf("wait for Welcome from %s: %w", addr, err)
	}
	if c := f.GetClose(); c != nil {
		return 0, &closeError{c.GetReason(), c.GetMessage()}
	}
	w := f.GetWelcome()
	if w == nil {
		return 0, fmt.Errorf("gateway %s answered Hello with %T, not Welcome", addr, f.GetKind())
	}
	if v := w.GetProtocolVersion(); v != agentv1.ProtocolVersion_PROTOCOL_VERSION_1 && v != agentv1.ProtocolVersion_PROTOCOL_VERSION_UNSPECIFIED {
		msg := fmt.Sprintf("the gateway chose protocol %s; this bcd speaks %s only", v, agentv1.ProtocolVersion_PROTOCOL_VERSION_1)
		_ = wire.WriteFrame(conn, closeFrame(agentv1.CloseReason_CLOSE_REASON_UNSUPPORTED_VERSION, msg))
		return 0, errors.New(msg)
	}
	s := n.welcome(ctx, conn, w, id)
	started := time.Now()
	err = s.serve()
	s.end()
	return max(time.Since(started), time.Nanosecond), err
}

// dial opens the TLS connection, with id's certificate, trusting only
// ca.pem, and checks that the gateway chose the session protocol.
func (n *Node) dial(ctx context.Context, addr string, id *identity) (*tls.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("gateway address %q: %w", addr, err)
	}
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: dialTimeout},
		Config: &tls.Config{
			MinVersion:         tls.VersionTLS13,
			RootCAs:            id.roots,
			ServerName:         host,
			Certificates:       []tls.Certificate{id.cert},
			NextProtos:         []string{wire.ALPN},
			ClientSessionCache: n.tlsCache.Load(),
		},
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to gateway %s: %w", addr, err)
	}
	conn := c.(*tls.Conn)
	if p := conn.ConnectionState().NegotiatedProtocol; p != wire.ALPN {
		conn.Close()
		return nil, fmt.Errorf("connect to gateway %s: it does not speak the node session protocol %s (negotiated %q)", addr, wire.ALPN, p)
	}
	return conn, nil
}

// hello builds the Hello frame from the journal.
func (n *Node) hello() (*agentv1.Frame, error) {
	gen, err := n.journal.specGeneration()
	if err != nil {
		return nil, fmt.Errorf("read the journal: %w", err)
	}
	ids, err := n.journal.recentIDs()
	if err != nil {
		return nil, fmt.Errorf("read the journal: %w", err)
	}
	h := &agentv1.Hello{
		NodeId:           n.id.Load().config.NodeID,
		BcdVersion:       version.Get().Version,
		ProtocolVersion:  agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
		BootId:           n.bootID(),
		SpecGeneration:   gen,
		RecentCommandIds: ids,
		FreshJournal:     n.fresh.Load(),
	}
	if n.cfg.FakeHW != nil {
		h.Capabilities = []string{"fakehw"}
	}
	return &agentv1.Frame{Kind: &agentv1.Frame_Hello{Hello: h}}, nil
}

// welcome records an accepted session, dialed with id, and makes it current.
func (n *Node) welcome(ctx context.Context, conn *tls.Conn, w *agentv1.Welcome, id *identity) *session {
	interval := w.GetHeartbeatInterval().AsDuration()
	if interval == 0 {
		interval = defaultHeartbeat
	}
	interval = min(max(interval, minHeartbeat), maxHeartbeat)
	s := &session{n: n, conn: conn, id: id, epoch: w.GetSessionEpoch(), interval: interval, hashes: map[string][]byte{}}
	s.ctx, s.cancel = context.WithCancel(ctx)
	// The gateway holds fresh_journal from this Hello on; later Hellos of
	// this process describe a journal that has been kept since.
	n.fresh.Store(false)
	now := n.now()
	n.mu.Lock()
	n.sess, n.state, n.epoch, n.lastErr = s, "connected", s.epoch, ""
	if st := w.GetServerTime(); st != nil {
		n.skew = now.Sub(st.AsTime())
	}
	n.mu.Unlock()
	n.log.Info("session established", "gateway", conn.RemoteAddr().String(), "epoch", s.epoch, "heartbeat", interval)
	return s
}

// resend sends the journal's unacknowledged results, first on the
// session, so that the gateway settles commands before anything else.
func (s *session) resend() error {
	results, err := s.n.journal.unacked()
	if err != nil {
		return fmt.Errorf("read the journal: %w", err)
	}
	for _, r := range results {
		if err := s.sendResult(r); err != nil {
			return err
		}
	}
	return nil
}

// firstReport sends the session's first StatusReport, in full, then has the
// converger apply the held spec again and report it. It runs on a goroutine
// of its own, which ends with it, once heartbeats and the reader run:
// collecting the inventory runs nvidia-smi, which a sick host (persistence
// mode off, a GPU off the bus) holds for up to its 20 s timeout, longer
// than the gateway waits for a silent node (3 heartbeat intervals), and
// commands must be read meanwhile. The gateway needs no report before
// other frames. A report that fails is retried by the next heartbeat's
// tick, as a periodic one: the session has no hashes yet, so it goes in
// full.
func (s *session) firstReport() {
	n := s.n
	defer n.work.Done()
	if err := s.report(true); err != nil {
		n.log.Warn("the session's first status report failed; the next heartbeat retries it", "err", err)
	}
	s.rmu.Lock()
	s.reporting = false
	s.rmu.Unlock()
	if s.ctx.Err() == nil { // an ended session's successor resyncs at its own start
		n.conv.sessionStarted()
	}
}

// serve resends unacknowledged results, starts heartbeats and the first
// report, then reads frames until the session ends.
func (s *session) serve() error {
	var err error
	wire.OffStack(func() { err = s.resend() })
	if err != nil {
		return err
	}
	s.rmu.Lock()
	s.reporting = true // no periodic report doubles the first
	s.rmu.Unlock()
	s.wmu.Lock()
	s.timer = time.AfterFunc(s.interval, s.tick)
	s.wmu.Unlock()
	s.n.work.Add(1)
	go s.firstReport()

	var buf []byte
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(3 * s.interval))
		f, b, err := wire.ReadFrame(s.conn, buf)
		if cap(b) <= keepReadBuf {
			buf = b
		} else {
			buf = nil
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("the gateway was silent for 3 heartbeat intervals (%v)", 3*s.interval)
			}
			if errors.Is(err, wire.ErrFrameTooLarge) {
				s.closeWith(agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, err.Error())
			}
			return fmt.Errorf("read from the gateway: %w", err)
		}
		if err := s.handle(f); err != nil {
			return err
		}
	}
}

// handle acts on one frame from the gateway.
func (s *session) handle(f *agentv1.Frame) error {
	n := s.n
	switch k := f.GetKind().(type) {
	case *agentv1.Frame_Heartbeat:
		n.mu.Lock()
		n.hbRecv = n.now()
		n.mu.Unlock()
		if n.cfg.HeartbeatLog {
			n.log.Info("heartbeat received", "seq", k.Heartbeat.GetSeq())
		}
	case *agentv1.Frame_Command:
		n.handleCommand(s, k.Command)
	case *agentv1.Frame_ResultAck:
		if err := n.journal.ack(k.ResultAck.GetId()); err != nil {
			return fmt.Errorf("journal the ack of %s: %w", k.ResultAck.GetId(), err)
		}
	case *agentv1.Frame_NodeSpec:
		// Specs come in order on a session, and a newer session's
		// replace an older's: the latest received is the one to hold.
		n.conv.offer(k.NodeSpec)
	case *agentv1.Frame_Close:
		return &closeError{k.Close.GetReason(), k.Close.GetMessage()}
	case nil:
		// A kind this build does not know (a newer gateway's addition)
		// decodes to no kind: additive protocol changes must be safe to
		// ignore, as the gateway ignores a newer node's.
		n.log.Debug("ignored a frame of a kind this bcd does not know")
	default:
		// A kind this build knows but the gateway never sends (Hello,
		// StatusReport...): the gateway is broken.
		msg := fmt.Sprintf("unexpected frame %T from the gateway", f.GetKind())
		s.closeWith(agentv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR, msg)
		return errors.New(msg)
	}
	return nil
}

// send writes one frame; a failed write closes the connection, so the
// reader ends the session.
func (s *session) send(f *agentv1.Frame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := wire.WriteFrame(s.conn, f); err != nil {
		_ = s.conn.Close()
		return fmt.Errorf("send to the gateway: %w", err)
	}
	return nil
}

// sendResult sends a result stamped with this session's epoch.
func (s *session) sendResult(r *agentv1.CommandResult) error {
	r.SessionEpoch = s.epoch
	return s.send(&agentv1.Frame{Kind: &agentv1.Frame_CommandResult{CommandResult: r}})
}

// closeWith tells the gateway why the node ends the session.
func (s *session) closeWith(reason agentv1.CloseReason, msg string) {
	_ = s.send(closeFrame(reason, msg))
}

func closeFrame(reason agentv1.CloseReason, msg string) *agentv1.Frame {
	return &agentv1.Frame{Kind: &agentv1.Frame_Close{Close: &agentv1.Close{Reason: reason, Message: msg}}}
}

// tick sends a heartbeat, schedules the next one, and sends a periodic
// report when one is due. It runs on the timer's goroutine, which exits
// when it returns. The next heartbeat is scheduled before the report,
// since collecting the inventory (nvidia-smi) can take seconds; a report
// still running when the next one falls due is not doubled.
func (s *session) tick() {
	s.wmu.Lock()
	if s.ctx.Err() != nil { // end stops the timer under wmu after cancel
		s.wmu.Unlock()
		return
	}
	s.seq++
	seq := s.seq
	s.timer.Reset(s.interval)
	s.wmu.Unlock()
	if err := s.send(&agentv1.Frame{Kind: &agentv1.Frame_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: seq}}}); err != nil {
		return
	}
	n := s.n
	n.mu.Lock()
	n.hbSent = n.now()
	n.mu.Unlock()
	if n.cfg.HeartbeatLog {
		n.log.Info("heartbeat sent", "seq", seq)
	}
	s.rmu.Lock()
	due := !s.reporting && time.Since(s.lastReport) >= n.cfg.ReportInterval
	s.reporting = s.reporting || due
	s.rmu.Unlock()
	if !due {
		return
	}
	if err := s.report(false); err != nil {
		n.log.Warn("periodic status report failed", "err", err)
	}
	s.rmu.Lock()
	s.reporting = false
	s.rmu.Unlock()
}

// report sends a StatusReport: every section's content when full (the
// session's first report, inventory.refresh), otherwise content only for
// sections whose hash the gateway has not had on this session. A new
// session starts with no hashes, so whatever a lost connection swallowed is
// resent in full.
func (s *session) report(full bool) error {
	n := s.n
	inv, err := n.collect(s.ctx)
	if err != nil {
		return fmt.Errorf("collect the inventory: %w", err)
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	sections := inventory.Sections(inv)
	for _, sec := range sections {
		if !full && bytes.Equal(s.hashes[sec.GetName()], sec.GetHash()) {
			sec.Content = nil
		}
	}
	rep := &agentv1.StatusReport{Sections: sections, Conditions: n.conditions()}
	if err := s.send(&agentv1.Frame{Kind: &agentv1.Frame_StatusReport{StatusReport: rep}}); err != nil {
		return err
	}
	for _, sec := range sections {
		s.hashes[sec.GetName()] = sec.GetHash()
	}
	s.lastReport = time.Now()
	return nil
}

// maxConditionMessage bounds a condition's message (an nvidia-smi error
// can carry its whole output).
const maxConditionMessage = 512

// conditions are the node's health facts, complete each time.
func (n *Node) conditions() []*agentv1.Condition {
	leaf := n.id.Load().cert.Leaf
	now := n.now()
	ok := now.After(leaf.NotBefore) && now.Before(leaf.NotAfter)
	conds := []*agentv1.Condition{{
		Type:    "CertificateValid",
		Ok:      ok,
		Message: "the node certificate expires " + leaf.NotAfter.UTC().Format(time.RFC3339),
		Since:   timestamppb.New(leaf.NotBefore),
	}}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gpusChecked {
		// Unreadable GPUs are reported as none, and so are not bookable;
		// this says why they went.
		conds = append(conds, &agentv1.Condition{
			Type: "GPUsReadable", Ok: n.gpusErr == "", Message: n.gpusErr, Since: timestamppb.New(n.gpusSince),
		})
	}
	return conds
}

// end stops the session's timers and makes it no longer current.
func (s *session) end() {
	s.cancel()
	s.wmu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.wmu.Unlock()
	_ = s.conn.Close()
	n := s.n
	n.mu.Lock()
	if n.sess == s {
		n.sess = nil
	}
	n.mu.Unlock()
}
