package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// pgConnectTimeout bounds each connection attempt to one address when the
// URL sets no connect_timeout, so that a wrong --store fails in seconds
// rather than after the operating system's TCP timeout.
const pgConnectTimeout = 5 * time.Second

// pgMigrationLockKey is the advisory lock key serve processes take while
// migrating ("bcmigr" in ASCII). Advisory locks are per database, so
// databases sharing a server do not contend.
const pgMigrationLockKey int64 = 0x62636d696772

// pgEngine is a PostgreSQL database behind a pgx pool.
type pgEngine struct {
	pool *pgxpool.Pool
}

func openPostgres(ctx context.Context, loc Location) (*pgEngine, error) {
	cfg, err := pgxpool.ParseConfig(loc.DSN)
	if err != nil {
		// ParseURL already parsed it; this is a changed environment
		// (PGSERVICEFILE, a missing sslrootcert). pgx's text can quote
		// the URL, so it is not repeated here.
		return nil, fmt.Errorf("store: cannot use PostgreSQL URL %s; check its parameters and PG* environment variables", loc)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(cfg.ConnConfig, err)
	}
	// Each address gets ConnectTimeout; bound the whole first contact too,
	// with room for a second address (localhost is often ::1, then
	// 127.0.0.1).
	pingCtx, cancel := context.WithTimeout(ctx, 2*cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, connectError(cfg.ConnConfig, err)
	}
	return &pgEngine{pool: pool}, nil
}

// connectError turns pgx's multi-line, multi-attempt connection error into
// one line: where, the root cause, and what to check. It names hosts and
// ports only, never the URL, so no password can appear.
func connectError(cfg *pgx.ConnConfig, err error) error {
	addrs := []string{pgAddr(cfg.Host, cfg.Port)}
	for _, fb := range cfg.Fallbacks {
		if a := pgAddr(fb.Host, fb.Port); a != addrs[len(addrs)-1] {
			addrs = append(addrs, a)
		}
	}
	return fmt.Errorf("store: cannot connect to PostgreSQL at %s: %s; check that it is running and that --store is right",
		strings.Join(addrs, ","), connectCause(err, cfg.ConnectTimeout))
}

func pgAddr(host string, port uint16) string {
	if strings.HasPrefix(host, "/") { // a Unix socket directory
		return host + ":" + strconv.Itoa(int(port))
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// connectCause names the root cause of a failed connection in a few words.
func connectCause(err error, timeout time.Duration) string {
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &pgErr): // the server answered: bad password, no such database...
		return fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot resolve host %q", dnsErr.Name)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer within %s", timeout)
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ENOENT):
		return "no such socket"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	// Otherwise the innermost error's text, on one line. Of several
	// attempts (hosts, then TLS and plain text on each), the last says most:
	// an earlier one is typically "server refused TLS" before the fallback.
	for {
		var next error
		switch e := err.(type) {
		case interface{ Unwrap() error }:
			next = e.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := e.Unwrap(); len(errs) > 0 {
				next = errs[len(errs)-1]
			}
		}
		if next == nil {
			break
		}
		err = next
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (e *pgEngine) autocommit() Querier { return pgQuerier{q: pgdb.New(e.pool)} }

// prepare does nothing: pgx prepares and caches each statement per
// connection on its first use.
func (e *pgEngine) prepare(context.Context) error { return nil }

func (e *pgEngine) tx(ctx context.Context, fn func(ctx context.Context, q Querier) error) error {
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	// Deferred, so that a panicking fn does not strand the connection in
	// a transaction; a no-op after Commit.
	defer rollback(ctx, tx)
	if err := fn(ctx, pgQuerier{q: pgdb.New(tx), tx: tx}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// rollback ends tx even when ctx is already canceled, so that the connection
// goes back to the pool clean instead of being closed; it still gives up
// after a few seconds on a dead connection.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// retryable: serialization_failure (40001) and deadlock_detected (40P01)
// are PostgreSQL's ways of saying "run it again".
func (e *pgEngine) retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

func (e *pgEngine) migrations() []migration { return postgresMigrations }

// lockMigrations holds a session advisory lock on one pooled connection
// until unlock, so that serve processes starting together migrate one at a
// time; the migrations themselves run on other connections.
func (e *pgEngine) lockMigrations(ctx context.Context) (func(), error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if err := pgdb.New(conn).LockMigrations(ctx, pgMigrationLockKey); err != nil {
		conn.Release()
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := pgdb.New(conn).UnlockMigrations(ctx, pgMigrationLockKey); err != nil {
			// The lock lives as long as the session: close it rather
			// than hand a locked connection back to the pool.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}

func (e *pgEngine) appliedVersion(ctx context.Context) (int, error) {
	q := pgdb.New(e.pool)
	exists, err := q.SchemaMigrationsExists(ctx)
	if err != nil || !exists {
		return 0, err
	}
	v, err := q.SchemaVersion(ctx)
	return int(v), err
}

// applyMigration runs under the advisory lock, so the version read before
// it is still true.
func (e *pgEngine) applyMigration(ctx context.Context, m migration) (bool, error) {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer rollback(ctx, tx) // a no-op after Commit
	// No arguments: pgx sends the file with the simple protocol, which runs
	// several statements.
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, err
	}
	err = pgdb.New(tx).RecordMigration(ctx, pgdb.RecordMigrationParams{Version: int32(m.Version), Name: m.Name})
	if err != nil {
		return false, fmt.Errorf("record: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}

// ping checks that a pooled connection answers.
func (e *pgEngine) ping(ctx context.Context) error { return e.pool.Ping(ctx) }

// close closes every pooled connection, waiting for those in use.
func (e *pgEngine) close() error {
	e.pool.Close()
	return nil
}

// pgQuerier implements Querier over PostgreSQL, on the pool or on one
// transaction.
type pgQuerier struct {
	q  *pgdb.Queries
	tx pgx.Tx // nil outside a transaction
}

// savepoint runs SAVEPOINT, RELEASE and ROLLBACK TO statements of the
// transaction this querier is in (InSharedTx's isolation of its calls).
func (p pgQuerier) savepoint(ctx context.Context, stmts ...string) error {
	if p.tx == nil {
		return errors.New("store: savepoint outside a transaction")
	}
	// Without arguments pgx sends a simple query, which may hold several
	// statements: one round trip for all.
	_, err := p.tx.Exec(ctx, strings.Join(stmts, "; "))
	return err
}

func pgSetting(r pgdb.Setting) Setting {
	return Setting{Key: r.Key, Value: r.Value, UpdatedAt: r.UpdatedAt.UTC()}
}

func (p pgQuerier) Now(ctx context.Context) (time.Time, error) {
	t, err := p.q.Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: now: %w", err)
	}
	return t.UTC(), nil
}

func (p pgQuerier) SchemaVersion(ctx context.Context) (int, error) {
	v, err := p.q.SchemaVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	return int(v), nil
}

func (p pgQuerier) GetSetting(ctx context.Context, key string) (Setting, error) {
	r, err := p.q.GetSetting(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Setting{}, fmt.Errorf("store: get setting %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return Setting{}, fmt.Errorf("store: get setting %q: %w", key, err)
	}
	return pgSetting(r), nil
}

func (p pgQuerier) PutSetting(ctx context.Context, key, value string) (Setting, error) {
	r, err := p.q.PutSetting(ctx, pgdb.PutSettingParams{Key: key, Value: value})
	if err != nil {
		return Setting{}, fmt.Errorf("store: put setting %q: %w", key, err)
	}
	return pgSetting(r), nil
}

func (p pgQuerier) ListSettings(ctx context.Context) ([]Setting, error) {
	rows, err := p.q.ListSettings(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list settings: %w", err)
	}
	out := make([]Setting, len(rows))
	for i, r := range rows {
		out[i] = pgSetting(r)
	}
	return out, nil
}

func (p pgQuerier) DeleteSetting(ctx context.Context, key string) error {
	n, err := p.q.DeleteSetting(ctx, key)
	if err != nil {
		return fmt.Errorf("store: delete setting %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("store: delete setting %q: %w", key, ErrNotFound)
	}
	return nil
}
