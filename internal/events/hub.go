// Package events follows the store's event outbox (store.Event) for the
// readers in this process: one poller reads every new event once, and fans
// it out to the live subscribers, such as server-sent event streams, so
// that a thousand watchers cost one query, not a thousand.
package events

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// Defaults for NewHub.
const (
	// DefaultPoll is how often the hub asks the store for new events: the
	// most an event waits before its watchers see it.
	DefaultPoll = 100 * time.Millisecond
	// DefaultBuffer is how many events a subscriber may fall behind by
	// before it is cut off and told to resync.
	DefaultBuffer = 1024
	// pollPage bounds one read; a full page is followed by another at once.
	pollPage = 1000
)

// Hub polls the store for events and hands each to every subscriber, in
// seq order. Create it with NewHub and run it with Run.
type Hub struct {
	st     store.Querier
	poll   time.Duration
	buffer int
	log    *slog.Logger

	ready chan struct{} // closed once head is known

	mu      sync.Mutex // guards head, subs and stopped
	head    int64      // the newest seq handed out
	subs    map[*Subscription]struct{}
	stopped bool
}

// Subscription receives the events after its start. C closes when the
// subscriber fell more than the hub's buffer behind (Overflowed is then
// true) or when the hub stopped.
type Subscription struct {
	// C delivers events in seq order, each once.
	C <-chan store.Event
	// Start is the newest seq the hub had handed out when the subscription
	// began: C delivers every event after it, and a reader catching up from
	// the store reads up to Start to join the two without a gap.
	Start int64

	c          chan store.Event
	hub        *Hub
	overflowed bool // guarded by hub.mu
}

// NewHub returns a hub over st that polls every poll (DefaultPoll when 0)
// and lets a subscriber fall buffer events behind (DefaultBuffer when 0).
func NewHub(st store.Querier, poll time.Duration, buffer int, log *slog.Logger) *Hub {
	if poll <= 0 {
		poll = DefaultPoll
	}
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{st: st, poll: poll, buffer: buffer, log: log, subs: map[*Subscription]struct{}{}, ready: make(chan struct{})}
}

// Run polls until ctx ends, then closes every subscription. It starts at
// the newest event in the store: subscribers catch up on older ones from
// the store themselves.
func (h *Hub) Run(ctx context.Context) error {
	defer h.closeAll()
	for {
		b, err := h.st.EventBounds(ctx)
		if err == nil {
			h.mu.Lock()
			h.head = b.Latest
			h.mu.Unlock()
			close(h.ready)
			break
		}
		h.log.WarnContext(ctx, "events: read the newest event", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	t := time.NewTicker(h.poll)
	defer t.Stop()
	for {
		full, err := h.pollOnce(ctx)
		if err != nil && ctx.Err() == nil {
			h.log.WarnContext(ctx, "events: poll the store", "err", err)
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pollOnce hands out the events after head; full reports a full page,
// after which more may be waiting.
func (h *Hub) pollOnce(ctx context.Context) (full bool, err error) {
	h.mu.Lock()
	after := h.head
	h.mu.Unlock()
	evs, err := h.st.ListEvents(ctx, store.EventFilter{After: after, AllTenants: true, Limit: pollPage})
	if err != nil || len(evs) == 0 {
		return false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		for _, e := range evs {
			select {
			case s.c <- e:
			default:
				// Too far behind: cut it off rather than block everyone
				// or drop an event without a word.
				s.overflowed = true
				h.dropLocked(s)
			}
			if s.overflowed {
				break
			}
		}
	}
	h.head = evs[len(evs)-1].Seq
	return len(evs) == pollPage, nil
}

// errStopped answers a subscription to a hub that has stopped.
var errStopped = errors.New("events: the event hub has stopped; the server is shutting down")

// Subscribe starts a subscription at the hub's newest event. It waits for
// the hub's first read of the store, or ctx.
func (h *Hub) Subscribe(ctx context.Context) (*Subscription, error) {
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, errStopped
	}
	c := make(chan store.Event, h.buffer)
	s := &Subscription{C: c, c: c, hub: h, Start: h.head}
	h.subs[s] = struct{}{}
	return s, nil
}

// Overflowed reports whether the subscription was cut off for falling
// behind (rather than ended by Close or the hub stopping).
func (s *Subscription) Overflowed() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.overflowed
}

// Close ends the subscription; C closes.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.dropLocked(s)
}

func (h *Hub) dropLocked(s *Subscription) {
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.c)
	}
}

func (h *Hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for s := range h.subs {
		h.dropLocked(s)
	}
}
