package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

func TestKeyFileCreatedPrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ca.key")
	s, err := loadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || info.Size() != keySize {
		t.Fatalf("key file is %v, %d bytes; want 0600, %d bytes", info.Mode().Perm(), info.Size(), keySize)
	}
	// Loading it again gives the same key: what one sealed, the other opens.
	s2, err := loadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s2.Open("root", s.Seal("root", []byte("secret")))
	if err != nil || string(plain) != "secret" {
		t.Fatalf("open after reload = %q, %v", plain, err)
	}
}

func TestKeyFileConcurrentCreate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ca.key")
	sealers := make([]*Sealer, 8)
	var wg sync.WaitGroup
	for i := range sealers {
		wg.Go(func() {
			s, err := loadKeyFile(path)
			if err != nil {
				t.Error(err)
			}
			sealers[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	sealed := sealers[0].Seal("node", []byte("k"))
	for _, s := range sealers[1:] {
		if _, err := s.Open("node", sealed); err != nil {
			t.Fatalf("racing creators ended with different keys: %v", err)
		}
	}
}

func TestKeyFileRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		content []byte
		perm    os.FileMode
		want    string
	}{
		{"too short", make([]byte, 16), 0o600, "holds 16 bytes, not 32"},
		{"too long", make([]byte, 33), 0o600, "holds 33 bytes, not 32"},
		{"empty", nil, 0o600, "holds 0 bytes, not 32"},
		{"world readable", make([]byte, 32), 0o644, "permissions 0644"},
		{"group readable", make([]byte, 32), 0o640, "chmod 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ca.key")
			if err := os.WriteFile(path, tc.content, tc.perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.perm); err != nil { // umask may have narrowed it
				t.Fatal(err)
			}
			_, err := loadKeyFile(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("loadKeyFile = %v, want one line containing %q", err, tc.want)
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		if _, err := loadKeyFile(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("loadKeyFile(dir) = %v", err)
		}
	})
	t.Run("no path", func(t *testing.T) {
		t.Parallel()
		if _, err := loadKeyFile(""); err == nil {
			t.Fatal("loadKeyFile(\"\") succeeded")
		}
	})
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := loadKeyFile(filepath.Join(dir, "a.key"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := loadKeyFile(filepath.Join(dir, "b.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealed := s.Seal("root", []byte("private key"))
	if plain, err := s.Open("root", sealed); err != nil || string(plain) != "private key" {
		t.Fatalf("Open = %q, %v", plain, err)
	}
	if bytes.Contains(sealed, []byte("private key")) {
		t.Fatal("sealed blob holds the plaintext")
	}
	if bytes.Equal(sealed, s.Seal("root", []byte("private key"))) {
		t.Fatal("sealing twice gave the same blob: nonce reused")
	}
	damaged := bytes.Clone(sealed)
	damaged[len(damaged)-1] ^= 1
	tamperedNonce := bytes.Clone(sealed)
	tamperedNonce[1] ^= 1
	for _, tc := range []struct {
		name   string
		s      *Sealer
		ca     string
		sealed []byte
		want   string
	}{
		{"another key file", other, "root", sealed, "sealed with a different key file"},
		{"another row's blob", s, "node", sealed, "sealed with a different key file"},
		{"damaged", s, "root", damaged, "different key file"},
		{"tampered nonce", s, "root", tamperedNonce, "different key file"},
		{"truncated", s, "root", sealed[:10], "damaged"},
		{"future version", s, "root", append([]byte{2}, sealed[1:]...), "newer version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plain, err := tc.s.Open(tc.ca, tc.sealed)
			if err == nil || !strings.Contains(err.Error(), tc.want) || plain != nil {
				t.Fatalf("Open = %q, %v, want an error containing %q", plain, err, tc.want)
			}
			if strings.Contains(err.Error(), "private key") {
				t.Fatalf("Open's error shows the plaintext: %v", err)
			}
		})
	}
}

// The Authority's sealer is the key file's: what one server seals, another
// loaded with the same key file opens, for the same name only.
func TestAuthoritySealer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.Open(t, store.EngineSQLite)
	keyFile := filepath.Join(t.TempDir(), "ca.key")
	a, err := LoadOrCreate(ctx, st, keyFile, "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreate(ctx, st, keyFile, "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	if a.Sealer() == nil {
		t.Fatal("an Authority from LoadOrCreate has no sealer")
	}
	sealed := a.Sealer().Seal("wh_1", []byte("whsec_x"))
	if plain, err := b.Sealer().Open("wh_1", sealed); err != nil || string(plain) != "whsec_x" {
		t.Fatalf("Open on another load = %q, %v", plain, err)
	}
	if _, err := b.Sealer().Open("wh_2", sealed); err == nil {
		t.Fatal("a blob sealed for wh_1 opened as wh_2's")
	}
	if (*Authority)(nil).Sealer() != nil {
		t.Fatal("a nil Authority has a sealer")
	}
}

// TestDeriveKey: one key file gives one key per purpose in every process
// that loads it; another purpose or another key file gives another key.
func TestDeriveKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := loadKeyFile(filepath.Join(dir, "a.key"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := loadKeyFile(filepath.Join(dir, "a.key")) // another process, the same file
	if err != nil {
		t.Fatal(err)
	}
	other, err := loadKeyFile(filepath.Join(dir, "b.key"))
	if err != nil {
		t.Fatal(err)
	}
	k := a.DeriveKey("console csrf v1")
	if len(k) != 32 || !bytes.Equal(k, again.DeriveKey("console csrf v1")) {
		t.Fatalf("the same file and purpose gave %x and %x", k, again.DeriveKey("console csrf v1"))
	}
	if bytes.Equal(k, a.DeriveKey("console csrf v2")) || bytes.Equal(k, other.DeriveKey("console csrf v1")) {
		t.Error("another purpose or key file gave the same key")
	}
	if bytes.Equal(k, a.key) {
		t.Error("the derived key is the key file's key")
	}
}
