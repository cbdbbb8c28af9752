package iam_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/iam"
)

// directoryAt is a deployment whose one acme policy is named after epoch,
// so a decision tells which epoch's engine made it.
func directoryAt(epoch int64) iam.Directory {
	return iam.Directory{
		Epoch:    epoch,
		Tenants:  []iam.DirTenant{{Name: "platform", Platform: true}, {Name: "acme"}},
		Members:  []iam.DirMember{{Tenant: "acme", Group: "admins", Member: "alice"}},
		Policies: []iam.DirPolicy{{Tenant: "acme", Name: fmt.Sprint("p", epoch), Body: iam.TenantAdminsPolicy("acme")}},
	}
}

// epochOf reads the epoch back from a decision's policy id, acme/p<epoch>#0.
func epochOf(t *testing.T, d iam.Decision) int64 {
	t.Helper()
	if len(d.Policies) != 1 {
		t.Fatalf("decision %+v: want one policy", d)
	}
	s := strings.TrimSuffix(strings.TrimPrefix(d.Policies[0], "acme/p"), "#0")
	e, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("decision %+v: %v", d, err)
	}
	return e
}

var adminListsUsers = iam.Request{Principal: user("acme", "alice"), Action: "compute:users:list", Resource: tenantRes("acme")}

// countingLoader serves directoryAt(*epoch) and counts loads.
type countingLoader struct {
	epoch atomic.Int64
	loads atomic.Int64
}

func (l *countingLoader) load(context.Context) (iam.Directory, error) {
	l.loads.Add(1)
	return directoryAt(l.epoch.Load()), nil
}

func TestAuthorizerFollowsTheEpoch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := &countingLoader{}
	l.epoch.Store(3)
	a := iam.NewAuthorizer(l.load)
	if a.Engine() != nil {
		t.Fatal("an engine before the first call")
	}
	for range 3 {
		d, err := a.Authorize(ctx, 3, adminListsUsers)
		if err != nil || !d.Allow || epochOf(t, d) != 3 {
			t.Fatalf("Authorize at 3 = %+v, %v", d, err)
		}
	}
	if n := l.loads.Load(); n != 1 {
		t.Errorf("%d loads at one epoch, want 1", n)
	}
	// An older epoch (a caller that read its token before the change) is
	// served by the newer engine without a load.
	if d, _ := a.Authorize(ctx, 2, adminListsUsers); epochOf(t, d) != 3 || l.loads.Load() != 1 {
		t.Errorf("Authorize at 2 = %+v after %d loads, want epoch 3's decision and no load", d, l.loads.Load())
	}
	// A newer epoch reloads before deciding: nothing stale is served.
	l.epoch.Store(5)
	d, err := a.Authorize(ctx, 5, adminListsUsers)
	if err != nil || epochOf(t, d) != 5 || l.loads.Load() != 2 || a.Engine().Epoch() != 5 {
		t.Errorf("Authorize at 5 = %+v, %v after %d loads", d, err, l.loads.Load())
	}
	// Callers may keep and change what they get.
	d.Policies[0] = "changed"
	if d, _ := a.Authorize(ctx, 5, adminListsUsers); epochOf(t, d) != 5 {
		t.Errorf("a caller's change reached the cache: %+v", d)
	}
}

func TestAuthorizerChangesTakeEffect(t *testing.T) {
	t.Parallel()
	var dir atomic.Pointer[iam.Directory]
	d1 := fixture()
	d1.Epoch = 1
	dir.Store(&d1)
	a := iam.NewAuthorizer(func(context.Context) (iam.Directory, error) { return *dir.Load(), nil })
	bobLists := iam.Request{Principal: user("acme", "bob"), Action: "compute:users:list", Resource: tenantRes("acme")}
	if d, err := a.Authorize(t.Context(), 1, bobLists); err != nil || d.Allow {
		t.Fatalf("bob before joining admins = %+v, %v; want deny", d, err)
	}
	d2 := fixture()
	d2.Epoch = 2
	d2.Members = append(d2.Members, iam.DirMember{Tenant: "acme", Group: "admins", Member: "bob"})
	dir.Store(&d2)
	if d, err := a.Authorize(t.Context(), 2, bobLists); err != nil || !d.Allow {
		t.Fatalf("bob after joining admins = %+v, %v; want allow", d, err)
	}
	d3 := fixture(iam.DirPolicy{Tenant: "acme", Name: "no-bob", Body: `forbid(principal == User::"acme/bob", action, resource);`})
	d3.Epoch = 3
	d3.Members = d2.Members
	dir.Store(&d3)
	if d, err := a.Authorize(t.Context(), 3, bobLists); err != nil || d.Allow {
		t.Fatalf("bob after a forbid = %+v, %v; want deny", d, err)
	}
}

func TestAuthorizerSingleFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var loads atomic.Int64
	a := iam.NewAuthorizer(func(context.Context) (iam.Directory, error) {
		loads.Add(1)
		<-release
		return directoryAt(1), nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			d, err := a.Authorize(t.Context(), 1, adminListsUsers)
			if err == nil && !d.Allow {
				err = fmt.Errorf("denied: %+v", d)
			}
			errs <- err
		})
	}
	time.Sleep(10 * time.Millisecond) // let them pile up on the one load
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads for 50 concurrent callers, want 1", n)
	}
}

func TestAuthorizerLoadFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("store down")
	tests := []struct {
		name    string
		load    func(context.Context) (iam.Directory, error)
		epoch   int64
		wantErr string
	}{
		{"load error", func(context.Context) (iam.Directory, error) { return iam.Directory{}, boom }, 1, "store down"},
		{"directory older than the caller", func(context.Context) (iam.Directory, error) { return directoryAt(4), nil }, 5, "older than the caller's epoch 5"},
		{"load times out", func(ctx context.Context) (iam.Directory, error) { <-ctx.Done(); return iam.Directory{}, ctx.Err() }, 1, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var loads atomic.Int64
			a := iam.NewAuthorizer(func(ctx context.Context) (iam.Directory, error) { loads.Add(1); return tt.load(ctx) },
				iam.WithReloadTimeout(20*time.Millisecond))
			for i := range 2 {
				if _, err := a.Authorize(t.Context(), tt.epoch, adminListsUsers); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("call %d: Authorize error = %v, want %q", i, err, tt.wantErr)
				}
			}
			if loads.Load() < 2 {
				t.Errorf("%d loads: a failed load must be retried by the next call", loads.Load())
			}
		})
	}
}

func TestAuthorizerCallerCanceled(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a := iam.NewAuthorizer(func(context.Context) (iam.Directory, error) { <-release; return directoryAt(1), nil })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := a.Authorize(ctx, 1, adminListsUsers)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled caller got %v", err)
	}
	// The load it started goes on for the next caller.
	close(release)
	if d, err := a.Authorize(t.Context(), 1, adminListsUsers); err != nil || !d.Allow {
		t.Errorf("next caller = %+v, %v", d, err)
	}
}

func TestAuthorizerLogsSkippedPolicies(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	d := directoryAt(1)
	d.Policies = append(d.Policies, iam.DirPolicy{Tenant: "acme", Name: "broken", Body: "permit("})
	a := iam.NewAuthorizer(func(context.Context) (iam.Directory, error) { return d, nil }, iam.WithLogger(logger), iam.WithCacheSize(0))
	if dec, err := a.Authorize(t.Context(), 1, adminListsUsers); err != nil || !dec.Allow {
		t.Fatalf("Authorize = %+v, %v", dec, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "acme/broken") {
		t.Errorf("log %q does not name the skipped policy", buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestAuthorizerRace runs callers against a directory that changes all the
// time (run with -race): every decision must come from an engine at least
// as new as the epoch its caller read.
func TestAuthorizerRace(t *testing.T) {
	t.Parallel()
	l := &countingLoader{}
	l.epoch.Store(1)
	a := iam.NewAuthorizer(l.load, iam.WithCacheSize(16))
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.epoch.Add(1)
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				epoch := l.epoch.Load()
				r := adminListsUsers
				r.Context = map[string]any{} // vary keys a little
				if i%2 == 0 {
					r.Action = "compute:groups:list"
				}
				d, err := a.Authorize(t.Context(), epoch, r)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if got := epochOf(t, d); got < epoch {
					t.Errorf("goroutine %d: decision from epoch %d for a caller at %d", g, got, epoch)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	writer.Wait()
}
