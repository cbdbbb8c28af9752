package store_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestConformance runs every Querier method, and the transaction behaviour
// around them, on both engines: one suite, so that the engines cannot drift
// apart. A new Querier method gets its subtest here.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()

		t.Run("Now", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			a, err := s.Now(ctx)
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			b, err := s.Now(ctx)
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			if a.Location() != time.UTC {
				t.Errorf("Now location = %v, want UTC", a.Location())
			}
			if d := time.Since(a); d < -5*time.Second || d > 5*time.Second {
				t.Errorf("Now = %v, %v away from the wall clock", a, d)
			}
			if b.Before(a) {
				t.Errorf("Now went backwards: %v then %v", a, b)
			}
		})

		t.Run("SchemaVersion", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			v, err := s.SchemaVersion(ctx)
			if err != nil {
				t.Fatalf("SchemaVersion: %v", err)
			}
			if want := store.LatestSchemaVersion(); v != want {
				t.Errorf("SchemaVersion = %d, want %d", v, want)
			}
			if err := s.Ready(ctx); err != nil {
				t.Errorf("Ready: %v", err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Errorf("Ping: %v", err)
			}
			if s.Engine() != engine || s.Location().Engine != engine {
				t.Errorf("Engine = %q, Location().Engine = %q, want %q", s.Engine(), s.Location().Engine, engine)
			}
		})

		t.Run("Settings", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseSettings(ctx, t, s)
		})

		t.Run("SettingsInTx", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				exerciseSettings(ctx, t, q)
				if _, err := q.PutSetting(ctx, "kept", "yes"); err != nil {
					t.Fatalf("PutSetting: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("InTx: %v", err)
			}
			if got, err := s.GetSetting(ctx, "kept"); err != nil || got.Value != "yes" {
				t.Errorf("after commit GetSetting(kept) = %+v, %v; want value yes", got, err)
			}
		})

		t.Run("PutSettingStampsStoreClock", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			before, err := s.Now(ctx)
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			first, err := s.PutSetting(ctx, "k", "v1")
			if err != nil {
				t.Fatalf("PutSetting: %v", err)
			}
			second, err := s.PutSetting(ctx, "k", "v2")
			if err != nil {
				t.Fatalf("PutSetting: %v", err)
			}
			after, err := s.Now(ctx)
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			if first.UpdatedAt.Before(before) || second.UpdatedAt.Before(first.UpdatedAt) || after.Before(second.UpdatedAt) {
				t.Errorf("store clock %v, UpdatedAt %v then %v, store clock %v: want non-decreasing",
					before, first.UpdatedAt, second.UpdatedAt, after)
			}
			if second.UpdatedAt.Location() != time.UTC {
				t.Errorf("UpdatedAt location = %v, want UTC", second.UpdatedAt.Location())
			}
		})

		t.Run("InTxRollsBackOnError", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			boom := errors.New("boom")
			calls := 0
			err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				calls++
				if _, err := q.PutSetting(ctx, "k", "v"); err != nil {
					return err
				}
				return fmt.Errorf("step two: %w", boom)
			})
			if !errors.Is(err, boom) {
				t.Fatalf("InTx = %v, want fn's error", err)
			}
			if calls != 1 {
				t.Errorf("fn ran %d times, want 1: its error is not a serialization failure", calls)
			}
			if _, err := s.GetSetting(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("after rollback GetSetting = %v, want ErrNotFound", err)
			}
			err = s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				_, err := q.GetSetting(ctx, "missing")
				return err
			})
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("InTx returning GetSetting's error = %v, want ErrNotFound", err)
			}
		})

		t.Run("InTxRetriesConflicts", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			const workers, increments = 8, 5
			var wg sync.WaitGroup
			errs := make(chan error, workers*increments)
			for range workers {
				wg.Go(func() {
					for range increments {
						errs <- s.InTx(ctx, increment("counter"))
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("InTx: %v", err)
				}
			}
			got, err := s.GetSetting(ctx, "counter")
			if err != nil {
				t.Fatalf("GetSetting: %v", err)
			}
			if want := strconv.Itoa(workers * increments); got.Value != want {
				t.Errorf("counter = %s, want %s: an increment was lost", got.Value, want)
			}
		})

		t.Run("InTxGivesUp", func(t *testing.T) {
			t.Parallel()
			testInTxGivesUp(t, engine)
		})

		t.Run("MigrateTwiceIsNoOp", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := storetest.URL(t, engine)
			for i, wantApplied := range []int{store.LatestSchemaVersion(), 0} {
				var logs logBuffer
				s, err := store.Open(ctx, url, store.Options{Logger: logs.logger()})
				if err != nil {
					t.Fatalf("Open #%d: %v", i+1, err)
				}
				if got := logs.count("store: applied migration"); got != wantApplied {
					t.Errorf("Open #%d applied %d migrations, want %d; log:\n%s", i+1, got, wantApplied, logs.String())
				}
				if v, err := s.SchemaVersion(ctx); err != nil || v != store.LatestSchemaVersion() {
					t.Errorf("Open #%d: SchemaVersion = %d, %v; want %d", i+1, v, err, store.LatestSchemaVersion())
				}
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
		})

		t.Run("ReopenKeepsData", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := storetest.URL(t, engine)
			s, err := store.Open(ctx, url, store.Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if _, err := s.PutSetting(ctx, "k", "v"); err != nil {
				t.Fatalf("PutSetting: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s, err = store.Open(ctx, url, store.Options{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer s.Close()
			if got, err := s.GetSetting(ctx, "k"); err != nil || got.Value != "v" {
				t.Errorf("after reopen GetSetting = %+v, %v; want value v", got, err)
			}
		})
	})
}

// setup returns a fresh migrated store on engine and a context for the test.
func setup(t *testing.T, engine store.Engine) (*store.Store, context.Context) {
	t.Helper()
	return storetest.Open(t, engine), t.Context()
}

// exerciseSettings runs the settings methods on q, starting from no settings.
func exerciseSettings(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	if _, err := q.GetSetting(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSetting(unset) = %v, want ErrNotFound", err)
	}
	if err := q.DeleteSetting(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSetting(unset) = %v, want ErrNotFound", err)
	}
	if got, err := q.ListSettings(ctx); err != nil || len(got) != 0 {
		t.Errorf("ListSettings = %v, %v; want none", got, err)
	}
	for _, k := range []string{"b", "a", "c"} {
		put, err := q.PutSetting(ctx, k, "value of "+k)
		if err != nil {
			t.Fatalf("PutSetting(%s): %v", k, err)
		}
		if put.Key != k || put.Value != "value of "+k || put.UpdatedAt.IsZero() {
			t.Errorf("PutSetting(%s) = %+v", k, put)
		}
	}
	replaced, err := q.PutSetting(ctx, "a", "new")
	if err != nil {
		t.Fatalf("PutSetting(a) again: %v", err)
	}
	got, err := q.GetSetting(ctx, "a")
	if err != nil {
		t.Fatalf("GetSetting(a): %v", err)
	}
	if got.Key != "a" || got.Value != "new" || !got.UpdatedAt.Equal(replaced.UpdatedAt) {
		t.Errorf("GetSetting(a) = %+v, want %+v with value new", got, replaced)
	}
	list, err := q.ListSettings(ctx)
	if err != nil {
		t.Fatalf("ListSettings: %v", err)
	}
	var keys []string
	for _, s := range list {
		keys = append(keys, s.Key+"="+s.Value)
	}
	if want := "[a=new b=value of b c=value of c]"; fmt.Sprint(keys) != want {
		t.Errorf("ListSettings = %v, want %s", keys, want)
	}
	if err := q.DeleteSetting(ctx, "b"); err != nil {
		t.Errorf("DeleteSetting(b): %v", err)
	}
	if _, err := q.GetSetting(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSetting(deleted) = %v, want ErrNotFound", err)
	}
	for _, k := range []string{"a", "c"} {
		if err := q.DeleteSetting(ctx, k); err != nil {
			t.Errorf("DeleteSetting(%s): %v", k, err)
		}
	}
}

// increment returns a transaction body that adds one to an integer setting:
// a read-modify-write that loses updates unless the store serializes it.
func increment(key string) func(ctx context.Context, q store.Querier) error {
	return func(ctx context.Context, q store.Querier) error {
		n := 0
		cur, err := q.GetSetting(ctx, key)
		switch {
		case err == nil:
			if n, err = strconv.Atoi(cur.Value); err != nil {
				return err
			}
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		_, err = q.PutSetting(ctx, key, strconv.Itoa(n+1))
		return err
	}
}
