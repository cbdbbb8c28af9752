package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
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
	plain, err := s2.open("root", s.seal("root", []byte("secret")))
	if err != nil || string(plain) != "secret" {
		t.Fatalf("open after reload = %q, %v", plain, err)
	}
}

func TestKeyFileConcurrentCreate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ca.key")
	sealers := make([]*sealer, 8)
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
	sealed := sealers[0].seal("node", []byte("k"))
	for _, s := range sealers[1:] {
		if _, err := s.open("node", sealed); err != nil {
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
	sealed := s.seal("root", []byte("private key"))
	if bytes.Contains(sealed, []byte("private key")) {
		t.Fatal("sealed blob holds the plaintext")
	}
	if bytes.Equal(sealed, s.seal("root", []byte("private key"))) {
		t.Fatal("sealing twice gave the same blob: nonce reused")
	}
	damaged := bytes.Clone(sealed)
	damaged[len(damaged)-1] ^= 1
	for _, tc := range []struct {
		name   string
		s      *sealer
		ca     string
		sealed []byte
		want   string
	}{
		{"another key file", other, "root", sealed, "sealed with a different key file"},
		{"another CA's blob", s, "node", sealed, "sealed with a different key file"},
		{"damaged", s, "root", damaged, "different key file"},
		{"truncated", s, "root", sealed[:10], "damaged"},
		{"future version", s, "root", append([]byte{2}, sealed[1:]...), "newer version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tc.s.open(tc.ca, tc.sealed); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open = %v, want %q", err, tc.want)
			}
		})
	}
}
