package store

import (
	"context"
	"fmt"
	"time"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// The usage part of sqliteQuerier (UsageQuerier). The schema is
// sqlite/migrations/0006_usage.sql. Every transaction takes SQLite's write
// lock at BEGIN, so a RecordUsage in InTx runs alone; the windows' primary
// key skips a window written twice even outside one.

func sqliteUsageWindow(r sqlitedb.UsageWindow) UsageWindow {
	return UsageWindow{
		Key: r.Key, Tenant: r.Tenant, Principal: r.Principal, PoolTenant: r.PoolTenant, Pool: r.Pool,
		ReservationID: r.ReservationID, ModelKey: r.ModelKey, Meter: r.Meter, GPUs: int(r.Gpus),
		WindowStart: fromMicros(r.WindowStart), WindowEnd: fromMicros(r.WindowEnd),
		Quantity: r.Quantity, CreatedAt: fromMicros(r.CreatedAt),
	}
}

func (s sqliteQuerier) ReservationsToMeter(ctx context.Context, now time.Time, limit int) ([]Reservation, error) {
	if err := checkLimit("reservations to meter", limit); err != nil {
		return nil, err
	}
	rows, err := s.q.ReservationsToMeter(ctx, sqlitedb.ReservationsToMeterParams{
		Now: now.UnixMicro(), HourStart: HourStart(now).UnixMicro(), Lim: int64(limit),
	})
	var out []Reservation
	if err == nil {
		out, err = s.withDevices(ctx, convertRows(rows, sqliteReservation))
	}
	if err != nil {
		return nil, fmt.Errorf("store: reservations to meter: %w", err)
	}
	return out, nil
}

func (s sqliteQuerier) RecordUsage(ctx context.Context, reservationID string, windows []UsageWindow, meteredUntil time.Time) (int, error) {
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("store: record usage of reservation %q: %w", reservationID, sqliteClassify(err))
	}
	if err := checkUsageWindows(reservationID, windows); err != nil {
		return fail(err)
	}
	if _, err := s.q.GetReservation(ctx, reservationID); err != nil {
		return fail(err)
	}
	added := 0
	for _, w := range windows {
		n, err := s.q.InsertUsageWindow(ctx, sqlitedb.InsertUsageWindowParams{
			Key: w.Key, Tenant: w.Tenant, Principal: w.Principal, PoolTenant: w.PoolTenant, Pool: w.Pool,
			ReservationID: w.ReservationID, ModelKey: w.ModelKey, Meter: w.Meter, Gpus: int64(w.GPUs),
			WindowStart: w.WindowStart.UnixMicro(), WindowEnd: w.WindowEnd.UnixMicro(), Quantity: w.Quantity,
		})
		if err != nil {
			return fail(err)
		}
		added += int(n)
	}
	if _, err := s.q.AdvanceMeteredUntil(ctx, sqlitedb.AdvanceMeteredUntilParams{
		ID: reservationID, MeteredUntil: meteredUntil.UnixMicro(),
	}); err != nil {
		return fail(err)
	}
	return added, nil
}

func (s sqliteQuerier) ListUsage(ctx context.Context, f UsageFilter) ([]UsageWindow, error) {
	if err := checkUsageFilter(f); err != nil {
		return nil, err
	}
	rows, err := s.q.ListUsage(ctx, sqlitedb.ListUsageParams{
		Tenant: toNullString(f.Tenant), Principal: toNullString(f.Principal),
		PoolTenant: toNullString(f.PoolTenant), Pool: toNullString(f.Pool), Meter: toNullString(f.Meter),
		Since: toNullMicros(f.From), Until: toNullMicros(f.To), After: toNullString(f.After),
		Lim: int64(f.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("store: list usage: %w", err)
	}
	return convertRows(rows, sqliteUsageWindow), nil
}
