-- 0001_init: the migration bookkeeping table and deployment-wide settings.
--
-- Times are INTEGER unix microseconds in UTC: sortable, unambiguous, and
-- converted to time.Time by the engine code (internal/store/sqlite.go).
-- Tables are STRICT so a value of the wrong type is refused, not coerced.

CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY NOT NULL,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT;

CREATE TABLE settings (
    key        TEXT    PRIMARY KEY NOT NULL,
    value      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
