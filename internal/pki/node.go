package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// nodePathPrefix starts the path of every node's SPIFFE ID.
const nodePathPrefix = "/node/"

// SignNodeCSR issues nodeID's client certificate for the key in csrDER, a
// PKCS#10 request. It checks the request's signature (the node holds the
// key) and that the key is ECDSA P-256, and ignores the request's subject
// and names: the identity comes from the join token or the node's current
// certificate, never from what the node asks for. The certificate carries
// the URI SAN spiffe://<trust domain>/node/<nodeID> and client
// authentication only, has a random 128-bit serial, and is valid from a
// minute ago (clock skew) for ttl. Refusals wrap ErrBadCSR.
func (a *Authority) SignNodeCSR(csrDER []byte, nodeID string, ttl time.Duration) (*x509.Certificate, error) {
	if !validNodeID(nodeID) {
		return nil, fmt.Errorf("pki: node id %q is not valid: want lowercase letters, digits and '-', at most 63", nodeID)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("pki: node certificate lifetime %v is not positive", ttl)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("%w: it is not a DER PKCS#10 request (%v); send the request bcd generated", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: its signature does not verify (%v); sign it with the key it requests a certificate for", ErrBadCSR, err)
	}
	pub, err := p256Key(csr.PublicKey)
	if err != nil {
		return nil, err
	}
	now := a.now()
	notAfter := now.Add(ttl)
	if notAfter.After(a.node.cert.NotAfter) {
		notAfter = a.node.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{Organization: []string{"Better Compute"}, OrganizationalUnit: []string{a.trustDomain}, CommonName: nodeID},
		URIs:                  []*url.URL{a.nodeSPIFFEID(nodeID)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.node.cert, pub, a.node.key)
	if err != nil {
		return nil, fmt.Errorf("pki: issue certificate for node %s: %w", nodeID, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: issue certificate for node %s: %w", nodeID, err)
	}
	return cert, nil
}

// p256Key accepts an ECDSA P-256 public key only: the one kind nodes
// generate, and the one the session's TLS configuration expects.
func p256Key(pub any) (*ecdsa.PublicKey, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%w: it is for an ECDSA %s key; nodes need an ECDSA P-256 key", ErrBadCSR, k.Curve.Params().Name)
		}
		return k, nil
	case *rsa.PublicKey:
		return nil, fmt.Errorf("%w: it is for an RSA key; nodes need an ECDSA P-256 key", ErrBadCSR)
	default:
		return nil, fmt.Errorf("%w: it is for a %T key; nodes need an ECDSA P-256 key", ErrBadCSR, pub)
	}
}

// nodeSPIFFEID is spiffe://<trust domain>/node/<id>.
func (a *Authority) nodeSPIFFEID(nodeID string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: a.trustDomain, Path: nodePathPrefix + nodeID}
}

// NodeID returns the node id in a node certificate's SPIFFE ID. The caller
// has verified the chain (the TLS handshake did); NodeID still checks that
// the node CA signed cert, so a certificate that skipped verification never
// names a node, and refuses any other trust domain or path.
func (a *Authority) NodeID(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", errors.New("pki: no client certificate; a node connects with the certificate bcd join obtained")
	}
	if err := cert.CheckSignatureFrom(a.node.cert); err != nil {
		return "", fmt.Errorf("pki: the certificate (subject %q) was not issued by this deployment's node CA; join the node again", cert.Subject.String())
	}
	if len(cert.URIs) != 1 {
		return "", fmt.Errorf("pki: a node certificate carries exactly one SPIFFE ID, this one has %d URI names", len(cert.URIs))
	}
	u := cert.URIs[0]
	if u.Scheme != "spiffe" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "" {
		return "", fmt.Errorf("pki: %q is not a SPIFFE ID", u.String())
	}
	if u.Host != a.trustDomain {
		return "", fmt.Errorf("pki: SPIFFE ID %s belongs to trust domain %q, not this deployment's %q", u, u.Host, a.trustDomain)
	}
	id, ok := strings.CutPrefix(u.Path, nodePathPrefix)
	if !ok || !validNodeID(id) || u.RawPath != "" {
		return "", fmt.Errorf("pki: SPIFFE ID %s does not name a node (want spiffe://%s/node/<id>)", u, a.trustDomain)
	}
	return id, nil
}
