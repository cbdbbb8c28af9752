// Package gateway holds the node sessions: one TLS 1.3 listener on which
// nodes keep a live, mutually authenticated session (ALPN wire.ALPN, framed
// protobuf, see proto/bettercompute/agent/v1/session.proto) and on which
// anything else is HTTP for the join and renew calls (join.go).
//
// A session is one connection with one reader goroutine. Writes go through
// a small bounded queue drained by a writer goroutine that exists only while
// there is something to write (send.go), so that an idle session costs its
// connection, its reader's stack and a small struct, and nothing else. One
// ticker for the whole gateway sends heartbeats and ends silent sessions
// (loops.go); the nodes heard from are written to the store in one
// TouchNodes per interval, never one write per heartbeat.
//
// DESIGN.md §4 gives the reason the session is not a Connect stream.
//
// Revocation, queued commands and spec changes reach a live session
// through Revoke and Notify at once when the API runs in this process, and
// through a comparison of the store with the sessions twice a second
// (reconcileLoop) when another process made them. A command whose frame
// died with its session is sent again on the node's next session
// (PendingNodeCommands returns commands sent on an older epoch); the node
// never runs an id twice.
package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/wire"
)

const (
	// DefaultHeartbeatInterval is Config.HeartbeatInterval's default.
	DefaultHeartbeatInterval = 5 * time.Second
	// DefaultSendQueue is Config.SendQueue's default.
	DefaultSendQueue = 64
	// SilentIntervals is how many heartbeat intervals of silence end a
	// session and make its node unreachable.
	SilentIntervals = 3

	// helloTimeout bounds the TLS handshake and the first frame together.
	helloTimeout = 10 * time.Second
	// closeGrace bounds writing the last frames of a closing session.
	closeGrace = 2 * time.Second
	// revokedMemory is how long Revoke remembers a node, to refuse a
	// session that passed the store's check just before the revocation
	// was stored and registers just after Revoke ran.
	revokedMemory = time.Minute
	// shutdownGrace bounds how long Serve waits, after its context ends,
	// for sessions to take their Close frames and for HTTP calls to finish.
	shutdownGrace = 5 * time.Second
)

// Config configures a Gateway. Zero values take the defaults noted on each
// field.
type Config struct {
	// Store holds nodes, their inventory and their commands; required.
	Store *store.Store
	// Authority issues the serving certificate and verifies nodes'
	// certificates; required.
	Authority *pki.Authority
	// Join, when set, has its handlers served over HTTP on the same
	// listener, to clients that do not negotiate the session protocol (no
	// client certificate needed).
	Join *JoinService
	// Listen is the address to bind, such as "127.0.0.1:7443"; required.
	Listen string
	// Hosts are the names and addresses the serving certificate is for;
	// by default localhost, 127.0.0.1, the Listen host and os.Hostname().
	Hosts []string
	// HeartbeatInterval is how often each side sends a heartbeat;
	// DefaultHeartbeatInterval when zero. A node silent for SilentIntervals
	// intervals loses its session and becomes unreachable.
	HeartbeatInterval time.Duration
	// SendQueue bounds the frames waiting to be written to one node;
	// DefaultSendQueue when zero. Overflow closes the session as a slow
	// consumer (the node reconnects).
	SendQueue int
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the gateway's metrics; nil keeps them unregistered.
	Metrics prometheus.Registerer
}

// storeAPI is what the gateway asks of the store: *store.Store, or in tests
// a wrapper that counts calls.
type storeAPI interface {
	store.Querier
	InTx(ctx context.Context, fn func(ctx context.Context, q store.Querier) error) error
	InSharedTx(ctx context.Context, fn func(ctx context.Context, q store.Querier) error) error
}

// Gateway holds the node sessions of one control-plane process. Create it
// with New, bind with Listen, run with Serve; Revoke, Notify and Connected
// are safe to call from any goroutine at any time.
type Gateway struct {
	st        storeAPI
	authority *pki.Authority
	join      *JoinService
	listen    string
	hosts     []string
	interval  time.Duration
	sendQueue int
	log       *slog.Logger
	metrics   *metrics
	tls       *tls.Config

	ln   net.Listener // set by Listen
	http *connListener

	// ctx is Serve's context, for the store calls of goroutines that
	// Notify and the sessions start; set before Serve accepts anything.
	ctx context.Context
	wg  sync.WaitGroup // every connection's goroutine and the loops

	mu       sync.Mutex           // guards sessions, revoked and stopping
	sessions map[string]*session  // by node id: the live session of each connected node
	revoked  map[string]time.Time // nodes Revoke named in the last revokedMemory, by when
	stopping bool                 // Serve's context ended: no new sessions

	heardMu sync.Mutex          // guards heard
	heard   map[string]struct{} // nodes that sent a frame since the last TouchNodes
}

// New checks cfg and returns a Gateway that is not yet listening.
func New(cfg Config) (*Gateway, error) {
	if cfg.Store == nil {
		return nil, errors.New("gateway: no store given")
	}
	if cfg.Authority == nil {
		return nil, errors.New("gateway: no certificate authority given")
	}
	if cfg.Listen == "" {
		return nil, errors.New("gateway: no listen address given: use HOST:PORT, such as 127.0.0.1:7443")
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("gateway: invalid listen address %q: use HOST:PORT, such as 127.0.0.1:7443", cfg.Listen)
	}
	if cfg.HeartbeatInterval < 0 || cfg.SendQueue < 0 {
		return nil, errors.New("gateway: heartbeat interval and send queue must not be negative")
	}
	hosts := cfg.Hosts
	if len(hosts) == 0 {
		hosts = defaultHosts(host)
	}
	// Issue once now, so that a bad host list fails here rather than in
	// every handshake.
	if _, err := cfg.Authority.ServingCertificate(hosts); err != nil {
		return nil, fmt.Errorf("gateway: serving certificate: %w", err)
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		st:        cfg.Store,
		authority: cfg.Authority,
		join:      cfg.Join,
		listen:    cfg.Listen,
		hosts:     hosts,
		interval:  cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval),
		sendQueue: cmp.Or(cfg.SendQueue, DefaultSendQueue),
		log:       cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		metrics:   m,
		sessions:  map[string]*session{},
		revoked:   map[string]time.Time{},
		heard:     map[string]struct{}{},
	}
	g.tls = &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{wire.ALPN, "h2", "http/1.1"},
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  cfg.Authority.NodeCAPool(),
		// The Authority caches the certificate and re-issues it at half
		// life, so asking on every handshake is cheap and never stale.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := g.authority.ServingCertificate(g.hosts)
			return &c, err
		},
	}
	return g, nil
}

// defaultHosts is localhost, 127.0.0.1, the listen host unless it is a
// wildcard, and this machine's host name.
func defaultHosts(listenHost string) []string {
	hosts := []string{"localhost", "127.0.0.1"}
	if ip := net.ParseIP(listenHost); listenHost != "" && (ip == nil || !ip.IsUnspecified()) {
		hosts = append(hosts, listenHost)
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	return hosts
}

// Listen binds the listen address and returns the bound address (useful
// with port 0). Serve calls it when it was not called first.
func (g *Gateway) Listen(ctx context.Context) (net.Addr, error) {
	if g.ln != nil {
		return g.ln.Addr(), nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", g.listen)
	switch {
	case err == nil:
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("gateway: listen on %s: the address is already in use; stop the other process or choose another gateway address", g.listen)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("gateway: listen on %s: permission denied; choose a port above 1023", g.listen)
	default:
		return nil, fmt.Errorf("gateway: listen on %s: %w", g.listen, err)
	}
	g.ln = ln
	return ln.Addr(), nil
}

// Serve accepts sessions and HTTP calls until ctx ends; then it sends every
// session Close{SHUTDOWN} (best effort), closes the connections, and
// returns nil. It returns an error only when it could not serve at all.
func (g *Gateway) Serve(ctx context.Context) error {
	if _, err := g.Listen(ctx); err != nil {
		return err
	}
	g.ctx = ctx
	g.http = newConnListener(g.ln.Addr())
	srv := &http.Server{
		Handler:           g.httpHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		// TLSConfig stays nil: the connections arrive already
		// handshaken, and Serve then wires HTTP/2 for those that
		// negotiated h2.
		Protocols: new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if err := srv.Serve(g.http); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			g.log.Error("gateway: serve HTTP", "err", err)
		}
	}()
	g.wg.Go(func() { g.heartbeatLoop(ctx) })
	g.wg.Go(func() { g.livenessLoop(ctx) })
	g.wg.Go(func() { g.expireLoop(ctx) })
	g.wg.Go(func() { g.reconcileLoop(ctx) })
	g.log.Info("gateway serving", "addr", g.ln.Addr().String(), "heartbeat_interval", g.interval)

	stopAccept := context.AfterFunc(ctx, func() { _ = g.ln.Close() })
	defer stopAccept()
	g.acceptLoop(ctx)

	// ctx ended: no new sessions, Close{SHUTDOWN} to the live ones.
	g.mu.Lock()
	g.stopping = true
	live := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		live = append(live, s)
	}
	g.mu.Unlock()
	for _, s := range live {
		s.closeWith(agentv1.CloseReason_CLOSE_REASON_SHUTDOWN, "the gateway is shutting down; reconnect later")
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	<-httpDone
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-shutdownCtx.Done():
		// A peer that takes no Close: cut every connection.
		for _, s := range live {
			_ = s.conn.Close()
		}
		<-done
	}
	g.log.Info("gateway stopped")
	return nil
}

// acceptLoop accepts connections until the listener closes, each handled on
// its own goroutine.
func (g *Gateway) acceptLoop(ctx context.Context) {
	var backoff time.Duration
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			g.log.Warn("gateway: accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		g.wg.Go(func() { g.handleConn(ctx, c) })
	}
}

// handleConn completes the TLS handshake and routes the connection: to a
// session when it negotiated wire.ALPN, to the HTTP server otherwise.
func (g *Gateway) handleConn(ctx context.Context, c net.Conn) {
	tc := tls.Server(c, g.tls)
	// Until the connection is a registered session (which Serve's
	// shutdown closes) or handed to the HTTP server, ctx ending closes it.
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(helloTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		stop()
		_ = c.Close()
		g.refuseHandshake(c.RemoteAddr(), err)
		return
	}
	state := tc.ConnectionState()
	if state.NegotiatedProtocol != wire.ALPN {
		stop()
		_ = c.SetDeadline(time.Time{})
		if !g.http.deliver(tc) {
			_ = tc.Close()
		}
		return
	}
	g.runSession(ctx, tc, state, stop)
}

// Revoke closes nodeID's live session, if any, with CLOSE_REASON_REVOKED at
// once. The API calls it after storing the revocation; the store then
// refuses the node's reconnects (BeginSession), and for a minute this
// gateway also refuses a session of the node that passed that check just
// before the revocation was stored. A revocation stored by another process
// is found by reconcileLoop within about a second.
func (g *Gateway) Revoke(nodeID string) {
	now := time.Now()
	g.mu.Lock()
	for id, at := range g.revoked {
		if now.Sub(at) > revokedMemory {
			delete(g.revoked, id)
		}
	}
	g.revoked[nodeID] = now
	s := g.sessions[nodeID]
	g.mu.Unlock()
	if s != nil {
		s.closeWith(agentv1.CloseReason_CLOSE_REASON_REVOKED, "the node was revoked")
	}
}

// Notify says commands were queued, or the spec changed, for nodeID: when
// the node is connected here, they are delivered at once (asynchronously).
func (g *Gateway) Notify(nodeID string) {
	if s := g.session(nodeID); s != nil {
		s.kickDispatch()
	}
}

// Connected reports whether nodeID holds a live session on this gateway.
func (g *Gateway) Connected(nodeID string) bool {
	return g.session(nodeID) != nil
}

// session returns nodeID's live session, or nil.
func (g *Gateway) session(nodeID string) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[nodeID]
}

// httpHandler serves the join service's handlers and answers 404 otherwise.
func (g *Gateway) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if g.join != nil {
		for path, h := range g.join.Handlers() {
			mux.Handle(path, h)
		}
	}
	return mux
}
