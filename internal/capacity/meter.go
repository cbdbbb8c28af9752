package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/better-compute/better-compute/internal/capacity/catalog"
	"github.com/better-compute/better-compute/internal/store"
)

// DefaultMeterInterval is how often the meter worker looks for closed time
// to meter. Hours close once an hour, but a released reservation's last
// window closes at its release, and a minute keeps that on the bill soon.
const DefaultMeterInterval = time.Minute

// DefaultMeterBatch is how many reservations one query of a sweep reads.
const DefaultMeterBatch = 100

// Meter turns the time reservations held their GPUs into usage windows:
// one per reservation, UTC clock hour and GPU model, written once the hour
// has closed (it ended by the store's clock, or the reservation ended in
// it). Each reservation's windows and where its metering stopped commit in
// one transaction, and each window has an idempotency key, so any number of
// processes may run it, and restart at any point, without writing a window
// twice or skipping one.
type Meter struct {
	// Store holds the reservations and their usage; required.
	Store *store.Store
	// Interval between sweeps; DefaultMeterInterval when zero.
	Interval time.Duration
	// Logger receives errors and one line per sweep that wrote windows;
	// nil discards.
	Logger *slog.Logger
	// Batch is how many reservations one query reads; DefaultMeterBatch
	// when zero.
	Batch int
	// Now reads the clock that decides which hours have closed; nil reads
	// the store's (Store.Now), as every deployment must. Tests set it to
	// move time forward by hours without waiting.
	Now func(ctx context.Context) (time.Time, error)
}

// Run sweeps until ctx ends.
func (m *Meter) Run(ctx context.Context) error {
	t := time.NewTicker(cmp.Or(m.Interval, DefaultMeterInterval))
	defer t.Stop()
	for {
		if _, err := m.RunOnce(ctx); err != nil && ctx.Err() == nil {
			m.logger().Error("capacity: meter usage", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce is one sweep: it meters every reservation with closed, unmetered
// time and returns how many windows it wrote (windows another process wrote
// first are not counted).
func (m *Meter) RunOnce(ctx context.Context) (int, error) {
	now, err := m.now(ctx)
	if err != nil {
		return 0, fmt.Errorf("meter: read the clock: %w", err)
	}
	batch := cmp.Or(m.Batch, DefaultMeterBatch)
	written, metered := 0, 0
	var errs []error
	for {
		rs, err := m.Store.ReservationsToMeter(ctx, now, batch)
		if err != nil {
			return written, fmt.Errorf("meter: %w", err)
		}
		for _, r := range rs {
			n, err := m.meter(ctx, r, now)
			if err != nil {
				// The others do not depend on it: meter them, and leave
				// this one to the next sweep.
				errs = append(errs, fmt.Errorf("meter: reservation %s: %w", r.ID, err))
				continue
			}
			written += n
			metered++
		}
		// Each reservation metered leaves the set, so a short batch was
		// the last one; after a failure the failed one would come back,
		// so stop there too.
		if len(rs) < batch || len(errs) > 0 {
			break
		}
	}
	if written > 0 {
		m.logger().Info("capacity: usage metered", "reservations", metered, "windows", written, "until", store.HourStart(now))
	}
	return written, errors.Join(errs...)
}

// meter writes r's closed, unmetered windows and where its metering
// stopped, in one transaction; it returns how many windows were new.
func (m *Meter) meter(ctx context.Context, r store.Reservation, now time.Time) (int, error) {
	// Cut as UsageWindows cuts, so that metering resumes exactly where
	// the last window ended.
	end := store.MeteredEnd(r, now).Truncate(time.Microsecond)
	windows := UsageWindows(r, store.MeteredFrom(r), end)
	var n int
	err := m.Store.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		n, err = q.RecordUsage(ctx, r.ID, windows, end)
		return err
	})
	return n, err
}

func (m *Meter) now(ctx context.Context) (time.Time, error) {
	if m.Now != nil {
		return m.Now(ctx)
	}
	return m.Store.Now(ctx)
}

func (m *Meter) logger() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

// UsageWindows cuts the time r held its GPUs from from to end into UTC
// clock-hour windows, one per hour and model key of r.ModelGPUs, keyed
// "<reservation id>/<model key>/<hour start, unix seconds>". The caller
// passes only closed time (end is at most the start of the current hour,
// or r's release), so a window is never written for a part of an hour and
// then again for more of it. Times are cut to microseconds, the store's
// resolution, so that each quantity is exact.
func UsageWindows(r store.Reservation, from, end time.Time) []store.UsageWindow {
	from, end = from.UTC().Truncate(time.Microsecond), end.UTC().Truncate(time.Microsecond)
	models := r.ModelGPUs
	if len(models) == 0 {
		// A reservation without device rows still held r.GPUs of its
		// model: meter those rather than nothing.
		models = map[string]int{r.ModelKey: r.GPUs}
	}
	keys := slices.Sorted(maps.Keys(models))
	var out []store.UsageWindow
	for start := from; start.Before(end); {
		hour := store.HourStart(start)
		stop := hour.Add(time.Hour)
		if end.Before(stop) {
			stop = end
		}
		for _, key := range keys {
			gpus := models[key]
			if gpus < 1 {
				continue
			}
			model := modelKey(key, r.ModelKey)
			out = append(out, store.UsageWindow{
				Key:    fmt.Sprintf("%s/%s/%d", r.ID, model, hour.Unix()),
				Tenant: r.Tenant, Principal: r.Principal, PoolTenant: r.PoolTenant, Pool: r.Pool,
				ReservationID: r.ID, ModelKey: model, Meter: MeterName(model), GPUs: gpus,
				WindowStart: start, WindowEnd: stop, Quantity: int64(gpus) * stop.Sub(start).Microseconds(),
			})
		}
		start = stop
	}
	return out
}

// modelKey is the model a GPU is metered as: its key as booked, else the
// model the reservation asked for, else "unknown" (a GPU whose model the
// inventory did not name is still billed).
func modelKey(booked, asked string) string {
	return cmp.Or(booked, asked, "unknown")
}

// MeterName is the meter a model key's GPU time counts against: the
// catalog's (variants of a family share one, gpu.h100.hours), else one of
// its own, gpu.<key>.hours, so that new hardware is metered on day one.
func MeterName(key string) string {
	if m, ok := catalog.ByKey(key); ok {
		return m.Meter
	}
	return "gpu." + key + ".hours"
}
