package webhooks

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// A webhook's signing secret must be read back to sign, so it cannot be
// hashed; instead the store keeps it sealed under the deployment's key file
// (pki.Sealer), bound to the webhook's id, so that a copy of the database
// alone cannot sign deliveries, and a sealed secret copied into another
// webhook's row does not open there. The column holds sealedPrefix and the
// standard base64 of the sealed blob. A plain whsec_ value, written before
// secrets were sealed, is still read as it is. A rotated webhook keeps its
// previous secret for a while too, sealed the same way for a name of its
// own (previousName).

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

// previousName is the name a webhook's previous secret is sealed for:
// not its id, so that the previous secret's sealed value does not open as
// the current one (copied back into the secret column it would otherwise
// sign again past its expiry), nor the current one's as the previous. Ids
// are wh_ and hex, so none ends in this suffix.
func previousName(id string) string { return id + "#previous" }

// SealRotation returns the rotation that makes secret, a new secret from
// NewSecret, h's secret: secret sealed for h's id, and h's current secret
// opened and sealed again as its previous one, kept for keep (none when
// keep is 0). A plain secret from before sealing comes out sealed too.
func (w *Worker) SealRotation(h store.Webhook, secret store.WebhookSecret, keep time.Duration) (store.WebhookRotation, error) {
	r := store.WebhookRotation{ID: h.ID, Old: h.Secret, Keep: keep}
	var err error
	if r.Secret, err = w.SealSecret(h.ID, secret); err != nil {
		return store.WebhookRotation{}, err
	}
	if keep == 0 {
		return r, nil
	}
	old, err := w.open(h.ID, h.ID, h.Secret)
	if err != nil {
		return store.WebhookRotation{}, err
	}
	if r.Previous, err = w.SealSecret(previousName(h.ID), old); err != nil {
		return store.WebhookRotation{}, err
	}
	return r, nil
}

// keys are a webhook's secrets, opened: the current one, and the previous
// one with when it stops signing (zero when there is none).
type keys struct {
	current, previous store.WebhookSecret
	previousUntil     time.Time
}

// at returns the secrets that sign a delivery made at now, the current
// first: the previous one too until it expires, so that a receiver that
// verifies with either accepts it.
func (k keys) at(now time.Time) []store.WebhookSecret {
	if k.previous != "" && now.Before(k.previousUntil) {
		return []store.WebhookSecret{k.current, k.previous}
	}
	return []store.WebhookSecret{k.current}
}

// keys opens h's secrets as of now: the previous one only while it is
// still valid, since one that has expired is never used and need not open.
// Its errors never show a secret.
func (w *Worker) keys(h store.Webhook, now time.Time) (keys, error) {
	cur, err := w.open(h.ID, h.ID, h.Secret)
	if err != nil {
		return keys{}, err
	}
	k := keys{current: cur}
	if h.PreviousSecret != "" && now.Before(h.PreviousUntil) {
		if k.previous, err = w.open(h.ID, previousName(h.ID), h.PreviousSecret); err != nil {
			return keys{}, err
		}
		k.previousUntil = h.PreviousUntil
	}
	return k, nil
}

// open returns the secret stored for webhook id, sealed for name: opened
// when sealed, as it is when plain (a row from before sealing). Its errors
// never show the secret.
func (w *Worker) open(id, name string, stored store.WebhookSecret) (store.WebhookSecret, error) {
	what := "signing secret"
	if name != id {
		what = "previous signing secret"
	}
	enc, ok := strings.CutPrefix(string(stored), sealedPrefix)
	if !ok {
		if strings.HasPrefix(string(stored), secretPrefix) {
			return stored, nil
		}
		return "", fmt.Errorf("webhooks: webhook %s: the stored %s is neither sealed nor whsec_; replace it with webhooks rotate-secret --keep-previous 0", id, what)
	}
	if w.Sealer == nil {
		return "", errNoSealer
	}
	sealed, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("webhooks: webhook %s: the sealed %s is not base64; restore the store from a backup, or replace it with webhooks rotate-secret --keep-previous 0", id, what)
	}
	plain, err := w.Sealer.Open(name, sealed)
	if err != nil {
		return "", fmt.Errorf("webhooks: webhook %s: open the %s: %w", id, what, err)
	}
	return store.WebhookSecret(plain), nil
}
