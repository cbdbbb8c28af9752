package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestSignNodeCSR(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	key := newP256(t)
	before := time.Now()
	cert, err := a.SignNodeCSR(csrFor(t, key), "n-abc", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	chains, err := cert.Verify(x509.VerifyOptions{
		Roots:       a.NodeCAPool(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		CurrentTime: time.Now(),
	})
	if err != nil || len(chains) != 1 || len(chains[0]) != 2 {
		t.Fatalf("issued certificate does not verify against NodeCAPool as a client: %v %v", chains, err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: a.NodeCAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("a node certificate verifies as a server certificate")
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != "spiffe://bc-test/node/n-abc" {
		t.Fatalf("URIs = %v, want spiffe://bc-test/node/n-abc", cert.URIs)
	}
	if len(cert.DNSNames) != 0 || cert.Subject.CommonName != "n-abc" {
		t.Fatalf("the CSR's names leaked into the certificate: %v %q", cert.DNSNames, cert.Subject.CommonName)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Fatal("certificate is not for the CSR's key")
	}
	if cert.SerialNumber.Sign() <= 0 || cert.SerialNumber.BitLen() < 120 || cert.SerialNumber.BitLen() > 128 {
		t.Fatalf("serial %x is not a random positive 128-bit number", cert.SerialNumber)
	}
	if d := before.Add(-time.Minute).Sub(cert.NotBefore); d < -2*time.Second || d > time.Second {
		t.Fatalf("NotBefore = %v, want about a minute before %v", cert.NotBefore, before)
	}
	if d := cert.NotAfter.Sub(before.Add(24 * time.Hour)); d < -time.Second || d > 2*time.Second {
		t.Fatalf("NotAfter = %v, want about 24h after %v", cert.NotAfter, before)
	}
	if got, err := a.NodeID(cert); err != nil || got != "n-abc" {
		t.Fatalf("NodeID = %q, %v; want n-abc", got, err)
	}
	other, err := a.SignNodeCSR(csrFor(t, key), "n-abc", time.Hour)
	if err != nil || other.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Fatalf("second certificate: serial reused or %v", err)
	}
}

func TestSignNodeCSRRefuses(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// A valid request whose signed content is then changed: "aaaa" -> "aaab".
	forged, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "aaaa"}}, newP256(t))
	if err != nil {
		t.Fatal(err)
	}
	forged = []byte(strings.Replace(string(forged), "aaaa", "aaab", 1))

	for _, tc := range []struct {
		name string
		csr  []byte
		want string
	}{
		{"rsa", csrFor(t, rsaKey), "RSA key; nodes need an ECDSA P-256 key"},
		{"p384", csrFor(t, p384), "ECDSA P-384 key; nodes need an ECDSA P-256 key"},
		{"ed25519", csrFor(t, edKey), "ed25519.PublicKey key"},
		{"bad signature", forged, "signature does not verify"},
		{"garbage", []byte("not a csr"), "not a DER PKCS#10 request"},
		{"empty", nil, "not a DER PKCS#10 request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := a.SignNodeCSR(tc.csr, "n-abc", time.Hour)
			if !errors.Is(err, ErrBadCSR) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("SignNodeCSR = %v, want ErrBadCSR, one line, containing %q", err, tc.want)
			}
		})
	}
	t.Run("bad node id", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{"", "N-ABC", "n/../x", strings.Repeat("a", 64)} {
			if _, err := a.SignNodeCSR(csrFor(t, newP256(t)), id, time.Hour); err == nil {
				t.Errorf("SignNodeCSR(node id %q) succeeded", id)
			}
		}
	})
	t.Run("no lifetime", func(t *testing.T) {
		t.Parallel()
		if _, err := a.SignNodeCSR(csrFor(t, newP256(t)), "n-abc", 0); err == nil {
			t.Error("SignNodeCSR(ttl 0) succeeded")
		}
	})
}

func TestNodeIDRefuses(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	foreign := newTestAuthority(t, "bc-other")
	foreignCert, err := foreign.SignNodeCSR(csrFor(t, newP256(t)), "n-abc", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := a.ServingCertificate([]string{"gw.example"})
	if err != nil {
		t.Fatal(err)
	}
	// Certificates our own node CA signed, with identities it never issues.
	signed := func(uris ...string) *x509.Certificate {
		t.Helper()
		var us []*url.URL
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			us = append(us, u)
		}
		key := newP256(t)
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: randomSerial(), URIs: us,
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, a.node.cert, &key.PublicKey, a.node.key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"nil", nil, "no client certificate"},
		{"another deployment's node", foreignCert, "not issued by this deployment's node CA"},
		{"a serving certificate", serving.Leaf, "not issued by this deployment's node CA"},
		{"foreign trust domain", signed("spiffe://bc-other/node/n-abc"), `trust domain "bc-other", not this deployment's "bc-test"`},
		{"not a node path", signed("spiffe://bc-test/gateway/n-abc"), "does not name a node"},
		{"nested path", signed("spiffe://bc-test/node/n-abc/x"), "does not name a node"},
		{"escaped path", signed("spiffe://bc-test/node/n%2Fabc"), "does not name a node"},
		{"empty id", signed("spiffe://bc-test/node/"), "does not name a node"},
		{"not spiffe", signed("https://bc-test/node/n-abc"), "not a SPIFFE ID"},
		{"with port", signed("spiffe://bc-test:1/node/n-abc"), "not a SPIFFE ID"},
		{"two ids", signed("spiffe://bc-test/node/a", "spiffe://bc-test/node/b"), "exactly one SPIFFE ID"},
		{"no id", signed(), "exactly one SPIFFE ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := a.NodeID(tc.cert)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NodeID = %q, %v; want an error containing %q", id, err, tc.want)
			}
		})
	}
}

func TestServingCertificate(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	now := time.Now()
	a.now = func() time.Time { return now }

	c, err := a.ServingCertificate([]string{"gw.example", "127.0.0.1", "[::1]", "GW.example."})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, der := range a.TrustBundleDER() {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		roots.AddCert(cert)
	}
	// bcd finds the pinned CA in the chain the gateway sends.
	if len(c.Certificate) != 2 {
		t.Fatalf("serving chain has %d certificates, want the leaf and the serving CA", len(c.Certificate))
	}
	if ca, err := x509.ParseCertificate(c.Certificate[1]); err != nil || PinOf(ca) != a.ServingPin() {
		t.Fatalf("the serving chain does not end with the pinned serving CA (%v)", err)
	}
	for _, host := range []string{"gw.example", "127.0.0.1", "::1"} {
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", host, err)
		}
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: a.NodeCAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a serving certificate verifies against NodeCAPool")
	}
	if d := c.Leaf.NotAfter.Sub(now); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("serving certificate lives %v, want a year", d)
	}

	// The same host set, in any order and case, is served from the cache.
	again, err := a.ServingCertificate([]string{"::1", "gw.example", "127.0.0.1"})
	if err != nil || again.Leaf != c.Leaf {
		t.Fatalf("same hosts: re-issued (%v) instead of cached", err)
	}
	other, err := a.ServingCertificate([]string{"api.example"})
	if err != nil || other.Leaf == c.Leaf {
		t.Fatalf("other hosts: served the cached certificate (%v)", err)
	}
	// Past half life it is re-issued.
	now = now.Add(183 * 24 * time.Hour)
	renewed, err := a.ServingCertificate([]string{"gw.example", "127.0.0.1", "::1"})
	if err != nil || renewed.Leaf == c.Leaf || !renewed.Leaf.NotAfter.After(c.Leaf.NotAfter) {
		t.Fatalf("past half life: not re-issued (%v)", err)
	}
}

func TestServingCertificateRefusesBadHosts(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	for _, hosts := range [][]string{nil, {""}, {"gw.example:443"}, {"https://gw.example"}} {
		if _, err := a.ServingCertificate(hosts); err == nil {
			t.Errorf("ServingCertificate(%q) succeeded", hosts)
		}
	}
}

func TestPinStable(t *testing.T) {
	t.Parallel()
	a := newTestAuthority(t, "bc-test")
	pin := a.ServingPin()
	if !strings.HasPrefix(pin, "sha256:") || len(pin) != len("sha256:")+43 {
		t.Fatalf("ServingPin = %q, want sha256: and 43 base64url characters", pin)
	}
	if PinOf(a.serving.cert) != pin || a.ServingPin() != pin {
		t.Fatal("pin changed between calls")
	}
	// Re-parsing the CA certificate (as a node does from the bundle) gives the same pin.
	cert, err := x509.ParseCertificate(a.TrustBundleDER()[0])
	if err != nil || PinOf(cert) != pin {
		t.Fatalf("pin of the bundle's serving CA differs: %v", err)
	}
	if PinOf(a.root.cert) == pin || newTestAuthority(t, "bc-test").ServingPin() == pin {
		t.Fatal("different CAs have the same pin")
	}
}
