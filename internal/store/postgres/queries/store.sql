-- name: Now :one
-- clock_timestamp(), not now(): the time of the call even inside a
-- transaction, which is what SQLite gives too.
SELECT clock_timestamp()::timestamptz AS now;

-- name: SchemaVersion :one
SELECT COALESCE(MAX(version), 0)::integer AS version FROM schema_migrations;

-- name: SchemaMigrationsExists :one
-- Asked before anything else at start-up, so a database that has never been
-- migrated is told apart from one that has, without writing to it.
SELECT (to_regclass('schema_migrations') IS NOT NULL)::boolean AS exists;

-- name: RecordMigration :exec
INSERT INTO schema_migrations (version, name, applied_at)
VALUES (sqlc.arg(version), sqlc.arg(name), clock_timestamp());

-- name: LockMigrations :exec
-- A session-level advisory lock, scoped to this database, held while one
-- process migrates so that several starting together take turns.
SELECT pg_advisory_lock(sqlc.arg(key)::bigint);

-- name: UnlockMigrations :exec
SELECT pg_advisory_unlock(sqlc.arg(key)::bigint);
