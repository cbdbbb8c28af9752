package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/agent/v1/agentv1connect"
	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/version"
)

// ErrPinMismatch means the server's certificate chain does not contain the
// CA pinned in the join token: the token is for another deployment, or
// someone is in the middle. bcd refuses before it sends the token.
var ErrPinMismatch = errors.New("the server's certificate does not match the join token's pin: this token is for another deployment, or someone is in the middle")

// JoinConfig says where and how to join.
type JoinConfig struct {
	// Server is the gateway's URL, https://host:port.
	Server string
	// Token is the join token, bcj_<id>_<secret>_<pin>.
	Token string
	// DataDir receives the identity; it must not hold one already.
	DataDir string
	// FakeHW, when set, supplies the host facts' hostname and machine id,
	// as bcd node --fakehw will report them.
	FakeHW *inventory.FakeHW
	// InventoryRoot is where host facts are read ("" means "/").
	InventoryRoot string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

// Join admits a node: it checks the server against the token's pin before
// sending anything, sends the token with a new key's CSR and the host's
// facts, checks the answer, and writes the identity into cfg.DataDir.
func Join(ctx context.Context, cfg JoinConfig) error {
	j, err := newJoiner(cfg.Server, cfg.Token)
	if err != nil {
		return err
	}
	defer j.close()
	_, err = j.join(ctx, cfg)
	return err
}

// JoinedNodeID returns the id of the node whose identity dataDir holds.
func JoinedNodeID(dataDir string) (string, error) {
	c, err := readConfig(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", notJoinedError(dataDir)
	}
	return c.NodeID, err
}

// joiner joins nodes to one server with one token. bcd sim shares one
// among all its agents: one pinned HTTP/2 connection carries every join.
type joiner struct {
	server *url.URL
	host   string // the server's host name, which its certificate must name
	token  string
	pin    string // "sha256:..."
	tr     *http.Transport
	client agentv1connect.JoinServiceClient
}

func newJoiner(server, token string) (*joiner, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("join: --server %q: want https://host:port, the gateway's address", server)
	}
	_, _, pin, err := pki.ParseJoinToken(token)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if !strings.HasPrefix(pin, "sha256:") {
		pin = "sha256:" + pin
	}
	j := &joiner{server: u, host: u.Hostname(), token: token, pin: pin}
	j.tr = h2Transport(&tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: j.host,
		// Nothing is trusted up front: VerifyConnection below accepts the
		// server only if its chain holds the pinned CA and the leaf
		// verifies against that CA for the host. It runs inside the
		// handshake, so a refused server never sees a request.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyPinned(cs.PeerCertificates, j.pin, j.host, time.Now())
			return err
		},
	})
	j.client = agentv1connect.NewJoinServiceClient(&http.Client{Transport: j.tr, Timeout: time.Minute}, strings.TrimSuffix(u.String(), "/"))
	return j, nil
}

func (j *joiner) close() { j.tr.CloseIdleConnections() }

// verifyPinned accepts a server chain that contains the pinned certificate
// and whose leaf verifies against it for host. It returns the pinned
// certificate.
func verifyPinned(chain []*x509.Certificate, pin, host string, now time.Time) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w (the server sent no certificate)", ErrPinMismatch)
	}
	var anchor *x509.Certificate
	for _, c := range chain {
		if pki.PinOf(c) == pin {
			anchor = c
			break
		}
	}
	if anchor == nil {
		return nil, ErrPinMismatch
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: host, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("%w (the pinned CA is in the chain, but the server's certificate does not verify against it for %q: %v)", ErrPinMismatch, host, err)
	}
	return anchor, nil
}

// join runs one join into cfg.DataDir and returns the node id.
func (j *joiner) join(ctx context.Context, cfg JoinConfig) (string, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch c, err := readConfig(cfg.DataDir); {
	case err == nil:
		return "", fmt.Errorf("join: already joined as node %s; remove %s to join again", c.NodeID, cfg.DataDir)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("join: %s holds a damaged identity (%v); remove it to join again", cfg.DataDir, err)
	}
	key, err := newKey()
	if err != nil {
		return "", err
	}
	csr, err := newCSR(key)
	if err != nil {
		return "", err
	}
	facts, err := hostFacts(ctx, cfg)
	if err != nil {
		return "", err
	}
	resp, err := j.client.Join(ctx, connect.NewRequest(&agentv1.JoinRequest{Token: j.token, CsrDer: csr, Facts: facts}))
	if err != nil {
		if errors.Is(err, ErrPinMismatch) {
			return "", fmt.Errorf("join %s: %w", j.server.Host, ErrPinMismatch)
		}
		return "", fmt.Errorf("join %s: %w", j.server.Host, err)
	}
	m := resp.Msg
	bundle, err := checkBundle(m.GetCaCertificatesDer(), j.pin)
	if err != nil {
		return "", fmt.Errorf("join: the server's answer: %w", err)
	}
	cert, err := checkIssued(m.GetCertificateDer(), key, m.GetNodeId(), bundle, time.Now())
	if err != nil {
		return "", fmt.Errorf("join: the server's answer: %w", err)
	}
	gws := m.GetGatewayAddresses()
	if len(gws) == 0 {
		gws = []string{hostPort(j.server)}
	}
	nc := nodeConfig{NodeID: m.GetNodeId(), ServerURL: j.server.String(), GatewayAddresses: gws}
	ders := make([][]byte, len(bundle))
	for i, c := range bundle {
		ders[i] = c.Raw
	}
	if err := saveJoined(cfg.DataDir, nc, key, cert.Raw, ders); err != nil {
		return "", err
	}
	log.Info("joined", "node", nc.NodeID, "gateways", gws, "not_after", cert.NotAfter)
	return nc.NodeID, nil
}

// hostPort is u's host:port, with 443 when u names no port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "443")
}

// hostFacts is what the join request says about the host.
func hostFacts(ctx context.Context, cfg JoinConfig) (*agentv1.HostFacts, error) {
	// Only the host section is needed: a nvidia-smi path that does not
	// exist skips the GPU query, which can take seconds.
	inv, err := inventory.Collect(ctx, inventory.Options{Root: cfg.InventoryRoot, FakeHW: cfg.FakeHW, NvidiaSMI: "/nonexistent/nvidia-smi"})
	if err != nil {
		return nil, fmt.Errorf("join: read the host facts: %w", err)
	}
	h := inv.GetHost()
	return &agentv1.HostFacts{
		Hostname: h.GetHostname(), MachineId: h.GetMachineId(), Os: h.GetOs(),
		Kernel: h.GetKernel(), Arch: runtime.GOARCH, BcdVersion: version.Get().Version,
	}, nil
}

// checkBundle parses the CA bundle and requires the pinned CA in it: the
// bundle becomes what the node trusts, so it must contain what the token
// vouched for.
func checkBundle(ders [][]byte, pin string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	pinned := false
	for _, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("a CA certificate in the bundle does not parse: %w", err)
		}
		pinned = pinned || pki.PinOf(c) == pin
		out = append(out, c)
	}
	if !pinned {
		return nil, errors.New("the CA bundle does not contain the CA pinned in the join token")
	}
	return out, nil
}

// checkIssued checks an issued node certificate: it is for key, names
// nodeID in its SPIFFE ID, allows client authentication, is valid now, and
// chains to the bundle. The deployment's bundle is the serving CA and the
// root, while node certificates come from the node CA; when the bundle
// does not carry the issuer, the chain cannot be checked here, and the
// gateway's handshake is what checks it.
func checkIssued(der []byte, key *ecdsa.PrivateKey, nodeID string, bundle []*x509.Certificate, now time.Time) (*x509.Certificate, error) {
	if nodeID == "" {
		return nil, errors.New("no node id")
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("the certificate does not parse: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the certificate is not for the key this node sent")
	}
	if len(cert.URIs) != 1 || !strings.HasSuffix(cert.URIs[0].Path, "/node/"+nodeID) {
		return nil, fmt.Errorf("the certificate does not name node %s in its SPIFFE ID (%v)", nodeID, cert.URIs)
	}
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, fmt.Errorf("the certificate is valid from %v to %v, not now (%v): check this host's clock", cert.NotBefore, cert.NotAfter, now)
	}
	pool := x509.NewCertPool()
	issuerPresent := false
	for _, c := range bundle {
		pool.AddCert(c)
		issuerPresent = issuerPresent || bytes.Equal(c.RawSubject, cert.RawIssuer)
	}
	if !issuerPresent {
		return cert, nil
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, Intermediates: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("the certificate does not chain to the CA bundle: %w", err)
	}
	return cert, nil
}
