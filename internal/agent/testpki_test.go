package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/pki"
)

// testPKI is a deployment's CAs in the shape internal/pki makes them: a
// root, a node CA (client certificates) and a serving CA (the gateway)
// under it; the bundle handed to nodes is the serving CA and the root.
type testPKI struct {
	root, node, serving testCA
	serial              atomic.Int64
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{}
	p.root = p.newCA(t, "root", nil, nil)
	p.node = p.newCA(t, "node", &p.root, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	p.serving = p.newCA(t, "serving", &p.root, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
	return p
}

func (p *testPKI) newCA(t *testing.T, name string, parent *testCA, eku []x509.ExtKeyUsage) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(p.serial.Add(1)),
		Subject:               pkix.Name{CommonName: "test " + name + " CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		ExtKeyUsage:           eku,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert, key}
}

// servingCert is a gateway certificate for 127.0.0.1 and localhost, from
// ca, with ca in its chain.
func (p *testPKI) servingCert(t *testing.T, ca testCA) tls.Certificate {
	t.Helper()
	return p.servingCertFor(t, ca, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// servingCertFor is a gateway certificate for the given names.
func (p *testPKI) servingCertFor(t *testing.T, ca testCA, dns []string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial.Add(1)),
		Subject:      pkix.Name{CommonName: "gateway"},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
}

// signNode issues a node certificate for the key in csrDER.
func (p *testPKI) signNode(csrDER []byte, nodeID string, ttl time.Duration) (*x509.Certificate, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial.Add(1)),
		Subject:      pkix.Name{CommonName: nodeID},
		URIs:         []*url.URL{{Scheme: "spiffe", Host: "test", Path: "/node/" + nodeID}},
		NotBefore:    time.Now().Add(-time.Second),
		NotAfter:     time.Now().Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.node.cert, csr.PublicKey, p.node.key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// bundle is what Join hands out: the serving CA and the root.
func (p *testPKI) bundle() [][]byte { return [][]byte{p.serving.cert.Raw, p.root.cert.Raw} }

// token is a join token sealed to the serving CA.
func (p *testPKI) token() string {
	_, tok, _ := pki.NewJoinToken(pki.PinOf(p.serving.cert))
	return tok
}

func (p *testPKI) nodePool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.node.cert)
	return pool
}
