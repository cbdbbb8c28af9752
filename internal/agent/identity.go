package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// The data dir holds one node's identity and state. Every file is written
// atomically (a temporary file, fsync, rename, fsync of the dir), so a crash
// leaves either the old file or the new one, never half of one. config.json
// is written last by join: its presence is what "joined" means, so a join
// that died half way is simply joined again.
const (
	keyFile     = "node.key"    // the node's private key, PKCS#8 PEM, 0600
	certFile    = "node.crt"    // its certificate, PEM
	caFile      = "ca.pem"      // the CA bundle it trusts for the gateway, PEM
	configFile  = "config.json" // nodeConfig
	journalFile = "journal.db"  // the bbolt journal
	socketFile  = "bcd.sock"    // the status socket of a running bcd node

	// renewSuffix marks a renewed key and certificate written but not yet
	// moved into place; see saveRenewed and repairRenewal.
	renewSuffix = ".renew"
)

// DefaultDataDir is where bcd keeps its state when --data-dir is not
// given: $BCD_DATA_DIR, else /var/lib/bcd.
func DefaultDataDir() string {
	if d := os.Getenv("BCD_DATA_DIR"); d != "" {
		return d
	}
	return "/var/lib/bcd"
}

// nodeConfig is config.json: who the node is and where its gateways are.
type nodeConfig struct {
	NodeID           string   `json:"node_id"`
	ServerURL        string   `json:"server_url"`
	GatewayAddresses []string `json:"gateway_addresses"`
}

// identity is a joined node's key, certificate, trust and configuration.
type identity struct {
	config nodeConfig
	cert   tls.Certificate     // Leaf is set
	roots  *x509.CertPool      // ca.pem, for the gateway's certificate
	bundle []*x509.Certificate // ca.pem's certificates, for renewals to check against
}

// notJoinedError says a data dir holds no identity.
func notJoinedError(dir string) error {
	return fmt.Errorf("%s holds no node identity: run 'BCD_JOIN_TOKEN=T bcd join --server URL --data-dir %s' first", dir, dir)
}

// readConfig reads config.json; a missing file is fs.ErrNotExist.
func readConfig(dir string) (nodeConfig, error) {
	var c nodeConfig
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("read %s: %w", filepath.Join(dir, configFile), err)
	}
	if c.NodeID == "" {
		return c, fmt.Errorf("read %s: no node_id; remove %s and join again", filepath.Join(dir, configFile), dir)
	}
	return c, nil
}

// trustCache shares parsed CA bundles among the agents of one process: the
// agents of bcd sim all trust the same ca.pem, and parsing it once instead
// of ten thousand times saves several KiB per agent.
type trustCache struct {
	mu sync.Mutex            // guards m
	m  map[[32]byte]*trusted // by SHA-256 of ca.pem
}

// trusted is one parsed CA bundle. It is never changed once made.
type trusted struct {
	roots  *x509.CertPool
	bundle []*x509.Certificate
}

func newTrustCache() *trustCache { return &trustCache{m: map[[32]byte]*trusted{}} }

// parseTrust parses a CA bundle, through c when c is not nil.
func (c *trustCache) parse(caPEM []byte) (*trusted, error) {
	var key [32]byte
	if c != nil {
		key = sha256.Sum256(caPEM)
		c.mu.Lock()
		defer c.mu.Unlock()
		if t, ok := c.m[key]; ok {
			return t, nil
		}
	}
	bundle, err := parsePEMCerts(caPEM)
	if err != nil {
		return nil, err
	}
	if len(bundle) == 0 {
		return nil, errors.New("no certificate in it")
	}
	t := &trusted{roots: x509.NewCertPool(), bundle: bundle}
	for _, b := range bundle {
		t.roots.AddCert(b)
	}
	if c != nil {
		c.m[key] = t
	}
	return t, nil
}

// loadIdentity reads the identity in dir, first finishing a renewal that a
// crash interrupted. cache may be nil.
func loadIdentity(dir string, cache *trustCache) (*identity, error) {
	cfg, err := readConfig(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notJoinedError(dir)
	}
	if err != nil {
		return nil, err
	}
	if err := repairRenewal(dir); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	if err != nil {
		return nil, fmt.Errorf("load the node's key and certificate from %s: %w", dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caFile))
	if err != nil {
		return nil, fmt.Errorf("load the CA bundle: %w", err)
	}
	tr, err := cache.parse(caPEM)
	if err != nil {
		return nil, fmt.Errorf("load the CA bundle %s: %w; remove %s and join again", filepath.Join(dir, caFile), err, dir)
	}
	if len(cfg.GatewayAddresses) == 0 {
		return nil, fmt.Errorf("read %s: no gateway addresses; remove %s and join again", filepath.Join(dir, configFile), dir)
	}
	return &identity{config: cfg, cert: cert, roots: tr.roots, bundle: tr.bundle}, nil
}

// newKey generates a node key: ECDSA P-256, the only kind the node CA signs.
func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the node key: %w", err)
	}
	return k, nil
}

// newCSR returns a PKCS#10 request (DER) for key. The subject is a hint
// only: the CA names the node from the token or the current certificate.
func newCSR(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, fmt.Errorf("create the certificate request: %w", err)
	}
	return der, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the node key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parsePEMCerts parses every CERTIFICATE block in b.
func parsePEMCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

func certPEM(ders ...[]byte) []byte {
	var out []byte
	for _, der := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return out
}

// ensureDir creates dir 0700 (it will hold a private key) or tightens an
// existing one to 0700.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("restrict the data dir to its owner: %w", err)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data, or leaves it as it was.
func writeFileAtomic(dir, name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	ok = true
	return syncDir(dir)
}

// syncDir makes renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// saveJoined writes a new identity: key, certificate and bundle first,
// config.json last (see the comment on the file names).
func saveJoined(dir string, cfg nodeConfig, key *ecdsa.PrivateKey, certDER []byte, bundle [][]byte) error {
	if err := ensureDir(dir); err != nil {
		return err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return err
	}
	cb, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", configFile, err)
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{keyFile, kp, 0o600},
		{certFile, certPEM(certDER), 0o644},
		{caFile, certPEM(bundle...), 0o644},
		{configFile, append(cb, '\n'), 0o644},
	} {
		if err := writeFileAtomic(dir, f.name, f.data, f.perm); err != nil {
			return fmt.Errorf("save the identity in %s: %w", dir, err)
		}
	}
	return nil
}

// saveRenewed replaces the key and certificate. Two renames cannot be one
// atomic step, so both new files are first written beside the old ones
// with renewSuffix; a crash between the two renames leaves a key whose
// certificate is still node.crt.renew, which repairRenewal moves in place.
func saveRenewed(dir string, key *ecdsa.PrivateKey, certDER []byte) error {
	kp, err := keyPEM(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(dir, keyFile+renewSuffix, kp, 0o600); err != nil {
		return err
	}
	if err := writeFileAtomic(dir, certFile+renewSuffix, certPEM(certDER), 0o644); err != nil {
		return err
	}
	for _, name := range []string{keyFile, certFile} {
		if err := os.Rename(filepath.Join(dir, name+renewSuffix), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("save the renewed %s: %w", name, err)
		}
	}
	return syncDir(dir)
}

// repairRenewal finishes or discards a renewal a crash interrupted. With
// both .renew files present, the old pair is intact: drop the new one.
// With only node.crt.renew present, node.key is already the new key: move
// its certificate in place.
func repairRenewal(dir string) error {
	newKey := filepath.Join(dir, keyFile+renewSuffix)
	newCert := filepath.Join(dir, certFile+renewSuffix)
	_, kerr := os.Stat(newKey)
	_, cerr := os.Stat(newCert)
	switch {
	case kerr == nil:
		_ = os.Remove(newCert)
		if err := os.Remove(newKey); err != nil {
			return fmt.Errorf("discard an interrupted renewal: %w", err)
		}
	case cerr == nil:
		if err := os.Rename(newCert, filepath.Join(dir, certFile)); err != nil {
			return fmt.Errorf("finish an interrupted renewal: %w", err)
		}
	default:
		return nil
	}
	return syncDir(dir)
}
