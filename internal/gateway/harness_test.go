package gateway

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
	"github.com/better-compute/better-compute/internal/wire"
)

// The session tests' harness: a real Gateway on loopback over a real store,
// and fakeNode, a minimal node written with crypto/tls and internal/wire
// that says exactly what each test makes it say.

const gwTestTenant = "fleet"

// readTimeout bounds every read a test makes.
const readTimeout = 5 * time.Second

// gwBundle is a running gateway and what a test inspects it with.
type gwBundle struct {
	st        *store.Store
	counted   *countingStore
	authority *pki.Authority
	gw        *Gateway
	addr      string
	reg       *prometheus.Registry
	roots     *x509.CertPool // trusts the gateway's serving certificate
	stop      context.CancelFunc
	served    chan error // Serve's result
}

// gwOptions tunes setupGateway.
type gwOptions struct {
	interval  time.Duration // 1s when zero
	sendQueue int
	join      bool // serve a real JoinService
}

// countingStore records the TouchNodes calls the gateway makes, and can
// make its transactions slow, as a loaded store's are.
type countingStore struct {
	storeAPI
	mu      sync.Mutex // guards touches
	touches [][]string
	slowTx  atomic.Int64 // nanoseconds each transaction waits before it runs
}

func (c *countingStore) InTx(ctx context.Context, fn func(ctx context.Context, q store.Querier) error) error {
	time.Sleep(time.Duration(c.slowTx.Load()))
	return c.storeAPI.InTx(ctx, fn)
}

func (c *countingStore) InSharedTx(ctx context.Context, fn func(ctx context.Context, q store.Querier) error) error {
	time.Sleep(time.Duration(c.slowTx.Load()))
	return c.storeAPI.InSharedTx(ctx, fn)
}

func (c *countingStore) TouchNodes(ctx context.Context, ids []string) ([]string, error) {
	c.mu.Lock()
	c.touches = append(c.touches, slices.Clone(ids))
	c.mu.Unlock()
	return c.storeAPI.TouchNodes(ctx, ids)
}

// touchCalls returns the TouchNodes calls so far.
func (c *countingStore) touchCalls() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.touches)
}

func setupGateway(t *testing.T, engine store.Engine, opts gwOptions) *gwBundle {
	t.Helper()
	ctx := t.Context()
	st := storetest.Open(t, engine)
	if _, err := st.CreateTenant(ctx, store.Tenant{Name: gwTestTenant, DisplayName: "Fleet"}); err != nil {
		t.Fatal(err)
	}
	authority, err := pki.LoadOrCreate(ctx, st, filepath.Join(t.TempDir(), "ca.key"), "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	var join *JoinService
	if opts.join {
		join = NewJoinService(JoinConfig{Store: st, Authority: authority, Metrics: reg, Logger: logger})
	}
	gw, err := New(Config{
		Store: st, Authority: authority, Join: join, Listen: "127.0.0.1:0",
		HeartbeatInterval: cmp.Or(opts.interval, time.Second), SendQueue: opts.sendQueue,
		Logger: logger, Metrics: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingStore{storeAPI: gw.st}
	gw.st = counted
	addr, err := gw.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, der := range authority.TrustBundleDER() {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		roots.AddCert(c)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	b := &gwBundle{st: st, counted: counted, authority: authority, gw: gw, addr: addr.String(), reg: reg, roots: roots, stop: stop, served: make(chan error, 1)}
	go func() { b.served <- gw.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-b.served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return b
}

// nodeIdentity is a node's id and its client certificate.
type nodeIdentity struct {
	id   string
	cert tls.Certificate
}

// newNode stores a node and issues its certificate from the node CA.
func (b *gwBundle) newNode(t *testing.T, id string) nodeIdentity {
	t.Helper()
	n := b.identity(t, b.authority, id)
	if _, err := b.st.CreateNode(t.Context(), store.Node{
		ID: id, Tenant: gwTestTenant, Hostname: id, MachineID: "machine-" + id,
		CertSerial: n.cert.Leaf.SerialNumber.String(), CertPublicKey: n.cert.Leaf.RawSubjectPublicKeyInfo,
		CertNotAfter: n.cert.Leaf.NotAfter,
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// identity issues a certificate for id from authority without storing a
// node.
func (b *gwBundle) identity(t *testing.T, authority *pki.Authority, id string) nodeIdentity {
	t.Helper()
	key, csr := keyAndCSR(t)
	cert, err := authority.SignNodeCSR(csr, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return nodeIdentity{id: id, cert: tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}
}

// keyAndCSR makes a node key and a certificate request for it.
func keyAndCSR(t *testing.T) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, csr
}

// dial opens a TLS connection offering alpn, with cert unless nil.
func (b *gwBundle) dial(t *testing.T, cert *tls.Certificate, alpn string) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: b.roots, NextProtos: []string{alpn}, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(t.Context(), readTimeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", b.addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*tls.Conn), nil
}

// fakeNode is one side of a session, driven by a test.
type fakeNode struct {
	t    *testing.T
	conn *tls.Conn
	buf  []byte
}

// open dials as n and sends hello (node id and protocol version filled in
// when empty).
func (b *gwBundle) open(t *testing.T, n nodeIdentity, hello *agentv1.Hello) *fakeNode {
	t.Helper()
	c, err := b.dial(t, &n.cert, wire.ALPN)
	if err != nil {
		t.Fatalf("dial as %s: %v", n.id, err)
	}
	if hello == nil {
		hello = &agentv1.Hello{}
	}
	if hello.NodeId == "" {
		hello.NodeId = n.id
	}
	if hello.ProtocolVersion == 0 {
		hello.ProtocolVersion = agentv1.ProtocolVersion_PROTOCOL_VERSION_1
	}
	if hello.BcdVersion == "" {
		hello.BcdVersion = "v0.0.0-test"
	}
	f := &fakeNode{t: t, conn: c}
	f.send(&agentv1.Frame{Kind: &agentv1.Frame_Hello{Hello: hello}})
	return f
}

// connect opens a session as n and returns it with its Welcome.
func (b *gwBundle) connect(t *testing.T, n nodeIdentity, hello *agentv1.Hello) (*fakeNode, *agentv1.Welcome) {
	t.Helper()
	f := b.open(t, n, hello)
	w := f.next().GetWelcome()
	if w == nil {
		t.Fatalf("node %s: the first frame is not Welcome", n.id)
	}
	return f, w
}

func (f *fakeNode) send(fr *agentv1.Frame) {
	f.t.Helper()
	if err := wire.WriteFrame(f.conn, fr); err != nil {
		f.t.Fatalf("send: %v", err)
	}
}

// read returns the next frame, heartbeats included, or the error.
func (f *fakeNode) read() (*agentv1.Frame, error) {
	_ = f.conn.SetReadDeadline(time.Now().Add(readTimeout))
	fr, buf, err := wire.ReadFrame(f.conn, f.buf)
	f.buf = buf
	return fr, err
}

// next returns the next frame that is not a heartbeat.
func (f *fakeNode) next() *agentv1.Frame {
	f.t.Helper()
	for {
		fr, err := f.read()
		if err != nil {
			f.t.Fatalf("read: %v", err)
		}
		if fr.GetHeartbeat() == nil {
			return fr
		}
	}
}

// wantClose reads until a Close, which must give reason, and then the end
// of the connection.
func (f *fakeNode) wantClose(reason agentv1.CloseReason) {
	f.t.Helper()
	fr := f.next()
	if fr.GetClose().GetReason() != reason {
		f.t.Fatalf("got %v, want Close %v", fr, reason)
	}
	if fr, err := f.read(); err == nil {
		f.t.Fatalf("after Close: got %v, want the connection to end", fr)
	}
}

// wantEnd reads until the connection ends, failing on any frame but a
// heartbeat.
func (f *fakeNode) wantEnd() {
	f.t.Helper()
	for {
		fr, err := f.read()
		if err != nil {
			if !errors.Is(err, io.EOF) && !isClosedErr(err) {
				f.t.Logf("connection ended with %v", err)
			}
			return
		}
		if fr.GetHeartbeat() == nil {
			f.t.Fatalf("got %v, want the connection to end", fr)
		}
	}
}

// isClosedErr reports an error reading a connection the peer closed.
func isClosedErr(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// heartbeat sends a heartbeat.
func (f *fakeNode) heartbeat() {
	f.t.Helper()
	f.send(&agentv1.Frame{Kind: &agentv1.Frame_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1}}})
}

// metric returns a counter's (or gauge's) value for a label value ("" for
// none).
func (b *gwBundle) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() != label {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// eventually polls cond every 10ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// node reads a node from the store.
func (b *gwBundle) node(t *testing.T, id string) store.Node {
	t.Helper()
	n, err := b.st.GetNode(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
