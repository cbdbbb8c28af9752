-- name: CreateNodeCommand :one
INSERT INTO node_commands (id, node_id, kind, args, idempotency_key, created_at, deadline)
VALUES (sqlc.arg(id), sqlc.arg(node_id), sqlc.arg(kind), sqlc.arg(args), sqlc.arg(idempotency_key),
        clock_timestamp(), sqlc.arg(deadline))
RETURNING *;

-- name: GetNodeCommand :one
SELECT * FROM node_commands WHERE id = sqlc.arg(id);

-- name: GetNodeCommandByKey :one
-- idempotency_key <> '' matches the partial unique index, and never finds
-- the commands created without a key.
SELECT * FROM node_commands
WHERE node_id = sqlc.arg(node_id) AND idempotency_key = sqlc.arg(idempotency_key) AND idempotency_key <> '';

-- name: ListNodeCommands :many
SELECT * FROM node_commands WHERE node_id = sqlc.arg(node_id)
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(lim);

-- name: PendingNodeCommands :many
-- Queued commands, and commands sent on an older session that never
-- finished: their frame may have died with that session, and resending is
-- safe because the node runs an id at most once.
SELECT * FROM node_commands
WHERE node_id = sqlc.arg(node_id)
  AND (state = 'queued' OR (state = 'sent' AND session_epoch < sqlc.arg(session_epoch)::bigint))
  AND deadline > clock_timestamp()
ORDER BY created_at, id
LIMIT sqlc.arg(lim);

-- name: MarkCommandSent :execrows
UPDATE node_commands SET state = 'sent', session_epoch = sqlc.arg(session_epoch), sent_at = clock_timestamp()
WHERE id = sqlc.arg(id) AND (state = 'queued' OR (state = 'sent' AND session_epoch < sqlc.arg(session_epoch)::bigint));

-- name: FinishCommand :one
-- A queued command may finish too: the node got it on session
-- session_epoch even if MarkCommandSent lost the race, so it is recorded as
-- sent on that session. An unknown command takes a late result that says
-- more than unknown: the node's word beats the deadline's guess.
UPDATE node_commands
SET state = sqlc.arg(state), output = sqlc.arg(output), error = sqlc.arg(error),
    session_epoch = CASE WHEN state = 'queued' THEN sqlc.arg(session_epoch)::bigint ELSE session_epoch END,
    sent_at = COALESCE(sent_at, c.now), finished_at = c.now
FROM (SELECT clock_timestamp() AS now) c
WHERE id = sqlc.arg(id) AND session_epoch <= sqlc.arg(session_epoch)::bigint
  AND (state IN ('queued', 'sent') OR (state = 'unknown' AND sqlc.arg(state) <> 'unknown'))
RETURNING node_commands.*;

-- name: ExpireCommands :many
-- A queued command past its deadline expires: no node took it in time. A
-- sent command with no result by its deadline plus result_grace_us (how
-- long a command may run on its node, and some) becomes unknown: the node
-- is gone or lost it. Its node may still report a result later, which then
-- replaces unknown (FinishCommand).
UPDATE node_commands
SET state = CASE WHEN node_commands.state = 'queued' THEN 'expired' ELSE 'unknown' END,
    error = CASE WHEN node_commands.state = 'queued' THEN 'its deadline passed before it was sent'
                 ELSE 'its node sent no result by its deadline; whether it ran is unknown' END,
    finished_at = c.now
FROM (SELECT clock_timestamp() AS now) c
WHERE (state = 'queued' AND deadline <= c.now)
   OR (state = 'sent' AND deadline <= c.now - sqlc.arg(result_grace_us)::bigint * interval '1 microsecond')
RETURNING node_commands.*;

-- name: FailInFlightCommands :many
UPDATE node_commands
SET state = 'unknown', error = 'the node lost its journal; whether it ran is unknown', finished_at = clock_timestamp()
WHERE node_id = sqlc.arg(node_id) AND state = 'sent'
RETURNING *;

-- name: NodesWithPendingCommands :many
-- The nodes with commands to send: queued, or sent on a session older than
-- the node's current one (that frame may have died with it). A gateway
-- kicks those of them it holds, whichever process queued the command.
SELECT DISTINCT c.node_id FROM node_commands c JOIN nodes n ON n.id = c.node_id
WHERE c.deadline > clock_timestamp()
  AND (c.state = 'queued' OR (c.state = 'sent' AND c.session_epoch < n.session_epoch))
ORDER BY c.node_id;
