-- name: CreatePool :one
INSERT INTO pools (tenant, name, description, created_at, updated_at)
VALUES (sqlc.arg(tenant), sqlc.arg(name), sqlc.arg(description), CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER))
RETURNING *;

-- name: GetPool :one
SELECT * FROM pools WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: ListPools :many
SELECT * FROM pools WHERE tenant = sqlc.arg(tenant) ORDER BY name;

-- name: ListPoolsOfferedTo :many
-- Other tenants' pools offered to tenant; its own pools are in ListPools.
SELECT p.* FROM pools p
JOIN pool_offers o ON o.pool_tenant = p.tenant AND o.pool = p.name
WHERE o.tenant = sqlc.arg(tenant) AND p.tenant <> sqlc.arg(tenant)
ORDER BY p.tenant, p.name;

-- name: UpdatePool :one
UPDATE pools SET description = sqlc.arg(description), updated_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE pools.tenant = sqlc.arg(tenant) AND pools.name = sqlc.arg(name)
RETURNING *;

-- name: DeletePool :execrows
-- Refused, by deleting nothing, while a node is adopted into the pool or a
-- reservation in it is active; its offers go with it (ON DELETE CASCADE).
DELETE FROM pools
WHERE pools.tenant = sqlc.arg(tenant) AND pools.name = sqlc.arg(name)
  AND NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.tenant = sqlc.arg(tenant) AND nodes.pool = sqlc.arg(name))
  AND NOT EXISTS (SELECT 1 FROM reservations r
                  WHERE r.pool_tenant = sqlc.arg(tenant) AND r.pool = sqlc.arg(name)
                    AND r.state IN ('placed', 'bound'));

-- name: OfferPool :exec
INSERT INTO pool_offers (pool_tenant, pool, tenant)
VALUES (sqlc.arg(pool_tenant), sqlc.arg(pool), sqlc.arg(tenant))
ON CONFLICT DO NOTHING;

-- name: UnofferPool :execrows
DELETE FROM pool_offers
WHERE pool_tenant = sqlc.arg(pool_tenant) AND pool = sqlc.arg(pool) AND tenant = sqlc.arg(tenant);

-- name: ListPoolOffers :many
SELECT tenant FROM pool_offers
WHERE pool_tenant = sqlc.arg(pool_tenant) AND pool = sqlc.arg(pool)
ORDER BY tenant;

-- name: AdoptNode :one
-- A node is adopted only into a pool of its own tenant; the caller tells a
-- missing node from a tenant mismatch when this changes nothing.
UPDATE nodes SET pool = sqlc.arg(pool)
WHERE id = sqlc.arg(id) AND tenant = sqlc.arg(tenant)
RETURNING *;

-- name: SetNodeCordoned :one
UPDATE nodes SET cordoned = sqlc.arg(cordoned) WHERE id = sqlc.arg(id)
RETURNING *;

-- name: UpsertDevice :execrows
-- A GPU's UUID is its identity across the fleet: a row moves to the
-- reporting node only from a node that was revoked (re-installed hardware
-- joins again), never from one still in the fleet, so that one node cannot
-- take another's GPU, and its bookings, by reporting its UUID. No row is
-- written then.
INSERT INTO devices (uuid, node_id, idx, model_key, model_name, memory_bytes, updated_at)
VALUES (sqlc.arg(uuid), sqlc.arg(node_id), sqlc.arg(idx), sqlc.arg(model_key), sqlc.arg(model_name),
        sqlc.arg(memory_bytes), CAST(unixepoch('subsec') * 1000000 AS INTEGER))
ON CONFLICT (uuid) DO UPDATE
SET node_id = excluded.node_id, idx = excluded.idx, model_key = excluded.model_key,
    model_name = excluded.model_name, memory_bytes = excluded.memory_bytes, updated_at = excluded.updated_at
WHERE devices.node_id = excluded.node_id
   OR (SELECT state FROM nodes WHERE id = devices.node_id) = 'revoked';

-- name: DeleteMissingDevices :execrows
-- The node's GPUs not in uuids (a JSON array), except booked ones: those
-- stay until their reservation ends.
DELETE FROM devices
WHERE node_id = sqlc.arg(node_id)
  AND uuid NOT IN (SELECT value FROM json_each(CAST(sqlc.arg(uuids) AS TEXT)))
  AND uuid NOT IN (SELECT device_uuid FROM device_bookings);

-- name: ListNodeDevices :many
SELECT * FROM devices WHERE node_id = sqlc.arg(node_id) ORDER BY idx, uuid;

-- name: PickNodes :many
-- The pool's nodes that may take a reservation and have at least min_free
-- GPUs of the model free ('' counts every model), fewest free first: the
-- node_free_pick index, read in order.
SELECT node_id, free FROM node_free
WHERE tenant = sqlc.arg(pool_tenant) AND pool = sqlc.arg(pool) AND model_key = sqlc.arg(model_key)
  AND eligible = 1 AND free >= sqlc.arg(min_free)
ORDER BY free, node_id
LIMIT sqlc.arg(lim);

-- name: NodeFreeDevices :many
-- A node's GPUs of the model ('' for any) that no reservation holds, by index.
SELECT d.uuid, d.node_id, d.model_key FROM devices d
WHERE d.node_id = sqlc.arg(node_id) AND (d.model_key = sqlc.arg(model_key) OR sqlc.arg(model_key) = '')
  AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = d.uuid)
ORDER BY d.idx, d.uuid
LIMIT sqlc.arg(lim);

-- name: PoolFree :many
-- The pool's free GPUs on nodes that may take a reservation, by model
-- (model_key '' sums them all), with the most on one node.
SELECT model_key, CAST(SUM(free) AS INTEGER) AS free, CAST(MAX(free) AS INTEGER) AS most FROM node_free
WHERE tenant = sqlc.arg(pool_tenant) AND pool = sqlc.arg(pool) AND eligible = 1
GROUP BY model_key
ORDER BY model_key;

-- name: InsertReservation :one
INSERT INTO reservations (id, tenant, principal, pool_tenant, pool, node_id, gpus, model_key,
                          idempotency_key, request_hash, created_at, ends_at)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(principal), sqlc.arg(pool_tenant), sqlc.arg(pool),
        sqlc.arg(node_id), sqlc.arg(gpus), sqlc.arg(model_key), sqlc.arg(idempotency_key),
        sqlc.arg(request_hash), CAST(unixepoch('subsec') * 1000000 AS INTEGER), sqlc.arg(ends_at))
RETURNING *;

-- name: InsertReservationDevices :exec
-- Each GPU with its node and model as they are now, kept for history.
INSERT INTO reservation_devices (reservation_id, device_uuid, node_id, model_key)
SELECT sqlc.arg(reservation_id), d.uuid, d.node_id, d.model_key FROM devices d
WHERE d.uuid IN (SELECT value FROM json_each(CAST(sqlc.arg(uuids) AS TEXT)));

-- name: InsertDeviceBookings :exec
-- Fails on the primary key when any of the GPUs is booked already.
INSERT INTO device_bookings (device_uuid, reservation_id)
SELECT value, sqlc.arg(reservation_id) FROM json_each(CAST(sqlc.arg(uuids) AS TEXT));

-- name: ListReservationDevices :many
SELECT reservation_id, device_uuid, node_id, model_key FROM reservation_devices
WHERE reservation_id IN (SELECT value FROM json_each(CAST(sqlc.arg(ids) AS TEXT)))
ORDER BY reservation_id, device_uuid;

-- name: GetReservation :one
SELECT * FROM reservations WHERE id = sqlc.arg(id);

-- name: GetReservationByKey :one
SELECT * FROM reservations
WHERE tenant = sqlc.arg(tenant) AND idempotency_key = sqlc.arg(idempotency_key) AND idempotency_key <> '';

-- name: ListReservations :many
-- Unset filters are NULL.
SELECT * FROM reservations
WHERE (tenant = sqlc.narg(tenant) OR sqlc.narg(tenant) IS NULL)
  AND (pool_tenant = sqlc.narg(pool_tenant) OR sqlc.narg(pool_tenant) IS NULL)
  AND (pool = sqlc.narg(pool) OR sqlc.narg(pool) IS NULL)
  AND (node_id = sqlc.narg(node_id) OR sqlc.narg(node_id) IS NULL)
  AND (state = sqlc.narg(state) OR sqlc.narg(state) IS NULL)
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(lim);

-- name: BindReservation :one
-- A reservation that spans nodes (node_id '') is bound by any of them.
UPDATE reservations SET state = 'bound', bound_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE id = sqlc.arg(id) AND state = 'placed' AND (node_id = sqlc.arg(node_id) OR node_id = '')
RETURNING *;

-- name: ReleaseReservation :one
-- The trigger reservations_free_bookings deletes its bookings.
UPDATE reservations SET state = 'released', released_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE id = sqlc.arg(id) AND state IN ('placed', 'bound')
RETURNING *;

-- name: ExtendReservation :one
-- Only an active reservation that has not ended by the store's clock.
UPDATE reservations SET ends_at = sqlc.arg(ends_at)
WHERE id = sqlc.arg(id) AND state IN ('placed', 'bound') AND ends_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)
RETURNING *;

-- name: ExpireReservations :many
-- The trigger reservations_free_bookings deletes their bookings.
UPDATE reservations SET state = 'expired', released_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE state IN ('placed', 'bound') AND ends_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER)
RETURNING *;

-- name: NodeAllocations :many
-- The GPUs booked on a node now, by reservation.
SELECT b.reservation_id, r.state, b.device_uuid FROM device_bookings b
JOIN devices d ON d.uuid = b.device_uuid
JOIN reservations r ON r.id = b.reservation_id
WHERE d.node_id = sqlc.arg(node_id)
ORDER BY b.reservation_id, b.device_uuid;
