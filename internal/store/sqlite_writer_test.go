package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestWriterQueueOrder: waiters get the lock in arrival order, bulk ones
// after every other, and a waiter that gives up leaves the queue (or hands
// the lock on if it had just been granted it).
func TestWriterQueueOrder(t *testing.T) {
	t.Parallel()
	var q writerQueue
	ctx := context.Background()
	if err := q.acquire(ctx, false, time.Second); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(name string, bulk bool) {
		wg.Go(func() {
			if err := q.acquire(ctx, bulk, 10*time.Second); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			q.release()
		})
		// Queued before the next one arrives.
		for {
			q.mu.Lock()
			n := len(q.interactive) + len(q.bulk)
			q.mu.Unlock()
			if n == len(name) { // names grow by one letter per waiter
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	enqueue("b", true)
	enqueue("bb", true)
	enqueue("iii", false)
	enqueue("bbbb", true)
	enqueue("iiiii", false)

	// One more gives up waiting, and must not keep its place.
	canceled, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- q.acquire(canceled, false, 10*time.Second) }()
	for {
		q.mu.Lock()
		n := len(q.interactive)
		q.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled waiter got %v", err)
	}

	q.release()
	wg.Wait()
	want := []string{"iii", "iiiii", "b", "bb", "bbbb"}
	if len(order) != len(want) {
		t.Fatalf("order %q, want %q", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %q, want %q", order, want)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held || len(q.interactive)+len(q.bulk) != 0 {
		t.Errorf("after everyone: held %v, %d waiting", q.held, len(q.interactive)+len(q.bulk))
	}
}

// TestWriterQueueTimeout: a waiter past its wait gets errWriterQueue, which
// InTx retries.
func TestWriterQueueTimeout(t *testing.T) {
	t.Parallel()
	var q writerQueue
	if err := q.acquire(context.Background(), false, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.acquire(context.Background(), true, 20*time.Millisecond); !errors.Is(err, errWriterQueue) {
		t.Errorf("acquire past its wait = %v, want errWriterQueue", err)
	}
	q.release()
	if err := q.acquire(context.Background(), true, 20*time.Millisecond); err != nil {
		t.Errorf("acquire of the free lock = %v", err)
	}
}
