package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The capacity rows: pools and their offers to other tenants, the GPUs of
// adopted nodes, and reservations of those GPUs with the bookings that keep
// any GPU from being held twice.

// ErrExhausted means a reservation cannot be placed: its pool has fewer
// matching GPUs free than it asked for. The wrapping error says how many
// are free; test it with errors.Is.
var ErrExhausted = errors.New("exhausted")

// errBadGPUs is returned by PlaceReservation for a count of GPUs below one.
var errBadGPUs = errors.New("a reservation holds at least one GPU")

// Pool is a named set of a tenant's nodes that reservations draw from. It
// belongs to one tenant (the platform's for platform pools) and may be
// offered to others.
type Pool struct {
	// Tenant owns the pool; Tenant and Name are the key.
	Tenant, Name string
	// Description says what it is for.
	Description string
	// CreatedAt and UpdatedAt come from the store's clock.
	CreatedAt, UpdatedAt time.Time
}

// PoolOffer lets Tenant's users reserve from the pool PoolTenant/Pool.
type PoolOffer struct {
	// PoolTenant and Pool name the pool.
	PoolTenant, Pool string
	// Tenant is the tenant it is offered to.
	Tenant string
}

// Device is one GPU of a node, bookable once its node is adopted.
type Device struct {
	// UUID is the GPU's UUID as the driver reports it, and its key.
	UUID string
	// NodeID is the node it is in.
	NodeID string
	// Index is its index on the node.
	Index int
	// ModelKey is its model's catalog key ("h100-sxm"); ModelName the
	// name the driver reported.
	ModelKey, ModelName string
	// MemoryBytes is its memory.
	MemoryBytes int64
	// UpdatedAt comes from the store's clock.
	UpdatedAt time.Time
}

// ReservationState is where a reservation is in its lifecycle.
type ReservationState string

const (
	// ReservationPlaced holds its GPUs; the node has not yet reported them.
	ReservationPlaced ReservationState = "placed"
	// ReservationBound holds its GPUs, and the node reported them bound.
	ReservationBound ReservationState = "bound"
	// ReservationReleased was released; its GPUs are free.
	ReservationReleased ReservationState = "released"
	// ReservationExpired reached EndsAt by the store's clock; its GPUs are
	// free.
	ReservationExpired ReservationState = "expired"
)

// Reservation is a tenant's hold on GPUs of a pool until EndsAt.
type Reservation struct {
	// ID is the reservation's key.
	ID string
	// Tenant and Principal made it.
	Tenant, Principal string
	// PoolTenant and Pool name the pool its GPUs come from.
	PoolTenant, Pool string
	// NodeID is the node of its GPUs, or "" when they span nodes.
	NodeID string
	// GPUs is how many it holds; ModelKey the model asked for ("" for any).
	GPUs     int
	ModelKey string
	// State is where it is.
	State ReservationState
	// IdempotencyKey, when set, is unique per tenant; RequestHash is the
	// hash of the request that made it, to tell a retry from a reuse.
	IdempotencyKey string
	RequestHash    []byte
	// DeviceUUIDs are the GPUs it holds (or held), sorted.
	DeviceUUIDs []string
	// NodeIDs are the nodes of those GPUs, sorted: one unless it spans
	// nodes. They are recorded at placement, so they outlive the nodes.
	NodeIDs []string
	// ModelGPUs counts its GPUs by model key, as booked; usage is metered
	// by model.
	ModelGPUs map[string]int
	// CreatedAt and EndsAt come from the store's clock; BoundAt and
	// ReleasedAt (release or expiry) are zero until then.
	CreatedAt, EndsAt, BoundAt, ReleasedAt time.Time
	// MeteredUntil is where the usage meter stopped: its time before this
	// is in usage windows. Zero until the first is written.
	MeteredUntil time.Time
}

// Active reports whether r holds its GPUs (placed or bound).
func (r Reservation) Active() bool {
	return r.State == ReservationPlaced || r.State == ReservationBound
}

// NodeAllocation is one reservation's GPUs on one node.
type NodeAllocation struct {
	// ReservationID names the reservation.
	ReservationID string
	// State is placed (the node has yet to bind it) or bound.
	State ReservationState
	// DeviceUUIDs are its GPUs on the node, sorted.
	DeviceUUIDs []string
}

// nodeAllocations groups rows of (reservation id, state, uuid), sorted by
// reservation id then uuid, into allocations.
func nodeAllocations[R any](rows []R, get func(R) (id, state, uuid string)) []NodeAllocation {
	var out []NodeAllocation
	for _, row := range rows {
		id, state, uuid := get(row)
		if n := len(out); n == 0 || out[n-1].ReservationID != id {
			out = append(out, NodeAllocation{ReservationID: id, State: ReservationState(state)})
		}
		a := &out[len(out)-1]
		a.DeviceUUIDs = append(a.DeviceUUIDs, uuid)
	}
	return out
}

// Placement is a request for GPUs that PlaceReservation places.
type Placement struct {
	// ID is the new reservation's id.
	ID string
	// Tenant and Principal make it.
	Tenant, Principal string
	// PoolTenant and Pool name the pool.
	PoolTenant, Pool string
	// GPUs is how many, at least one.
	GPUs int
	// ModelKey restricts it to one model; "" takes any.
	ModelKey string
	// SameNode takes all the GPUs from one node.
	SameNode bool
	// EndsAt is when it expires, by the store's clock.
	EndsAt time.Time
	// IdempotencyKey and RequestHash: see Reservation.
	IdempotencyKey string
	RequestHash    []byte
}

// ReservationFilter selects reservations; a zero field matches all.
type ReservationFilter struct {
	// Tenant is the tenant that made them.
	Tenant string
	// PoolTenant and Pool name the pool they draw from.
	PoolTenant, Pool string
	// NodeID is the node of their GPUs.
	NodeID string
	// State is where they are.
	State ReservationState
	// Limit bounds the result and must be positive.
	Limit int
}

// CapacityQuerier is the capacity part of Querier, with the same
// conventions as IAMQuerier.
type CapacityQuerier interface {
	// CreatePool inserts p, stamping CreatedAt and UpdatedAt; ErrConflict
	// when the tenant has a pool of that name, ErrNotFound for a missing
	// tenant.
	CreatePool(ctx context.Context, p Pool) (Pool, error)
	// GetPool returns one pool.
	GetPool(ctx context.Context, tenant, name string) (Pool, error)
	// ListPools returns a tenant's own pools by name.
	ListPools(ctx context.Context, tenant string) ([]Pool, error)
	// ListPoolsOfferedTo returns the pools of other tenants offered to
	// tenant, by tenant and name.
	ListPoolsOfferedTo(ctx context.Context, tenant string) ([]Pool, error)
	// UpdatePool sets a pool's description, stamping UpdatedAt.
	UpdatePool(ctx context.Context, tenant, name, description string) (Pool, error)
	// DeletePool deletes a pool with its offers; ErrConflict while a node
	// is adopted into it or one of its reservations is active, because
	// both would then point at nothing.
	DeletePool(ctx context.Context, tenant, name string) error
	// OfferPool offers a pool to tenant; offering it again is a no-op.
	// ErrNotFound for a missing pool or tenant.
	OfferPool(ctx context.Context, poolTenant, pool, tenant string) error
	// UnofferPool withdraws an offer; ErrNotFound when there was none. It
	// leaves the tenant's reservations in the pool as they are.
	UnofferPool(ctx context.Context, poolTenant, pool, tenant string) error
	// ListPoolOffers returns a pool's offers by tenant.
	ListPoolOffers(ctx context.Context, poolTenant, pool string) ([]PoolOffer, error)

	// AdoptNode puts a node into a pool of its own tenant, from which its
	// GPUs may then be reserved; ErrNotFound for a missing node or pool,
	// ErrConflict when the pool belongs to another tenant. A node is in one
	// pool at a time: adopting it again moves it, leaving its active
	// reservations as they are.
	AdoptNode(ctx context.Context, nodeID, poolTenant, pool string) (Node, error)
	// SetNodeCordoned cordons or uncordons a node: a cordoned node keeps
	// its reservations but gets no new ones.
	SetNodeCordoned(ctx context.Context, nodeID string, cordoned bool) (Node, error)

	// SyncNodeDevices makes devices the node's GPUs: it inserts or updates
	// each, stamping UpdatedAt, and deletes the node's others, except a GPU
	// that is booked, which stays (and stays booked) until its reservation
	// ends, so that a GPU missing from one inventory report is never handed
	// to a second reservation. A GPU whose UUID another node holds, one
	// not revoked, stays that node's: its UUID is returned in taken, and
	// the rest is synced. ErrNotFound for a missing node.
	SyncNodeDevices(ctx context.Context, nodeID string, devices []Device) (taken []string, err error)
	// ListNodeDevices returns a node's GPUs by index.
	ListNodeDevices(ctx context.Context, nodeID string) ([]Device, error)

	// PlaceReservation books p.GPUs GPUs free now on the pool's ready,
	// uncordoned nodes, of p.ModelKey when set, and inserts the placed
	// reservation holding them. It picks from the nodes with the fewest
	// free GPUs first (with SameNode, the one node with the fewest that
	// still fits), to keep big nodes whole for big requests. Call it inside
	// InTx: it reads, then writes. It fails with ErrExhausted, saying how
	// many matching GPUs are free, when too few are; ErrNotFound for a
	// missing pool. A booking that collides with a concurrent one is
	// ErrConflict (or, on PostgreSQL, a serialization failure that InTx
	// retries): the store refuses a double booking whatever runs
	// concurrently, and the caller runs the transaction again.
	//
	// When the tenant has a reservation with p.IdempotencyKey, it returns
	// that reservation, booking nothing, if p.RequestHash matches, and
	// ErrConflict if not (the key was reused for a different request).
	PlaceReservation(ctx context.Context, p Placement) (Reservation, error)
	// GetReservation returns one reservation.
	GetReservation(ctx context.Context, id string) (Reservation, error)
	// ListReservations returns the reservations f selects, newest first.
	ListReservations(ctx context.Context, f ReservationFilter) ([]Reservation, error)
	// BindReservation records that nodeID holds a placed reservation's
	// GPUs: placed becomes bound, stamping BoundAt. ErrConflict when it is
	// not placed or is on another node (one that spans nodes is bound by
	// any of them).
	BindReservation(ctx context.Context, id, nodeID string) (Reservation, error)
	// ReleaseReservation ends a placed or bound reservation and frees its
	// GPUs in the same statement; ErrConflict when it already ended.
	ReleaseReservation(ctx context.Context, id string) (Reservation, error)
	// ExtendReservation moves a placed or bound reservation's EndsAt;
	// ErrConflict when it ended, or reached EndsAt by the store's clock
	// before the sweeper expired it.
	ExtendReservation(ctx context.Context, id string, endsAt time.Time) (Reservation, error)
	// ExpireReservations ends every placed or bound reservation whose
	// EndsAt passed by the store's clock, freeing its GPUs, and returns
	// them, oldest first.
	ExpireReservations(ctx context.Context) ([]Reservation, error)
	// NodeAllocations returns what nodeID must hold: the active
	// reservations booking its GPUs, by id, each with only its GPUs on
	// this node. Read the node's SpecGeneration first: the allocations
	// are then at least as new as it.
	NodeAllocations(ctx context.Context, nodeID string) ([]NodeAllocation, error)
	// FreeDevices counts, by model key, the GPUs a placement in the pool
	// could book now; only modelKey's when it is set.
	FreeDevices(ctx context.Context, poolTenant, pool, modelKey string) (map[string]int, error)
}

// bookedDevice is a GPU a placement may book or a reservation holds (or
// held), with its node and model at the time of booking.
type bookedDevice struct {
	uuid, nodeID, modelKey string
}

// nodeFree is a node with free GPUs, as placement sees it.
type nodeFree struct {
	nodeID string
	free   int
}

// poolFree is a pool's free GPUs of one model ("" for all models) on nodes
// that may take a reservation, and the most of them on one node.
type poolFree struct {
	modelKey   string
	free, most int
}

// placer is what placeReservation needs from an engine: the reads and the
// one write of a placement.
type placer interface {
	GetPool(ctx context.Context, tenant, name string) (Pool, error)
	// reservationByKey returns the tenant's reservation with key, and
	// whether there is one.
	reservationByKey(ctx context.Context, tenant, key string) (Reservation, bool, error)
	// pickNodes returns up to limit of the pool's nodes that may take a
	// reservation and have at least minFree GPUs of modelKey ("" for any)
	// free, fewest free first, then by id.
	pickNodes(ctx context.Context, poolTenant, pool, modelKey string, minFree, limit int) ([]nodeFree, error)
	// pickFirst returns the first node pickNodes would, with minFree
	// GPUs, and up to minFree of its free GPUs by index; a zero nodeFree
	// when none fits. It is the placement on one node in as few round
	// trips as the engine allows.
	pickFirst(ctx context.Context, poolTenant, pool, modelKey string, minFree int) (nodeFree, []bookedDevice, error)
	// nodeFreeDevices returns up to limit free GPUs of modelKey ("" for
	// any) on the node, by index.
	nodeFreeDevices(ctx context.Context, nodeID, modelKey string, limit int) ([]bookedDevice, error)
	// poolFree returns the pool's free GPUs by model.
	poolFree(ctx context.Context, poolTenant, pool string) ([]poolFree, error)
	// insertReservation inserts the reservation and books chosen for it.
	insertReservation(ctx context.Context, p Placement, nodeID string, chosen []bookedDevice) (Reservation, error)
}

// placeReservation is PlaceReservation on either engine: the choice of
// GPUs does not depend on the engine, and the bookings' primary key, not
// this code, is what refuses a double booking.
func placeReservation(ctx context.Context, e placer, p Placement) (Reservation, error) {
	fail := func(err error) (Reservation, error) {
		return Reservation{}, fmt.Errorf("store: place reservation %q in pool %s/%s: %w", p.ID, p.PoolTenant, p.Pool, err)
	}
	if p.GPUs < 1 {
		return fail(fmt.Errorf("%w (got %d)", errBadGPUs, p.GPUs))
	}
	if p.IdempotencyKey != "" {
		r, ok, err := e.reservationByKey(ctx, p.Tenant, p.IdempotencyKey)
		switch {
		case err != nil:
			return fail(err)
		case ok && bytes.Equal(r.RequestHash, p.RequestHash):
			return r, nil
		case ok:
			return fail(fmt.Errorf("idempotency key reused with a different request: %w", ErrConflict))
		}
	}
	nodeID, chosen, err := chooseDevices(ctx, e, p)
	if err != nil {
		return fail(err)
	}
	r, err := e.insertReservation(ctx, p, nodeID, chosen)
	if err != nil {
		return fail(err)
	}
	setDevices(&r, chosen)
	return r, nil
}

// chooseDevices picks p.GPUs free GPUs from the nodes with the fewest free
// first (with SameNode, the one node with the fewest that still fits), to
// keep big nodes whole for big requests, and returns them sorted by UUID
// with their node ("" when they span nodes), or an ErrExhausted that says
// what is free. It reads node_free's index in order and the chosen nodes'
// GPUs, never the whole pool.
func chooseDevices(ctx context.Context, e placer, p Placement) (string, []bookedDevice, error) {
	byUUID := func(a, b bookedDevice) int { return strings.Compare(a.uuid, b.uuid) }
	if p.SameNode || p.GPUs == 1 {
		n, chosen, err := e.pickFirst(ctx, p.PoolTenant, p.Pool, p.ModelKey, p.GPUs)
		switch {
		case err != nil:
			return "", nil, err
		case n.nodeID == "":
			return "", nil, exhausted(ctx, e, p)
		case len(chosen) != p.GPUs:
			return "", nil, fmt.Errorf("node %s counts %d free GPUs but has %d: the free counts disagree with the bookings", n.nodeID, n.free, len(chosen))
		}
		slices.SortFunc(chosen, byUUID)
		return n.nodeID, chosen, nil
	}
	// Spread over nodes: each gives at least one.
	nodes, err := e.pickNodes(ctx, p.PoolTenant, p.Pool, p.ModelKey, 1, p.GPUs)
	if err != nil {
		return "", nil, err
	}
	var chosen []bookedDevice
	var used []string
	for _, n := range nodes {
		take := min(p.GPUs-len(chosen), n.free)
		devs, err := e.nodeFreeDevices(ctx, n.nodeID, p.ModelKey, take)
		if err != nil {
			return "", nil, err
		}
		if len(devs) != take {
			return "", nil, fmt.Errorf("node %s counts %d free GPUs but has %d: the free counts disagree with the bookings", n.nodeID, n.free, len(devs))
		}
		chosen = append(chosen, devs...)
		used = append(used, n.nodeID)
		if len(chosen) == p.GPUs {
			break
		}
	}
	if len(chosen) < p.GPUs {
		return "", nil, exhausted(ctx, e, p)
	}
	slices.SortFunc(chosen, byUUID)
	if len(used) == 1 {
		return used[0], chosen, nil
	}
	return "", chosen, nil
}

// exhausted is the ErrExhausted for a placement that does not fit, saying
// what is free, or ErrNotFound for a pool that does not exist. Only here
// is the pool looked up: a pool with nodes that fit exists (DeletePool
// refuses while a node is adopted into it), so a placement that fits
// saves the round trip.
func exhausted(ctx context.Context, e placer, p Placement) error {
	if _, err := e.GetPool(ctx, p.PoolTenant, p.Pool); err != nil {
		return err
	}
	free, err := e.poolFree(ctx, p.PoolTenant, p.Pool)
	if err != nil {
		return err
	}
	var f poolFree
	for _, pf := range free {
		if pf.modelKey == p.ModelKey {
			f = pf
		}
	}
	model := ""
	if p.ModelKey != "" {
		model = " of model " + p.ModelKey
	}
	if p.SameNode && f.free >= p.GPUs {
		return fmt.Errorf("pool %s/%s has %d free GPUs%s but at most %d on one node; %d asked on one node: %w",
			p.PoolTenant, p.Pool, f.free, model, f.most, p.GPUs, ErrExhausted)
	}
	return fmt.Errorf("pool %s/%s has %d free GPUs%s; %d asked: %w",
		p.PoolTenant, p.Pool, f.free, model, p.GPUs, ErrExhausted)
}

// freeByModel is FreeDevices from the pool's free counts: by model key,
// only modelKey's when set, only models with a GPU free.
func freeByModel(free []poolFree, modelKey string) map[string]int {
	out := map[string]int{}
	for _, f := range free {
		if f.modelKey != "" && f.free > 0 && (modelKey == "" || f.modelKey == modelKey) {
			out[f.modelKey] = f.free
		}
	}
	return out
}

// checkReservationFilter refuses a filter the store cannot run.
func checkReservationFilter(f ReservationFilter) error {
	return checkLimit("list reservations", f.Limit)
}

// setDevices sets r's DeviceUUIDs, NodeIDs and ModelGPUs from the GPUs it
// holds or held, sorted by uuid.
func setDevices(r *Reservation, devices []bookedDevice) {
	r.DeviceUUIDs = make([]string, 0, len(devices))
	r.NodeIDs = nil
	r.ModelGPUs = make(map[string]int, 1)
	for _, d := range devices {
		r.DeviceUUIDs = append(r.DeviceUUIDs, d.uuid)
		r.ModelGPUs[d.modelKey]++
		if d.nodeID != "" && !slices.Contains(r.NodeIDs, d.nodeID) {
			r.NodeIDs = append(r.NodeIDs, d.nodeID)
		}
	}
	slices.Sort(r.NodeIDs)
}

// withDevices sets the devices of each of rs from rows, which hold
// (reservation id, device) sorted by reservation id, then uuid.
func withDevices(rs []Reservation, rows []reservationDeviceRow) []Reservation {
	idx := make(map[string]int, len(rs))
	for i, r := range rs {
		idx[r.ID] = i
	}
	for start := 0; start < len(rows); {
		end := start + 1
		for end < len(rows) && rows[end].reservationID == rows[start].reservationID {
			end++
		}
		if i, ok := idx[rows[start].reservationID]; ok {
			devices := make([]bookedDevice, end-start)
			for j, r := range rows[start:end] {
				devices[j] = r.device
			}
			setDevices(&rs[i], devices)
		}
		start = end
	}
	return rs
}

// reservationDeviceRow is a row of reservation_devices.
type reservationDeviceRow struct {
	reservationID string
	device        bookedDevice
}

// reservationIDs returns the ids of rs.
func reservationIDs(rs []Reservation) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

// sortReservations orders the rows an UPDATE ... RETURNING gave, which
// come in no defined order, oldest first.
func sortReservations(rs []Reservation) {
	slices.SortFunc(rs, func(a, b Reservation) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
}

// deviceUUIDs returns the UUIDs of devices.
func deviceUUIDs(devices []Device) []string {
	uuids := make([]string, len(devices))
	for i, d := range devices {
		uuids[i] = d.UUID
	}
	return uuids
}

// poolOffers returns the offers of a pool to tenants.
func poolOffers(poolTenant, pool string, tenants []string) []PoolOffer {
	out := make([]PoolOffer, len(tenants))
	for i, t := range tenants {
		out[i] = PoolOffer{PoolTenant: poolTenant, Pool: pool, Tenant: t}
	}
	return out
}
