package pki

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// LoadOrCreate loads the deployment's three CAs from the store, creating
// each on first use. Creation is safe across processes: of two servers
// starting together, store.CreateCA answers ErrConflict to the loser, which
// then loads the winner's CA, so every process ends with the same CAs
// (they must share the key file). Private keys are sealed with AES-256-GCM
// under the 32-byte key in keyFile, created 0600 when missing; a key file of
// the wrong size, readable by others, or not the one the CAs were sealed
// with is refused with an error that says so. trustDomain is the SPIFFE
// trust domain, "bc-<deployment id lowercased>"; CAs made for another trust
// domain are refused.
func LoadOrCreate(ctx context.Context, st *store.Store, keyFile, trustDomain string) (*Authority, error) {
	if !validTrustDomain(trustDomain) {
		return nil, fmt.Errorf("pki: trust domain %q is not valid: want lowercase letters, digits, '.', '-' and '_'", trustDomain)
	}
	s, err := loadKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	root, err := loadOrCreateCA(ctx, st, s, rootName, trustDomain, nil)
	if err != nil {
		return nil, err
	}
	node, err := loadOrCreateCA(ctx, st, s, nodeName, trustDomain, &root)
	if err != nil {
		return nil, err
	}
	serving, err := loadOrCreateCA(ctx, st, s, servingName, trustDomain, &root)
	if err != nil {
		return nil, err
	}
	a := newAuthority(trustDomain, root, node, serving)
	a.sealer = s
	return a, nil
}

// loadOrCreateCA loads one CA, or creates it (signed by parent, or
// self-signed) when the store has none.
func loadOrCreateCA(ctx context.Context, st *store.Store, s *Sealer, name, trustDomain string, parent *ca) (ca, error) {
	stored, err := st.GetCA(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		created, cerr := createCA(ctx, st, s, name, trustDomain, parent)
		if !errors.Is(cerr, store.ErrConflict) {
			return created, cerr
		}
		stored, err = st.GetCA(ctx, name) // another process created it first
	}
	if err != nil {
		return ca{}, fmt.Errorf("pki: load the %s CA: %w", name, err)
	}
	c, err := openCA(s, stored)
	if err != nil {
		return ca{}, err
	}
	if err := checkCA(c, trustDomain, parent); err != nil {
		return ca{}, err
	}
	return c, nil
}

// createCA generates a CA and stores it with its key sealed; ErrConflict
// (wrapped) when another process stored one first.
func createCA(ctx context.Context, st *store.Store, s *Sealer, name, trustDomain string, parent *ca) (ca, error) {
	c, err := newCA(name, trustDomain, parent, time.Now())
	if err != nil {
		return ca{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return ca{}, fmt.Errorf("pki: create the %s CA: %w", name, err)
	}
	if _, err := st.CreateCA(ctx, store.CA{Name: name, CertDER: c.cert.Raw, KeyEncrypted: s.Seal(name, keyDER)}); err != nil {
		return ca{}, fmt.Errorf("pki: create the %s CA: %w", name, err)
	}
	return c, nil
}

// openCA parses a stored CA and unseals its key.
func openCA(s *Sealer, stored store.CA) (ca, error) {
	cert, err := x509.ParseCertificate(stored.CertDER)
	if err != nil {
		return ca{}, fmt.Errorf("pki: the %s CA's certificate in the store does not parse (%v); restore the store from a backup", stored.Name, err)
	}
	keyDER, err := s.open(stored.Name, stored.KeyEncrypted)
	switch {
	case errors.Is(err, errSealDamaged):
		return ca{}, fmt.Errorf("pki: the %s CA's sealed key in the store is %w; restore the store from a backup", stored.Name, err)
	case err != nil:
		return ca{}, fmt.Errorf("pki: the %s CA's key in the store was %w than %s; use the key file this deployment was created with", stored.Name, err, s.path)
	}
	key, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return ca{}, fmt.Errorf("pki: the %s CA's key does not parse (%v); restore the store from a backup", stored.Name, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return ca{}, fmt.Errorf("pki: the %s CA's key is a %T, not ECDSA; restore the store from a backup", stored.Name, key)
	}
	return ca{name: stored.Name, cert: cert, key: ec}, nil
}
