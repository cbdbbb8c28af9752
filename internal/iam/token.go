package iam

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"strings"
)

// API tokens look like bc_<id>_<secret>: "bc_" lets secret scanners and
// people recognize them; the id is the public key of the stored record, so
// authenticating is one lookup by primary key rather than a search by hash;
// the secret is 160 random bits, stored only as its SHA-256 (a fast hash is
// right for a high-entropy secret; slow hashes are for passwords).

// TokenPrefix starts every API token.
const TokenPrefix = "bc_"

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

const (
	tokenIDBytes     = 10 // 16 characters
	tokenSecretBytes = 20 // 32 characters
)

// ErrMalformedToken means a string is not shaped like an API token.
var ErrMalformedToken = errors.New("malformed API token: expected bc_<id>_<secret>")

// NewToken returns a fresh token: its id, the full secret string to hand to
// the user once, and the hash to store.
func NewToken() (id, secret string, hash []byte) {
	idb := make([]byte, tokenIDBytes)
	sb := make([]byte, tokenSecretBytes)
	_, _ = rand.Read(idb) // crypto/rand.Read never fails
	_, _ = rand.Read(sb)
	id = tokenEncoding.EncodeToString(idb)
	s := tokenEncoding.EncodeToString(sb)
	sum := sha256.Sum256([]byte(s))
	return id, TokenPrefix + id + "_" + s, sum[:]
}

// ParseToken splits a token string into its id and the hash of its secret.
func ParseToken(token string) (id string, hash []byte, err error) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return "", nil, ErrMalformedToken
	}
	id, s, ok := strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(s) != 32 || !tokenChars(id) || !tokenChars(s) {
		return "", nil, ErrMalformedToken
	}
	sum := sha256.Sum256([]byte(s))
	return id, sum[:], nil
}

// TokenHashEqual compares two secret hashes in constant time.
func TokenHashEqual(a, b []byte) bool {
	return subtle.ConstantTimeCompare(a, b) == 1
}

func tokenChars(s string) bool {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
