package store

import (
	"context"
	"fmt"
	"math"
	"time"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// The usage part of pgQuerier (UsageQuerier). The schema is
// postgres/migrations/0006_usage.sql. Two workers recording the same
// reservation in SERIALIZABLE transactions collide on its row, and InTx
// runs the loser again; the windows' primary key skips a window written
// twice even outside one.

func pgUsageWindow(r pgdb.UsageWindow) UsageWindow {
	return UsageWindow{
		Key: r.Key, Tenant: r.Tenant, Principal: r.Principal, PoolTenant: r.PoolTenant, Pool: r.Pool,
		ReservationID: r.ReservationID, ModelKey: r.ModelKey, Meter: r.Meter, GPUs: int(r.Gpus),
		WindowStart: r.WindowStart.UTC(), WindowEnd: r.WindowEnd.UTC(),
		Quantity: r.Quantity, CreatedAt: r.CreatedAt.UTC(),
	}
}

func (p pgQuerier) ReservationsToMeter(ctx context.Context, now time.Time, limit int) ([]Reservation, error) {
	if err := checkLimit("reservations to meter", limit); err != nil {
		return nil, err
	}
	rows, err := p.q.ReservationsToMeter(ctx, pgdb.ReservationsToMeterParams{
		Now: now, HourStart: HourStart(now), Lim: int32(min(limit, math.MaxInt32)),
	})
	var out []Reservation
	if err == nil {
		out, err = p.withDevices(ctx, convertRows(rows, pgReservation))
	}
	if err != nil {
		return nil, fmt.Errorf("store: reservations to meter: %w", err)
	}
	return out, nil
}

func (p pgQuerier) RecordUsage(ctx context.Context, reservationID string, windows []UsageWindow, meteredUntil time.Time) (int, error) {
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("store: record usage of reservation %q: %w", reservationID, pgClassify(err))
	}
	if err := checkUsageWindows(reservationID, windows); err != nil {
		return fail(err)
	}
	if _, err := p.q.GetReservation(ctx, reservationID); err != nil {
		return fail(err)
	}
	added := 0
	for _, w := range windows {
		n, err := p.q.InsertUsageWindow(ctx, pgdb.InsertUsageWindowParams{
			Key: w.Key, Tenant: w.Tenant, Principal: w.Principal, PoolTenant: w.PoolTenant, Pool: w.Pool,
			ReservationID: w.ReservationID, ModelKey: w.ModelKey, Meter: w.Meter, Gpus: int64(w.GPUs),
			WindowStart: w.WindowStart, WindowEnd: w.WindowEnd, Quantity: w.Quantity,
		})
		if err != nil {
			return fail(err)
		}
		added += int(n)
	}
	if _, err := p.q.AdvanceMeteredUntil(ctx, pgdb.AdvanceMeteredUntilParams{
		ID: reservationID, MeteredUntil: meteredUntil,
	}); err != nil {
		return fail(err)
	}
	return added, nil
}

func (p pgQuerier) ListUsage(ctx context.Context, f UsageFilter) ([]UsageWindow, error) {
	if err := checkUsageFilter(f); err != nil {
		return nil, err
	}
	rows, err := p.q.ListUsage(ctx, pgdb.ListUsageParams{
		Tenant: toPgText(f.Tenant), Principal: toPgText(f.Principal),
		PoolTenant: toPgText(f.PoolTenant), Pool: toPgText(f.Pool), Meter: toPgText(f.Meter),
		Since: toNullTime(f.From), Until: toNullTime(f.To), After: toPgText(f.After),
		Lim: int32(min(f.Limit, math.MaxInt32)),
	})
	if err != nil {
		return nil, fmt.Errorf("store: list usage: %w", err)
	}
	return convertRows(rows, pgUsageWindow), nil
}
