package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"strings"
)

// Join tokens look like bcj_<id>_<secret>_<pin>, in the style of the API
// tokens of internal/iam: "bcj_" lets secret scanners and people recognize
// them; the id (80 random bits) is the key of the stored record, so a join is
// one lookup by primary key; the secret (160 random bits) is stored only as
// its SHA-256, a fast hash being right for a high-entropy secret. The pin
// (the serving CA's public key hash, see ServingPin) seals the token to one
// deployment: bcd checks the server against it before it sends the token, as
// kubeadm join does with its CA cert hash.

// JoinTokenPrefix starts every join token.
const JoinTokenPrefix = "bcj_"

// pinPrefix names the pin's hash function, as kubeadm's discovery hashes do.
const pinPrefix = "sha256:"

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

const (
	joinIDBytes     = 10 // 16 characters
	joinSecretBytes = 20 // 32 characters
	nodeIDBytes     = 10 // 16 characters
	pinChars        = 43 // base64url without padding of 32 bytes
)

// ErrMalformedJoinToken means a string is not shaped like a join token.
var ErrMalformedJoinToken = errors.New("malformed join token: expected bcj_<id>_<secret>_<pin>; copy the whole token printed by 'better-compute join-tokens create'")

// NewJoinToken returns a fresh join token sealed to pin (ServingPin's
// value; the "sha256:" prefix is optional): its id, the full token to hand to
// the operator once, and the hash of its secret to store.
func NewJoinToken(pin string) (id, token string, hash []byte) {
	idb := make([]byte, joinIDBytes)
	sb := make([]byte, joinSecretBytes)
	_, _ = rand.Read(idb) // crypto/rand.Read never fails
	_, _ = rand.Read(sb)
	id = tokenEncoding.EncodeToString(idb)
	s := tokenEncoding.EncodeToString(sb)
	sum := sha256.Sum256([]byte(s))
	return id, JoinTokenPrefix + id + "_" + s + "_" + strings.TrimPrefix(pin, pinPrefix), sum[:]
}

// ParseJoinToken splits a join token into its id, the hash of its secret and
// its pin, returned with its "sha256:" prefix so that it compares equal to
// ServingPin. Anything else is ErrMalformedJoinToken.
func ParseJoinToken(token string) (id string, hash []byte, pin string, err error) {
	rest, ok := strings.CutPrefix(token, JoinTokenPrefix)
	if !ok {
		return "", nil, "", ErrMalformedJoinToken
	}
	// The id and secret never contain '_'; the pin (base64url) may.
	parts := strings.SplitN(rest, "_", 3)
	if len(parts) != 3 {
		return "", nil, "", ErrMalformedJoinToken
	}
	id, s, p := parts[0], parts[1], parts[2]
	if len(id) != 16 || len(s) != 32 || !tokenChars(id) || !tokenChars(s) || !validPin(p) {
		return "", nil, "", ErrMalformedJoinToken
	}
	sum := sha256.Sum256([]byte(s))
	return id, sum[:], pinPrefix + p, nil
}

// NewNodeID returns a fresh node id, "n-" and 16 base32 characters: short
// enough for people and URLs, random enough (80 bits) never to collide.
func NewNodeID() string {
	b := make([]byte, nodeIDBytes)
	_, _ = rand.Read(b)
	return "n-" + tokenEncoding.EncodeToString(b)
}

// validNodeID accepts what may stand in a SPIFFE path segment and a Cedar
// entity id without escaping: NewNodeID's ids and any other short
// lowercase name.
func validNodeID(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// validPin accepts exactly the canonical base64url encoding of 32 bytes.
func validPin(p string) bool {
	if len(p) != pinChars {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(p)
	return err == nil && len(b) == sha256.Size
}

func tokenChars(s string) bool {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
