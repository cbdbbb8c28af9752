package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"
)

// newTestAuthority builds an Authority in memory, without a store.
func newTestAuthority(t testing.TB, trustDomain string) *Authority {
	t.Helper()
	now := time.Now()
	root, err := newCA(rootName, trustDomain, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	node, err := newCA(nodeName, trustDomain, &root, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := newCA(servingName, trustDomain, &root, now)
	if err != nil {
		t.Fatal(err)
	}
	return newAuthority(trustDomain, root, node, serving)
}

// newP256 returns a fresh node key.
func newP256(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrFor returns a DER CSR for key, asking for names the Authority must
// ignore.
func csrFor(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "admin"},
		DNSNames: []string{"gateway.example"},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
