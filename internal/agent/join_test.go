package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/pki"
)

// joinedDir joins a fresh data dir to gw and returns it.
func joinedDir(t *testing.T, gw *fakeGateway) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bcd")
	err := Join(context.Background(), JoinConfig{Server: gw.url(), Token: gw.pki.token(), DataDir: dir,
		FakeHW: inventory.GenerateFakeHW("test", 0, 2, "")})
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	return dir
}

func TestJoinWritesIdentity(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)

	id, err := loadIdentity(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id.config.NodeID != "n-test1" || id.config.GatewayAddresses[0] != gw.addr || id.config.ServerURL != gw.url() {
		t.Errorf("config = %+v", id.config)
	}
	for name, want := range map[string]os.FileMode{keyFile: 0o600, certFile: 0o644, caFile: 0o644, configFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v, want 0700", fi.Mode().Perm())
	}
	if got, err := JoinedNodeID(dir); err != nil || got != "n-test1" {
		t.Errorf("JoinedNodeID = %q, %v", got, err)
	}

	err = Join(context.Background(), JoinConfig{Server: gw.url(), Token: gw.pki.token(), DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "already joined as node n-test1; remove "+dir) {
		t.Errorf("second join: %v", err)
	}
}

// A server whose chain lacks the pinned CA is refused inside the TLS
// handshake: the token never leaves the node.
func TestJoinRefusesUnpinnedServer(t *testing.T) {
	t.Parallel()
	deployment := newTestPKI(t) // the token is sealed to this one
	other := newTestPKI(t)      // the server is this one
	var ran atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) }))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{other.servingCert(t, other.serving)}}
	srv.StartTLS()
	defer srv.Close()

	dir := filepath.Join(t.TempDir(), "bcd")
	err := Join(context.Background(), JoinConfig{Server: srv.URL, Token: deployment.token(), DataDir: dir})
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("join: %v, want ErrPinMismatch", err)
	}
	if !strings.Contains(err.Error(), "does not match the join token's pin") {
		t.Errorf("error text: %v", err)
	}
	if ran.Load() {
		t.Error("the server's handler ran: the request was sent before the pin was checked")
	}
	if _, err := os.Stat(filepath.Join(dir, configFile)); err == nil {
		t.Error("an identity was written")
	}
}

// The pinned CA is in the chain, but the leaf is not valid for the name
// dialed: refused all the same.
func TestJoinRefusesWrongHost(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	var ran atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) }))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.servingCertFor(t, p.serving, []string{"gateway.example"}, nil)}}
	srv.StartTLS()
	defer srv.Close()

	err := Join(context.Background(), JoinConfig{Server: srv.URL, Token: p.token(), DataDir: filepath.Join(t.TempDir(), "bcd")})
	if !errors.Is(err, ErrPinMismatch) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("join: %v", err)
	}
	if ran.Load() {
		t.Error("the server's handler ran")
	}
}

func TestJoinChecksAnswer(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	pin := pki.PinOf(p.serving.cert)
	if _, err := checkBundle([][]byte{p.root.cert.Raw}, pin); err == nil {
		t.Error("a bundle without the pinned CA was accepted")
	}
	bundle, err := checkBundle(p.bundle(), pin)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := newKey()
	other, _ := newKey()
	csr, _ := newCSR(key)
	cert, err := p.signNode(csr, "n-1", 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	now := cert.NotBefore.Add(1)
	if _, err := checkIssued(cert.Raw, key, "n-1", bundle, now); err != nil {
		t.Errorf("a good certificate: %v", err)
	}
	if _, err := checkIssued(cert.Raw, other, "n-1", bundle, now); err == nil {
		t.Error("a certificate for another key was accepted")
	}
	if _, err := checkIssued(cert.Raw, key, "n-2", bundle, now); err == nil {
		t.Error("a certificate for another node was accepted")
	}
	// With the node CA in the bundle the chain is checked: a certificate
	// from a CA of another deployment with the same name fails.
	withNode := slices.Concat(bundle, []*x509.Certificate{p.node.cert})
	if _, err := checkIssued(cert.Raw, key, "n-1", withNode, now); err != nil {
		t.Errorf("with the node CA: %v", err)
	}
	q := newTestPKI(t) // its node CA has the same name as p's, another key
	forged, _ := q.signNode(csr, "n-1", 3600e9)
	if _, err := checkIssued(forged.Raw, key, "n-1", withNode, now); err == nil {
		t.Error("a certificate signed by another deployment's node CA was accepted")
	}
}

func TestRepairRenewal(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	before, _ := os.ReadFile(filepath.Join(dir, certFile))

	// Crash after writing both .renew files: the old pair stays.
	_ = os.WriteFile(filepath.Join(dir, keyFile+renewSuffix), []byte("new key"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, certFile+renewSuffix), []byte("new cert"), 0o644)
	if _, err := loadIdentity(dir, nil); err != nil {
		t.Fatalf("load after an interrupted renewal: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, certFile))
	if string(after) != string(before) {
		t.Error("the certificate changed")
	}
	for _, n := range []string{keyFile + renewSuffix, certFile + renewSuffix} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s left behind", n)
		}
	}

	// Crash between the two renames: node.key is new, its certificate is
	// still node.crt.renew.
	id, _ := loadIdentity(dir, nil)
	key, _ := newKey()
	csr, _ := newCSR(key)
	cert, err := gw.pki.signNode(csr, id.config.NodeID, 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := keyPEM(key)
	_ = os.WriteFile(filepath.Join(dir, keyFile), kp, 0o600)
	_ = os.WriteFile(filepath.Join(dir, certFile+renewSuffix), certPEM(cert.Raw), 0o644)
	id, err = loadIdentity(dir, nil)
	if err != nil {
		t.Fatalf("load between the renames: %v", err)
	}
	if id.cert.Leaf.SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Error("the renewed certificate was not moved in place")
	}
}
