package capacity_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/capacity"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestUsageWindows cuts reservations into clock-hour windows: across hour
// boundaries, ending mid-hour, per model, with the catalog's meters.
func TestUsageWindows(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return time.Date(2030, 5, 6, h, m, 0, 0, time.UTC) }
	r := store.Reservation{
		ID: "r1", Tenant: "acme", Principal: `User::"acme/alice"`, PoolTenant: "platform", Pool: "shared",
		GPUs: 3, ModelGPUs: map[string]int{"h100-sxm": 2, "mi300x": 1},
	}
	type win struct {
		key, meter string
		start, end time.Time
		quantity   int64
	}
	hour := time.Hour.Microseconds()
	tests := []struct {
		name      string
		r         store.Reservation
		from, end time.Time
		want      []win
	}{
		{"inside one hour", r, at(10, 15), at(10, 45), []win{
			{fmt.Sprintf("r1/h100-sxm/%d", at(10, 0).Unix()), "gpu.h100.hours", at(10, 15), at(10, 45), 2 * hour / 2},
			{fmt.Sprintf("r1/mi300x/%d", at(10, 0).Unix()), "gpu.mi300x.hours", at(10, 15), at(10, 45), hour / 2},
		}},
		{"across hour boundaries, up to the current hour", r, at(10, 15), at(13, 0), []win{
			{fmt.Sprintf("r1/h100-sxm/%d", at(10, 0).Unix()), "gpu.h100.hours", at(10, 15), at(11, 0), 2 * hour * 3 / 4},
			{fmt.Sprintf("r1/mi300x/%d", at(10, 0).Unix()), "gpu.mi300x.hours", at(10, 15), at(11, 0), hour * 3 / 4},
			{fmt.Sprintf("r1/h100-sxm/%d", at(11, 0).Unix()), "gpu.h100.hours", at(11, 0), at(12, 0), 2 * hour},
			{fmt.Sprintf("r1/mi300x/%d", at(11, 0).Unix()), "gpu.mi300x.hours", at(11, 0), at(12, 0), hour},
			{fmt.Sprintf("r1/h100-sxm/%d", at(12, 0).Unix()), "gpu.h100.hours", at(12, 0), at(13, 0), 2 * hour},
			{fmt.Sprintf("r1/mi300x/%d", at(12, 0).Unix()), "gpu.mi300x.hours", at(12, 0), at(13, 0), hour},
		}},
		{"released mid-hour, resumed where the meter stopped", store.Reservation{ID: "r2", GPUs: 1, ModelGPUs: map[string]int{"a100-sxm4-80gb": 1}},
			at(11, 0), at(12, 20), []win{
				{fmt.Sprintf("r2/a100-sxm4-80gb/%d", at(11, 0).Unix()), "gpu.a100.hours", at(11, 0), at(12, 0), hour},
				{fmt.Sprintf("r2/a100-sxm4-80gb/%d", at(12, 0).Unix()), "gpu.a100.hours", at(12, 0), at(12, 20), hour / 3},
			}},
		{"GPUs whose model is unknown take the model asked for", store.Reservation{ID: "r3", GPUs: 1, ModelKey: "l4", ModelGPUs: map[string]int{"": 1}},
			at(9, 0), at(9, 30), []win{
				{fmt.Sprintf("r3/l4/%d", at(9, 0).Unix()), "gpu.l4.hours", at(9, 0), at(9, 30), hour / 2},
			}},
		{"or unknown", store.Reservation{ID: "r4", GPUs: 2}, at(9, 0), at(9, 6), []win{
			{fmt.Sprintf("r4/unknown/%d", at(9, 0).Unix()), "gpu.unknown.hours", at(9, 0), at(9, 6), 2 * hour / 10},
		}},
		{"nothing closed", r, at(10, 0), at(10, 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []win
			for _, w := range capacity.UsageWindows(tt.r, tt.from, tt.end) {
				if w.ReservationID != tt.r.ID || w.Tenant != tt.r.Tenant || w.Principal != tt.r.Principal ||
					w.PoolTenant != tt.r.PoolTenant || w.Pool != tt.r.Pool {
					t.Errorf("window %s does not carry its reservation: %+v", w.Key, w)
				}
				got = append(got, win{w.Key, w.Meter, w.WindowStart, w.WindowEnd, w.Quantity})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("UsageWindows =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

// clock is a Meter.Now that tests move by hours.
type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *clock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func (c *clock) Now(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, nil
}

// usage lists every window, checking that no key appears twice and that
// each lies within one clock hour.
func usage(ctx context.Context, t *testing.T, st *store.Store, reservationID string) (ws []store.UsageWindow, total int64) {
	t.Helper()
	all, err := st.ListUsage(ctx, store.UsageFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, w := range all {
		if seen[w.Key] {
			t.Errorf("window %s written twice", w.Key)
		}
		seen[w.Key] = true
		if !w.WindowEnd.After(w.WindowStart) || store.HourStart(w.WindowStart).Add(time.Hour).Before(w.WindowEnd) {
			t.Errorf("window %s spans [%s, %s), not within one hour", w.Key, w.WindowStart, w.WindowEnd)
		}
		if w.ReservationID == reservationID {
			ws = append(ws, w)
			total += w.Quantity
		}
	}
	return ws, total
}

// TestMeter meters reservations on both engines with the clock moved by
// hours: closed hours only, a restarted worker and a second one racing it
// write nothing twice, and a released reservation's last part-hour is
// metered as soon as it ends.
func TestMeter(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := context.Background()
		st := seedNode(t, engine)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		place := func(id string, gpus int) store.Reservation {
			t.Helper()
			now, err := st.Now(ctx)
			must(err)
			var r store.Reservation
			must(st.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				r, err = q.PlaceReservation(ctx, store.Placement{ID: id, Tenant: "acme", Principal: `User::"acme/a"`, PoolTenant: "acme", Pool: "gpu", GPUs: gpus, EndsAt: now.Add(24 * time.Hour)})
				return err
			}))
			return r
		}
		run := func(m *capacity.Meter) int {
			t.Helper()
			n, err := m.RunOnce(ctx)
			must(err)
			return n
		}

		r1 := place("r1", 2)
		c := &clock{now: r1.CreatedAt}
		m := &capacity.Meter{Store: st, Now: c.Now, Batch: 1}

		// Its first hour has not closed: nothing to write.
		if n := run(m); n != 0 {
			t.Errorf("RunOnce in the first hour wrote %d windows, want 0", n)
		}
		// Three hours on: its part of the first hour and two full ones, and
		// nothing of the current hour.
		c.set(r1.CreatedAt.Add(3 * time.Hour))
		if n := run(m); n != 3 {
			t.Errorf("RunOnce 3h on wrote %d windows, want 3", n)
		}
		until := store.HourStart(r1.CreatedAt.Add(3 * time.Hour))
		ws, total := usage(ctx, t, st, "r1")
		if want := 2 * until.Sub(r1.CreatedAt).Microseconds(); total != want || len(ws) != 3 {
			t.Errorf("r1 metered %d GPU-µs in %d windows, want %d in 3", total, len(ws), want)
		}
		if last := ws[len(ws)-1]; !last.WindowEnd.Equal(until) || last.Meter != "gpu.h100.hours" || last.GPUs != 2 {
			t.Errorf("last window %+v, want gpu.h100.hours of 2 GPUs ending at %s", last, until)
		}
		// Later in the same hour, the partial hour is still open.
		c.set(until.Add(59 * time.Minute))
		if n := run(m); n != 0 {
			t.Errorf("RunOnce later in the same hour wrote %d windows, want 0", n)
		}

		// A restarted worker (a new Meter on the same store, same time)
		// writes nothing again.
		restarted := &capacity.Meter{Store: st, Now: c.Now}
		if n := run(restarted); n != 0 {
			t.Errorf("a restarted meter wrote %d windows, want 0", n)
		}
		// Two workers racing over the next two hours write each window
		// once between them.
		c.set(until.Add(2 * time.Hour))
		var wg sync.WaitGroup
		counts := make([]int, 4)
		for i := range counts {
			wg.Go(func() {
				n, err := (&capacity.Meter{Store: st, Now: c.Now}).RunOnce(ctx)
				if err != nil {
					t.Error(err)
				}
				counts[i] = n
			})
		}
		wg.Wait()
		if sum := counts[0] + counts[1] + counts[2] + counts[3]; sum != 2 {
			t.Errorf("racing meters wrote %v windows, want 2 in all", counts)
		}
		ws, total = usage(ctx, t, st, "r1")
		until = until.Add(2 * time.Hour)
		if want := 2 * until.Sub(r1.CreatedAt).Microseconds(); total != want || len(ws) != 5 {
			t.Errorf("r1 metered %d GPU-µs in %d windows, want exactly %d in 5", total, len(ws), want)
		}

		// Released mid-hour by the store's clock: its time is closed at its
		// release, without waiting for the hour to end.
		place("r2", 1)
		time.Sleep(5 * time.Millisecond)
		r2, err := st.ReleaseReservation(ctx, "r2")
		must(err)
		byStore := &capacity.Meter{Store: st}
		if n := run(byStore); n < 1 {
			t.Errorf("RunOnce after a release wrote %d windows, want its last part-hour", n)
		}
		if n := run(byStore); n != 0 {
			t.Errorf("RunOnce again wrote %d windows, want 0", n)
		}
		if _, total := usage(ctx, t, st, "r2"); total != r2.ReleasedAt.Sub(r2.CreatedAt).Microseconds() {
			t.Errorf("r2 metered %d GPU-µs, want exactly %d", total, r2.ReleasedAt.Sub(r2.CreatedAt).Microseconds())
		}
		if r, err := st.GetReservation(ctx, "r2"); err != nil || !r.MeteredUntil.Equal(r2.ReleasedAt) {
			t.Errorf("r2 metered until %s (%v), want its release %s", r.MeteredUntil, err, r2.ReleasedAt)
		}
	})
}
