-- 0003_nodes: the deployment's certificate authorities, join tokens, nodes
-- with their inventory, and the per-node command queue.
--
-- Times are INTEGER unix microseconds in UTC, as in 0001. Labels and command
-- arguments are JSON objects of strings, as TEXT.

-- A CA's private key is sealed with a key held outside the store.
CREATE TABLE pki_cas (
    name          TEXT    PRIMARY KEY NOT NULL,
    cert_der      BLOB    NOT NULL,
    key_encrypted BLOB    NOT NULL,
    created_at    INTEGER NOT NULL
) STRICT;

-- The secret is never stored, only its SHA-256. pool has no foreign key
-- yet: pools arrive in a later migration.
CREATE TABLE join_tokens (
    id          TEXT    PRIMARY KEY NOT NULL,
    tenant      TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    pool        TEXT    NOT NULL DEFAULT '',
    secret_hash BLOB    NOT NULL,
    max_uses    INTEGER NOT NULL CHECK (max_uses >= 0),
    uses        INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
    labels      TEXT    NOT NULL DEFAULT '{}',
    description TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    revoked_at  INTEGER
) STRICT;

-- A tenant's join tokens newest first, and the cascade when it is deleted.
CREATE INDEX join_tokens_tenant_created ON join_tokens (tenant, created_at);

-- A tenant with nodes cannot be deleted (RESTRICT): its nodes are revoked
-- and deleted first. conditions is the API's JSON, opaque to the store.
CREATE TABLE nodes (
    id              TEXT    PRIMARY KEY NOT NULL,
    tenant          TEXT    NOT NULL REFERENCES tenants (name) ON DELETE RESTRICT,
    pool            TEXT    NOT NULL DEFAULT '',
    hostname        TEXT    NOT NULL,
    machine_id      TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'joined'
                    CHECK (state IN ('joined', 'ready', 'unreachable', 'revoked')),
    labels          TEXT    NOT NULL DEFAULT '{}',
    bcd_version     TEXT    NOT NULL DEFAULT '',
    cert_serial     TEXT    NOT NULL,
    cert_public_key BLOB    NOT NULL,
    cert_not_after  INTEGER NOT NULL,
    session_epoch   INTEGER NOT NULL DEFAULT 0,
    boot_id         TEXT    NOT NULL DEFAULT '',
    spec_generation INTEGER NOT NULL DEFAULT 0,
    conditions      BLOB    NOT NULL DEFAULT x'',
    last_seen_at    INTEGER,
    created_at      INTEGER NOT NULL,
    revoked_at      INTEGER
) STRICT;

-- A tenant's nodes by id, and the foreign key check when a tenant is
-- deleted.
CREATE INDEX nodes_tenant ON nodes (tenant, id);
-- MarkUnreachable: ready nodes last seen before a cutoff.
CREATE INDEX nodes_state_last_seen ON nodes (state, last_seen_at);

-- One row per section of a node's inventory; content is binary protobuf.
CREATE TABLE node_inventory (
    node_id    TEXT    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    hash       BLOB    NOT NULL,
    content    BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (node_id, name)
) STRICT;

-- The per-node command queue. session_epoch is 0 until the command is sent.
CREATE TABLE node_commands (
    id              TEXT    PRIMARY KEY NOT NULL,
    node_id         TEXT    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    kind            TEXT    NOT NULL,
    args            TEXT    NOT NULL DEFAULT '{}',
    idempotency_key TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'sent', 'succeeded', 'failed', 'expired', 'unknown')),
    output          TEXT    NOT NULL DEFAULT '',
    error           TEXT    NOT NULL DEFAULT '',
    session_epoch   INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    deadline        INTEGER NOT NULL,
    sent_at         INTEGER,
    finished_at     INTEGER
) STRICT;

-- An idempotency key, when set, is unique per node.
CREATE UNIQUE INDEX node_commands_idempotency ON node_commands (node_id, idempotency_key)
    WHERE idempotency_key <> '';
-- A node's pending commands oldest first, and the cascade when it is deleted.
CREATE INDEX node_commands_node_state ON node_commands (node_id, state, created_at);
-- A node's commands newest first, whatever their state.
CREATE INDEX node_commands_node_created ON node_commands (node_id, created_at);
-- ExpireCommands: queued commands past their deadline.
CREATE INDEX node_commands_state_deadline ON node_commands (state, deadline);
