package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/agent/v1/agentv1connect"
	"github.com/better-compute/better-compute/internal/wire"
)

// fakeGateway is the server side of join, renew and the session, small
// enough to script from a test: one TLS 1.3 listener routing by ALPN, as
// the real gateway does. Sessions are handed to the test (sessions) after
// their Hello; the test reads their frames and writes frames to them.
type fakeGateway struct {
	t        *testing.T
	pki      *testPKI
	addr     string
	ttl      time.Duration // node certificate lifetime
	interval time.Duration // heartbeat interval in Welcome
	// silence, when set, ends a session that sends nothing for this long,
	// as the real gateway ends one silent for 3 heartbeat intervals.
	silence time.Duration

	// helloReply, when set, answers a Hello instead of a Welcome.
	helloReply func(*agentv1.Hello) *agentv1.Frame

	sessions chan *gwSession

	mu     sync.Mutex                  // guards the fields below
	epoch  int64                       // the last session epoch handed out
	nodes  map[string]*ecdsa.PublicKey // node id -> current public key
	joins  int                         // Join calls served
	renews int                         // Renew calls served
}

// gwSession is one accepted session, seen from the gateway.
type gwSession struct {
	conn   *tls.Conn
	hello  *agentv1.Hello
	epoch  int64
	serial string // the client certificate's serial number
	frames chan *agentv1.Frame
	wmu    sync.Mutex
}

func newFakeGateway(t *testing.T, p *testPKI) *fakeGateway {
	t.Helper()
	gw := &fakeGateway{t: t, pki: p, ttl: time.Hour, interval: 50 * time.Millisecond,
		sessions: make(chan *gwSession, 16), nodes: map[string]*ecdsa.PublicKey{}}
	cert := p.servingCert(t, p.serving)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    p.nodePool(),
		NextProtos:   []string{wire.ALPN, "h2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	gw.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewJoinServiceHandler(gw))
	mux.Handle(agentv1connect.NewNodeServiceHandler(gw))
	httpConns := &chanListener{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(httpConns) }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go gw.route(c.(*tls.Conn), httpConns)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		srv.Close()
	})
	return gw
}

func (gw *fakeGateway) url() string { return "https://" + gw.addr }

// route hands h2 connections to the HTTP server and serves sessions.
func (gw *fakeGateway) route(c *tls.Conn, httpConns *chanListener) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		c.Close()
		return
	}
	if c.ConnectionState().NegotiatedProtocol != wire.ALPN {
		select {
		case httpConns.conns <- c:
		case <-httpConns.done:
			c.Close()
		}
		return
	}
	gw.serveSession(c)
}

func (gw *fakeGateway) serveSession(c *tls.Conn) {
	defer c.Close()
	peers := c.ConnectionState().PeerCertificates
	if len(peers) == 0 {
		return
	}
	f, _, err := wire.ReadFrame(c, nil)
	if err != nil || f.GetHello() == nil {
		return
	}
	h := f.GetHello()
	if reply := gw.helloReply; reply != nil {
		if r := reply(h); r != nil {
			_ = wire.WriteFrame(c, r)
			return
		}
	}
	gw.mu.Lock()
	gw.epoch++
	s := &gwSession{conn: c, hello: h, epoch: gw.epoch, serial: peers[0].SerialNumber.String(), frames: make(chan *agentv1.Frame, 64)}
	gw.mu.Unlock()
	if err := s.send(&agentv1.Frame{Kind: &agentv1.Frame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: s.epoch, ServerTime: timestamppb.Now(), HeartbeatInterval: durationpb.New(gw.interval),
		ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
	}}}); err != nil {
		return
	}
	gw.sessions <- s
	defer close(s.frames)
	for {
		if gw.silence > 0 {
			_ = c.SetReadDeadline(time.Now().Add(gw.silence))
		}
		f, _, err := wire.ReadFrame(c, nil)
		if err != nil {
			return
		}
		if f.GetHeartbeat() != nil {
			_ = s.send(&agentv1.Frame{Kind: &agentv1.Frame_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: f.GetHeartbeat().GetSeq()}}})
		}
		select {
		case s.frames <- f:
		default: // a test that does not read heartbeats must not block the session
		}
	}
}

func (s *gwSession) send(f *agentv1.Frame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return wire.WriteFrame(s.conn, f)
}

// session waits for the next session.
func (gw *fakeGateway) session(t *testing.T) *gwSession {
	t.Helper()
	select {
	case s := <-gw.sessions:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no session within 10s")
		return nil
	}
}

// next returns the next frame that is not a heartbeat or status report
// (unless asked for one of those).
func (s *gwSession) next(t *testing.T, want func(*agentv1.Frame) bool) *agentv1.Frame {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				t.Fatal("the session ended before the frame came")
			}
			if want(f) {
				return f
			}
		case <-timeout:
			t.Fatal("no such frame within 10s")
		}
	}
}

func isResult(f *agentv1.Frame) bool    { return f.GetCommandResult() != nil }
func isReport(f *agentv1.Frame) bool    { return f.GetStatusReport() != nil }
func isHeartbeat(f *agentv1.Frame) bool { return f.GetHeartbeat() != nil }

// ended waits until the node closes the session.
func (s *gwSession) ended(t *testing.T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.frames:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the session did not end within 10s")
		}
	}
}

// Join implements JoinServiceHandler.
func (gw *fakeGateway) Join(_ context.Context, req *connect.Request[agentv1.JoinRequest]) (*connect.Response[agentv1.JoinResponse], error) {
	gw.mu.Lock()
	gw.joins++
	id := fmt.Sprintf("n-test%d", gw.joins)
	gw.mu.Unlock()
	if !strings.HasPrefix(req.Msg.GetToken(), "bcj_") {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("bad token"))
	}
	cert, err := gw.pki.signNode(req.Msg.GetCsrDer(), id, gw.ttl)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	gw.mu.Lock()
	gw.nodes[id] = cert.PublicKey.(*ecdsa.PublicKey)
	gw.mu.Unlock()
	return connect.NewResponse(&agentv1.JoinResponse{
		NodeId: id, CertificateDer: cert.Raw, CaCertificatesDer: gw.pki.bundle(),
		GatewayAddresses: []string{gw.addr}, NotAfter: timestamppb.New(cert.NotAfter),
	}), nil
}

// Renew implements NodeServiceHandler: the signature must verify with the
// node's current key.
func (gw *fakeGateway) Renew(_ context.Context, req *connect.Request[agentv1.RenewRequest]) (*connect.Response[agentv1.RenewResponse], error) {
	m := req.Msg
	gw.mu.Lock()
	pub := gw.nodes[m.GetNodeId()]
	gw.renews++
	gw.mu.Unlock()
	sum := sha256.Sum256(m.GetCsrDer())
	if pub == nil || !ecdsa.VerifyASN1(pub, sum[:], m.GetSignature()) {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("no proof of possession"))
	}
	cert, err := gw.pki.signNode(m.GetCsrDer(), m.GetNodeId(), gw.ttl)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	gw.mu.Lock()
	gw.nodes[m.GetNodeId()] = cert.PublicKey.(*ecdsa.PublicKey)
	gw.mu.Unlock()
	return connect.NewResponse(&agentv1.RenewResponse{CertificateDer: cert.Raw, NotAfter: timestamppb.New(cert.NotAfter)}), nil
}

// chanListener feeds already accepted connections to an http.Server.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
