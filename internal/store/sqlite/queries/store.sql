-- name: Now :one
-- The store's clock in unix microseconds. SQLite reads the clock once per
-- statement, with millisecond resolution.
SELECT CAST(unixepoch('subsec') * 1000000 AS INTEGER) AS now_us;

-- name: SchemaVersion :one
SELECT CAST(COALESCE(MAX(version), 0) AS INTEGER) AS version FROM schema_migrations;

-- name: RecordMigration :exec
INSERT INTO schema_migrations (version, name, applied_at)
VALUES (sqlc.arg(version), sqlc.arg(name), CAST(unixepoch('subsec') * 1000000 AS INTEGER));
