package store

import (
	"context"
	"fmt"
	"math"
	"time"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// The webhooks part of pgQuerier (WebhookQuerier). The schema is
// postgres/migrations/0010_webhooks.sql. Claims and cursor moves are
// single UPDATEs with the expected old values in their WHERE: whichever of
// two processes writes first wins, and the other's update matches no row.

func pgWebhook(r pgdb.Webhook) Webhook {
	return Webhook{
		ID: r.ID, Tenant: r.Tenant, URL: r.Url, Events: splitPatterns(r.Events), Secret: WebhookSecret(r.Secret),
		State: WebhookState(r.State), Cursor: r.CursorSeq, Attempts: int(r.Attempts),
		FailingSince: fromNullTime(r.FailingSince), NextAttemptAt: fromNullTime(r.NextAttemptAt),
		CreatedAt: r.CreatedAt.UTC(), PreviousSecret: WebhookSecret(r.PreviousSecret),
		PreviousUntil: fromNullTime(r.PreviousUntil),
	}
}

func pgWebhookDelivery(r pgdb.WebhookDelivery) WebhookDelivery {
	return WebhookDelivery{
		ID: r.ID, WebhookID: r.WebhookID, EventSeq: r.EventSeq, EventType: r.EventType,
		Attempt: int(r.Attempt), HTTPStatus: int(r.HttpStatus), Error: r.Error,
		Duration: time.Duration(r.DurationUs) * time.Microsecond, CreatedAt: r.CreatedAt.UTC(),
	}
}

func (p pgQuerier) CreateWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	if err := checkWebhook(w); err != nil {
		return Webhook{}, fmt.Errorf("store: create webhook: %w", err)
	}
	r, err := p.q.CreateWebhook(ctx, pgdb.CreateWebhookParams{
		ID: w.ID, Tenant: w.Tenant, Url: w.URL, Events: joinPatterns(w.Events), Secret: string(w.Secret),
	})
	if err != nil {
		return Webhook{}, fmt.Errorf("store: create webhook %q in tenant %q: %w", w.ID, w.Tenant, pgClassify(err))
	}
	return pgWebhook(r), nil
}

func (p pgQuerier) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	r, err := p.q.GetWebhook(ctx, id)
	if err != nil {
		return Webhook{}, fmt.Errorf("store: get webhook %q: %w", id, pgClassify(err))
	}
	return pgWebhook(r), nil
}

func (p pgQuerier) ListWebhooks(ctx context.Context, tenant string) ([]Webhook, error) {
	rows, err := p.q.ListWebhooks(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list webhooks of tenant %q: %w", tenant, err)
	}
	return convertRows(rows, pgWebhook), nil
}

func (p pgQuerier) DeleteWebhook(ctx context.Context, id string) error {
	n, err := p.q.DeleteWebhook(ctx, id)
	if err := pgAffected(n, err, "delete webhook %q", id); err != nil {
		return err
	}
	if err := p.q.DeleteWebhookDeliveries(ctx, id); err != nil {
		return fmt.Errorf("store: delete webhook %q's deliveries: %w", id, err)
	}
	return nil
}

func (p pgQuerier) EnableWebhook(ctx context.Context, id string) (Webhook, error) {
	r, err := p.q.EnableWebhook(ctx, id)
	if err != nil {
		return Webhook{}, fmt.Errorf("store: enable webhook %q: %w", id, pgClassify(err))
	}
	return pgWebhook(r), nil
}

func (p pgQuerier) RotateWebhookSecret(ctx context.Context, rot WebhookRotation) (Webhook, error) {
	if err := checkRotation(rot); err != nil {
		return Webhook{}, fmt.Errorf("store: rotate webhook secret: %w", err)
	}
	r, err := p.q.RotateWebhookSecret(ctx, pgdb.RotateWebhookSecretParams{
		Secret: string(rot.Secret), KeepUs: rot.Keep.Microseconds(), PreviousSecret: string(rot.Previous),
		ID: rot.ID, OldSecret: string(rot.Old),
	})
	if err != nil {
		return Webhook{}, rotateMissed(ctx, p, rot.ID, pgClassify(err))
	}
	return pgWebhook(r), nil
}

func (p pgQuerier) DueWebhooks(ctx context.Context, now time.Time, limit int) ([]Webhook, error) {
	if err := checkLimit("due webhooks", limit); err != nil {
		return nil, err
	}
	rows, err := p.q.DueWebhooks(ctx, pgdb.DueWebhooksParams{Now: now, Lim: int32(min(limit, math.MaxInt32))})
	if err != nil {
		return nil, fmt.Errorf("store: due webhooks: %w", err)
	}
	return convertRows(rows, pgWebhook), nil
}

func (p pgQuerier) ClaimWebhook(ctx context.Context, id, owner string, cursor int64, until time.Time) (bool, error) {
	n, err := p.q.ClaimWebhook(ctx, pgdb.ClaimWebhookParams{Owner: owner, LeaseUntil: until, ID: id, CursorSeq: cursor})
	if err != nil {
		return false, fmt.Errorf("store: claim webhook %q: %w", id, err)
	}
	return n == 1, nil
}

func (p pgQuerier) ReleaseWebhook(ctx context.Context, id, owner string) error {
	if _, err := p.q.ReleaseWebhook(ctx, pgdb.ReleaseWebhookParams{ID: id, Owner: owner}); err != nil {
		return fmt.Errorf("store: release webhook %q: %w", id, err)
	}
	return nil
}

func (p pgQuerier) AdvanceWebhook(ctx context.Context, id string, from, to int64) (bool, error) {
	n, err := p.q.AdvanceWebhook(ctx, pgdb.AdvanceWebhookParams{ToSeq: to, ID: id, FromSeq: from})
	if err != nil {
		return false, fmt.Errorf("store: advance webhook %q from %d to %d: %w", id, from, to, err)
	}
	return n == 1, nil
}

func (p pgQuerier) FailWebhookAttempt(ctx context.Context, id string, cursor int64, next time.Time, failing bool) (Webhook, error) {
	r, err := p.q.FailWebhookAttempt(ctx, pgdb.FailWebhookAttemptParams{
		NextAttemptAt: next, Failing: failing, ID: id, CursorSeq: cursor,
	})
	if err != nil {
		return Webhook{}, fmt.Errorf("store: fail webhook %q at cursor %d: %w", id, cursor, pgClassify(err))
	}
	return pgWebhook(r), nil
}

func (p pgQuerier) InsertWebhookDelivery(ctx context.Context, d WebhookDelivery) (WebhookDelivery, error) {
	r, err := p.q.InsertWebhookDelivery(ctx, pgdb.InsertWebhookDeliveryParams{
		WebhookID: d.WebhookID, EventSeq: d.EventSeq, EventType: d.EventType,
		Attempt: int32(min(d.Attempt, math.MaxInt32)), HttpStatus: int32(min(d.HTTPStatus, math.MaxInt32)),
		Error: d.Error, DurationUs: d.Duration.Microseconds(),
	})
	if err != nil {
		return WebhookDelivery{}, fmt.Errorf("store: log delivery of webhook %q: %w", d.WebhookID, err)
	}
	return pgWebhookDelivery(r), nil
}

func (p pgQuerier) ListWebhookDeliveries(ctx context.Context, f WebhookDeliveryFilter) ([]WebhookDelivery, error) {
	if err := checkDeliveryFilter(f); err != nil {
		return nil, err
	}
	rows, err := p.q.ListWebhookDeliveries(ctx, pgdb.ListWebhookDeliveriesParams{
		WebhookID: f.WebhookID, Before: f.Before, Lim: int32(min(f.Limit, math.MaxInt32)),
	})
	if err != nil {
		return nil, fmt.Errorf("store: list deliveries of webhook %q: %w", f.WebhookID, err)
	}
	return convertRows(rows, pgWebhookDelivery), nil
}
