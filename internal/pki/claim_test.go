package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"testing"
)

func TestAllocationClaimSignature(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	claim := []byte("claim bytes")
	sig, err := SignAllocationClaim(key, claim)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyAllocationClaim(key.Public(), claim, sig); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	for name, tc := range map[string]struct {
		pub        any
		claim, sig []byte
	}{
		"another key":     {other.Public(), claim, sig},
		"changed claim":   {key.Public(), []byte("claim bytez"), sig},
		"truncated":       {key.Public(), claim, sig[:len(sig)-1]},
		"empty signature": {key.Public(), claim, nil},
	} {
		if err := VerifyAllocationClaim(tc.pub, tc.claim, tc.sig); !errors.Is(err, ErrBadClaimSignature) {
			t.Errorf("%s: err = %v, want ErrBadClaimSignature", name, err)
		}
	}
	// A signature over the bare digest, without the context, is refused:
	// the node's key signs other things too.
	bare, err := ecdsa.SignASN1(rand.Reader, key, sha256Sum(claim))
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyAllocationClaim(key.Public(), claim, bare); !errors.Is(err, ErrBadClaimSignature) {
		t.Errorf("a signature without the context: err = %v, want ErrBadClaimSignature", err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyAllocationClaim(rk.Public(), claim, sig); err == nil {
		t.Error("an RSA key verified an allocation claim")
	}
}

func sha256Sum(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}

// FuzzVerifyAllocationClaim: a node sends claim and signature bytes of its
// choosing. Whatever they are, verifying never panics, and only the claim
// the key signed verifies: no changed claim passes with its signature.
func FuzzVerifyAllocationClaim(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	signed := []byte("\x0a\x05n-123\x10\x07\x1a\x0cr-abcdef0123")
	sig, err := SignAllocationClaim(key, signed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed, sig)
	f.Add(signed[:4], sig)
	f.Add([]byte{}, sig[:8])
	f.Add(signed, []byte{0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, claim, s []byte) {
		err := VerifyAllocationClaim(key.Public(), claim, s)
		if err == nil && string(claim) != string(signed) {
			t.Fatalf("claim %q verified with signature %x; only %q was signed", claim, s, signed)
		}
		if err != nil && !errors.Is(err, ErrBadClaimSignature) {
			t.Fatalf("err = %v, want ErrBadClaimSignature", err)
		}
	})
}
