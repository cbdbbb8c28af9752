-- 0004_capacity: pools and their offers, node adoption and cordoning, the
-- GPUs of each node, reservations, and the bookings that keep a GPU from
-- ever being held twice.
--
-- Times are INTEGER unix microseconds in UTC, as in 0001.

-- A pool belongs to a tenant (the platform's tenant for platform pools).
CREATE TABLE pools (
    tenant      TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    description TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT;

-- A pool offered to another tenant, whose users may then reserve from it.
CREATE TABLE pool_offers (
    pool_tenant TEXT NOT NULL,
    pool        TEXT NOT NULL,
    tenant      TEXT NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    PRIMARY KEY (pool_tenant, pool, tenant),
    FOREIGN KEY (pool_tenant, pool) REFERENCES pools (tenant, name) ON DELETE CASCADE
) STRICT;

-- ListPoolsOfferedTo, and the cascade when the offered-to tenant goes.
CREATE INDEX pool_offers_tenant ON pool_offers (tenant);

-- nodes.pool (0003) names the pool of the node's own tenant it is adopted
-- into ('' for none); it has no foreign key because SQLite cannot add one to
-- an existing table, so AdoptNode and DeletePool check it. A cordoned node
-- keeps its reservations but takes no new ones.
ALTER TABLE nodes ADD COLUMN cordoned INTEGER NOT NULL DEFAULT 0 CHECK (cordoned IN (0, 1));

-- Placement: a pool's nodes; DeletePool: whether any node is adopted.
CREATE INDEX nodes_tenant_pool ON nodes (tenant, pool);

-- One row per GPU, keyed by its UUID; idx is its index on the node.
CREATE TABLE devices (
    uuid         TEXT    PRIMARY KEY NOT NULL,
    node_id      TEXT    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    idx          INTEGER NOT NULL,
    model_key    TEXT    NOT NULL,
    model_name   TEXT    NOT NULL,
    memory_bytes INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;

-- A node's GPUs by index, and the cascade when it is deleted.
CREATE INDEX devices_node ON devices (node_id, idx);

-- pool_tenant, pool and node_id have no foreign keys: a reservation is
-- history and outlives them (DeletePool refuses while one is active).
-- node_id is '' for a reservation that spans nodes.
CREATE TABLE reservations (
    id              TEXT    PRIMARY KEY NOT NULL,
    tenant          TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    principal       TEXT    NOT NULL,
    pool_tenant     TEXT    NOT NULL,
    pool            TEXT    NOT NULL,
    node_id         TEXT    NOT NULL,
    gpus            INTEGER NOT NULL CHECK (gpus > 0),
    model_key       TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'placed'
                    CHECK (state IN ('placed', 'bound', 'released', 'expired')),
    idempotency_key TEXT    NOT NULL DEFAULT '',
    request_hash    BLOB    NOT NULL,
    created_at      INTEGER NOT NULL,
    ends_at         INTEGER NOT NULL,
    bound_at        INTEGER,
    released_at     INTEGER
) STRICT;

-- An idempotency key, when set, is unique per tenant.
CREATE UNIQUE INDEX reservations_idempotency ON reservations (tenant, idempotency_key)
    WHERE idempotency_key <> '';
-- ListReservations newest first, and the cascade when a tenant goes.
CREATE INDEX reservations_tenant_created ON reservations (tenant, created_at);
CREATE INDEX reservations_pool_created ON reservations (pool_tenant, pool, created_at);
-- ExpireReservations and DeletePool: active reservations by end.
CREATE INDEX reservations_state_ends ON reservations (state, ends_at);

-- The GPUs a reservation held, kept after it ends, for history.
CREATE TABLE reservation_devices (
    reservation_id TEXT NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    device_uuid    TEXT NOT NULL,
    PRIMARY KEY (reservation_id, device_uuid)
) STRICT;

-- A row exists exactly while a placed or bound reservation holds the GPU.
-- The primary key is what makes double-booking impossible, whatever runs
-- concurrently: a second booking of a GPU cannot be inserted. device_uuid
-- has no foreign key: a booked GPU that leaves the node's inventory stays
-- booked until its reservation ends.
CREATE TABLE device_bookings (
    device_uuid    TEXT PRIMARY KEY NOT NULL,
    reservation_id TEXT NOT NULL REFERENCES reservations (id) ON DELETE CASCADE
) STRICT;

CREATE INDEX device_bookings_reservation ON device_bookings (reservation_id);

-- Ending a reservation frees its GPUs in the same statement, whichever
-- statement ends it (release, expiry), so that no booking outlives it.
CREATE TRIGGER reservations_free_bookings
AFTER UPDATE OF state ON reservations
WHEN NEW.state IN ('released', 'expired')
BEGIN
    DELETE FROM device_bookings WHERE reservation_id = NEW.id;
END;
