package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// The events part of sqliteQuerier (EventQuerier). The schema is
// sqlite/migrations/0009_events.sql; one writer at a time keeps seq in
// commit order.

func (s sqliteQuerier) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	if err := checkEventFilter(f); err != nil {
		return nil, err
	}
	arg := sqlitedb.ListEventsParams{After: f.After, Lim: int64(f.Limit)}
	if !f.AllTenants {
		arg.Tenant = toNullString(f.Tenant)
	}
	if f.Kinds != nil {
		if len(f.Kinds) == 0 {
			return nil, nil // no kind: nothing, not everything
		}
		kinds, err := json.Marshal(f.Kinds)
		if err != nil {
			return nil, fmt.Errorf("store: list events: %w", err)
		}
		arg.Kinds = string(kinds)
	}
	rows, err := s.q.ListEvents(ctx, arg)
	if err != nil {
		return nil, fmt.Errorf("store: list events: %w", err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		data, err := eventData(r.Seq, []byte(r.Data))
		if err != nil {
			return nil, err
		}
		out[i] = Event{
			Seq: r.Seq, Kind: r.Kind, Type: r.Type, Tenant: r.Tenant, Subject: r.Subject,
			Data: data, CreatedAt: fromMicros(r.CreatedAt),
		}
	}
	return out, nil
}

func (s sqliteQuerier) EventBounds(ctx context.Context) (EventBounds, error) {
	r, err := s.q.EventBounds(ctx)
	if err != nil {
		return EventBounds{}, fmt.Errorf("store: event bounds: %w", err)
	}
	return EventBounds{Oldest: r.Oldest, Latest: r.Latest}, nil
}

func (s sqliteQuerier) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	n, err := s.q.PruneEvents(ctx, before.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("store: prune events: %w", err)
	}
	return n, nil
}
