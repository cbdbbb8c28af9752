-- 0003_nodes: the deployment's certificate authorities, join tokens, nodes
-- with their inventory, and the per-node command queue.
--
-- Labels and command arguments are JSON objects of strings, as jsonb.

-- A CA's private key is sealed with a key held outside the store.
CREATE TABLE pki_cas (
    name          text        PRIMARY KEY,
    cert_der      bytea       NOT NULL,
    key_encrypted bytea       NOT NULL,
    created_at    timestamptz NOT NULL
);

-- The secret is never stored, only its SHA-256. pool has no foreign key
-- yet: pools arrive in a later migration.
CREATE TABLE join_tokens (
    id          text        PRIMARY KEY,
    tenant      text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    pool        text        NOT NULL DEFAULT '',
    secret_hash bytea       NOT NULL,
    max_uses    bigint      NOT NULL CHECK (max_uses >= 0),
    uses        bigint      NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
    labels      jsonb       NOT NULL DEFAULT '{}',
    description text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

-- A tenant's join tokens newest first, and the cascade when it is deleted.
CREATE INDEX join_tokens_tenant_created ON join_tokens (tenant, created_at);

-- A tenant with nodes cannot be deleted (RESTRICT): its nodes are revoked
-- and deleted first. conditions is the API's JSON, opaque to the store.
CREATE TABLE nodes (
    id              text        PRIMARY KEY,
    tenant          text        NOT NULL,
    pool            text        NOT NULL DEFAULT '',
    hostname        text        NOT NULL,
    machine_id      text        NOT NULL,
    state           text        NOT NULL DEFAULT 'joined'
                    CHECK (state IN ('joined', 'ready', 'unreachable', 'revoked')),
    labels          jsonb       NOT NULL DEFAULT '{}',
    bcd_version     text        NOT NULL DEFAULT '',
    cert_serial     text        NOT NULL,
    cert_public_key bytea       NOT NULL,
    cert_not_after  timestamptz NOT NULL,
    session_epoch   bigint      NOT NULL DEFAULT 0,
    boot_id         text        NOT NULL DEFAULT '',
    spec_generation bigint      NOT NULL DEFAULT 0,
    conditions      bytea       NOT NULL DEFAULT '',
    last_seen_at    timestamptz,
    created_at      timestamptz NOT NULL,
    revoked_at      timestamptz,
    -- Named, so that DeleteTenant can tell its violation from others.
    CONSTRAINT nodes_tenant_fkey FOREIGN KEY (tenant) REFERENCES tenants (name) ON DELETE RESTRICT
);

-- A tenant's nodes by id, and the foreign key check when a tenant is
-- deleted.
CREATE INDEX nodes_tenant ON nodes (tenant, id);
-- MarkUnreachable: ready nodes last seen before a cutoff.
CREATE INDEX nodes_state_last_seen ON nodes (state, last_seen_at);

-- One row per section of a node's inventory; content is binary protobuf.
CREATE TABLE node_inventory (
    node_id    text        NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    name       text        NOT NULL,
    hash       bytea       NOT NULL,
    content    bytea       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (node_id, name)
);

-- The per-node command queue. session_epoch is 0 until the command is sent.
CREATE TABLE node_commands (
    id              text        PRIMARY KEY,
    node_id         text        NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    kind            text        NOT NULL,
    args            jsonb       NOT NULL DEFAULT '{}',
    idempotency_key text        NOT NULL DEFAULT '',
    state           text        NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'sent', 'succeeded', 'failed', 'expired', 'unknown')),
    output          text        NOT NULL DEFAULT '',
    error           text        NOT NULL DEFAULT '',
    session_epoch   bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    deadline        timestamptz NOT NULL,
    sent_at         timestamptz,
    finished_at     timestamptz
);

-- An idempotency key, when set, is unique per node.
CREATE UNIQUE INDEX node_commands_idempotency ON node_commands (node_id, idempotency_key)
    WHERE idempotency_key <> '';
-- A node's pending commands oldest first, and the cascade when it is deleted.
CREATE INDEX node_commands_node_state ON node_commands (node_id, state, created_at);
-- A node's commands newest first, whatever their state.
CREATE INDEX node_commands_node_created ON node_commands (node_id, created_at);
-- ExpireCommands: queued commands past their deadline.
CREATE INDEX node_commands_state_deadline ON node_commands (state, deadline);
