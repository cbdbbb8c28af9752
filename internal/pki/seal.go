package pki

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// The CA private keys, and the other secrets the server must be able to
// read back (webhook signing secrets), live in the store sealed with
// AES-256-GCM under a key that never enters the store: a 32-byte file next
// to the server (the data dir, or BETTER_COMPUTE_KEY_FILE). A copy of the
// database alone therefore cannot issue node or server certificates, nor
// sign webhook deliveries.

// keySize is the length of the sealing key file: AES-256.
const keySize = 32

// sealVersion starts every sealed blob, so that the format can change
// without guessing what an old blob is.
const sealVersion = 1

// Sealer seals and opens the secrets the store keeps under the deployment's
// key file. The Authority holds the one a server loads (Authority.Sealer).
// It is safe for concurrent use.
type Sealer struct {
	aead cipher.AEAD
	key  []byte // the key file's key, for DeriveKey
	path string // the key file, for error messages
}

// loadKeyFile reads the sealing key from path, creating it (0600, random)
// when it does not exist. It refuses a file of the wrong size or readable by
// anyone but its owner, since either means it is not the key it should be or
// the key has leaked.
func loadKeyFile(path string) (*Sealer, error) {
	if path == "" {
		return nil, errors.New("pki: no key file given; pass one under the data dir or set BETTER_COMPUTE_KEY_FILE")
	}
	key, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = createKeyFile(path)
	}
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("pki: key file %s: %w", path, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("pki: key file %s: %w", path, err)
	}
	return &Sealer{aead: aead, key: key, path: path}, nil
}

// DeriveKey returns a 32-byte key for purpose, derived from the key file's
// key (HKDF-SHA256): the same in every process that loads the same key
// file, and useless for opening what the Sealer sealed. Each purpose names
// its use and version, such as "console csrf v1".
func (s *Sealer) DeriveKey(purpose string) []byte {
	k, err := hkdf.Key(sha256.New, s.key, nil, "bettercompute "+purpose, 32)
	if err != nil {
		panic("pki: derive key: " + err.Error()) // only for a length HKDF cannot give
	}
	return k
}

// readKeyFile reads and checks an existing key file; fs.ErrNotExist when
// there is none.
func readKeyFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("pki: read key file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("pki: key file %s is not a regular file; point it at the deployment's 32-byte key file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("pki: key file %s has permissions %04o, readable by others; make it private with chmod 600 %s (and consider the key leaked)", path, perm, path)
	}
	if info.Size() != keySize {
		return nil, fmt.Errorf("pki: key file %s holds %d bytes, not %d: it is not a Better Compute key file; restore the deployment's key file", path, info.Size(), keySize)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: read key file: %w", err)
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("pki: key file %s holds %d bytes, not %d: it is not a Better Compute key file; restore the deployment's key file", path, len(key), keySize)
	}
	return key, nil
}

// createKeyFile writes a new random key to path. It writes a private
// temporary file and hard-links it into place, so that a process starting
// at the same moment either sees no file or the whole key, and the loser of
// a race reads the winner's key.
func createKeyFile(path string) ([]byte, error) {
	key := make([]byte, keySize)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	f, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return nil, fmt.Errorf("pki: create key file %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("pki: create key file %s: %w", path, err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, fmt.Errorf("pki: create key file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("pki: create key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("pki: create key file %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKeyFile(path) // another process created it first
		}
		return nil, fmt.Errorf("pki: create key file %s: %w", path, err)
	}
	return key, nil
}

// Errors of open, which Open and openCA each phrase for their caller.
var (
	errSealDamaged = errors.New("damaged or from a newer version")
	errSealKey     = errors.New("sealed with a different key file")
)

// Seal encrypts plaintext for the row called name. name is bound as
// additional data: the blob opens only under the same name, so that one
// row's sealed secret (a CA's key, a webhook's secret) cannot be copied
// into another row and used there. Each call draws a fresh nonce.
func (s *Sealer) Seal(name string, plaintext []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := append([]byte{sealVersion}, nonce...)
	return s.aead.Seal(out, nonce, plaintext, []byte(name))
}

// Open decrypts what Seal produced for the same name. It fails for a blob
// that is damaged or was tampered with, sealed under another name, or
// sealed with another key file; its error never holds the plaintext.
func (s *Sealer) Open(name string, sealed []byte) ([]byte, error) {
	plaintext, err := s.open(name, sealed)
	switch {
	case errors.Is(err, errSealDamaged):
		return nil, fmt.Errorf("pki: the sealed value of %s in the store is %w; restore the store from a backup", name, err)
	case err != nil:
		return nil, fmt.Errorf("pki: the value of %s in the store was %w than %s, or for another row; use the key file this deployment was created with", name, err, s.path)
	}
	return plaintext, nil
}

// open decrypts; errSealDamaged when the blob cannot be one of Seal's,
// errSealKey when it does not authenticate (another key, another name, or
// tampered with: GCM cannot tell these apart).
func (s *Sealer) open(name string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n+s.aead.Overhead() || sealed[0] != sealVersion {
		return nil, errSealDamaged
	}
	plaintext, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(name))
	if err != nil {
		return nil, errSealKey
	}
	return plaintext, nil
}
