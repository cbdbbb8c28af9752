// Package store is the control plane's only door to its database: SQLite
// (modernc.org/sqlite, one process) or PostgreSQL (pgx, any number of
// processes).
//
// It follows River's shape. Every query the control plane runs is one method
// of Querier, written as SQL in sqlite/queries and postgres/queries, compiled
// by sqlc once per engine, and wrapped by the engine files (sqlite.go,
// postgres.go; sqlite_iam.go, postgres_iam.go for the identity queries;
// sqlite_nodes.go, postgres_nodes.go for the node queries;
// sqlite_capacity.go, postgres_capacity.go for pools and reservations;
// sqlite_usage.go, postgres_usage.go for metered usage; sqlite_webhooks.go,
// postgres_webhooks.go for webhooks), which turn rows
// into domain types and errors into ErrNotFound and ErrConflict. The
// conformance suite (conformance_test.go, iam_conformance_test.go,
// nodes_conformance_test.go, capacity_conformance_test.go,
// usage_conformance_test.go, webhooks_conformance_test.go) runs every
// method on both engines.
//
// Adding a query:
//
//  1. Write it in sqlite/queries/*.sql and postgres/queries/*.sql (a new
//     table or column also needs a new migration pair, same number on both).
//  2. Regenerate: go tool -modfile=tools/go.mod sqlc generate -f internal/store/sqlc.yaml
//  3. Declare the method on Querier and implement it on sqliteQuerier and
//     pgQuerier, converting rows to the domain type (times through
//     fromMicros on SQLite, .UTC() on PostgreSQL).
//  4. Cover it in conformance_test.go.
//
// Time comes from the store: Querier.Now is the clock for every lease, TTL
// and expiry, so that several processes on several machines agree.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Engine names a database engine the store runs on.
type Engine string

const (
	// EngineSQLite is an embedded SQLite file: one control-plane process.
	EngineSQLite Engine = "sqlite"
	// EnginePostgres is a PostgreSQL server: any number of processes.
	EnginePostgres Engine = "postgres"
)

// ErrNotFound means the row asked for does not exist. Store methods wrap it
// with what was looked for; test it with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrConflict means a write collided with an existing row (a unique key, an
// overlapping reservation). Store methods wrap it; test it with errors.Is.
var ErrConflict = errors.New("conflict")

// Setting is one deployment-wide key/value setting.
type Setting struct {
	// Key names the setting.
	Key string
	// Value is the setting's value, opaque to the store.
	Value string
	// UpdatedAt is when it was last written, by the store's clock, in UTC.
	UpdatedAt time.Time
}

// Querier is every query the control plane runs, one method per query,
// implemented once per engine. InTx hands fn one bound to its transaction;
// *Store is one too, running each call as its own autocommit statement.
type Querier interface {
	// Now returns the store's clock, in UTC. Every lease, TTL and expiry in
	// the project uses it, never time.Now, so that processes on different
	// machines agree. Inside a transaction it is still the time of the call
	// (clock_timestamp() on PostgreSQL, not the transaction's start), the same
	// on both engines; call it once and pass the value on when one instant
	// must stamp several rows. SQLite's clock has millisecond resolution.
	Now(ctx context.Context) (time.Time, error)
	// SchemaVersion returns the highest applied migration.
	SchemaVersion(ctx context.Context) (int, error)
	// GetSetting returns a deployment-wide setting; ErrNotFound when unset.
	GetSetting(ctx context.Context, key string) (Setting, error)
	// PutSetting inserts or replaces a setting, stamping UpdatedAt with the
	// store's clock.
	PutSetting(ctx context.Context, key, value string) (Setting, error)
	// ListSettings returns all settings ordered by key.
	ListSettings(ctx context.Context) ([]Setting, error)
	// DeleteSetting removes a setting; ErrNotFound when absent.
	DeleteSetting(ctx context.Context, key string) error

	IAMQuerier
	NodeQuerier
	CapacityQuerier
	UsageQuerier
	EventQuerier
	WebhookQuerier
}

// Options tunes Open. The zero value is ready to use.
type Options struct {
	// Logger receives migrations applied and transactions retried; nil
	// discards them.
	Logger *slog.Logger
	// MaxTxAttempts is how many times InTx runs fn before giving up on
	// serialization failures and lock contention; 0 means 10.
	MaxTxAttempts int
	// BusyTimeout is how long a SQLite statement waits for another
	// connection's write lock before failing with SQLITE_BUSY (which InTx
	// then retries); 0 means 5s. PostgreSQL ignores it.
	BusyTimeout time.Duration
}

// querier lets Store embed the Querier interface without exporting the
// field: each Querier method is promoted onto *Store, so a method added to
// Querier needs no forwarding code here.
type querier = Querier

// Store is an open, migrated database. It is safe for concurrent use; Close
// it when done. It is also a Querier: every Querier method (Now, GetSetting,
// ...) is promoted from the engine and runs as its own autocommit statement;
// use InTx to group several into one transaction.
type Store struct {
	querier // autocommit: each call is its own statement

	loc         Location
	eng         engine
	log         *slog.Logger
	maxAttempts int
	shared      sharedTx // InSharedTx's queue
}

// *Store answers every query on its own, outside any transaction.
var _ Querier = (*Store)(nil)

// engine is what each database engine gives the Store: queries, one-shot
// transactions, retry classification and migration bookkeeping. The retry
// loop and the migration runner above it are shared.
type engine interface {
	// autocommit returns the Querier that runs each call as its own statement.
	autocommit() Querier
	// prepare readies the engine's statements once the schema is migrated.
	prepare(ctx context.Context) error
	// tx runs fn once in one transaction (SERIALIZABLE on PostgreSQL, BEGIN
	// IMMEDIATE on SQLite), committing when fn returns nil.
	tx(ctx context.Context, fn func(ctx context.Context, q Querier) error) error
	// retryable reports whether err means the transaction lost a race with
	// another and may succeed when run again.
	retryable(err error) bool
	// migrations returns this engine's migrations, in order.
	migrations() []migration
	// lockMigrations takes the lock that keeps processes from migrating at
	// the same time; unlock releases it.
	lockMigrations(ctx context.Context) (unlock func(), err error)
	// appliedVersion returns the highest applied migration without writing
	// anything, 0 for a database never migrated.
	appliedVersion(ctx context.Context) (int, error)
	// applyMigration applies m and records it in one transaction, unless the
	// database already has it; it reports whether it applied m.
	applyMigration(ctx context.Context, m migration) (bool, error)
	// ping checks that the database answers.
	ping(ctx context.Context) error
	// close releases every connection.
	close() error
}

// Open parses rawURL (see ParseURL), connects, refuses a database it must not
// touch (not a SQLite file, migrated by a newer binary), applies pending
// migrations and returns a ready Store. Every error is one line that names
// the problem and its fix, and carries no password.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	loc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.NewTextHandler(io.Discard, nil)))
	opts.MaxTxAttempts = cmp.Or(opts.MaxTxAttempts, 10)
	opts.BusyTimeout = cmp.Or(opts.BusyTimeout, 5*time.Second)

	var eng engine
	switch loc.Engine {
	case EngineSQLite:
		eng, err = openSQLite(ctx, loc, opts)
	case EnginePostgres:
		eng, err = openPostgres(ctx, loc)
	}
	if err != nil {
		return nil, err
	}
	s := &Store{
		querier:     eng.autocommit(),
		loc:         loc,
		eng:         eng,
		log:         opts.Logger.With("store", loc.String()),
		maxAttempts: opts.MaxTxAttempts,
	}
	if err := s.migrate(ctx); err != nil {
		_ = eng.close()
		return nil, err
	}
	if err := eng.prepare(ctx); err != nil {
		_ = eng.close()
		return nil, fmt.Errorf("store: prepare statements on %s: %w", loc, err)
	}
	s.querier = eng.autocommit()
	return s, nil
}

// Engine reports which engine the store runs on, for the few callers whose
// behaviour must differ (SQLite means one control-plane process).
func (s *Store) Engine() Engine { return s.loc.Engine }

// Location returns where the store is; print it with String, which masks
// passwords.
func (s *Store) Location() Location { return s.loc }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.eng.ping(ctx); err != nil {
		return fmt.Errorf("store: ping %s: %w", s.loc, err)
	}
	return nil
}

// Ready reports nil when the store answers and its schema version is the one
// this binary knows (LatestSchemaVersion); it backs readiness probes.
func (s *Store) Ready(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("store: not ready: %w", err)
	}
	if latest := LatestSchemaVersion(); v != latest {
		return fmt.Errorf("store: not ready: schema version %d, this binary needs %d", v, latest)
	}
	return nil
}

// Close releases the store's connections. Calls in flight may fail.
func (s *Store) Close() error {
	if err := s.eng.close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.loc, err)
	}
	return nil
}
