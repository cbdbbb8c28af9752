-- name: CreateNode :one
INSERT INTO nodes (id, tenant, pool, hostname, machine_id, labels, bcd_version,
                   cert_serial, cert_public_key, cert_not_after, spec_generation, created_at)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(pool), sqlc.arg(hostname), sqlc.arg(machine_id), sqlc.arg(labels),
        sqlc.arg(bcd_version), sqlc.arg(cert_serial), sqlc.arg(cert_public_key), sqlc.arg(cert_not_after),
        sqlc.arg(spec_generation), CAST(unixepoch('subsec') * 1000000 AS INTEGER))
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
UPDATE nodes
SET state = 'revoked', revoked_at = COALESCE(revoked_at, CAST(unixepoch('subsec') * 1000000 AS INTEGER))
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: DeleteNode :execrows
-- Its inventory and commands go with it (ON DELETE CASCADE).
DELETE FROM nodes WHERE id = sqlc.arg(id);

-- name: BeginSession :one
UPDATE nodes
SET session_epoch = session_epoch + 1, state = 'ready',
    bcd_version = sqlc.arg(bcd_version), boot_id = sqlc.arg(boot_id),
    last_seen_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE id = sqlc.arg(id) AND state <> 'revoked'
RETURNING *;

-- name: TouchNodes :execrows
-- The first of TouchNodes' two statements: stamp every listed node that is
-- not unreachable. Once it ran, none of them is both ready and last seen
-- before a cutoff in the past, so MarkUnreachable cannot slip in before
-- WakeNodes.
UPDATE nodes SET last_seen_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE id IN (SELECT value FROM json_each(CAST(sqlc.arg(ids) AS TEXT))) AND state <> 'unreachable';

-- name: WakeNodes :many
-- The second: stamp the listed unreachable nodes and set them ready,
-- returning exactly the ids that this statement changed.
UPDATE nodes SET state = 'ready', last_seen_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE id IN (SELECT value FROM json_each(CAST(sqlc.arg(ids) AS TEXT))) AND state = 'unreachable'
RETURNING id;

-- name: MarkUnreachable :many
UPDATE nodes SET state = 'unreachable'
WHERE state = 'ready' AND last_seen_at < CAST(sqlc.arg(cutoff) AS INTEGER)
RETURNING id;

-- name: SetNodeConditions :execrows
UPDATE nodes SET conditions = sqlc.arg(conditions) WHERE id = sqlc.arg(id);

-- name: PutInventorySection :exec
INSERT INTO node_inventory (node_id, name, hash, content, updated_at)
VALUES (sqlc.arg(node_id), sqlc.arg(name), sqlc.arg(hash), sqlc.arg(content), CAST(unixepoch('subsec') * 1000000 AS INTEGER))
ON CONFLICT (node_id, name) DO UPDATE
SET hash = excluded.hash, content = excluded.content, updated_at = excluded.updated_at;

-- name: ListInventorySections :many
SELECT * FROM node_inventory WHERE node_id = sqlc.arg(node_id) ORDER BY name;

-- name: NodeSyncStates :many
-- What a gateway compares with the sessions it holds: whether each node was
-- revoked, and which spec generation it should hold.
SELECT id, state, spec_generation FROM nodes
WHERE id IN (SELECT value FROM json_each(CAST(sqlc.arg(ids) AS TEXT)));

-- name: SetNodeLabels :one
UPDATE nodes SET labels = sqlc.arg(labels) WHERE id = sqlc.arg(id)
RETURNING *;

-- name: SetNodeInventoryLabels :execrows
UPDATE nodes SET inventory_labels = sqlc.arg(inventory_labels) WHERE id = sqlc.arg(id);
