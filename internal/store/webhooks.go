package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Webhooks deliver a tenant's events (the outbox, events.go) to an HTTP
// endpoint in seq order; internal/webhooks is the worker that delivers.
// The schema is migrations/0010_webhooks.sql.

// WebhookState says whether a webhook is being delivered.
type WebhookState string

const (
	// WebhookActive webhooks are delivered, retrying a failed event with
	// backoff.
	WebhookActive WebhookState = "active"
	// WebhookFailing webhooks kept failing one event past the retry bound
	// and wait, their cursor where it was, until EnableWebhook.
	WebhookFailing WebhookState = "failing"
)

// WebhookSecret is a webhook's signing secret, whsec_ and base64, or its
// sealed form as the store keeps it (Webhook.Secret). Its
// String, GoString and LogValue hide it, so that printing or logging a
// Webhook never shows it; convert it with string() where it must be used.
type WebhookSecret string

// String hides the secret.
func (WebhookSecret) String() string { return "whsec_(hidden)" }

// GoString hides the secret from %#v.
func (s WebhookSecret) GoString() string { return s.String() }

// LogValue hides the secret from slog.
func (s WebhookSecret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Webhook is one endpoint a tenant's events are delivered to.
type Webhook struct {
	// ID names the webhook (wh_...), unique across tenants.
	ID string
	// Tenant owns the webhook; only its events are delivered.
	Tenant string
	// URL is where events are POSTed.
	URL string
	// Events are the patterns of the event types delivered: a type
	// (node.ready), a kind (reservation.*) or everything (*).
	Events []string
	// Secret is the signing secret as stored: sealed under the key file
	// for this ID (sealed:v1:...), or a plain whsec_ value in rows from
	// before sealing. The store keeps it as given; internal/webhooks seals
	// and opens it.
	Secret WebhookSecret
	// State is active or failing.
	State WebhookState
	// Cursor is the seq of the last event handled: delivered, or skipped
	// as not matching Events. It starts at the newest seq at creation.
	Cursor int64
	// Attempts is how many attempts at the event after Cursor failed.
	Attempts int
	// FailingSince is when the first of those failed; zero when none did.
	FailingSince time.Time
	// NextAttemptAt is when the event after Cursor may be tried again;
	// zero when it may be tried now.
	NextAttemptAt time.Time
	// CreatedAt is when the webhook was made, by the store's clock.
	CreatedAt time.Time
	// PreviousSecret is the secret the last RotateWebhookSecret replaced,
	// sealed like Secret but for a name of its own (internal/webhooks), so
	// that it cannot stand in for Secret; empty when there is none. It is
	// kept so that receivers can switch secrets without a gap.
	PreviousSecret WebhookSecret
	// PreviousUntil is when PreviousSecret stops signing deliveries, by the
	// store's clock; zero when there is none. It may be past: an expired
	// one stays in the row, never used, until the next rotation.
	PreviousUntil time.Time
}

// MaxKeepPrevious bounds WebhookRotation.Keep: a replaced secret is for a
// switch-over, not a second secret to live on indefinitely.
const MaxKeepPrevious = 7 * 24 * time.Hour

// WebhookRotation replaces one webhook's signing secret
// (RotateWebhookSecret). The secrets are as the row stores them, sealed by
// internal/webhooks, which the store never opens.
type WebhookRotation struct {
	// ID names the webhook.
	ID string
	// Old is the Secret the caller read: the rotation applies only while it
	// is still the one stored, so that of two rotations at once the second
	// cannot keep, as previous, a secret the first already replaced.
	Old WebhookSecret
	// Secret is the new secret.
	Secret WebhookSecret
	// Previous is Old sealed again as a previous secret; ignored when Keep
	// is 0.
	Previous WebhookSecret
	// Keep is how long Previous signs beside Secret, from the store's now,
	// 0 to MaxKeepPrevious; 0 drops the old secret at once.
	Keep time.Duration
}

// WebhookDelivery is one attempt to deliver one event, as logged.
type WebhookDelivery struct {
	// ID orders the log: higher is later.
	ID int64
	// WebhookID names the webhook.
	WebhookID string
	// EventSeq is the event's seq; 0 for a test send.
	EventSeq int64
	// EventType is the event's type, webhook.test for a test send.
	EventType string
	// Attempt counts the attempts at this event, from 1.
	Attempt int
	// HTTPStatus is the receiver's status; 0 when none came back.
	HTTPStatus int
	// Error says why the attempt failed; empty when it was delivered.
	Error string
	// Duration is how long the attempt took.
	Duration time.Duration
	// CreatedAt is when it was logged.
	CreatedAt time.Time
}

// Delivered reports whether the attempt was delivered: a 2xx and no error.
func (d WebhookDelivery) Delivered() bool {
	return d.Error == "" && d.HTTPStatus >= 200 && d.HTTPStatus < 300
}

// WebhookDeliveryFilter selects one webhook's delivery log, newest first.
type WebhookDeliveryFilter struct {
	// WebhookID names the webhook; required.
	WebhookID string
	// Before is the ID of the last delivery of the previous page; 0 reads
	// from the newest.
	Before int64
	// Limit caps the result and must be positive.
	Limit int
}

// WebhookQuerier is the webhooks part of Querier, with the same conventions
// as IAMQuerier. Delivery is claimed and advanced by compare-and-set, so
// any number of processes may run the worker on one PostgreSQL.
type WebhookQuerier interface {
	// CreateWebhook inserts w (ID, Tenant, URL, Events, Secret) active,
	// its cursor at the newest event seq. ErrConflict for a taken ID,
	// ErrNotFound for a missing tenant.
	CreateWebhook(ctx context.Context, w Webhook) (Webhook, error)
	// GetWebhook returns one webhook; ErrNotFound when there is none.
	GetWebhook(ctx context.Context, id string) (Webhook, error)
	// ListWebhooks returns a tenant's webhooks, oldest first.
	ListWebhooks(ctx context.Context, tenant string) ([]Webhook, error)
	// DeleteWebhook removes a webhook and its delivery log; ErrNotFound
	// when there is none. Call it in InTx so both go together.
	DeleteWebhook(ctx context.Context, id string) error
	// EnableWebhook makes a webhook active with its retries from scratch,
	// its cursor unchanged; ErrNotFound when there is none.
	EnableWebhook(ctx context.Context, id string) (Webhook, error)
	// RotateWebhookSecret stores r in one statement: the new secret, and
	// the old one as previous until now plus r.Keep (none when r.Keep is
	// 0), replacing any previous one; cursor, state and log stay. ErrNotFound
	// when there is no webhook r.ID, ErrConflict when its secret is no
	// longer r.Old.
	RotateWebhookSecret(ctx context.Context, r WebhookRotation) (Webhook, error)
	// DueWebhooks returns active webhooks that may be tried at now (no
	// retry wait, no live claim) and have an event of their tenant after
	// their cursor, by ID, at most limit.
	DueWebhooks(ctx context.Context, now time.Time, limit int) ([]Webhook, error)
	// ClaimWebhook takes, or renews, the claim of owner on webhook id until
	// until, provided its cursor is still cursor, it is active, and no
	// other owner holds a claim that has not run out. It reports whether
	// the claim is owner's.
	ClaimWebhook(ctx context.Context, id, owner string, cursor int64, until time.Time) (bool, error)
	// ReleaseWebhook drops owner's claim on webhook id, if it holds one.
	ReleaseWebhook(ctx context.Context, id, owner string) error
	// AdvanceWebhook moves the cursor from from to to (to > from) and
	// clears the retry bookkeeping, only when the cursor is still from; it
	// reports whether it moved.
	AdvanceWebhook(ctx context.Context, id string, from, to int64) (bool, error)
	// FailWebhookAttempt counts one more failed attempt at the event after
	// cursor, stamping FailingSince on the first, and sets when the next may
	// run; failing marks the webhook failing. It only applies while the
	// cursor is still cursor: ErrNotFound otherwise, or without a webhook.
	FailWebhookAttempt(ctx context.Context, id string, cursor int64, next time.Time, failing bool) (Webhook, error)
	// InsertWebhookDelivery logs one attempt (all fields but ID and
	// CreatedAt).
	InsertWebhookDelivery(ctx context.Context, d WebhookDelivery) (WebhookDelivery, error)
	// ListWebhookDeliveries returns the log f selects, newest first.
	ListWebhookDeliveries(ctx context.Context, f WebhookDeliveryFilter) ([]WebhookDelivery, error)
}

// errBadWebhook is returned for a webhook the store refuses to write.
var errBadWebhook = errors.New("invalid webhook")

// checkWebhook refuses a webhook CreateWebhook cannot write. The patterns
// are joined with commas in one column, so none may hold one. The worker
// and the API check URL and patterns properly; this only keeps the column
// readable.
func checkWebhook(w Webhook) error {
	switch {
	case w.ID == "" || w.Tenant == "" || w.URL == "":
		return fmt.Errorf("a webhook needs an id, a tenant and a URL: %w", errBadWebhook)
	case w.Secret == "":
		return fmt.Errorf("webhook %q has no secret: %w", w.ID, errBadWebhook)
	case len(w.Events) == 0:
		return fmt.Errorf("webhook %q has no event patterns: %w", w.ID, errBadWebhook)
	}
	for _, p := range w.Events {
		if p == "" || strings.Contains(p, ",") {
			return fmt.Errorf("webhook %q has the event pattern %q: %w", w.ID, p, errBadWebhook)
		}
	}
	return nil
}

// checkRotation refuses a rotation RotateWebhookSecret cannot write.
func checkRotation(r WebhookRotation) error {
	switch {
	case r.ID == "" || r.Old == "" || r.Secret == "":
		return fmt.Errorf("a rotation needs the webhook's id, its old secret and a new one: %w", errBadWebhook)
	case r.Keep < 0 || r.Keep > MaxKeepPrevious:
		return fmt.Errorf("webhook %q: the old secret may be kept 0 to %v, not %v: %w", r.ID, MaxKeepPrevious, r.Keep, errBadWebhook)
	case r.Keep > 0 && r.Previous == "":
		return fmt.Errorf("webhook %q: the old secret is to be kept but none was given: %w", r.ID, errBadWebhook)
	}
	return nil
}

// rotateMissed tells why a rotation's compare-and-set matched no row: the
// webhook is gone (ErrNotFound, as err says) or its secret changed since
// the caller read it (ErrConflict).
func rotateMissed(ctx context.Context, q WebhookQuerier, id string, err error) error {
	if !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("store: rotate the secret of webhook %q: %w", id, err)
	}
	if _, gerr := q.GetWebhook(ctx, id); gerr != nil {
		return gerr
	}
	return fmt.Errorf("store: rotate the secret of webhook %q: it was rotated since it was read: %w", id, ErrConflict)
}

// joinPatterns and splitPatterns store Events in one text column.
func joinPatterns(ps []string) string { return strings.Join(ps, ",") }

func splitPatterns(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// checkDeliveryFilter refuses a filter the engines cannot run.
func checkDeliveryFilter(f WebhookDeliveryFilter) error {
	if f.WebhookID == "" {
		return fmt.Errorf("store: list webhook deliveries: name a webhook: %w", errBadWebhook)
	}
	return checkLimit("list webhook deliveries", f.Limit)
}
