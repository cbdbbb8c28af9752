package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestUsageConformance runs every UsageQuerier method on both engines:
// which reservations have time to meter, recording windows idempotently,
// and listing them with filters and pages.
func TestUsageConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			run  func(ctx context.Context, t *testing.T, s *store.Store)
		}{
			{"ToMeter", exerciseReservationsToMeter},
			{"RecordUsage", exerciseRecordUsage},
			{"ListUsage", exerciseListUsage},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, ctx := setup(t, engine)
				tc.run(ctx, t, s)
			})
		}
	})
}

// usageWindow is a window of reservation r from start for d, of gpus GPUs,
// keyed as the meter keys them.
func usageWindow(r store.Reservation, model string, gpus int, start time.Time, d time.Duration) store.UsageWindow {
	return store.UsageWindow{
		Key:    fmt.Sprintf("%s/%s/%d", r.ID, model, store.HourStart(start).Unix()),
		Tenant: r.Tenant, Principal: r.Principal, PoolTenant: r.PoolTenant, Pool: r.Pool,
		ReservationID: r.ID, ModelKey: model, Meter: "gpu." + model + ".hours", GPUs: gpus,
		WindowStart: start, WindowEnd: start.Add(d), Quantity: int64(gpus) * d.Microseconds(),
	}
}

func recordUsage(ctx context.Context, t *testing.T, s *store.Store, id string, ws []store.UsageWindow, until time.Time) int {
	t.Helper()
	var n int
	if err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		n, err = q.RecordUsage(ctx, id, ws, until)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func toMeterIDs(ctx context.Context, t *testing.T, s *store.Store, now time.Time) []string {
	t.Helper()
	return reservationIDsOf(must(s.ReservationsToMeter(ctx, now, 100))(t))
}

func reservationIDsOf(rs []store.Reservation) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func exerciseReservationsToMeter(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4)
	active := must(s.PlaceReservation(ctx, placement("r-active", 2)))(t)
	must(s.PlaceReservation(ctx, placement("r-ended", 1)))(t)
	// SQLite's clock has millisecond resolution: a reservation released in
	// the millisecond it began held nothing to meter.
	time.Sleep(5 * time.Millisecond)
	ended := must(s.ReleaseReservation(ctx, "r-ended"))(t)
	now := must(s.Now(ctx))(t)

	// At the store's clock now, the active reservation's time is all in the
	// current hour (unless it began in the previous one), while the ended
	// one's is closed by its release.
	got := toMeterIDs(ctx, t, s, now)
	if !slices.Contains(got, "r-ended") || slices.Contains(got, "r-active") != active.CreatedAt.Before(store.HourStart(now)) {
		t.Errorf("ReservationsToMeter(now) = %v", got)
	}
	// Two hours on, the active one has closed hours too; the rows come with
	// their devices and models, oldest first.
	later := now.Add(2 * time.Hour)
	rs := must(s.ReservationsToMeter(ctx, later, 100))(t)
	if ids := reservationIDsOf(rs); !slices.Equal(ids, []string{"r-active", "r-ended"}) {
		t.Fatalf("ReservationsToMeter(+2h) = %v, want r-active, r-ended", ids)
	}
	if rs[0].ModelGPUs["h100-sxm"] != 2 || !rs[0].MeteredUntil.IsZero() {
		t.Errorf("ReservationsToMeter(+2h)[0] = %+v, want 2 h100-sxm, nothing metered", rs[0])
	}
	if ids := reservationIDsOf(must(s.ReservationsToMeter(ctx, later, 1))(t)); !slices.Equal(ids, []string{"r-active"}) {
		t.Errorf("ReservationsToMeter(limit 1) = %v", ids)
	}
	_, err := s.ReservationsToMeter(ctx, later, 0)
	if err == nil {
		t.Error("ReservationsToMeter(limit 0) succeeded")
	}

	// Metered to its release, the ended one is done for good.
	recordUsage(ctx, t, s, "r-ended", []store.UsageWindow{
		usageWindow(ended, "h100-sxm", 1, ended.CreatedAt, ended.ReleasedAt.Sub(ended.CreatedAt)),
	}, ended.ReleasedAt)
	if got := toMeterIDs(ctx, t, s, later.Add(24*time.Hour)); !slices.Equal(got, []string{"r-active"}) {
		t.Errorf("ReservationsToMeter after metering r-ended = %v, want r-active", got)
	}
	// Metered to the start of later's hour, the active one waits for the
	// next hour to close.
	recordUsage(ctx, t, s, "r-active", nil, store.HourStart(later))
	if got := toMeterIDs(ctx, t, s, later); len(got) != 0 {
		t.Errorf("ReservationsToMeter(same hour) = %v, want none", got)
	}
	if got := toMeterIDs(ctx, t, s, later.Add(time.Hour)); !slices.Equal(got, []string{"r-active"}) {
		t.Errorf("ReservationsToMeter(next hour) = %v, want r-active", got)
	}
}

func exerciseRecordUsage(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4)
	r := must(s.PlaceReservation(ctx, placement("r1", 2)))(t)
	h := store.HourStart(r.CreatedAt).Add(time.Hour)
	first := usageWindow(r, "h100-sxm", 2, r.CreatedAt, h.Sub(r.CreatedAt))
	second := usageWindow(r, "h100-sxm", 2, h, time.Hour)

	before := must(s.Now(ctx))(t)
	if n := recordUsage(ctx, t, s, "r1", []store.UsageWindow{first}, h); n != 1 {
		t.Errorf("RecordUsage = %d new, want 1", n)
	}
	// A worker that wrote the same window again (it restarted, or raced
	// another) adds nothing; a new window is added beside it.
	if n := recordUsage(ctx, t, s, "r1", []store.UsageWindow{first, second}, h.Add(time.Hour)); n != 1 {
		t.Errorf("RecordUsage(again, and one more) = %d new, want 1", n)
	}
	if got := must(s.GetReservation(ctx, "r1"))(t).MeteredUntil; !got.Equal(h.Add(time.Hour)) {
		t.Errorf("MeteredUntil = %s, want %s", got, h.Add(time.Hour))
	}
	// metered_until never moves backwards.
	recordUsage(ctx, t, s, "r1", nil, h)
	if got := must(s.GetReservation(ctx, "r1"))(t).MeteredUntil; !got.Equal(h.Add(time.Hour)) {
		t.Errorf("MeteredUntil after an older write = %s, want %s", got, h.Add(time.Hour))
	}

	ws := must(s.ListUsage(ctx, store.UsageFilter{Limit: 10}))(t)
	if len(ws) != 2 {
		t.Fatalf("ListUsage = %+v, want 2 windows", ws)
	}
	w := ws[0]
	want := first
	want.CreatedAt = w.CreatedAt
	if w != want {
		t.Errorf("ListUsage[0] = %+v, want %+v", w, want)
	}
	if w.CreatedAt.Before(before.Add(-time.Millisecond)) || w.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt = %s, want the store's clock after %s, in UTC", w.CreatedAt, before)
	}
	if got := ws[1].Hours(); got != 2 {
		t.Errorf("Hours of a full hour of 2 GPUs = %v, want 2", got)
	}

	_, err := s.RecordUsage(ctx, "nope", nil, h)
	wantIs(t, "RecordUsage(missing reservation)", err, store.ErrNotFound)
	for name, bad := range map[string]func(w *store.UsageWindow){
		"another reservation": func(w *store.UsageWindow) { w.ReservationID = "r2" },
		"no key":              func(w *store.UsageWindow) { w.Key = "" },
		"empty":               func(w *store.UsageWindow) { w.WindowEnd = w.WindowStart },
		"wrong quantity":      func(w *store.UsageWindow) { w.Quantity++ },
		"no GPUs":             func(w *store.UsageWindow) { w.GPUs, w.Quantity = 0, 0 },
	} {
		w := usageWindow(r, "h100-sxm", 2, h.Add(time.Hour), time.Hour)
		bad(&w)
		if _, err := s.RecordUsage(ctx, "r1", []store.UsageWindow{w}, h); err == nil {
			t.Errorf("RecordUsage(%s) succeeded", name)
		}
	}
}

func exerciseListUsage(ctx context.Context, t *testing.T, s *store.Store) {
	seedPool(ctx, t, s, "h100-sxm", 4)
	r1 := must(s.PlaceReservation(ctx, placement("r1", 1)))(t)
	p := placement("r2", 1)
	p.Tenant, p.Principal = "acme", "bob"
	r2 := must(s.PlaceReservation(ctx, p))(t)
	base := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	var want []string // keys, in (window_start, key) order
	for i := range 3 {
		start := base.Add(time.Duration(i) * time.Hour)
		w1 := usageWindow(r1, "h100-sxm", 1, start, time.Hour)
		w2 := usageWindow(r2, "a100-sxm4-80gb", 1, start, 30*time.Minute)
		w2.Meter = "gpu.a100.hours"
		recordUsage(ctx, t, s, "r1", []store.UsageWindow{w1}, start.Add(time.Hour))
		recordUsage(ctx, t, s, "r2", []store.UsageWindow{w2}, start.Add(time.Hour))
		want = append(want, w1.Key, w2.Key)
	}
	keys := func(f store.UsageFilter) []string {
		t.Helper()
		if f.Limit == 0 {
			f.Limit = 100
		}
		ws := must(s.ListUsage(ctx, f))(t)
		out := make([]string, len(ws))
		for i, w := range ws {
			out[i] = w.Key
		}
		return out
	}
	pick := func(idx ...int) []string {
		out := make([]string, len(idx))
		for i, j := range idx {
			out[i] = want[j]
		}
		return out
	}
	for name, tt := range map[string]struct {
		f    store.UsageFilter
		want []string
	}{
		"all":           {store.UsageFilter{}, want},
		"tenant":        {store.UsageFilter{Tenant: "acme"}, pick(1, 3, 5)},
		"principal":     {store.UsageFilter{Principal: "alice"}, pick(0, 2, 4)},
		"pool":          {store.UsageFilter{PoolTenant: "acme", Pool: "gpu"}, want},
		"other pool":    {store.UsageFilter{PoolTenant: "acme", Pool: "cpu"}, []string{}},
		"meter":         {store.UsageFilter{Meter: "gpu.a100.hours"}, pick(1, 3, 5)},
		"from":          {store.UsageFilter{From: base.Add(time.Hour)}, want[2:]},
		"to":            {store.UsageFilter{To: base.Add(time.Hour)}, want[:2]},
		"from and to":   {store.UsageFilter{From: base.Add(time.Hour), To: base.Add(2 * time.Hour)}, want[2:4]},
		"after":         {store.UsageFilter{After: want[2]}, want[3:]},
		"after, limit":  {store.UsageFilter{After: want[0], Limit: 2}, want[1:3]},
		"tenant, after": {store.UsageFilter{Tenant: "globex", After: want[0]}, pick(2, 4)},
	} {
		if got := keys(tt.f); !slices.Equal(got, tt.want) {
			t.Errorf("ListUsage(%s) = %v, want %v", name, got, tt.want)
		}
	}
	// Paging with After visits every window once, in order.
	var paged []string
	f := store.UsageFilter{Limit: 4}
	for {
		page := keys(f)
		paged = append(paged, page...)
		if len(page) < f.Limit {
			break
		}
		f.After = page[len(page)-1]
	}
	if !slices.Equal(paged, want) {
		t.Errorf("paged ListUsage = %v, want %v", paged, want)
	}
	if _, err := s.ListUsage(ctx, store.UsageFilter{}); err == nil {
		t.Error("ListUsage(limit 0) succeeded")
	}
	if _, err := s.ListUsage(ctx, store.UsageFilter{From: base, To: base.Add(-time.Hour), Limit: 1}); err == nil {
		t.Error("ListUsage(to before from) succeeded")
	}
}
