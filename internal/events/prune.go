package events

import (
	"context"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// DefaultRetention is how long the control plane keeps events.
const DefaultRetention = 7 * 24 * time.Hour

// pruneEvery is how often Prune deletes what has aged out.
const pruneEvery = time.Hour

// Prune deletes events older than keep now and every hour until ctx ends.
// A reader that falls behind what was pruned is told to resync (the API's
// resync flag and event), never silently skipped ahead. Any process may
// prune; two doing it at once delete the same rows.
func Prune(ctx context.Context, st store.Querier, keep time.Duration, log *slog.Logger) {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		now, err := st.Now(ctx)
		if err == nil {
			var n int64
			n, err = st.PruneEvents(ctx, now.Add(-keep))
			if n > 0 {
				log.InfoContext(ctx, "events: pruned", "events", n, "older_than", now.Add(-keep))
			}
		}
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "events: prune", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
