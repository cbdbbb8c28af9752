// Package capacity holds the control plane's capacity workers. Reservations
// end by the store's clock: the expiry worker here ends those whose time is
// up and frees their GPUs, whichever control-plane process runs it. The
// meter (meter.go) turns the time reservations held GPUs into hourly usage
// windows, once each, however many processes run it.
package capacity

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// DefaultExpiryInterval is how often the expiry worker looks for
// reservations whose end passed.
const DefaultExpiryInterval = 5 * time.Second

// Expirer ends reservations whose end time passed by the store's clock.
type Expirer struct {
	// Store holds the reservations; required.
	Store *store.Store
	// Interval between sweeps; DefaultExpiryInterval when zero.
	Interval time.Duration
	// Logger receives one line per expired reservation; nil discards.
	Logger *slog.Logger
	// OnExpired, when set, is told of each sweep's expired reservations
	// (the gateway uses it to update the nodes that held them).
	OnExpired func([]store.Reservation)
}

// Run sweeps until ctx ends. Several processes may run it against one
// store: each sweep is one statement, so a reservation expires once.
func (e *Expirer) Run(ctx context.Context) error {
	logger := e.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(cmp.Or(e.Interval, DefaultExpiryInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := e.RunOnce(ctx, logger); err != nil {
			logger.Error("capacity: expire reservations", "err", err)
		}
	}
}

// RunOnce is one sweep; it returns the reservations it expired.
func (e *Expirer) RunOnce(ctx context.Context, logger *slog.Logger) ([]store.Reservation, error) {
	expired, err := e.Store.ExpireReservations(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range expired {
		logger.Info("capacity: reservation expired", "reservation", r.ID, "tenant", r.Tenant, "gpus", r.GPUs)
	}
	if len(expired) > 0 && e.OnExpired != nil {
		e.OnExpired(expired)
	}
	return expired, nil
}
