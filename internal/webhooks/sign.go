package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/internal/store"
)

// Deliveries are signed as the Standard Webhooks specification says
// (standardwebhooks.com), so that receivers can verify them with any of its
// libraries: three headers, and a signature over the id, the timestamp and
// the body.
const (
	// HeaderID names the delivery: the same for every attempt at one event
	// of one webhook (evt_<seq>), so that a receiver can drop repeats.
	HeaderID = "webhook-id"
	// HeaderTimestamp is when the attempt was signed, in unix seconds; a
	// receiver refuses old ones, so a captured request cannot be replayed.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1," and the base64 of HMAC-SHA256 over
	// id "." timestamp "." body, keyed with the secret's bytes; while a
	// rotated secret is still valid, one such signature per secret,
	// space-separated, the current secret's first.
	HeaderSignature = "webhook-signature"
)

// secretPrefix starts every signing secret, as the specification's
// libraries expect.
const secretPrefix = "whsec_"

// secretBytes is the length of a new secret's key: 256 bits, HMAC-SHA256's
// block of security.
const secretBytes = 32

// errBadSecret: a stored secret that is not whsec_ and base64. It never
// says what the secret was.
var errBadSecret = errors.New("webhooks: the signing secret is not whsec_ followed by base64; re-create the webhook")

// NewSecret returns a new random signing secret: whsec_ and the base64 of
// 32 random bytes.
func NewSecret() store.WebhookSecret {
	key := make([]byte, secretBytes)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	return store.WebhookSecret(secretPrefix + base64.StdEncoding.EncodeToString(key))
}

// key decodes a secret into the HMAC key: the bytes its base64 stands for.
func key(secret store.WebhookSecret) ([]byte, error) {
	s, ok := strings.CutPrefix(string(secret), secretPrefix)
	if !ok {
		return nil, errBadSecret
	}
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(k) == 0 {
		return nil, errBadSecret
	}
	return k, nil
}

// Sign returns the webhook-signature header's value for one delivery:
// "v1," and the base64 of HMAC-SHA256(key, id "." timestamp "." body).
func Sign(secret store.WebhookSecret, id string, timestamp int64, body []byte) (string, error) {
	k, err := key(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// signAll returns the webhook-signature header's value for a delivery
// signed with each of secrets: their Sign values, space-separated, as the
// specification allows, so that a receiver holding any one of them
// verifies it.
func signAll(secrets []store.WebhookSecret, id string, timestamp int64, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		sig, err := Sign(s, id, timestamp, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// Verify reports whether header, a webhook-signature value (one or more
// space-separated "v1,<base64>"), holds a valid signature of the delivery.
// It is what a receiver does, here for tests and for receivers in Go; it
// does not check the timestamp's age, which is the receiver's policy.
func Verify(secret store.WebhookSecret, id string, timestamp int64, body []byte, header string) bool {
	want, err := Sign(secret, id, timestamp, body)
	if err != nil {
		return false
	}
	for sig := range strings.FieldsSeq(header) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}
