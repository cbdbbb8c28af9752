package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// The capacity part of sqliteQuerier (CapacityQuerier). The schema is
// sqlite/migrations/0004_capacity.sql. Every transaction takes SQLite's
// write lock at BEGIN, so a placement in InTx runs alone; the bookings'
// primary key refuses a double booking even outside one.

func sqlitePool(r sqlitedb.Pool) Pool {
	return Pool{
		Tenant: r.Tenant, Name: r.Name, Description: r.Description,
		CreatedAt: fromMicros(r.CreatedAt), UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

func sqliteDevice(r sqlitedb.Device) Device {
	return Device{
		UUID: r.Uuid, NodeID: r.NodeID, Index: int(r.Idx), ModelKey: r.ModelKey, ModelName: r.ModelName,
		MemoryBytes: r.MemoryBytes, UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

func sqliteReservation(r sqlitedb.Reservation) Reservation {
	return Reservation{
		ID: r.ID, Tenant: r.Tenant, Principal: r.Principal, PoolTenant: r.PoolTenant, Pool: r.Pool,
		NodeID: r.NodeID, GPUs: int(r.Gpus), ModelKey: r.ModelKey, State: ReservationState(r.State),
		IdempotencyKey: r.IdempotencyKey, RequestHash: nilIfEmpty(r.RequestHash),
		CreatedAt: fromMicros(r.CreatedAt), EndsAt: fromMicros(r.EndsAt),
		BoundAt: fromNullMicros(r.BoundAt), ReleasedAt: fromNullMicros(r.ReleasedAt),
		MeteredUntil: fromNullMicros(r.MeteredUntil),
	}
}

func (s sqliteQuerier) CreatePool(ctx context.Context, p Pool) (Pool, error) {
	r, err := s.q.CreatePool(ctx, sqlitedb.CreatePoolParams{Tenant: p.Tenant, Name: p.Name, Description: p.Description})
	if err != nil {
		return Pool{}, fmt.Errorf("store: create pool %s/%s: %w", p.Tenant, p.Name, sqliteClassify(err))
	}
	return sqlitePool(r), nil
}

func (s sqliteQuerier) GetPool(ctx context.Context, tenant, name string) (Pool, error) {
	r, err := s.q.GetPool(ctx, sqlitedb.GetPoolParams{Tenant: tenant, Name: name})
	if err != nil {
		return Pool{}, fmt.Errorf("store: get pool %s/%s: %w", tenant, name, sqliteClassify(err))
	}
	return sqlitePool(r), nil
}

func (s sqliteQuerier) ListPools(ctx context.Context, tenant string) ([]Pool, error) {
	rows, err := s.q.ListPools(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list pools of %q: %w", tenant, err)
	}
	return convertRows(rows, sqlitePool), nil
}

func (s sqliteQuerier) ListPoolsOfferedTo(ctx context.Context, tenant string) ([]Pool, error) {
	rows, err := s.q.ListPoolsOfferedTo(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list pools offered to %q: %w", tenant, err)
	}
	return convertRows(rows, sqlitePool), nil
}

func (s sqliteQuerier) UpdatePool(ctx context.Context, tenant, name, description string) (Pool, error) {
	r, err := s.q.UpdatePool(ctx, sqlitedb.UpdatePoolParams{Tenant: tenant, Name: name, Description: description})
	if err != nil {
		return Pool{}, fmt.Errorf("store: update pool %s/%s: %w", tenant, name, sqliteClassify(err))
	}
	return sqlitePool(r), nil
}

// DeletePool deletes in one statement that refuses a pool in use; only
// when it deleted nothing does a read tell a missing pool from one in use.
func (s sqliteQuerier) DeletePool(ctx context.Context, tenant, name string) error {
	n, err := s.q.DeletePool(ctx, sqlitedb.DeletePoolParams{Tenant: tenant, Name: name})
	if err == nil && n == 0 {
		if _, err = s.q.GetPool(ctx, sqlitedb.GetPoolParams{Tenant: tenant, Name: name}); err == nil {
			err = fmt.Errorf("nodes are adopted into it or reservations in it are active: %w", ErrConflict)
		} else {
			err = sqliteClassify(err)
		}
	}
	if err != nil {
		return fmt.Errorf("store: delete pool %s/%s: %w", tenant, name, sqliteClassify(err))
	}
	return nil
}

func (s sqliteQuerier) OfferPool(ctx context.Context, poolTenant, pool, tenant string) error {
	err := s.q.OfferPool(ctx, sqlitedb.OfferPoolParams{PoolTenant: poolTenant, Pool: pool, Tenant: tenant})
	if err != nil {
		return fmt.Errorf("store: offer pool %s/%s to %q: %w", poolTenant, pool, tenant, sqliteClassify(err))
	}
	return nil
}

func (s sqliteQuerier) UnofferPool(ctx context.Context, poolTenant, pool, tenant string) error {
	n, err := s.q.UnofferPool(ctx, sqlitedb.UnofferPoolParams{PoolTenant: poolTenant, Pool: pool, Tenant: tenant})
	return sqliteAffected(n, err, "withdraw pool %s/%s from %q", poolTenant, pool, tenant)
}

func (s sqliteQuerier) ListPoolOffers(ctx context.Context, poolTenant, pool string) ([]PoolOffer, error) {
	tenants, err := s.q.ListPoolOffers(ctx, sqlitedb.ListPoolOffersParams{PoolTenant: poolTenant, Pool: pool})
	if err != nil {
		return nil, fmt.Errorf("store: list offers of pool %s/%s: %w", poolTenant, pool, err)
	}
	return poolOffers(poolTenant, pool, tenants), nil
}

// AdoptNode reads the node and the pool first, so that it can say which is
// missing and refuse another tenant's pool; inside InTx the reads and the
// update are one transaction.
func (s sqliteQuerier) AdoptNode(ctx context.Context, nodeID, poolTenant, pool string) (Node, error) {
	fail := func(err error) (Node, error) {
		return Node{}, fmt.Errorf("store: adopt node %q into pool %s/%s: %w", nodeID, poolTenant, pool, sqliteClassify(err))
	}
	n, err := s.q.GetNode(ctx, nodeID)
	if err != nil {
		return fail(err)
	}
	if _, err := s.q.GetPool(ctx, sqlitedb.GetPoolParams{Tenant: poolTenant, Name: pool}); err != nil {
		return fail(err)
	}
	if n.Tenant != poolTenant {
		return fail(fmt.Errorf("the node belongs to tenant %q: %w", n.Tenant, ErrConflict))
	}
	r, err := s.q.AdoptNode(ctx, sqlitedb.AdoptNodeParams{ID: nodeID, Tenant: poolTenant, Pool: pool})
	return sqliteNodeResult(r, err, "adopt node %q into pool %s/%s", nodeID, poolTenant, pool)
}

func (s sqliteQuerier) SetNodeCordoned(ctx context.Context, nodeID string, cordoned bool) (Node, error) {
	r, err := s.q.SetNodeCordoned(ctx, sqlitedb.SetNodeCordonedParams{ID: nodeID, Cordoned: boolInt(cordoned)})
	return sqliteNodeResult(r, err, "set node %q cordoned=%t", nodeID, cordoned)
}

func (s sqliteQuerier) SyncNodeDevices(ctx context.Context, nodeID string, devices []Device) ([]string, error) {
	fail := func(err error) ([]string, error) {
		return nil, fmt.Errorf("store: sync devices of node %q: %w", nodeID, sqliteClassify(err))
	}
	if _, err := s.q.GetNode(ctx, nodeID); err != nil {
		return fail(err)
	}
	if _, err := s.q.DeleteMissingDevices(ctx, sqlitedb.DeleteMissingDevicesParams{
		NodeID: nodeID, Uuids: jsonStrings(deviceUUIDs(devices)),
	}); err != nil {
		return fail(err)
	}
	var taken []string
	for _, d := range devices {
		n, err := s.q.UpsertDevice(ctx, sqlitedb.UpsertDeviceParams{
			Uuid: d.UUID, NodeID: nodeID, Idx: int64(d.Index), ModelKey: d.ModelKey, ModelName: d.ModelName,
			MemoryBytes: d.MemoryBytes,
		})
		if err != nil {
			return fail(err)
		}
		if n == 0 {
			taken = append(taken, d.UUID)
		}
	}
	return taken, nil
}

func (s sqliteQuerier) ListNodeDevices(ctx context.Context, nodeID string) ([]Device, error) {
	rows, err := s.q.ListNodeDevices(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("store: list devices of node %q: %w", nodeID, err)
	}
	return convertRows(rows, sqliteDevice), nil
}

func (s sqliteQuerier) PlaceReservation(ctx context.Context, p Placement) (Reservation, error) {
	return placeReservation(ctx, s, p)
}

func (s sqliteQuerier) reservationByKey(ctx context.Context, tenant, key string) (Reservation, bool, error) {
	r, err := s.q.GetReservationByKey(ctx, sqlitedb.GetReservationByKeyParams{Tenant: tenant, IdempotencyKey: key})
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, err
	}
	out, err := s.withDevices(ctx, []Reservation{sqliteReservation(r)})
	if err != nil {
		return Reservation{}, false, err
	}
	return out[0], true, nil
}

func (s sqliteQuerier) pickNodes(ctx context.Context, poolTenant, pool, modelKey string, minFree, limit int) ([]nodeFree, error) {
	rows, err := s.q.PickNodes(ctx, sqlitedb.PickNodesParams{
		PoolTenant: poolTenant, Pool: pool, ModelKey: modelKey, MinFree: int64(minFree), Lim: int64(limit),
	})
	if err != nil {
		return nil, sqliteClassify(err)
	}
	out := make([]nodeFree, len(rows))
	for i, r := range rows {
		out[i] = nodeFree{nodeID: r.NodeID, free: int(r.Free)}
	}
	return out, nil
}

// pickFirst is two statements: SQLite has no LATERAL join, and a round
// trip costs nothing in-process.
func (s sqliteQuerier) pickFirst(ctx context.Context, poolTenant, pool, modelKey string, minFree int) (nodeFree, []bookedDevice, error) {
	nodes, err := s.pickNodes(ctx, poolTenant, pool, modelKey, minFree, 1)
	if err != nil || len(nodes) == 0 {
		return nodeFree{}, nil, err
	}
	devs, err := s.nodeFreeDevices(ctx, nodes[0].nodeID, modelKey, minFree)
	return nodes[0], devs, err
}

func (s sqliteQuerier) nodeFreeDevices(ctx context.Context, nodeID, modelKey string, limit int) ([]bookedDevice, error) {
	rows, err := s.q.NodeFreeDevices(ctx, sqlitedb.NodeFreeDevicesParams{NodeID: nodeID, ModelKey: modelKey, Lim: int64(limit)})
	if err != nil {
		return nil, sqliteClassify(err)
	}
	out := make([]bookedDevice, len(rows))
	for i, r := range rows {
		out[i] = bookedDevice{uuid: r.Uuid, nodeID: r.NodeID, modelKey: r.ModelKey}
	}
	return out, nil
}

func (s sqliteQuerier) poolFree(ctx context.Context, poolTenant, pool string) ([]poolFree, error) {
	rows, err := s.q.PoolFree(ctx, sqlitedb.PoolFreeParams{PoolTenant: poolTenant, Pool: pool})
	if err != nil {
		return nil, sqliteClassify(err)
	}
	out := make([]poolFree, len(rows))
	for i, r := range rows {
		out[i] = poolFree{modelKey: r.ModelKey, free: int(r.Free), most: int(r.Most)}
	}
	return out, nil
}

func (s sqliteQuerier) insertReservation(ctx context.Context, p Placement, nodeID string, chosen []bookedDevice) (Reservation, error) {
	uuids := make([]string, len(chosen))
	for i, d := range chosen {
		uuids[i] = d.uuid
	}
	hash := p.RequestHash
	if hash == nil {
		hash = []byte{} // NOT NULL: empty, not NULL
	}
	r, err := s.q.InsertReservation(ctx, sqlitedb.InsertReservationParams{
		ID: p.ID, Tenant: p.Tenant, Principal: p.Principal, PoolTenant: p.PoolTenant, Pool: p.Pool,
		NodeID: nodeID, Gpus: int64(p.GPUs), ModelKey: p.ModelKey, IdempotencyKey: p.IdempotencyKey,
		RequestHash: hash, EndsAt: p.EndsAt.UnixMicro(),
	})
	if err != nil {
		return Reservation{}, sqliteClassify(err)
	}
	list := jsonStrings(uuids)
	if err := s.q.InsertReservationDevices(ctx, sqlitedb.InsertReservationDevicesParams{ReservationID: p.ID, Uuids: list}); err != nil {
		return Reservation{}, sqliteClassify(err)
	}
	if err := s.q.InsertDeviceBookings(ctx, sqlitedb.InsertDeviceBookingsParams{ReservationID: p.ID, Uuids: list}); err != nil {
		return Reservation{}, fmt.Errorf("a GPU was booked concurrently: %w", sqliteClassify(err))
	}
	return sqliteReservation(r), nil
}

// withDevices fills in the devices of rs with one query for all.
func (s sqliteQuerier) withDevices(ctx context.Context, rs []Reservation) ([]Reservation, error) {
	if len(rs) == 0 {
		return rs, nil
	}
	rows, err := s.q.ListReservationDevices(ctx, jsonStrings(reservationIDs(rs)))
	if err != nil {
		return nil, err
	}
	devices := make([]reservationDeviceRow, len(rows))
	for i, r := range rows {
		devices[i] = reservationDeviceRow{r.ReservationID, bookedDevice{uuid: r.DeviceUuid, nodeID: r.NodeID, modelKey: r.ModelKey}}
	}
	return withDevices(rs, devices), nil
}

// reservationResult converts the row of an update that returns one
// reservation, with its devices, or wraps its error with what was being
// done. An update that matched no row is ErrConflict when the reservation
// exists (it is not in a state the update accepts), ErrNotFound when not.
func (s sqliteQuerier) reservationResult(ctx context.Context, id string, r sqlitedb.Reservation, err error, what string, args ...any) (Reservation, error) {
	var out []Reservation
	if err == nil {
		out, err = s.withDevices(ctx, []Reservation{sqliteReservation(r)})
	} else if errors.Is(err, sql.ErrNoRows) {
		if _, err = s.q.GetReservation(ctx, id); err == nil {
			err = ErrConflict
		}
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("store: "+what+": %w", append(args, sqliteClassify(err))...)
	}
	return out[0], nil
}

func (s sqliteQuerier) GetReservation(ctx context.Context, id string) (Reservation, error) {
	r, err := s.q.GetReservation(ctx, id)
	var out []Reservation
	if err == nil {
		out, err = s.withDevices(ctx, []Reservation{sqliteReservation(r)})
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("store: get reservation %q: %w", id, sqliteClassify(err))
	}
	return out[0], nil
}

func (s sqliteQuerier) ListReservations(ctx context.Context, f ReservationFilter) ([]Reservation, error) {
	if err := checkReservationFilter(f); err != nil {
		return nil, err
	}
	rows, err := s.q.ListReservations(ctx, sqlitedb.ListReservationsParams{
		Tenant: toNullString(f.Tenant), PoolTenant: toNullString(f.PoolTenant), Pool: toNullString(f.Pool),
		NodeID: toNullString(f.NodeID), State: toNullString(string(f.State)), Lim: int64(f.Limit),
	})
	var out []Reservation
	if err == nil {
		out, err = s.withDevices(ctx, convertRows(rows, sqliteReservation))
	}
	if err != nil {
		return nil, fmt.Errorf("store: list reservations: %w", err)
	}
	return out, nil
}

func (s sqliteQuerier) BindReservation(ctx context.Context, id, nodeID string) (Reservation, error) {
	r, err := s.q.BindReservation(ctx, sqlitedb.BindReservationParams{ID: id, NodeID: nodeID})
	return s.reservationResult(ctx, id, r, err, "bind reservation %q on node %q", id, nodeID)
}

func (s sqliteQuerier) ReleaseReservation(ctx context.Context, id string) (Reservation, error) {
	r, err := s.q.ReleaseReservation(ctx, id)
	return s.reservationResult(ctx, id, r, err, "release reservation %q", id)
}

func (s sqliteQuerier) ExtendReservation(ctx context.Context, id string, endsAt time.Time) (Reservation, error) {
	r, err := s.q.ExtendReservation(ctx, sqlitedb.ExtendReservationParams{ID: id, EndsAt: endsAt.UnixMicro()})
	return s.reservationResult(ctx, id, r, err, "extend reservation %q", id)
}

func (s sqliteQuerier) ExpireReservations(ctx context.Context) ([]Reservation, error) {
	rows, err := s.q.ExpireReservations(ctx)
	var out []Reservation
	if err == nil {
		out, err = s.withDevices(ctx, convertRows(rows, sqliteReservation))
	}
	if err != nil {
		return nil, fmt.Errorf("store: expire reservations: %w", err)
	}
	sortReservations(out)
	return out, nil
}

func (s sqliteQuerier) FreeDevices(ctx context.Context, poolTenant, pool, modelKey string) (map[string]int, error) {
	free, err := s.poolFree(ctx, poolTenant, pool)
	if err != nil {
		return nil, fmt.Errorf("store: count free devices of pool %s/%s: %w", poolTenant, pool, err)
	}
	return freeByModel(free, modelKey), nil
}

func (s sqliteQuerier) NodeAllocations(ctx context.Context, nodeID string) ([]NodeAllocation, error) {
	rows, err := s.q.NodeAllocations(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("store: node allocations of %s: %w", nodeID, sqliteClassify(err))
	}
	return nodeAllocations(rows, func(r sqlitedb.NodeAllocationsRow) (string, string, string) {
		return r.ReservationID, r.State, r.DeviceUuid
	}), nil
}
