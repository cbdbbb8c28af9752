package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestInSharedTx runs concurrent calls that share transactions (on
// PostgreSQL, and bulk ones on SQLite; other SQLite calls have their own), a third of them failing after a
// write (some in a failed statement), and checks that each call got its own
// outcome: the failed ones' writes are gone, the rest committed.
func TestInSharedTx(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		// Bulk calls share transactions on SQLite too.
		for _, bulk := range []bool{false, true} {
			t.Run(fmt.Sprintf("bulk=%v", bulk), func(t *testing.T) {
				t.Parallel()
				s, ctx := setup(t, engine)
				if bulk {
					ctx = store.Bulk(ctx)
				}
				exerciseSharedCalls(ctx, t, s)
			})
		}
	})
}

// exerciseSharedCalls is TestInSharedTx's body on one store.
func exerciseSharedCalls(ctx context.Context, t *testing.T, s *store.Store) {
	must(s.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
	errOwn := errors.New("this call fails")
	const n = 300
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.InSharedTx(ctx, func(ctx context.Context, q store.Querier) error {
				if _, err := q.PutSetting(ctx, fmt.Sprintf("k%03d", i), "v"); err != nil {
					return err
				}
				switch i % 6 {
				case 0:
					return errOwn
				case 3:
					// A statement that fails: on PostgreSQL it aborts
					// the transaction until the savepoint is rolled back.
					_, err := q.CreateTenant(ctx, store.Tenant{Name: "acme"})
					return err
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		_, gerr := s.GetSetting(ctx, fmt.Sprintf("k%03d", i))
		switch i % 6 {
		case 0:
			if !errors.Is(err, errOwn) {
				t.Errorf("call %d = %v, want its own error", i, err)
			}
		case 3:
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("call %d = %v, want ErrConflict", i, err)
			}
		default:
			if err != nil {
				t.Errorf("call %d = %v, want nil", i, err)
			}
			if gerr != nil {
				t.Errorf("call %d committed, but its setting: %v", i, gerr)
			}
			continue
		}
		if !errors.Is(gerr, store.ErrNotFound) {
			t.Errorf("call %d failed, but its setting is there (%v)", i, gerr)
		}
	}
}

// TestInSharedTxLastCallFails builds one batch in a known order, whose
// last call fails in a failed statement: its write is undone before the
// batch commits, and the calls before it commit.
func TestInSharedTxLastCallFails(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		s, ctx := setup(t, engine)
		ctx = store.Bulk(ctx) // shared on SQLite too
		must(s.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)

		// The first call leads alone and holds its transaction open while
		// the next three queue behind it, in order: they are the batch.
		hold, held := make(chan struct{}), make(chan struct{})
		results := make(chan error, 4)
		go func() {
			results <- s.InSharedTx(ctx, func(ctx context.Context, q store.Querier) error {
				close(held)
				<-hold
				return nil
			})
		}()
		<-held
		calls := []func(ctx context.Context, q store.Querier) error{
			put("first"),
			func(ctx context.Context, q store.Querier) error {
				if err := put("fails-own")(ctx, q); err != nil {
					return err
				}
				return errors.New("this call fails")
			},
			put("second"),
			func(ctx context.Context, q store.Querier) error {
				if err := put("fails-last")(ctx, q); err != nil {
					return err
				}
				_, err := q.CreateTenant(ctx, store.Tenant{Name: "acme"}) // a failed statement
				return err
			},
		}
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		for i, fn := range calls {
			wg.Go(func() { errs[i] = s.InSharedTx(ctx, fn) })
			for s.SharedQueued() != i+1 {
				time.Sleep(time.Millisecond)
			}
		}
		close(hold)
		wg.Wait()
		if err := <-results; err != nil {
			t.Fatalf("the leading call: %v", err)
		}
		if errs[0] != nil || errs[2] != nil || errs[1] == nil || !errors.Is(errs[3], store.ErrConflict) {
			t.Fatalf("errors = %v; want nil, its own, nil, ErrConflict", errs)
		}
		for _, k := range []string{"first", "second"} {
			if _, err := s.GetSetting(ctx, k); err != nil {
				t.Errorf("setting %s of a call that succeeded: %v", k, err)
			}
		}
		for _, k := range []string{"fails-own", "fails-last"} {
			if _, err := s.GetSetting(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("setting %s of a call that failed: %v, want not found", k, err)
			}
		}
	})
}

// put is a shared call that stores setting k.
func put(k string) func(ctx context.Context, q store.Querier) error {
	return func(ctx context.Context, q store.Querier) error {
		_, err := q.PutSetting(ctx, k, "v")
		return err
	}
}

// TestInSharedTxDropsCanceled: a call whose context has ended by the time
// its transaction runs is not run.
func TestInSharedTxDropsCanceled(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		s, ctx := setup(t, engine)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		var ran atomic.Bool
		err := s.InSharedTx(canceled, func(context.Context, store.Querier) error {
			ran.Store(true)
			return nil
		})
		if !errors.Is(err, context.Canceled) || ran.Load() {
			t.Errorf("InSharedTx(canceled) = %v, ran %v; want context.Canceled, not run", err, ran.Load())
		}
	})
}

// TestPlaceReservationSharedStorm is the placement storm through
// InSharedTx with the default attempts: the placements of one process no
// longer collide with each other, so none gives up.
func TestPlaceReservationSharedStorm(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		s, ctx := setup(t, engine)
		seedPool(ctx, t, s, "h100-sxm", 8, 8, 8, 8, 8, 8, 8, 8)
		const n = 500
		var wg sync.WaitGroup
		var placed, exhausted atomic.Int64
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				err := s.InSharedTx(ctx, func(ctx context.Context, q store.Querier) error {
					_, err := q.PlaceReservation(ctx, placement(fmt.Sprintf("r%04d", i), 1+i%2))
					return err
				})
				switch {
				case errors.Is(err, store.ErrExhausted):
					exhausted.Add(1)
				case err != nil:
					errs <- err
				default:
					placed.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if free := must(s.FreeDevices(ctx, "acme", "gpu", ""))(t); len(free) != 0 {
			t.Errorf("FreeDevices after the storm = %v, want none", free)
		}
		t.Logf("%s: %d placed, %d exhausted", engine, placed.Load(), exhausted.Load())
		checkBookings(ctx, t, s)
	})
}
