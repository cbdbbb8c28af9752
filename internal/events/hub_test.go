package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/events"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// joinNodes writes n node.joined events.
func joinNodes(t *testing.T, st *store.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		if _, err := st.CreateNode(context.Background(), store.Node{
			ID: id, Tenant: "acme", Hostname: id, CertSerial: id, CertPublicKey: []byte(id), CertNotAfter: time.Now().Add(time.Hour),
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func runHub(t *testing.T, st *store.Store, buffer int) (*events.Hub, context.CancelFunc) {
	t.Helper()
	h := events.NewHub(st, 5*time.Millisecond, buffer, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, cancel
}

// TestHub: subscribers get every event after their start, in order and
// once; one that falls behind its buffer is cut off and says so; stopping
// the hub ends every subscription.
func TestHub(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, store.EngineSQLite)
	if _, err := st.CreateTenant(context.Background(), store.Tenant{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	joinNodes(t, st, "old", 3) // before the hub: not delivered
	h, stop := runHub(t, st, 4)
	ctx := context.Background()
	a, err := h.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := h.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := st.EventBounds(ctx); a.Start != b.Latest {
		t.Errorf("subscription starts at %d, want the newest event %d", a.Start, b.Latest)
	}

	joinNodes(t, st, "new", 3)
	last := a.Start
	for i := range 3 {
		select {
		case e := <-a.C:
			if e.Seq <= last || e.Subject != fmt.Sprintf("new%d", i) {
				t.Errorf("event %d = seq %d %s after %d", i, e.Seq, e.Subject, last)
			}
			last = e.Seq
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not delivered", i)
		}
	}

	// slow never reads: 3 buffered, then 2 more overflow its 4.
	joinNodes(t, st, "more", 2)
	deadline := time.Now().Add(5 * time.Second)
	for !slow.Overflowed() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !slow.Overflowed() {
		t.Fatal("a subscriber 5 events behind a buffer of 4 was not cut off")
	}
	n := 0
	for range slow.C { // closed after what it had
		n++
	}
	if n != 4 {
		t.Errorf("the cut-off subscriber drained %d events, want its buffer's 4", n)
	}

	stop()
	for range a.C {
	}
	if a.Overflowed() {
		t.Error("a subscription ended by the hub stopping reports an overflow")
	}
	if _, err := h.Subscribe(ctx); err == nil {
		t.Error("Subscribe on a stopped hub succeeded")
	}
}
