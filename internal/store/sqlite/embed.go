// Package sqlitedb holds the SQLite engine's schema and queries: numbered
// migrations (embedded here) and the Go that sqlc generates from queries/*.sql.
// Only internal/store uses it; everything else goes through store.Querier.
package sqlitedb

import "embed"

// Migrations holds migrations/NNNN_name.sql, applied in order by the store's
// migration runner. Each has a PostgreSQL twin with the same number and name.
//
//go:embed migrations/*.sql
var Migrations embed.FS
