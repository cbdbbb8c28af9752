package controlplane_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/controlplane"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// server is a control plane running in this test process.
type server struct {
	ready controlplane.Ready
	done  chan error // receives Run's result
	stop  context.CancelFunc
}

// start runs the control plane with cfg (on a free loopback port unless cfg
// says otherwise) and waits until it serves.
func start(t *testing.T, cfg controlplane.Config) *server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.GatewayListen == "" {
		cfg.GatewayListen = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan controlplane.Ready, 1)
	cfg.OnReady = func(r controlplane.Ready) error { readyc <- r; return nil }
	s := &server{done: make(chan error, 1), stop: cancel}
	go func() { s.done <- controlplane.Run(ctx, cfg) }()
	select {
	case s.ready = <-readyc:
	case err := <-s.done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("server did not start within 30s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			t.Error("server did not stop within 15s")
		}
	})
	return s
}

// adminToken reads the token the first start wrote for the platform admin.
func adminToken(t *testing.T, r controlplane.Ready) string {
	t.Helper()
	if r.AdminTokenFile == "" {
		t.Fatal("the server reports no admin token file")
	}
	b, err := os.ReadFile(r.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	res, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func TestServeOnEachEngine(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		s := start(t, controlplane.Config{StoreURL: storetest.URL(t, engine), DataDir: filepath.Join(t.TempDir(), "data")})

		c, err := client.New(s.ready.URL, client.Options{Token: adminToken(t, s.ready)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.System.GetStatus(context.Background(), connect.NewRequest(&apiv1.GetStatusRequest{}))
		if err != nil {
			t.Fatalf("GetStatus: %v", err)
		}
		if got := res.Msg.GetEngine(); got != string(engine) {
			t.Errorf("engine = %q, want %q", got, engine)
		}
		if got := int(res.Msg.GetSchemaVersion()); got != store.LatestSchemaVersion() || got < 1 {
			t.Errorf("schema version = %d, want %d", got, store.LatestSchemaVersion())
		}
		if d := time.Since(res.Msg.GetStoreTime().AsTime()); d < -time.Minute || d > time.Minute {
			t.Errorf("store time is %v away from this clock", d)
		}
		if _, err := c.System.GetVersion(context.Background(), connect.NewRequest(&apiv1.GetVersionRequest{})); err != nil {
			t.Fatalf("GetVersion: %v", err)
		}

		hc := &http.Client{Timeout: 10 * time.Second}
		if code, body := get(t, hc, s.ready.URL+"/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("/healthz = %d %q", code, body)
		}
		if code, body := get(t, hc, s.ready.URL+"/readyz"); code != 200 || body != "ready\n" {
			t.Errorf("/readyz = %d %q", code, body)
		}
		code, body := get(t, hc, s.ready.URL+"/metrics")
		want := `bettercompute_api_requests_total{code="ok",procedure="/bettercompute.api.v1.SystemService/GetStatus"} 1`
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics = %d, missing %s", code, want)
		}

		s.stop()
		if err := <-s.done; err != nil {
			t.Errorf("Run after shutdown = %v, want nil", err)
		}
		s.done <- nil // for the cleanup
	})
}

func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	s := start(t, controlplane.Config{
		StoreURL:    "sqlite:" + filepath.Join(dir, "bc.db"),
		DataDir:     filepath.Join(dir, "data"),
		TLSCertFile: certFile,
		TLSKeyFile:  keyFile,
	})
	if !strings.HasPrefix(s.ready.URL, "https://") {
		t.Fatalf("URL = %s, want https", s.ready.URL)
	}
	c, err := client.New(s.ready.URL, client.Options{Token: adminToken(t, s.ready), TLSConfig: &tls.Config{RootCAs: pool}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.System.GetStatus(context.Background(), connect.NewRequest(&apiv1.GetStatusRequest{}))
	if err != nil {
		t.Fatalf("GetStatus over TLS: %v", err)
	}
	if res.Msg.GetEngine() != "sqlite" {
		t.Errorf("engine = %q", res.Msg.GetEngine())
	}
	// TLS 1.2 is refused.
	conn, err := tls.Dial("tcp", s.ready.Addr.String(), &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Error("a TLS 1.2 handshake succeeded; want TLS 1.3 only")
	}
}

// TestBadInput checks that each mistake an operator can make fails with one
// line that names it and the fix, before the server writes anything.
func TestBadInput(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })

	notSQLite := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notSQLite, []byte("these are my notes, not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certOnly := filepath.Join(t.TempDir(), "cert.pem")

	tests := []struct {
		name string
		cfg  controlplane.Config
		want string
	}{
		{"no store", controlplane.Config{}, "no store given"},
		{"malformed store URL", controlplane.Config{StoreURL: "mysql://root@localhost/db"}, "unsupported store URL"},
		{"unreachable postgres", controlplane.Config{StoreURL: "postgres://postgres@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"}, "cannot connect to PostgreSQL"},
		{"not a sqlite file", controlplane.Config{StoreURL: "sqlite:" + notSQLite}, "is not a SQLite database"},
		{"port in use", controlplane.Config{Listen: busy.Addr().String()}, "already in use"},
		{"cert without key", controlplane.Config{TLSCertFile: certOnly}, "needs both --tls-cert and --tls-key"},
		{"plaintext on all interfaces", controlplane.Config{Listen: "0.0.0.0:0"}, "refusing to serve without TLS"},
		{"bad listen address", controlplane.Config{Listen: "nonsense"}, "invalid --listen address"},
		{"profiles on the network", controlplane.Config{DebugListen: "0.0.0.0:0"}, "--debug-listen takes a loopback address"},
		{"profiles on a busy port", controlplane.Config{DebugListen: busy.Addr().String()}, "already in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := tt.cfg
			if cfg.StoreURL == "" && tt.name != "no store" {
				cfg.StoreURL = "sqlite:" + filepath.Join(dir, "data", "bc.db")
			}
			if cfg.Listen == "" {
				cfg.Listen = "127.0.0.1:0"
			}
			cfg.GatewayListen = "127.0.0.1:0"
			cfg.DataDir = filepath.Join(dir, "data")
			cfg.OnReady = func(controlplane.Ready) error {
				t.Error("server started")
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := controlplane.Run(ctx, cfg)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("error = %q, want one line containing %q", msg, tt.want)
			}
			if tt.name != "not a sqlite file" {
				if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
					t.Errorf("data dir was written (stat: %v)", err)
				}
			}
		})
	}
	got, err := os.ReadFile(notSQLite)
	if err != nil || string(got) != "these are my notes, not a database\n" {
		t.Errorf("the non-SQLite file changed: %q, %v", got, err)
	}
}

// selfSigned writes a certificate and key for 127.0.0.1 and returns their
// paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "better-compute test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestBootstrap: the first start creates the platform admin and writes its
// token 0600, logging where but never what; a later start on the same store
// makes no second admin token.
func TestBootstrap(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		url := storetest.URL(t, engine)
		dir := t.TempDir()
		var logs syncBuffer
		cfg := controlplane.Config{StoreURL: url, DataDir: filepath.Join(dir, "a"), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		s := start(t, cfg)
		token := adminToken(t, s.ready)
		fi, err := os.Stat(s.ready.AdminTokenFile)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("admin token file: %v, %v", fi, err)
		}
		if !strings.Contains(logs.String(), s.ready.AdminTokenFile) || strings.Contains(logs.String(), token) {
			t.Errorf("the log must name the token file and never the token:\n%s", logs.String())
		}
		s.stop()
		<-s.done
		s.done <- nil

		// A second server on the same store, with another data dir, does not
		// bootstrap again: no new token file, and the first token still works.
		// Servers sharing a store share the key that seals the CA keys.
		s2 := start(t, controlplane.Config{StoreURL: url, DataDir: filepath.Join(dir, "b"), KeyFile: filepath.Join(dir, "a", "ca.key")})
		if s2.ready.AdminTokenFile != "" {
			t.Errorf("second start wrote %s", s2.ready.AdminTokenFile)
		}
		c, err := client.New(s2.ready.URL, client.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.System.GetStatus(context.Background(), connect.NewRequest(&apiv1.GetStatusRequest{})); err != nil {
			t.Errorf("the first admin token on the second server: %v", err)
		}
		if _, err := c.System.GetStatus(context.Background(), connect.NewRequest(&apiv1.GetStatusRequest{})); err != nil {
			t.Error(err)
		}
		anon, _ := client.New(s2.ready.URL, client.Options{})
		if _, err := anon.System.GetStatus(context.Background(), connect.NewRequest(&apiv1.GetStatusRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("anonymous GetStatus: %v, want unauthenticated", err)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a server's logger and a test.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDebugListen: --debug-listen serves Go's profiles on loopback.
func TestDebugListen(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	start(t, controlplane.Config{StoreURL: "sqlite:" + filepath.Join(dir, "bc.db"), DataDir: dir, DebugListen: addr})
	res, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("GET /debug/pprof/goroutine: %s\n%.200s", res.Status, body)
	}
}

// TestConsoleCookieBehindProxy: served in plaintext on a non-loopback
// address (allowed only behind a TLS proxy, so the browser speaks HTTPS),
// the console's session cookie, which holds the user's token, is Secure:
// the browser never sends it over plain HTTP.
func TestConsoleCookieBehindProxy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, controlplane.Config{
		StoreURL: "sqlite:" + filepath.Join(dir, "bc.db"), DataDir: filepath.Join(dir, "data"),
		Listen: "0.0.0.0:0", AllowPlaintext: true,
	})
	u, err := url.Parse(s.ready.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + u.Port()
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := hc.Get(base + "/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(body)
	if m == nil || len(res.Cookies()) == 0 {
		t.Fatalf("the sign-in form: %d, cookies %v", res.StatusCode, res.Cookies())
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/sign-in", strings.NewReader(url.Values{"token": {adminToken(t, s.ready)}, "csrf": {string(m[1])}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range res.Cookies() { // sent by hand: a jar keeps Secure cookies off plain HTTP
		req.AddCookie(c)
	}
	res, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "bc_session" {
			session = c
		}
	}
	if res.StatusCode != http.StatusSeeOther || session == nil || !session.Secure || !session.HttpOnly {
		t.Errorf("signing in: %d, session cookie %v; want a Secure, HttpOnly cookie", res.StatusCode, session)
	}
}
