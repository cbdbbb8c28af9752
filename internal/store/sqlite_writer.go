package store

import (
	"context"
	"slices"
	"sync"
	"time"
)

// bulkKey marks a context whose transactions are bulk work.
type bulkKey struct{}

// Bulk marks ctx's transactions as bulk work, such as the inventory reports
// of thousands of nodes reconnecting at once: on SQLite they wait for the
// write lock behind every other transaction of the process, so that an API
// call is not queued behind the whole backlog. PostgreSQL has no queue of
// its own and ignores the mark.
func Bulk(ctx context.Context) context.Context {
	return context.WithValue(ctx, bulkKey{}, true)
}

func isBulk(ctx context.Context) bool {
	b, _ := ctx.Value(bulkKey{}).(bool)
	return b
}

// writerQueue hands SQLite's one write lock to this process's transactions
// in arrival order, bulk ones only when no other waits (sqliteEngine says
// why the queue exists).
type writerQueue struct {
	mu          sync.Mutex
	held        bool
	interactive []chan struct{} // waiters, oldest first; closed when granted
	bulk        []chan struct{}
}

// acquire waits for the lock, at most wait, or until ctx ends.
func (q *writerQueue) acquire(ctx context.Context, bulk bool, wait time.Duration) error {
	q.mu.Lock()
	if !q.held {
		q.held = true
		q.mu.Unlock()
		return nil
	}
	granted := make(chan struct{})
	if bulk {
		q.bulk = append(q.bulk, granted)
	} else {
		q.interactive = append(q.interactive, granted)
	}
	q.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case <-granted:
		return nil
	case <-timer.C:
		err = errWriterQueue
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Gone from the queue, unless the lock was handed over meanwhile: then
	// it is this caller's to give back.
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, waiters := range []*[]chan struct{}{&q.interactive, &q.bulk} {
		if i := slices.Index(*waiters, granted); i >= 0 {
			*waiters = slices.Delete(*waiters, i, i+1)
			return err
		}
	}
	q.handOverLocked()
	return err
}

// release gives the lock to the next waiter, if any.
func (q *writerQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.handOverLocked()
}

func (q *writerQueue) handOverLocked() {
	for _, waiters := range []*[]chan struct{}{&q.interactive, &q.bulk} {
		if len(*waiters) > 0 {
			next := (*waiters)[0]
			*waiters = slices.Delete(*waiters, 0, 1)
			close(next) // held stays true: it passes to next
			return
		}
	}
	q.held = false
}
