package webhooks

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/better-compute/better-compute/internal/store"
)

// A webhook's signing secret must be read back to sign, so it cannot be
// hashed; instead the store keeps it sealed under the deployment's key file
// (pki.Sealer), bound to the webhook's id, so that a copy of the database
// alone cannot sign deliveries, and a sealed secret copied into another
// webhook's row does not open there. The column holds sealedPrefix and the
// standard base64 of the sealed blob. A plain whsec_ value, written before
// secrets were sealed, is still read as it is.

// sealedPrefix starts a sealed secret as stored; v1 is the format of what
// follows, so that it can change without guessing.
const sealedPrefix = "sealed:v1:"

// errNoSealer: the worker was built without the key file's sealer. Sealing
// is never skipped: a secret stored plain would defeat it.
var errNoSealer = errors.New("webhooks: no sealer for signing secrets; the server must give the worker its Authority's Sealer")

// SealSecret returns secret as webhook id's row stores it: sealed for id
// and encoded. The API calls it when it creates a webhook; only the
// receiver and this server's key file can then recover the secret.
func (w *Worker) SealSecret(id string, secret store.WebhookSecret) (store.WebhookSecret, error) {
	if w.Sealer == nil {
		return "", errNoSealer
	}
	sealed := w.Sealer.Seal(id, []byte(secret))
	return store.WebhookSecret(sealedPrefix + base64.StdEncoding.EncodeToString(sealed)), nil
}

// secret returns h's signing secret from its stored form: opened when
// sealed, as it is when plain (a row from before sealing). Its errors never
// show the secret.
func (w *Worker) secret(h store.Webhook) (store.WebhookSecret, error) {
	enc, ok := strings.CutPrefix(string(h.Secret), sealedPrefix)
	if !ok {
		if strings.HasPrefix(string(h.Secret), secretPrefix) {
			return h.Secret, nil
		}
		return "", fmt.Errorf("webhooks: webhook %s: the stored signing secret is neither sealed nor whsec_; re-create the webhook", h.ID)
	}
	if w.Sealer == nil {
		return "", errNoSealer
	}
	sealed, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("webhooks: webhook %s: the sealed signing secret is not base64; restore the store from a backup or re-create the webhook", h.ID)
	}
	plain, err := w.Sealer.Open(h.ID, sealed)
	if err != nil {
		return "", fmt.Errorf("webhooks: webhook %s: open the signing secret: %w", h.ID, err)
	}
	return store.WebhookSecret(plain), nil
}
