-- name: CreateNode :one
INSERT INTO nodes (id, tenant, pool, hostname, machine_id, labels, bcd_version,
                   cert_serial, cert_public_key, cert_not_after, spec_generation, created_at)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(pool), sqlc.arg(hostname), sqlc.arg(machine_id), sqlc.arg(labels),
        sqlc.arg(bcd_version), sqlc.arg(cert_serial), sqlc.arg(cert_public_key), sqlc.arg(cert_not_after),
        sqlc.arg(spec_generation), clock_timestamp())
RETURNING *;

-- name: GetNode :one
SELECT * FROM nodes WHERE id = sqlc.arg(id);

-- name: ListTenantNodes :many
SELECT * FROM nodes WHERE tenant = sqlc.arg(tenant) ORDER BY id;

-- name: ListAllNodes :many
SELECT * FROM nodes ORDER BY id;

-- name: RenewNodeCert :one
UPDATE nodes
SET cert_serial = sqlc.arg(cert_serial), cert_public_key = sqlc.arg(cert_public_key),
    cert_not_after = sqlc.arg(cert_not_after)
WHERE id = sqlc.arg(id) AND state <> 'revoked'
RETURNING *;

-- name: RevokeNode :one
-- A second revocation keeps the first one's time.
UPDATE nodes SET state = 'revoked', revoked_at = COALESCE(revoked_at, clock_timestamp())
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: DeleteNode :execrows
-- Its inventory and commands go with it (ON DELETE CASCADE).
DELETE FROM nodes WHERE id = sqlc.arg(id);

-- name: BeginSession :one
UPDATE nodes
SET session_epoch = session_epoch + 1, state = 'ready',
    bcd_version = sqlc.arg(bcd_version), boot_id = sqlc.arg(boot_id), last_seen_at = clock_timestamp()
WHERE id = sqlc.arg(id) AND state <> 'revoked'
RETURNING *;

-- name: TouchNodes :many
-- One statement for the whole heartbeat batch. prev locks the rows in id
-- order (so that two batches cannot deadlock on each other) and, in READ
-- COMMITTED, reads each row's latest committed state once locked: no other
-- statement can change it before the UPDATE, so the ids returned are
-- exactly those this statement set ready.
WITH prev AS (
    SELECT id, state FROM nodes WHERE id = ANY(sqlc.arg(ids)::text[]) ORDER BY id FOR UPDATE
), touched AS (
    UPDATE nodes
    SET last_seen_at = c.now, state = CASE WHEN prev.state = 'unreachable' THEN 'ready' ELSE prev.state END
    FROM prev, (SELECT clock_timestamp() AS now) c
    WHERE nodes.id = prev.id
    RETURNING nodes.id, prev.state AS prev_state
)
SELECT id FROM touched WHERE prev_state = 'unreachable' ORDER BY id;

-- name: MarkUnreachable :many
UPDATE nodes SET state = 'unreachable'
WHERE state = 'ready' AND last_seen_at < sqlc.arg(cutoff)::timestamptz
RETURNING id;

-- name: SetNodeConditions :execrows
UPDATE nodes SET conditions = sqlc.arg(conditions) WHERE id = sqlc.arg(id);

-- name: PutInventorySection :exec
INSERT INTO node_inventory (node_id, name, hash, content, updated_at)
VALUES (sqlc.arg(node_id), sqlc.arg(name), sqlc.arg(hash), sqlc.arg(content), clock_timestamp())
ON CONFLICT (node_id, name) DO UPDATE
SET hash = excluded.hash, content = excluded.content, updated_at = excluded.updated_at;

-- name: ListInventorySections :many
SELECT * FROM node_inventory WHERE node_id = sqlc.arg(node_id) ORDER BY name;

-- name: NodeSyncStates :many
-- What a gateway compares with the sessions it holds: whether each node was
-- revoked, and which spec generation it should hold.
SELECT id, state, spec_generation FROM nodes WHERE id = ANY(sqlc.arg(ids)::text[]);

-- name: SetNodeLabels :one
UPDATE nodes SET labels = sqlc.arg(labels) WHERE id = sqlc.arg(id)
RETURNING *;

-- name: SetNodeInventoryLabels :execrows
UPDATE nodes SET inventory_labels = sqlc.arg(inventory_labels) WHERE id = sqlc.arg(id);
