package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff between InTx attempts: exponential from txBackoffBase, capped at
// txBackoffMax, each wait drawn at random from its upper half so that the
// transactions that collided do not collide again in lockstep.
const (
	txBackoffBase = 2 * time.Millisecond
	txBackoffMax  = 200 * time.Millisecond
)

// InTx runs fn in one transaction (SERIALIZABLE on PostgreSQL, BEGIN
// IMMEDIATE on SQLite), committing when fn returns nil and rolling back
// otherwise. When the transaction loses a race (PostgreSQL serialization
// failure 40001 or deadlock 40P01, SQLite SQLITE_BUSY or SQLITE_LOCKED, from
// fn or from the commit) it runs the whole of fn again after a jittered
// backoff, at most Options.MaxTxAttempts times, then fails with an error that
// says it gave up, after how many attempts, and wraps the last cause.
//
// fn must be safe to re-run: it may only touch the database through q, and
// must not keep side effects of an attempt that did not commit. Do not call
// InTx, or the Store's own methods, from inside fn: on SQLite the outer
// transaction holds the write lock the inner call waits for.
//
// fn's own errors come back as they are (errors.Is(err, ErrNotFound) works).
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, q Querier) error) error {
	for attempt := 1; ; attempt++ {
		err := s.eng.tx(ctx, fn)
		if err == nil || !s.eng.retryable(err) {
			return err
		}
		if attempt >= s.maxAttempts {
			return fmt.Errorf("store: transaction gave up after %d attempts: %w", attempt, err)
		}
		wait := txBackoff(attempt)
		s.log.DebugContext(ctx, "store: retrying transaction", "attempt", attempt, "wait", wait, "cause", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: transaction canceled after %d attempts: %w (last cause: %v)", attempt, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// txBackoff is the wait after failed attempt n (1-based).
func txBackoff(n int) time.Duration {
	d := txBackoffMax
	if n < 16 {
		d = min(txBackoffBase<<(n-1), txBackoffMax)
	}
	return d/2 + rand.N(d/2+1)
}
