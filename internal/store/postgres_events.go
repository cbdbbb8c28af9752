package store

import (
	"context"
	"fmt"
	"time"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// The events part of pgQuerier (EventQuerier). The schema, and why seq is
// in commit order, is postgres/migrations/0009_events.sql.

func (p pgQuerier) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	if err := checkEventFilter(f); err != nil {
		return nil, err
	}
	arg := pgdb.ListEventsParams{After: f.After, Kinds: f.Kinds, Lim: int32(min(f.Limit, 1<<30))}
	if !f.AllTenants {
		arg.Tenant = toPgText(f.Tenant)
	}
	if f.Kinds != nil && len(f.Kinds) == 0 {
		return nil, nil // no kind: nothing, not everything
	}
	rows, err := p.q.ListEvents(ctx, arg)
	if err != nil {
		return nil, fmt.Errorf("store: list events: %w", err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		data, err := eventData(r.Seq, r.Data)
		if err != nil {
			return nil, err
		}
		out[i] = Event{
			Seq: r.Seq, Kind: r.Kind, Type: r.Type, Tenant: r.Tenant, Subject: r.Subject,
			Data: data, CreatedAt: r.CreatedAt.UTC(),
		}
	}
	return out, nil
}

func (p pgQuerier) EventBounds(ctx context.Context) (EventBounds, error) {
	r, err := p.q.EventBounds(ctx)
	if err != nil {
		return EventBounds{}, fmt.Errorf("store: event bounds: %w", err)
	}
	return EventBounds{Oldest: r.Oldest, Latest: r.Latest}, nil
}

func (p pgQuerier) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	n, err := p.q.PruneEvents(ctx, before)
	if err != nil {
		return 0, fmt.Errorf("store: prune events: %w", err)
	}
	return n, nil
}
