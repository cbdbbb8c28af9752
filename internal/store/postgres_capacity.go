package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// The capacity part of pgQuerier (CapacityQuerier). The schema is
// postgres/migrations/0004_capacity.sql. Placements that overlap in
// SERIALIZABLE transactions mostly fail with serialization failures, which
// InTx retries; the bookings' primary key refuses a double booking even
// outside one.

func pgPool(r pgdb.Pool) Pool {
	return Pool{
		Tenant: r.Tenant, Name: r.Name, Description: r.Description,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgDevice(r pgdb.Device) Device {
	return Device{
		UUID: r.Uuid, NodeID: r.NodeID, Index: int(r.Idx), ModelKey: r.ModelKey, ModelName: r.ModelName,
		MemoryBytes: r.MemoryBytes, UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgReservation(r pgdb.Reservation) Reservation {
	return Reservation{
		ID: r.ID, Tenant: r.Tenant, Principal: r.Principal, PoolTenant: r.PoolTenant, Pool: r.Pool,
		NodeID: r.NodeID, GPUs: int(r.Gpus), ModelKey: r.ModelKey, State: ReservationState(r.State),
		IdempotencyKey: r.IdempotencyKey, RequestHash: nilIfEmpty(r.RequestHash),
		CreatedAt: r.CreatedAt.UTC(), EndsAt: r.EndsAt.UTC(),
		BoundAt: fromNullTime(r.BoundAt), ReleasedAt: fromNullTime(r.ReleasedAt),
		MeteredUntil: fromNullTime(r.MeteredUntil),
	}
}

func (p pgQuerier) CreatePool(ctx context.Context, pool Pool) (Pool, error) {
	r, err := p.q.CreatePool(ctx, pgdb.CreatePoolParams{Tenant: pool.Tenant, Name: pool.Name, Description: pool.Description})
	if err != nil {
		return Pool{}, fmt.Errorf("store: create pool %s/%s: %w", pool.Tenant, pool.Name, pgClassify(err))
	}
	return pgPool(r), nil
}

func (p pgQuerier) GetPool(ctx context.Context, tenant, name string) (Pool, error) {
	r, err := p.q.GetPool(ctx, pgdb.GetPoolParams{Tenant: tenant, Name: name})
	if err != nil {
		return Pool{}, fmt.Errorf("store: get pool %s/%s: %w", tenant, name, pgClassify(err))
	}
	return pgPool(r), nil
}

func (p pgQuerier) ListPools(ctx context.Context, tenant string) ([]Pool, error) {
	rows, err := p.q.ListPools(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list pools of %q: %w", tenant, err)
	}
	return convertRows(rows, pgPool), nil
}

func (p pgQuerier) ListPoolsOfferedTo(ctx context.Context, tenant string) ([]Pool, error) {
	rows, err := p.q.ListPoolsOfferedTo(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list pools offered to %q: %w", tenant, err)
	}
	return convertRows(rows, pgPool), nil
}

func (p pgQuerier) UpdatePool(ctx context.Context, tenant, name, description string) (Pool, error) {
	r, err := p.q.UpdatePool(ctx, pgdb.UpdatePoolParams{Tenant: tenant, Name: name, Description: description})
	if err != nil {
		return Pool{}, fmt.Errorf("store: update pool %s/%s: %w", tenant, name, pgClassify(err))
	}
	return pgPool(r), nil
}

// DeletePool deletes in one statement that refuses a pool in use; only
// when it deleted nothing does a read tell a missing pool from one in use.
func (p pgQuerier) DeletePool(ctx context.Context, tenant, name string) error {
	n, err := p.q.DeletePool(ctx, pgdb.DeletePoolParams{Tenant: tenant, Name: name})
	if err == nil && n == 0 {
		if _, err = p.q.GetPool(ctx, pgdb.GetPoolParams{Tenant: tenant, Name: name}); err == nil {
			err = fmt.Errorf("nodes are adopted into it or reservations in it are active: %w", ErrConflict)
		} else {
			err = pgClassify(err)
		}
	}
	if err != nil {
		return fmt.Errorf("store: delete pool %s/%s: %w", tenant, name, pgClassify(err))
	}
	return nil
}

func (p pgQuerier) OfferPool(ctx context.Context, poolTenant, pool, tenant string) error {
	err := p.q.OfferPool(ctx, pgdb.OfferPoolParams{PoolTenant: poolTenant, Pool: pool, Tenant: tenant})
	if err != nil {
		return fmt.Errorf("store: offer pool %s/%s to %q: %w", poolTenant, pool, tenant, pgClassify(err))
	}
	return nil
}

func (p pgQuerier) UnofferPool(ctx context.Context, poolTenant, pool, tenant string) error {
	n, err := p.q.UnofferPool(ctx, pgdb.UnofferPoolParams{PoolTenant: poolTenant, Pool: pool, Tenant: tenant})
	return pgAffected(n, err, "withdraw pool %s/%s from %q", poolTenant, pool, tenant)
}

func (p pgQuerier) ListPoolOffers(ctx context.Context, poolTenant, pool string) ([]PoolOffer, error) {
	tenants, err := p.q.ListPoolOffers(ctx, pgdb.ListPoolOffersParams{PoolTenant: poolTenant, Pool: pool})
	if err != nil {
		return nil, fmt.Errorf("store: list offers of pool %s/%s: %w", poolTenant, pool, err)
	}
	return poolOffers(poolTenant, pool, tenants), nil
}

// AdoptNode reads the node and the pool first, so that it can say which is
// missing and refuse another tenant's pool; inside InTx the reads and the
// update are one transaction.
func (p pgQuerier) AdoptNode(ctx context.Context, nodeID, poolTenant, pool string) (Node, error) {
	fail := func(err error) (Node, error) {
		return Node{}, fmt.Errorf("store: adopt node %q into pool %s/%s: %w", nodeID, poolTenant, pool, pgClassify(err))
	}
	n, err := p.q.GetNode(ctx, nodeID)
	if err != nil {
		return fail(err)
	}
	if _, err := p.q.GetPool(ctx, pgdb.GetPoolParams{Tenant: poolTenant, Name: pool}); err != nil {
		return fail(err)
	}
	if n.Tenant != poolTenant {
		return fail(fmt.Errorf("the node belongs to tenant %q: %w", n.Tenant, ErrConflict))
	}
	r, err := p.q.AdoptNode(ctx, pgdb.AdoptNodeParams{ID: nodeID, Tenant: poolTenant, Pool: pool})
	return pgNodeResult(r, err, "adopt node %q into pool %s/%s", nodeID, poolTenant, pool)
}

func (p pgQuerier) SetNodeCordoned(ctx context.Context, nodeID string, cordoned bool) (Node, error) {
	r, err := p.q.SetNodeCordoned(ctx, pgdb.SetNodeCordonedParams{ID: nodeID, Cordoned: cordoned})
	return pgNodeResult(r, err, "set node %q cordoned=%t", nodeID, cordoned)
}

func (p pgQuerier) SyncNodeDevices(ctx context.Context, nodeID string, devices []Device) ([]string, error) {
	fail := func(err error) ([]string, error) {
		return nil, fmt.Errorf("store: sync devices of node %q: %w", nodeID, pgClassify(err))
	}
	if _, err := p.q.GetNode(ctx, nodeID); err != nil {
		return fail(err)
	}
	if _, err := p.q.DeleteMissingDevices(ctx, pgdb.DeleteMissingDevicesParams{
		NodeID: nodeID, Uuids: deviceUUIDs(devices),
	}); err != nil {
		return fail(err)
	}
	var taken []string
	for _, d := range devices {
		n, err := p.q.UpsertDevice(ctx, pgdb.UpsertDeviceParams{
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

func (p pgQuerier) ListNodeDevices(ctx context.Context, nodeID string) ([]Device, error) {
	rows, err := p.q.ListNodeDevices(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("store: list devices of node %q: %w", nodeID, err)
	}
	return convertRows(rows, pgDevice), nil
}

func (p pgQuerier) PlaceReservation(ctx context.Context, pl Placement) (Reservation, error) {
	return placeReservation(ctx, p, pl)
}

func (p pgQuerier) reservationByKey(ctx context.Context, tenant, key string) (Reservation, bool, error) {
	r, err := p.q.GetReservationByKey(ctx, pgdb.GetReservationByKeyParams{Tenant: tenant, IdempotencyKey: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, err
	}
	out, err := p.withDevices(ctx, []Reservation{pgReservation(r)})
	if err != nil {
		return Reservation{}, false, err
	}
	return out[0], true, nil
}

func (p pgQuerier) pickNodes(ctx context.Context, poolTenant, pool, modelKey string, minFree, limit int) ([]nodeFree, error) {
	rows, err := p.q.PickNodes(ctx, pgdb.PickNodesParams{
		PoolTenant: poolTenant, Pool: pool, ModelKey: modelKey, MinFree: int32(minFree), Lim: int32(limit),
	})
	if err != nil {
		return nil, pgClassify(err)
	}
	out := make([]nodeFree, len(rows))
	for i, r := range rows {
		out[i] = nodeFree{nodeID: r.NodeID, free: int(r.Free)}
	}
	return out, nil
}

func (p pgQuerier) pickFirst(ctx context.Context, poolTenant, pool, modelKey string, minFree int) (nodeFree, []bookedDevice, error) {
	rows, err := p.q.PickNodeDevices(ctx, pgdb.PickNodeDevicesParams{
		PoolTenant: poolTenant, Pool: pool, ModelKey: modelKey, MinFree: int32(minFree), Lim: int32(minFree),
	})
	if err != nil || len(rows) == 0 {
		return nodeFree{}, nil, pgClassify(err)
	}
	devs := make([]bookedDevice, len(rows))
	for i, r := range rows {
		devs[i] = bookedDevice{uuid: r.Uuid, nodeID: r.NodeID, modelKey: r.ModelKey}
	}
	return nodeFree{nodeID: rows[0].NodeID, free: int(rows[0].Free)}, devs, nil
}

func (p pgQuerier) nodeFreeDevices(ctx context.Context, nodeID, modelKey string, limit int) ([]bookedDevice, error) {
	rows, err := p.q.NodeFreeDevices(ctx, pgdb.NodeFreeDevicesParams{NodeID: nodeID, ModelKey: modelKey, Lim: int32(limit)})
	if err != nil {
		return nil, pgClassify(err)
	}
	out := make([]bookedDevice, len(rows))
	for i, r := range rows {
		out[i] = bookedDevice{uuid: r.Uuid, nodeID: r.NodeID, modelKey: r.ModelKey}
	}
	return out, nil
}

func (p pgQuerier) poolFree(ctx context.Context, poolTenant, pool string) ([]poolFree, error) {
	rows, err := p.q.PoolFree(ctx, pgdb.PoolFreeParams{PoolTenant: poolTenant, Pool: pool})
	if err != nil {
		return nil, pgClassify(err)
	}
	out := make([]poolFree, len(rows))
	for i, r := range rows {
		out[i] = poolFree{modelKey: r.ModelKey, free: int(r.Free), most: int(r.Most)}
	}
	return out, nil
}

func (p pgQuerier) insertReservation(ctx context.Context, pl Placement, nodeID string, chosen []bookedDevice) (Reservation, error) {
	uuids, nodes, models := make([]string, len(chosen)), make([]string, len(chosen)), make([]string, len(chosen))
	for i, d := range chosen {
		uuids[i], nodes[i], models[i] = d.uuid, d.nodeID, d.modelKey
	}
	hash := pl.RequestHash
	if hash == nil {
		hash = []byte{} // NOT NULL: empty, not NULL
	}
	r, err := p.q.InsertReservation(ctx, pgdb.InsertReservationParams{
		ID: pl.ID, Tenant: pl.Tenant, Principal: pl.Principal, PoolTenant: pl.PoolTenant, Pool: pl.Pool,
		NodeID: nodeID, Gpus: int64(pl.GPUs), ModelKey: pl.ModelKey, IdempotencyKey: pl.IdempotencyKey,
		RequestHash: hash, EndsAt: pl.EndsAt, Uuids: uuids, NodeIds: nodes, ModelKeys: models,
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName == "device_bookings_pkey" {
		return Reservation{}, fmt.Errorf("a GPU was booked concurrently: %w", pgClassify(err))
	}
	if err != nil {
		return Reservation{}, pgClassify(err)
	}
	return pgReservation(pgdb.Reservation(r)), nil
}

// withDevices fills in the devices of rs with one query for all.
func (p pgQuerier) withDevices(ctx context.Context, rs []Reservation) ([]Reservation, error) {
	if len(rs) == 0 {
		return rs, nil
	}
	rows, err := p.q.ListReservationDevices(ctx, reservationIDs(rs))
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
func (p pgQuerier) reservationResult(ctx context.Context, id string, r pgdb.Reservation, err error, what string, args ...any) (Reservation, error) {
	var out []Reservation
	if err == nil {
		out, err = p.withDevices(ctx, []Reservation{pgReservation(r)})
	} else if errors.Is(err, pgx.ErrNoRows) {
		if _, err = p.q.GetReservation(ctx, id); err == nil {
			err = ErrConflict
		}
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("store: "+what+": %w", append(args, pgClassify(err))...)
	}
	return out[0], nil
}

func (p pgQuerier) GetReservation(ctx context.Context, id string) (Reservation, error) {
	r, err := p.q.GetReservation(ctx, id)
	var out []Reservation
	if err == nil {
		out, err = p.withDevices(ctx, []Reservation{pgReservation(r)})
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("store: get reservation %q: %w", id, pgClassify(err))
	}
	return out[0], nil
}

func (p pgQuerier) ListReservations(ctx context.Context, f ReservationFilter) ([]Reservation, error) {
	if err := checkReservationFilter(f); err != nil {
		return nil, err
	}
	rows, err := p.q.ListReservations(ctx, pgdb.ListReservationsParams{
		Tenant: toPgText(f.Tenant), PoolTenant: toPgText(f.PoolTenant), Pool: toPgText(f.Pool),
		NodeID: toPgText(f.NodeID), State: toPgText(string(f.State)), Lim: int32(min(f.Limit, math.MaxInt32)),
	})
	var out []Reservation
	if err == nil {
		out, err = p.withDevices(ctx, convertRows(rows, pgReservation))
	}
	if err != nil {
		return nil, fmt.Errorf("store: list reservations: %w", err)
	}
	return out, nil
}

func (p pgQuerier) BindReservation(ctx context.Context, id, nodeID string) (Reservation, error) {
	r, err := p.q.BindReservation(ctx, pgdb.BindReservationParams{ID: id, NodeID: nodeID})
	return p.reservationResult(ctx, id, r, err, "bind reservation %q on node %q", id, nodeID)
}

func (p pgQuerier) ReleaseReservation(ctx context.Context, id string) (Reservation, error) {
	r, err := p.q.ReleaseReservation(ctx, id)
	return p.reservationResult(ctx, id, r, err, "release reservation %q", id)
}

func (p pgQuerier) ExtendReservation(ctx context.Context, id string, endsAt time.Time) (Reservation, error) {
	r, err := p.q.ExtendReservation(ctx, pgdb.ExtendReservationParams{ID: id, EndsAt: endsAt})
	return p.reservationResult(ctx, id, r, err, "extend reservation %q", id)
}

func (p pgQuerier) ExpireReservations(ctx context.Context) ([]Reservation, error) {
	rows, err := p.q.ExpireReservations(ctx)
	var out []Reservation
	if err == nil {
		out, err = p.withDevices(ctx, convertRows(rows, pgReservation))
	}
	if err != nil {
		return nil, fmt.Errorf("store: expire reservations: %w", err)
	}
	sortReservations(out)
	return out, nil
}

func (p pgQuerier) FreeDevices(ctx context.Context, poolTenant, pool, modelKey string) (map[string]int, error) {
	free, err := p.poolFree(ctx, poolTenant, pool)
	if err != nil {
		return nil, fmt.Errorf("store: count free devices of pool %s/%s: %w", poolTenant, pool, err)
	}
	return freeByModel(free, modelKey), nil
}

func (p pgQuerier) NodeAllocations(ctx context.Context, nodeID string) ([]NodeAllocation, error) {
	rows, err := p.q.NodeAllocations(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("store: node allocations of %s: %w", nodeID, pgClassify(err))
	}
	return nodeAllocations(rows, func(r pgdb.NodeAllocationsRow) (string, string, string) {
		return r.ReservationID, r.State, r.DeviceUuid
	}), nil
}
