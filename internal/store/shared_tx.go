package store

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// maxShared bounds how many calls one shared transaction runs, so that a
// burst does not make one transaction hold its locks for long.
const maxShared = 64

// sharedTx queues the calls of InSharedTx. At most one transaction of
// shared calls runs at a time; the calls that arrive meanwhile wait and go
// together into the next.
type sharedTx struct {
	mu      sync.Mutex // guards queue and running
	queue   []*sharedCall
	running bool
}

// sharedCall is one InSharedTx call waiting for its transaction.
type sharedCall struct {
	ctx  context.Context
	fn   func(ctx context.Context, q Querier) error
	err  error
	done chan struct{} // closed once err is final
}

// savepointer is what an engine's transaction Querier gives InSharedTx to
// keep one call's failure from undoing the others'. It runs stmts, each a
// SAVEPOINT, RELEASE or ROLLBACK TO statement, in order; PostgreSQL sends
// them in one round trip.
type savepointer interface {
	savepoint(ctx context.Context, stmts ...string) error
}

// The statements that fence one shared call from the next.
const (
	spBegin    = "SAVEPOINT shared_call"
	spRelease  = "RELEASE SAVEPOINT shared_call"
	spRollback = "ROLLBACK TO SAVEPOINT shared_call"
)

// InSharedTx runs fn as InTx does, except that calls made at the same time
// share one transaction: on PostgreSQL, one commit (one fsync) for many, and
// no serialization failures among calls of this process that would
// otherwise collide, such as placements in one pool or joins spending one
// token. On SQLite only bulk calls share (see below). Each call runs inside its own
// savepoint, so an fn that fails is undone alone and gets its own error
// back; the others commit. When the shared transaction loses a race or its
// commit fails, every call in it runs again or gets that error.
//
// fn follows InTx's rules, and one more: it must not depend on running
// alone, since it sees the writes of the calls before it in the same
// transaction (which is the point). A call whose ctx ends while it waits
// is dropped with ctx's error; once running, it runs to the end.
func (s *Store) InSharedTx(ctx context.Context, fn func(ctx context.Context, q Querier) error) error {
	if s.loc.Engine == EngineSQLite && !isBulk(ctx) {
		// One writer at a time already, so no conflicts to avoid, and a
		// WAL commit without fsync (synchronous=NORMAL) costs little: a
		// shared transaction would only make the next writer wait longer.
		// Bulk work (see Bulk) is shared: thousands of session starts cost
		// one BEGIN and COMMIT per batch instead of each, and queue as one
		// waiter behind interactive transactions instead of thousands.
		return s.InTx(ctx, fn)
	}
	c := &sharedCall{ctx: ctx, fn: fn, done: make(chan struct{})}
	g := &s.shared
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.running
	g.running = true
	g.mu.Unlock()
	if lead {
		s.leadShared()
	}
	<-c.done
	return c.err
}

// leadShared runs the queued calls in one transaction, then hands the
// queue on to a new leader if more calls came meanwhile, so that the
// caller that led gets its answer without waiting for later batches.
func (s *Store) leadShared() {
	g := &s.shared
	g.mu.Lock()
	n := min(len(g.queue), maxShared)
	batch := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()

	s.runShared(batch)
	for _, c := range batch {
		close(c.done)
	}

	g.mu.Lock()
	more := len(g.queue) > 0
	g.running = more
	g.mu.Unlock()
	if more {
		go s.leadShared()
	}
}

// runShared runs batch's live calls in one transaction and sets each
// call's err.
func (s *Store) runShared(batch []*sharedCall) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		// Alone: no savepoints needed; its failure is its own.
		live[0].err = s.InTx(live[0].ctx, live[0].fn)
		return
	}
	// The transaction outlives any one caller's cancellation: the others'
	// work is in it. InTx's bounded attempts still end it.
	ctx := context.WithoutCancel(live[0].ctx)
	errs := make([]error, len(live))
	err := s.InTx(ctx, func(ctx context.Context, q Querier) error {
		sp, ok := q.(savepointer)
		if !ok {
			return errors.New("store: this engine's transactions have no savepoints")
		}
		clear(errs)
		// The fence between two calls (undo the last one if it failed,
		// end its savepoint, open the next one's) is one round trip. No
		// fence after the last call but its undo: COMMIT releases the
		// rest.
		fence := []string{spBegin}
		for i, c := range live {
			if err := sp.savepoint(ctx, fence...); err != nil {
				return err
			}
			fence = append(fence[:0], spRelease, spBegin)
			err := c.fn(context.WithoutCancel(c.ctx), q)
			switch {
			case err == nil:
			case s.eng.retryable(err):
				return err // the whole transaction runs again
			default:
				errs[i] = err
				fence = append([]string{spRollback}, fence...)
			}
		}
		if errs[len(live)-1] != nil {
			return sp.savepoint(ctx, spRollback)
		}
		return nil
	})
	for i, c := range live {
		c.err = errs[i]
		if err != nil {
			c.err = err
		}
	}
}
