package pki

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

func TestLoadOrCreate(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		st := storetest.Open(t, engine)
		keyFile := filepath.Join(t.TempDir(), "ca.key")

		a, err := LoadOrCreate(ctx, st, keyFile, "bc-test")
		if err != nil {
			t.Fatal(err)
		}
		if a.TrustDomain() != "bc-test" {
			t.Fatalf("TrustDomain = %q", a.TrustDomain())
		}
		for _, name := range []string{"root", "node", "serving"} {
			stored, err := st.GetCA(ctx, name)
			if err != nil {
				t.Fatalf("the %s CA was not stored: %v", name, err)
			}
			if bytes.Contains(stored.KeyEncrypted, []byte("PRIVATE")) || len(stored.KeyEncrypted) < 100 {
				t.Fatalf("the %s CA's key is not sealed", name)
			}
		}
		// The CA chain is sound: root self-signed, both intermediates under it.
		roots := x509.NewCertPool()
		roots.AddCert(a.root.cert)
		for _, c := range []*x509.Certificate{a.node.cert, a.serving.cert} {
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Fatalf("%s does not chain to the root: %v", c.Subject, err)
			}
		}

		// Reloading gives the same CAs, and certificates issued before verify after.
		cert, err := a.SignNodeCSR(csrFor(t, newP256(t)), "n-abc", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b, err := LoadOrCreate(ctx, st, keyFile, "bc-test")
		if err != nil {
			t.Fatal(err)
		}
		if b.ServingPin() != a.ServingPin() || !a.root.cert.Equal(b.root.cert) || !a.node.cert.Equal(b.node.cert) || !a.serving.cert.Equal(b.serving.cert) {
			t.Fatal("reload gave other CAs")
		}
		if !a.node.key.Equal(b.node.key) {
			t.Fatal("reload gave another node CA key")
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: b.NodeCAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("a certificate issued before the reload does not verify after: %v", err)
		}
		if id, err := b.NodeID(cert); err != nil || id != "n-abc" {
			t.Fatalf("NodeID after reload = %q, %v", id, err)
		}
	})
}

func TestLoadOrCreateRefuses(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		st := storetest.Open(t, engine)
		dir := t.TempDir()
		keyFile := filepath.Join(dir, "ca.key")
		if _, err := LoadOrCreate(ctx, st, keyFile, "bc-test"); err != nil {
			t.Fatal(err)
		}
		loose := filepath.Join(dir, "loose.key")
		key, err := os.ReadFile(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(loose, key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(loose, 0o644); err != nil {
			t.Fatal(err)
		}
		short := filepath.Join(dir, "short.key")
		if err := os.WriteFile(short, key[:31], 0o600); err != nil {
			t.Fatal(err)
		}

		for _, tc := range []struct {
			name, keyFile, trustDomain, want string
		}{
			{"another key file", filepath.Join(dir, "other.key"), "bc-test", "sealed with a different key file than"},
			{"key file readable by others", loose, "bc-test", "has permissions 0644"},
			{"key file of the wrong size", short, "bc-test", "holds 31 bytes, not 32"},
			{"another trust domain", keyFile, "bc-other", `belong to another trust domain than "bc-other"`},
			{"invalid trust domain", keyFile, "BC Test", "is not valid"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := LoadOrCreate(ctx, st, tc.keyFile, tc.trustDomain)
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("LoadOrCreate = %v, want one line containing %q", err, tc.want)
				}
			})
		}
	})
}

// Several servers starting together on one store end with one set of CAs.
func TestLoadOrCreateConcurrent(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		url := storetest.URL(t, engine)
		keyFile := filepath.Join(t.TempDir(), "ca.key")
		const n = 6
		// One Store per "process", so that PostgreSQL sees separate pools.
		stores := make([]*store.Store, n)
		for i := range stores {
			st, err := store.Open(ctx, url, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			stores[i] = st
		}
		auths := make([]*Authority, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				a, err := LoadOrCreate(context.WithoutCancel(ctx), stores[i], keyFile, "bc-test")
				if err != nil {
					t.Error(err)
				}
				auths[i] = a
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, a := range auths[1:] {
			if a.ServingPin() != auths[0].ServingPin() || !a.root.cert.Equal(auths[0].root.cert) || !a.node.cert.Equal(auths[0].node.cert) {
				t.Fatal("concurrent LoadOrCreate produced different CAs")
			}
		}
	})
}
