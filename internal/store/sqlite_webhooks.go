package store

import (
	"context"
	"fmt"
	"time"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// The webhooks part of sqliteQuerier (WebhookQuerier). The schema is
// sqlite/migrations/0010_webhooks.sql. SQLite means one process, but the
// claims and cursor moves are the same compare-and-set UPDATEs as on
// PostgreSQL, so the worker needs no engine of its own.

func sqliteWebhook(r sqlitedb.Webhook) Webhook {
	return Webhook{
		ID: r.ID, Tenant: r.Tenant, URL: r.Url, Events: splitPatterns(r.Events), Secret: WebhookSecret(r.Secret),
		State: WebhookState(r.State), Cursor: r.CursorSeq, Attempts: int(r.Attempts),
		FailingSince: fromNullMicros(r.FailingSince), NextAttemptAt: fromNullMicros(r.NextAttemptAt),
		CreatedAt: fromMicros(r.CreatedAt), PreviousSecret: WebhookSecret(r.PreviousSecret),
		PreviousUntil: fromNullMicros(r.PreviousUntil),
	}
}

func sqliteWebhookDelivery(r sqlitedb.WebhookDelivery) WebhookDelivery {
	return WebhookDelivery{
		ID: r.ID, WebhookID: r.WebhookID, EventSeq: r.EventSeq, EventType: r.EventType,
		Attempt: int(r.Attempt), HTTPStatus: int(r.HttpStatus), Error: r.Error,
		Duration: time.Duration(r.DurationUs) * time.Microsecond, CreatedAt: fromMicros(r.CreatedAt),
	}
}

func (s sqliteQuerier) CreateWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	if err := checkWebhook(w); err != nil {
		return Webhook{}, fmt.Errorf("store: create webhook: %w", err)
	}
	r, err := s.q.CreateWebhook(ctx, sqlitedb.CreateWebhookParams{
		ID: w.ID, Tenant: w.Tenant, Url: w.URL, Events: joinPatterns(w.Events), Secret: string(w.Secret),
	})
	if err != nil {
		return Webhook{}, fmt.Errorf("store: create webhook %q in tenant %q: %w", w.ID, w.Tenant, sqliteClassify(err))
	}
	return sqliteWebhook(r), nil
}

func (s sqliteQuerier) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	r, err := s.q.GetWebhook(ctx, id)
	if err != nil {
		return Webhook{}, fmt.Errorf("store: get webhook %q: %w", id, sqliteClassify(err))
	}
	return sqliteWebhook(r), nil
}

func (s sqliteQuerier) ListWebhooks(ctx context.Context, tenant string) ([]Webhook, error) {
	rows, err := s.q.ListWebhooks(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list webhooks of tenant %q: %w", tenant, err)
	}
	return convertRows(rows, sqliteWebhook), nil
}

func (s sqliteQuerier) DeleteWebhook(ctx context.Context, id string) error {
	n, err := s.q.DeleteWebhook(ctx, id)
	if err := sqliteAffected(n, err, "delete webhook %q", id); err != nil {
		return err
	}
	if err := s.q.DeleteWebhookDeliveries(ctx, id); err != nil {
		return fmt.Errorf("store: delete webhook %q's deliveries: %w", id, err)
	}
	return nil
}

func (s sqliteQuerier) EnableWebhook(ctx context.Context, id string) (Webhook, error) {
	r, err := s.q.EnableWebhook(ctx, id)
	if err != nil {
		return Webhook{}, fmt.Errorf("store: enable webhook %q: %w", id, sqliteClassify(err))
	}
	return sqliteWebhook(r), nil
}

func (s sqliteQuerier) RotateWebhookSecret(ctx context.Context, rot WebhookRotation) (Webhook, error) {
	if err := checkRotation(rot); err != nil {
		return Webhook{}, fmt.Errorf("store: rotate webhook secret: %w", err)
	}
	r, err := s.q.RotateWebhookSecret(ctx, sqlitedb.RotateWebhookSecretParams{
		Secret: string(rot.Secret), KeepUs: rot.Keep.Microseconds(), PreviousSecret: string(rot.Previous),
		ID: rot.ID, OldSecret: string(rot.Old),
	})
	if err != nil {
		return Webhook{}, rotateMissed(ctx, s, rot.ID, sqliteClassify(err))
	}
	return sqliteWebhook(r), nil
}

func (s sqliteQuerier) DueWebhooks(ctx context.Context, now time.Time, limit int) ([]Webhook, error) {
	if err := checkLimit("due webhooks", limit); err != nil {
		return nil, err
	}
	rows, err := s.q.DueWebhooks(ctx, sqlitedb.DueWebhooksParams{Now: now.UnixMicro(), Lim: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("store: due webhooks: %w", err)
	}
	return convertRows(rows, sqliteWebhook), nil
}

func (s sqliteQuerier) ClaimWebhook(ctx context.Context, id, owner string, cursor int64, until time.Time) (bool, error) {
	n, err := s.q.ClaimWebhook(ctx, sqlitedb.ClaimWebhookParams{Owner: owner, LeaseUntil: until.UnixMicro(), ID: id, CursorSeq: cursor})
	if err != nil {
		return false, fmt.Errorf("store: claim webhook %q: %w", id, err)
	}
	return n == 1, nil
}

func (s sqliteQuerier) ReleaseWebhook(ctx context.Context, id, owner string) error {
	if _, err := s.q.ReleaseWebhook(ctx, sqlitedb.ReleaseWebhookParams{ID: id, Owner: owner}); err != nil {
		return fmt.Errorf("store: release webhook %q: %w", id, err)
	}
	return nil
}

func (s sqliteQuerier) AdvanceWebhook(ctx context.Context, id string, from, to int64) (bool, error) {
	n, err := s.q.AdvanceWebhook(ctx, sqlitedb.AdvanceWebhookParams{ToSeq: to, ID: id, FromSeq: from})
	if err != nil {
		return false, fmt.Errorf("store: advance webhook %q from %d to %d: %w", id, from, to, err)
	}
	return n == 1, nil
}

func (s sqliteQuerier) FailWebhookAttempt(ctx context.Context, id string, cursor int64, next time.Time, failing bool) (Webhook, error) {
	r, err := s.q.FailWebhookAttempt(ctx, sqlitedb.FailWebhookAttemptParams{
		NextAttemptAt: next.UnixMicro(), Failing: boolInt(failing), ID: id, CursorSeq: cursor,
	})
	if err != nil {
		return Webhook{}, fmt.Errorf("store: fail webhook %q at cursor %d: %w", id, cursor, sqliteClassify(err))
	}
	return sqliteWebhook(r), nil
}

func (s sqliteQuerier) InsertWebhookDelivery(ctx context.Context, d WebhookDelivery) (WebhookDelivery, error) {
	r, err := s.q.InsertWebhookDelivery(ctx, sqlitedb.InsertWebhookDeliveryParams{
		WebhookID: d.WebhookID, EventSeq: d.EventSeq, EventType: d.EventType,
		Attempt: int64(d.Attempt), HttpStatus: int64(d.HTTPStatus),
		Error: d.Error, DurationUs: d.Duration.Microseconds(),
	})
	if err != nil {
		return WebhookDelivery{}, fmt.Errorf("store: log delivery of webhook %q: %w", d.WebhookID, err)
	}
	return sqliteWebhookDelivery(r), nil
}

func (s sqliteQuerier) ListWebhookDeliveries(ctx context.Context, f WebhookDeliveryFilter) ([]WebhookDelivery, error) {
	if err := checkDeliveryFilter(f); err != nil {
		return nil, err
	}
	rows, err := s.q.ListWebhookDeliveries(ctx, sqlitedb.ListWebhookDeliveriesParams{
		WebhookID: f.WebhookID, Before: f.Before, Lim: int64(f.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("store: list deliveries of webhook %q: %w", f.WebhookID, err)
	}
	return convertRows(rows, sqliteWebhookDelivery), nil
}
