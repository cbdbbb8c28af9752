package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestEventsConformance checks, on both engines, that every change the
// outbox covers writes its event in its own transaction, and that reads
// filter and page as documented.
func TestEventsConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		s, ctx := setup(t, engine)
		all := func(t *testing.T, after int64) []store.Event {
			t.Helper()
			return must(s.ListEvents(ctx, store.EventFilter{After: after, AllTenants: true, Limit: 1000}))(t)
		}
		types := func(evs []store.Event) []string {
			var out []string
			for _, e := range evs {
				out = append(out, e.Type+" "+e.Tenant+"/"+e.Subject)
			}
			return out
		}

		seedPool(ctx, t, s, "h100-sxm", 2)
		seeded := all(t, 0)
		if got, want := types(seeded), []string{"node.joined acme/n1", "node.ready acme/n1"}; !slices.Equal(got, want) {
			t.Fatalf("events after seeding = %q, want %q", got, want)
		}
		if d := seeded[0].Data; d["hostname"] != "n1" || seeded[1].Data["previous"] != "joined" {
			t.Errorf("node events' data = %v, %v", d, seeded[1].Data)
		}
		last := seeded[1].Seq

		r := must(s.PlaceReservation(ctx, placement("r1", 2)))(t)
		must(s.BindReservation(ctx, "r1", "n1"))(t)
		must(s.ReleaseReservation(ctx, "r1"))(t)
		must(s.PutPolicy(ctx, store.Policy{Tenant: "globex", Name: "p", Body: "permit(principal, action, resource);"}))(t)
		must(s.PutPolicy(ctx, store.Policy{Tenant: "globex", Name: "p", Body: "forbid(principal, action, resource);"}))(t)
		must(struct{}{}, s.DeletePolicy(ctx, "globex", "p"))(t)
		w := usageWindow(r, "h100-sxm", 2, r.CreatedAt, time.Minute)
		recordUsage(ctx, t, s, "r1", []store.UsageWindow{w}, w.WindowEnd)
		must(s.RevokeNode(ctx, "n1"))(t)

		got := all(t, last)
		want := []string{
			"reservation.placed globex/r1", "reservation.bound globex/r1", "reservation.released globex/r1",
			"policy.changed globex/p", "policy.changed globex/p", "policy.changed globex/p",
			"usage.closed globex/r1", "node.revoked acme/n1",
		}
		if !slices.Equal(types(got), want) {
			t.Fatalf("events = %q, want %q", types(got), want)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Errorf("seq not increasing: %d then %d", got[i-1].Seq, got[i].Seq)
			}
		}
		placed := got[0]
		if placed.Kind != "reservation" || placed.Data["gpus"] != "2" || placed.Data["pool"] != "gpu" ||
			placed.Data["pool_tenant"] != "acme" || placed.Data["principal"] != "alice" || placed.CreatedAt.IsZero() {
			t.Errorf("reservation.placed = %+v", placed)
		}
		var changes []string
		for _, e := range got[3:6] {
			changes = append(changes, e.Data["change"])
		}
		if !slices.Equal(changes, []string{"created", "updated", "deleted"}) {
			t.Errorf("policy changes = %q", changes)
		}
		if u := got[6].Data; u["key"] != w.Key || u["quantity"] != fmt.Sprint(w.Quantity) || u["model"] != "h100-sxm" ||
			u["start"] != w.WindowStart.UTC().Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("usage.closed data = %v, want key %s, quantity %d, start %s", u, w.Key, w.Quantity, w.WindowStart.UTC())
		}

		// Filters: one tenant, some kinds, a page.
		globex := must(s.ListEvents(ctx, store.EventFilter{Tenant: "globex", Limit: 1000}))(t)
		if len(globex) != 7 {
			t.Errorf("globex's events = %q, want its 7", types(globex))
		}
		nodes := must(s.ListEvents(ctx, store.EventFilter{AllTenants: true, Kinds: []string{"node"}, Limit: 1000}))(t)
		if got := types(nodes); !slices.Equal(got, []string{"node.joined acme/n1", "node.ready acme/n1", "node.revoked acme/n1"}) {
			t.Errorf("node events = %q", got)
		}
		if none := must(s.ListEvents(ctx, store.EventFilter{AllTenants: true, Kinds: []string{}, Limit: 10}))(t); len(none) != 0 {
			t.Errorf("no kinds gave %q, want nothing", types(none))
		}
		page := must(s.ListEvents(ctx, store.EventFilter{After: last, AllTenants: true, Limit: 2}))(t)
		if len(page) != 2 || page[0].Seq != got[0].Seq {
			t.Errorf("a page of 2 = %q", types(page))
		}
		if _, err := s.ListEvents(ctx, store.EventFilter{Limit: 10}); err == nil {
			t.Error("ListEvents without a tenant succeeded; want an error")
		}

		// A change that rolls back leaves no event.
		b := must(s.EventBounds(ctx))(t)
		if b.Oldest != seeded[0].Seq || b.Latest != got[len(got)-1].Seq {
			t.Errorf("EventBounds = %+v, want %d..%d", b, seeded[0].Seq, got[len(got)-1].Seq)
		}
		errUndo := errors.New("undo")
		err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
			if _, err := q.PutPolicy(ctx, store.Policy{Tenant: "globex", Name: "undone", Body: "permit(principal, action, resource);"}); err != nil {
				return err
			}
			return errUndo
		})
		if !errors.Is(err, errUndo) {
			t.Fatalf("InTx = %v", err)
		}
		if b2 := must(s.EventBounds(ctx))(t); b2.Latest != b.Latest {
			t.Errorf("a rolled-back change left events: bounds %+v, then %+v", b, b2)
		}

		// Pruning drops the old ones and moves Oldest.
		n := must(s.PruneEvents(ctx, time.Now().Add(time.Hour)))(t)
		if n != int64(len(seeded)+len(got)) {
			t.Errorf("PruneEvents = %d, want %d", n, len(seeded)+len(got))
		}
		if b := must(s.EventBounds(ctx))(t); b != (store.EventBounds{}) {
			t.Errorf("EventBounds after pruning all = %+v, want zero", b)
		}
	})
}

// TestEventsReadInCommitOrder: a reader that follows the outbox by seq
// while changes commit concurrently sees every event, none
// twice. Were seq allocated before commit order was settled, a reader could
// pass a seq whose transaction had not committed yet and miss it for good.
// (Without 0009_events's lock this fails on PostgreSQL.)
func TestEventsReadInCommitOrder(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		s := openConcurrent(t, engine)
		must(s.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
		start := must(s.EventBounds(ctx))(t).Latest

		var done atomic.Bool
		var seen []int64
		reader := make(chan error, 1)
		go func() {
			last := start
			for {
				stop := done.Load() // read once more after the writers end
				evs, err := s.ListEvents(context.Background(), store.EventFilter{After: last, AllTenants: true, Limit: 100})
				if err != nil {
					reader <- err
					return
				}
				for _, e := range evs {
					seen = append(seen, e.Seq)
					last = e.Seq
				}
				if stop && len(evs) == 0 {
					reader <- nil
					return
				}
			}
		}()

		// Nodes joining, each its own row: the writers never wait for each
		// other's row locks, so their commits interleave freely. Half of
		// them linger after the change, before committing: the window a
		// reader could slip through.
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 25 {
					err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
						id := fmt.Sprintf("w%d-%d", w, i)
						_, err := q.CreateNode(ctx, store.Node{
							ID: id, Tenant: "acme", Hostname: id, MachineID: id, CertSerial: id, CertPublicKey: []byte(id),
							CertNotAfter: time.Now().Add(time.Hour).Truncate(time.Microsecond),
						})
						if err == nil && w%2 == 1 {
							time.Sleep(2 * time.Millisecond)
						}
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		done.Store(true)
		if err := <-reader; err != nil {
			t.Fatal(err)
		}
		var want []int64
		for _, e := range must(s.ListEvents(ctx, store.EventFilter{After: start, AllTenants: true, Limit: 10000}))(t) {
			want = append(want, e.Seq)
		}
		if len(want) != 8*25 {
			t.Errorf("%d events written, want %d", len(want), 8*25)
		}
		if !slices.Equal(seen, want) {
			t.Errorf("the reader saw %d events, the outbox holds %d: a reader following seq missed or repeated some", len(seen), len(want))
		}
	})
}
