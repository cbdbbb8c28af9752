-- name: ListEvents :many
-- Events after seq after, in order. tenant NULL reads every tenant's;
-- kinds NULL reads every kind.
SELECT * FROM events
WHERE seq > sqlc.arg(after)::bigint
  AND (tenant = sqlc.narg(tenant) OR sqlc.narg(tenant)::text IS NULL)
  AND (kind = ANY(sqlc.narg(kinds)::text[]) OR sqlc.narg(kinds)::text[] IS NULL)
ORDER BY seq
LIMIT sqlc.arg(lim);

-- name: EventBounds :one
-- The oldest and newest seq kept; 0 for none.
SELECT COALESCE(MIN(seq), 0)::bigint AS oldest, COALESCE(MAX(seq), 0)::bigint AS latest FROM events;

-- name: PruneEvents :execrows
DELETE FROM events WHERE created_at < sqlc.arg(before)::timestamptz;
