-- 0004_capacity: pools and their offers, node adoption and cordoning, the
-- GPUs of each node, reservations, and the bookings that keep a GPU from
-- ever being held twice.

-- A pool belongs to a tenant (the platform's tenant for platform pools).
CREATE TABLE pools (
    tenant      text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name        text        NOT NULL,
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- A pool offered to another tenant, whose users may then reserve from it.
CREATE TABLE pool_offers (
    pool_tenant text NOT NULL,
    pool        text NOT NULL,
    tenant      text NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    PRIMARY KEY (pool_tenant, pool, tenant),
    FOREIGN KEY (pool_tenant, pool) REFERENCES pools (tenant, name) ON DELETE CASCADE
);

-- ListPoolsOfferedTo, and the cascade when the offered-to tenant goes.
CREATE INDEX pool_offers_tenant ON pool_offers (tenant);

-- nodes.pool (0003) names the pool of the node's own tenant it is adopted
-- into ('' for none); it has no foreign key, as on SQLite (which cannot add
-- one to an existing table), so AdoptNode and DeletePool check it. A
-- cordoned node keeps its reservations but takes no new ones.
ALTER TABLE nodes ADD COLUMN cordoned boolean NOT NULL DEFAULT false;

-- Placement: a pool's nodes; DeletePool: whether any node is adopted.
CREATE INDEX nodes_tenant_pool ON nodes (tenant, pool);

-- One row per GPU, keyed by its UUID; idx is its index on the node.
CREATE TABLE devices (
    uuid         text        PRIMARY KEY,
    node_id      text        NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    idx          bigint      NOT NULL,
    model_key    text        NOT NULL,
    model_name   text        NOT NULL,
    memory_bytes bigint      NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- A node's GPUs by index, and the cascade when it is deleted.
CREATE INDEX devices_node ON devices (node_id, idx);

-- pool_tenant, pool and node_id have no foreign keys: a reservation is
-- history and outlives them (DeletePool refuses while one is active).
-- node_id is '' for a reservation that spans nodes.
CREATE TABLE reservations (
    id              text        PRIMARY KEY,
    tenant          text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    principal       text        NOT NULL,
    pool_tenant     text        NOT NULL,
    pool            text        NOT NULL,
    node_id         text        NOT NULL,
    gpus            bigint      NOT NULL CHECK (gpus > 0),
    model_key       text        NOT NULL,
    state           text        NOT NULL DEFAULT 'placed'
                    CHECK (state IN ('placed', 'bound', 'released', 'expired')),
    idempotency_key text        NOT NULL DEFAULT '',
    request_hash    bytea       NOT NULL,
    created_at      timestamptz NOT NULL,
    ends_at         timestamptz NOT NULL,
    bound_at        timestamptz,
    released_at     timestamptz
);

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
    reservation_id text NOT NULL REFERENCES reservations (id) ON DELETE CASCADE,
    device_uuid    text NOT NULL,
    PRIMARY KEY (reservation_id, device_uuid)
);

-- A row exists exactly while a placed or bound reservation holds the GPU.
-- The primary key is what makes double-booking impossible, whatever runs
-- concurrently: a second booking of a GPU cannot be inserted. device_uuid
-- has no foreign key: a booked GPU that leaves the node's inventory stays
-- booked until its reservation ends.
CREATE TABLE device_bookings (
    device_uuid    text PRIMARY KEY,
    reservation_id text NOT NULL REFERENCES reservations (id) ON DELETE CASCADE
);

CREATE INDEX device_bookings_reservation ON device_bookings (reservation_id);

-- Ending a reservation frees its GPUs in the same statement, whichever
-- statement ends it (release, expiry), so that no booking outlives it.
CREATE FUNCTION reservations_free_bookings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM device_bookings WHERE reservation_id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER reservations_free_bookings
AFTER UPDATE OF state ON reservations
FOR EACH ROW WHEN (NEW.state IN ('released', 'expired'))
EXECUTE FUNCTION reservations_free_bookings();
