package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// allocationContext separates allocation claims from anything else a node
// key signs (its CSRs, its renewals): a signature made for one can never
// pass as the other.
const allocationContext = "bettercompute allocation-bound v1\x00"

// ErrBadClaimSignature says a claim's signature does not verify.
var ErrBadClaimSignature = errors.New("the signature does not match the node's key")

// allocationDigest is what an allocation claim's signature covers.
func allocationDigest(claim []byte) []byte {
	h := sha256.New()
	h.Write([]byte(allocationContext))
	h.Write(claim)
	return h.Sum(nil)
}

// SignAllocationClaim signs claim (an AllocationClaim in deterministic
// binary form) with the node's key, for an AllocationBound.
func SignAllocationClaim(key crypto.Signer, claim []byte) ([]byte, error) {
	sig, err := key.Sign(rand.Reader, allocationDigest(claim), crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sign the allocation claim: %w", err)
	}
	return sig, nil
}

// VerifyAllocationClaim checks sig over claim against the node's public
// key, a P-256 ECDSA key as every node certificate holds.
func VerifyAllocationClaim(pub crypto.PublicKey, claim, sig []byte) error {
	k, err := p256Key(pub)
	if err != nil {
		return err
	}
	if !ecdsa.VerifyASN1(k, allocationDigest(claim), sig) {
		return ErrBadClaimSignature
	}
	return nil
}
