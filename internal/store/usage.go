package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Usage: the GPU time reservations held, metered into UTC clock-hour
// windows by the meter worker (internal/capacity), one row per reservation,
// hour and GPU model. The schema is migrations/0006_usage.sql.

// MicrosPerHour turns a UsageWindow's Quantity (GPU-microseconds) into
// GPU-hours: quantity / MicrosPerHour.
const MicrosPerHour = int64(time.Hour / time.Microsecond)

// errBadUsage is returned for a usage window or filter the store refuses.
var errBadUsage = errors.New("invalid usage request")

// UsageWindow is the GPU time one reservation held of one model within one
// UTC clock hour.
type UsageWindow struct {
	// Key is the idempotency key, unique across all usage:
	// "<reservation id>/<model key>/<hour start, unix seconds>". Writing a
	// window with a key already written is skipped, never counted twice.
	Key string
	// Tenant and Principal made the reservation.
	Tenant, Principal string
	// PoolTenant and Pool name the pool its GPUs came from.
	PoolTenant, Pool string
	// ReservationID names the reservation.
	ReservationID string
	// ModelKey is the GPU model's catalog key; Meter is what the time counts
	// against, such as "gpu.h100.hours".
	ModelKey, Meter string
	// GPUs is how many GPUs of the model the reservation held.
	GPUs int
	// WindowStart and WindowEnd bound the part of the hour the reservation
	// held them: within one UTC clock hour, WindowStart before WindowEnd.
	WindowStart, WindowEnd time.Time
	// Quantity is GPUs times the microseconds from WindowStart to
	// WindowEnd: exact, so that sums never drift. Hours() is for display.
	Quantity int64
	// CreatedAt is when the window was written, by the store's clock.
	CreatedAt time.Time
}

// Hours is the window's quantity in GPU-hours, for display; sum Quantity,
// not Hours, to total usage exactly.
func (w UsageWindow) Hours() float64 {
	return float64(w.Quantity) / float64(MicrosPerHour)
}

// UsageFilter selects usage windows; a zero field matches all.
type UsageFilter struct {
	// Tenant made the reservations; Principal, when set, is the principal
	// that made them, as Reservation.Principal spells it.
	Tenant, Principal string
	// PoolTenant and Pool name the pool their GPUs came from.
	PoolTenant, Pool string
	// Meter is what they count against, such as "gpu.h100.hours".
	Meter string
	// From and To bound WindowStart: From <= WindowStart < To. Windows are
	// within clock hours, so hour-aligned bounds never split one.
	From, To time.Time
	// After is the Key of the last window of the previous page: the result
	// follows it in (WindowStart, Key) order.
	After string
	// Limit bounds the result and must be positive.
	Limit int
}

// UsageQuerier is the usage part of Querier, with the same conventions as
// IAMQuerier.
type UsageQuerier interface {
	// ReservationsToMeter returns reservations with time that is closed at
	// now but not yet metered: MeteredEnd(r, now) is after MeteredFrom(r).
	// now is the store's clock, read once by the caller so that the choice
	// of reservations and the windows written for them agree. Oldest
	// first, at most limit.
	ReservationsToMeter(ctx context.Context, now time.Time, limit int) ([]Reservation, error)
	// RecordUsage inserts windows, all of reservationID, skipping any whose
	// Key was written before, and moves the reservation's MeteredUntil
	// forward to meteredUntil (never backwards). It returns how many
	// windows were new. Call it inside InTx, so that the windows and where
	// the meter stopped commit together: a worker that restarts, or two
	// that race, then never write a window twice nor skip one. ErrNotFound
	// for a missing reservation.
	RecordUsage(ctx context.Context, reservationID string, windows []UsageWindow, meteredUntil time.Time) (int, error)
	// ListUsage returns the windows f selects, by WindowStart then Key.
	ListUsage(ctx context.Context, f UsageFilter) ([]UsageWindow, error)
}

// MeteredFrom is where r's unmetered time starts: where the meter stopped,
// or its creation when nothing was metered yet.
func MeteredFrom(r Reservation) time.Time {
	if r.MeteredUntil.IsZero() {
		return r.CreatedAt
	}
	return r.MeteredUntil
}

// MeteredEnd is where r's closed time ends at now: its release (or
// expiry) when it ended by now, since then no later time of it remains;
// else the start of now's UTC clock hour, since the current hour may still
// grow. The meter worker and ReservationsToMeter both use it, so they
// agree on what is closed.
func MeteredEnd(r Reservation, now time.Time) time.Time {
	if !r.ReleasedAt.IsZero() && !r.ReleasedAt.After(now) {
		return r.ReleasedAt
	}
	return HourStart(now)
}

// HourStart is the start of t's UTC clock hour.
func HourStart(t time.Time) time.Time {
	return t.UTC().Truncate(time.Hour)
}

// checkUsageWindows refuses windows RecordUsage cannot write: of another
// reservation, without a key, empty, or with a quantity that is not GPUs
// times the time covered.
func checkUsageWindows(reservationID string, windows []UsageWindow) error {
	for _, w := range windows {
		switch {
		case w.ReservationID != reservationID:
			return fmt.Errorf("window %q is of reservation %q: %w", w.Key, w.ReservationID, errBadUsage)
		case w.Key == "":
			return fmt.Errorf("a window has no key: %w", errBadUsage)
		case w.GPUs < 1:
			return fmt.Errorf("window %q holds %d GPUs: %w", w.Key, w.GPUs, errBadUsage)
		case !w.WindowEnd.After(w.WindowStart):
			return fmt.Errorf("window %q ends at %s, not after its start %s: %w", w.Key, w.WindowEnd, w.WindowStart, errBadUsage)
		case w.Quantity != int64(w.GPUs)*w.WindowEnd.Sub(w.WindowStart).Microseconds():
			return fmt.Errorf("window %q has quantity %d, not GPUs times microseconds: %w", w.Key, w.Quantity, errBadUsage)
		}
	}
	return nil
}

// checkUsageFilter refuses a filter the store cannot run.
func checkUsageFilter(f UsageFilter) error {
	if !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From) {
		return fmt.Errorf("store: list usage: to %s is before from %s: %w", f.To.Format(time.RFC3339), f.From.Format(time.RFC3339), errBadUsage)
	}
	return checkLimit("list usage", f.Limit)
}
