package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Event is one entry of the event outbox: a state change that matters,
// written by the database's triggers in the same transaction as the change
// (migrations 0009_events). Seq orders events by commit on both engines: a
// reader that has seen seq n has seen every event numbered below n that
// will ever exist (numbers can be skipped, never filled in later).
type Event struct {
	// Seq is the event's position, increasing in commit order.
	Seq int64
	// Kind is Type's part before the dot: node, reservation, policy, usage.
	Kind string
	// Type names the change: node.joined, node.ready, node.unreachable,
	// node.revoked, reservation.placed, reservation.bound,
	// reservation.released, reservation.expired, policy.changed,
	// usage.closed.
	Type string
	// Tenant is the tenant whose object changed, and whose principals may
	// read the event.
	Tenant string
	// Subject is the object's id: a node or reservation id, a policy name;
	// for usage.closed, the reservation the window belongs to.
	Subject string
	// Data holds the object's details at the change, all strings (counts
	// in decimal, times in RFC 3339 UTC).
	Data map[string]string
	// CreatedAt is when the event was written.
	CreatedAt time.Time
}

// EventKinds are the kinds of events the triggers write, in the order the
// API documents them.
var EventKinds = []string{"node", "reservation", "policy", "usage"}

// EventFilter selects events for ListEvents.
type EventFilter struct {
	// After is the last seq already seen: events numbered above it are
	// returned, oldest first. 0 reads from the start.
	After int64
	// Tenant restricts the events to one tenant's, unless AllTenants.
	Tenant     string
	AllTenants bool
	// Kinds restricts the events to these kinds; nil means every kind, an
	// empty non-nil slice none.
	Kinds []string
	// Limit caps the events returned; it must be positive.
	Limit int
}

// EventBounds are the oldest and newest seq the store keeps, 0 when it
// keeps none. A reader that has seen up to a seq below Oldest-1 has missed
// pruned events and must start over.
type EventBounds struct {
	Oldest, Latest int64
}

// EventQuerier reads the event outbox. Nothing writes it but the database's
// own triggers, and PruneEvents.
type EventQuerier interface {
	// ListEvents returns the events f selects, by seq.
	ListEvents(ctx context.Context, f EventFilter) ([]Event, error)
	// EventBounds returns the oldest and newest seq kept.
	EventBounds(ctx context.Context) (EventBounds, error)
	// PruneEvents deletes the events written before before, and returns how
	// many it deleted.
	PruneEvents(ctx context.Context, before time.Time) (int64, error)
}

// errNoEventTenant: a filter must say whose events it reads; an empty
// tenant does not mean all of them.
var errNoEventTenant = errors.New("store: list events: name a tenant, or all tenants")

// checkEventFilter refuses a filter the engines cannot run.
func checkEventFilter(f EventFilter) error {
	if f.Tenant == "" && !f.AllTenants {
		return errNoEventTenant
	}
	return checkLimit("list events", f.Limit)
}

// eventData decodes an event's data column.
func eventData(seq int64, raw []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("store: event %d: data is not an object of strings: %w", seq, err)
	}
	return m, nil
}
