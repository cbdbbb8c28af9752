-- name: ListEvents :many
-- Events after seq after, in order. tenant NULL reads every tenant's;
-- kinds (a JSON array) NULL reads every kind.
SELECT * FROM events
WHERE seq > sqlc.arg(after)
  AND (tenant = sqlc.narg(tenant) OR sqlc.narg(tenant) IS NULL)
  AND (kind IN (SELECT value FROM json_each(sqlc.narg(kinds))) OR sqlc.narg(kinds) IS NULL)
ORDER BY seq
LIMIT sqlc.arg(lim);

-- name: EventBounds :one
-- The oldest and newest seq kept; 0 for none.
SELECT CAST(COALESCE(MIN(seq), 0) AS INTEGER) AS oldest, CAST(COALESCE(MAX(seq), 0) AS INTEGER) AS latest FROM events;

-- name: PruneEvents :execrows
DELETE FROM events WHERE created_at < sqlc.arg(before);
