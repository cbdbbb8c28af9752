-- name: GetSetting :one
SELECT key, value, updated_at FROM settings WHERE key = sqlc.arg(key);

-- name: PutSetting :one
INSERT INTO settings (key, value, updated_at)
VALUES (sqlc.arg(key), sqlc.arg(value), CAST(unixepoch('subsec') * 1000000 AS INTEGER))
ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
RETURNING key, value, updated_at;

-- name: ListSettings :many
SELECT key, value, updated_at FROM settings ORDER BY key;

-- name: DeleteSetting :execrows
DELETE FROM settings WHERE key = sqlc.arg(key);
