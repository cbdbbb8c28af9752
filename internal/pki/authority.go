// Package pki is the deployment's certificate authority: a root CA and,
// under it, a node CA that issues the client certificates nodes hold their
// sessions with (SPIFFE IDs spiffe://<trust domain>/node/<id>) and a serving
// CA that issues the gateway's and the API's server certificates. Every key
// is ECDSA P-256. The CAs live in the store with their private keys sealed
// by a key file outside it (seal.go); join tokens carry a pin of the serving
// CA (token.go), so a joining node authenticates the server before it sends
// anything. See DESIGN.md §6.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// The CA names, as stored.
const (
	rootName    = "root"
	nodeName    = "node"
	servingName = "serving"
)

const (
	// caValidity is how long the CAs live. Long, because nothing rotates
	// them yet and every node would have to re-join when they change.
	caValidity = 20 * 365 * 24 * time.Hour
	// servingValidity is how long a serving certificate lives; the
	// Authority re-issues it in memory at half life.
	servingValidity = 365 * 24 * time.Hour
	// backdate absorbs clock skew between the control plane and nodes.
	backdate = time.Minute
)

// ErrBadCSR wraps every reason SignNodeCSR refuses a certificate request,
// so that callers can answer the node "invalid argument" rather than
// "internal error".
var ErrBadCSR = errors.New("bad certificate request")

// ca is one certificate authority with its private key.
type ca struct {
	name string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Authority is the deployment's CAs: a root, and under it a node CA (client
// certificates for nodes) and a serving CA (gateway and API server
// certificates), all ECDSA P-256. It is safe for concurrent use.
type Authority struct {
	trustDomain         string
	root, node, serving ca
	now                 func() time.Time // time.Now; tests move it

	nodePool   *x509.CertPool // the node CA alone
	bundle     [][]byte       // serving CA, node CA, root
	servingPin string
	sealer     *Sealer // the key file's; nil for an Authority not loaded from a store

	mu     sync.Mutex                 // guards served
	served map[string]tls.Certificate // by canonical host set
}

// newAuthority assembles an Authority from its three CAs.
func newAuthority(trustDomain string, root, node, serving ca) *Authority {
	pool := x509.NewCertPool()
	pool.AddCert(node.cert)
	return &Authority{
		trustDomain: trustDomain,
		root:        root,
		node:        node,
		serving:     serving,
		now:         time.Now,
		nodePool:    pool,
		bundle:      [][]byte{serving.cert.Raw, node.cert.Raw, root.cert.Raw},
		servingPin:  PinOf(serving.cert),
		served:      map[string]tls.Certificate{},
	}
}

// TrustDomain is the SPIFFE trust domain node identities live in.
func (a *Authority) TrustDomain() string { return a.trustDomain }

// Sealer seals and opens, under the deployment's key file, the other
// secrets the store keeps, such as webhook signing secrets; it is the one
// that sealed the CA keys. It is nil when a is nil, so that callers without
// an Authority find no sealer rather than a panic.
func (a *Authority) Sealer() *Sealer {
	if a == nil {
		return nil
	}
	return a.sealer
}

// ServingPin is the pin join tokens carry: "sha256:" and the unpadded
// base64url SHA-256 of the serving CA's SubjectPublicKeyInfo. Pinning the
// CA's key rather than a server certificate lets server certificates be
// re-issued without invalidating tokens.
func (a *Authority) ServingPin() string { return a.servingPin }

// PinOf computes ServingPin's form of pin for any certificate; bcd uses it
// to find the pinned CA in the gateway's chain.
func PinOf(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return pinPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// NodeCAPool is the pool that verifies node client certificates (for
// tls.Config.ClientCAs): the node CA alone, so that no certificate from the
// serving CA passes as a node. Each call returns a new pool the caller may
// change.
func (a *Authority) NodeCAPool() *x509.CertPool { return a.nodePool.Clone() }

// TrustBundleDER is what a node trusts: the serving CA (for the gateway and
// the API), the node CA (so bcd can check the whole chain of the
// certificate it was issued; it signs client certificates only, so trusting
// it admits no server) and the root, DER, in that order. Each call returns
// copies.
func (a *Authority) TrustBundleDER() [][]byte {
	out := make([][]byte, len(a.bundle))
	for i, der := range a.bundle {
		out[i] = slices.Clone(der)
	}
	return out
}

// ServingCertificate returns a TLS server certificate from the serving CA
// for hosts (DNS names or IP addresses), valid for a year, with the serving
// CA in its chain. It is cached per host set and re-issued in memory at half
// life, so calling it on every handshake (tls.Config.GetCertificate) is
// cheap and never serves an expired certificate.
func (a *Authority) ServingCertificate(hosts []string) (tls.Certificate, error) {
	key, dns, ips, err := canonicalHosts(hosts)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.served[key]; ok {
		half := c.Leaf.NotBefore.Add(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore) / 2)
		if now.Before(half) {
			return c, nil
		}
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: generate serving key: %w", err)
	}
	cn := strings.SplitN(key, ",", 2)[0]
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{Organization: []string{"Better Compute"}, CommonName: cn},
		DNSNames:              dns,
		IPAddresses:           ips,
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(servingValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.serving.cert, &leafKey.PublicKey, a.serving.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: issue serving certificate for %s: %w", key, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: issue serving certificate for %s: %w", key, err)
	}
	c := tls.Certificate{
		Certificate: [][]byte{der, a.serving.cert.Raw},
		PrivateKey:  leafKey,
		Leaf:        leaf,
	}
	a.served[key] = c
	return c, nil
}

// canonicalHosts sorts and deduplicates hosts into a cache key and splits
// them into DNS names and IPs.
func canonicalHosts(hosts []string) (key string, dns []string, ips []net.IP, err error) {
	var names []string
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSuffix(strings.Trim(strings.TrimSpace(h), "[]"), "."))
		if h == "" {
			continue
		}
		if strings.ContainsAny(h, ":/ ") && net.ParseIP(h) == nil {
			return "", nil, nil, fmt.Errorf("pki: serving certificate host %q is neither a DNS name nor an IP address; pass hosts without ports or schemes", h)
		}
		names = append(names, h)
	}
	if len(names) == 0 {
		return "", nil, nil, errors.New("pki: a serving certificate needs at least one DNS name or IP address; configure the server's public names")
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, h := range names {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	return strings.Join(names, ","), dns, ips, nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial() *big.Int {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[0] |= 0x40 // never zero, always 16 bytes
	b[0] &= 0x7f // positive in DER without a pad byte
	return new(big.Int).SetBytes(b)
}

// trustDomainID is the SPIFFE ID of the trust domain itself, which the CA
// certificates carry so that a store is never used under another domain.
func trustDomainID(td string) *url.URL { return &url.URL{Scheme: "spiffe", Host: td} }

// validTrustDomain accepts SPIFFE's trust domain characters.
func validTrustDomain(td string) bool {
	if td == "" || len(td) > 255 {
		return false
	}
	for _, c := range td {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// newCA generates a CA key and certificate, self-signed when parent is nil.
func newCA(name, trustDomain string, parent *ca, now time.Time) (ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ca{}, fmt.Errorf("pki: generate %s CA key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{Organization: []string{"Better Compute"}, OrganizationalUnit: []string{trustDomain}, CommonName: "Better Compute " + name + " CA"},
		URIs:                  []*url.URL{trustDomainID(trustDomain)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	signer, signerKey := tmpl, key
	switch name {
	case rootName:
		tmpl.MaxPathLen = 1
	case nodeName, servingName:
		// An intermediate issues leaves only, of one kind: Go's verifier
		// refuses a leaf whose usage its issuer lacks, so a serving CA
		// certificate cannot pass as a node and the reverse.
		tmpl.MaxPathLenZero = true
		tmpl.NotAfter = parent.cert.NotAfter
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		if name == nodeName {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return ca{}, fmt.Errorf("pki: create %s CA certificate: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return ca{}, fmt.Errorf("pki: create %s CA certificate: %w", name, err)
	}
	return ca{name: name, cert: cert, key: key}, nil
}

// checkCA verifies a loaded CA: its key matches its certificate, it belongs
// to trustDomain, and it is signed by parent (or itself, for the root).
func checkCA(c ca, trustDomain string, parent *ca) error {
	if !c.key.PublicKey.Equal(c.cert.PublicKey) {
		return fmt.Errorf("pki: the %s CA's stored key does not match its certificate; the store is damaged, restore it from a backup", c.name)
	}
	if len(c.cert.URIs) != 1 || c.cert.URIs[0].String() != trustDomainID(trustDomain).String() {
		return fmt.Errorf("pki: the CAs in the store belong to another trust domain than %q (%v); the deployment id changed, or the store is another deployment's", trustDomain, c.cert.URIs)
	}
	issuer := c.cert
	if parent != nil {
		issuer = parent.cert
	}
	if err := c.cert.CheckSignatureFrom(issuer); err != nil {
		return fmt.Errorf("pki: the %s CA's certificate is not signed by the root CA in the store (%v); the store is damaged, restore it from a backup", c.name, err)
	}
	return nil
}
