package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// sqliteHeader opens every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

// sqliteEngine is a SQLite file opened through database/sql. One pool serves
// reads and writes: WAL lets readers run beside the single writer, and
// _txlock=immediate makes every transaction take the write lock at BEGIN,
// so two transactions never both read and then fail to upgrade; a writer
// that finds the lock taken waits up to the busy timeout, then fails with
// SQLITE_BUSY, which InTx retries.
//
// This process's transactions also queue for writer before BEGIN, in
// order, except that bulk ones (see Bulk) go after the rest: SQLite's busy
// handler polls with growing sleeps, so a writer that keeps losing to
// newer ones can wait seconds while the lock is free most of the time; a
// queue in Go hands the lock over as soon as it is released. Other
// processes (and autocommit writes) still meet at the busy handler.
type sqliteEngine struct {
	db     *sql.DB
	q      *sqlitedb.Queries // the prepared statements, once prepare ran; unprepared before
	writer writerQueue       // this process's transactions, one at a time
	busy   time.Duration     // how long a transaction waits for writer
	log    *slog.Logger      // slow transactions

	lastQueueLog atomic.Int64 // unix nanoseconds of the last long-queue warning
}

// slowTx is how long a transaction may hold the write lock, or wait for
// it, before it is logged with its phases: the queue, BEGIN (SQLite's
// lock), the work, the commit (with any WAL checkpoint it ran).
const slowTx = time.Second

// queueLogEvery bounds the long-queue warnings: in a backlog every waiter
// waits long, and one line says so.
const queueLogEvery = 10 * time.Second

// errWriterQueue says a transaction waited the busy timeout for this
// process's other transactions; InTx retries it like SQLITE_BUSY.
var errWriterQueue = errors.New("store: waited the busy timeout for this process's other SQLite transactions")

// openSQLite checks that loc.Path is a new file or a SQLite database before
// anything opens it (so a wrong path is left byte-for-byte alone, without
// -wal or -shm files beside it), then opens it with the pragmas the store
// relies on.
func openSQLite(ctx context.Context, loc Location, opts Options) (*sqliteEngine, error) {
	path, err := filepath.Abs(loc.Path)
	if err != nil {
		return nil, fmt.Errorf("store: SQLite path %s: %w", loc.Path, err)
	}
	if err := checkSQLiteFile(path); err != nil {
		return nil, err
	}
	params := url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()),
			"journal_mode(WAL)",
			"foreign_keys(1)",
			"synchronous(NORMAL)",
		},
		"_txlock": {"immediate"},
	}
	// A file: URI, with the path escaped, so that no character of a file
	// name ('?', '#', '%') can be read as a parameter.
	dsn := "file:" + (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath() + "?" + params.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open SQLite database %s: %w", path, err)
	}
	// A bounded pool that keeps its connections: opening one runs the
	// pragmas and parses the whole schema, triggers and all, which under a
	// burst of joins cost more than the joins themselves. Writers queue on
	// writer anyway; readers wait for a free connection instead.
	db.SetMaxOpenConns(sqliteConns)
	db.SetMaxIdleConns(sqliteConns)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open SQLite database %s: %w", path, err)
	}
	return &sqliteEngine{db: db, q: sqlitedb.New(db), busy: opts.BusyTimeout, log: opts.Logger.With("store", loc.String())}, nil
}

// checkSQLiteFile accepts a path that does not exist yet (in a directory
// that does), an empty file, or a file that starts with the SQLite header.
// It only reads.
func checkSQLiteFile(path string) error {
	const fix = "point --store at a new file or a better-compute database"
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(path)
		di, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && !di.IsDir()) {
			return fmt.Errorf("store: cannot create SQLite database %s: directory %s does not exist; create it first or point --store at a file in an existing directory", path, dir)
		}
		if err != nil {
			return fmt.Errorf("store: cannot create SQLite database %s: %w", path, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("store: cannot open SQLite database %s: %w", path, err)
	case fi.IsDir():
		return fmt.Errorf("store: %s is a directory, not a SQLite database; %s", path, fix)
	case fi.Size() == 0:
		return nil // SQLite writes a new database into an empty file
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: cannot open SQLite database %s: %w", path, err)
	}
	defer f.Close()
	header := make([]byte, len(sqliteHeader))
	if _, err := io.ReadFull(f, header); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("store: cannot read SQLite database %s: %w", path, err)
	}
	if !bytes.Equal(header, []byte(sqliteHeader)) {
		return fmt.Errorf("store: %s is not a SQLite database; %s", path, fix)
	}
	return nil
}

// sqliteConns bounds the connections to a SQLite file.
const sqliteConns = 16

func (e *sqliteEngine) autocommit() Querier { return sqliteQuerier{q: e.q} }

// prepare prepares every query once; database/sql then prepares each again
// on each connection it is used on, once, and transactions reuse them.
func (e *sqliteEngine) prepare(ctx context.Context) error {
	q, err := sqlitedb.Prepare(ctx, e.db)
	if err != nil {
		return err
	}
	e.q = q
	return nil
}

func (e *sqliteEngine) tx(ctx context.Context, fn func(ctx context.Context, q Querier) error) error {
	start := time.Now()
	var queued, begun, ran time.Duration
	defer func() {
		total := time.Since(start)
		switch {
		case ran == 0:
		case total-queued >= slowTx:
			e.log.WarnContext(ctx, "store: a SQLite transaction held the write lock long", "held", total-queued,
				"begin", begun-queued, "run", ran-begun, "commit", total-ran, "queued", queued)
		case queued >= slowTx:
			now := time.Now().UnixNano()
			if last := e.lastQueueLog.Load(); now-last >= int64(queueLogEvery) && e.lastQueueLog.CompareAndSwap(last, now) {
				e.log.WarnContext(ctx, "store: SQLite transactions queue for the write lock", "queued", queued, "bulk", isBulk(ctx))
			}
		}
	}()
	if err := e.writer.acquire(ctx, isBulk(ctx), e.busy); err != nil {
		if errors.Is(err, errWriterQueue) {
			return err
		}
		return fmt.Errorf("store: begin: %w", err)
	}
	defer e.writer.release()
	queued = time.Since(start)
	tx, err := e.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE, from _txlock
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	begun = time.Since(start)
	// Deferred, so that a panicking fn does not leave the write lock held;
	// a no-op after Commit.
	defer func() { _ = tx.Rollback() }()
	err = fn(ctx, sqliteQuerier{q: e.q.WithTx(tx), tx: tx})
	ran = time.Since(start)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// retryable: another connection holds the write lock past the busy timeout
// (SQLITE_BUSY), or a table lock within this process (SQLITE_LOCKED), in any
// of their extended forms (the driver turns extended result codes on).
func (e *sqliteEngine) retryable(err error) bool {
	if errors.Is(err, errWriterQueue) {
		return true
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

func (e *sqliteEngine) migrations() []migration { return sqliteMigrations }

// lockMigrations takes no lock: SQLite serves one process, and
// applyMigration re-reads the version under BEGIN IMMEDIATE, which already
// makes a second process that races it skip what the first applied.
func (e *sqliteEngine) lockMigrations(context.Context) (func(), error) { return func() {}, nil }

// schemaMigrationsExistsSQL is migration bookkeeping that sqlc cannot
// compile: its SQLite catalog has no sqlite_schema table.
const schemaMigrationsExistsSQL = `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'`

func sqliteAppliedVersion(ctx context.Context, db sqlitedb.DBTX) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, schemaMigrationsExistsSQL).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	v, err := sqlitedb.New(db).SchemaVersion(ctx)
	return int(v), err
}

func (e *sqliteEngine) appliedVersion(ctx context.Context) (int, error) {
	return sqliteAppliedVersion(ctx, e.db)
}

func (e *sqliteEngine) applyMigration(ctx context.Context, m migration) (bool, error) {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	current, err := sqliteAppliedVersion(ctx, tx)
	if err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	if current >= m.Version {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, err
	}
	err = sqlitedb.New(tx).RecordMigration(ctx, sqlitedb.RecordMigrationParams{Version: int64(m.Version), Name: m.Name})
	if err != nil {
		return false, fmt.Errorf("record: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}

// ping checks that a connection answers.
func (e *sqliteEngine) ping(ctx context.Context) error { return e.db.PingContext(ctx) }

// close closes the pool; the last connection to close checkpoints the WAL.
func (e *sqliteEngine) close() error { return e.db.Close() }

// sqliteQuerier implements Querier over SQLite, on the pool or on one
// transaction.
type sqliteQuerier struct {
	q  *sqlitedb.Queries
	tx *sql.Tx // nil outside a transaction
}

// savepoint runs SAVEPOINT, RELEASE and ROLLBACK TO statements of the
// transaction this querier is in (InSharedTx's isolation of its calls).
func (s sqliteQuerier) savepoint(ctx context.Context, stmts ...string) error {
	if s.tx == nil {
		return errors.New("store: savepoint outside a transaction")
	}
	for _, stmt := range stmts {
		if _, err := s.tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// fromMicros converts the SQLite engine's stored time (INTEGER unix
// microseconds) to a UTC time.Time.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func sqliteSetting(r sqlitedb.Setting) Setting {
	return Setting{Key: r.Key, Value: r.Value, UpdatedAt: fromMicros(r.UpdatedAt)}
}

func (s sqliteQuerier) Now(ctx context.Context) (time.Time, error) {
	us, err := s.q.Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: now: %w", err)
	}
	return fromMicros(us), nil
}

func (s sqliteQuerier) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.q.SchemaVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	return int(v), nil
}

func (s sqliteQuerier) GetSetting(ctx context.Context, key string) (Setting, error) {
	r, err := s.q.GetSetting(ctx, key)
	if errors.Is(err, sql.ErrNoRows) {
		return Setting{}, fmt.Errorf("store: get setting %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return Setting{}, fmt.Errorf("store: get setting %q: %w", key, err)
	}
	return sqliteSetting(r), nil
}

func (s sqliteQuerier) PutSetting(ctx context.Context, key, value string) (Setting, error) {
	r, err := s.q.PutSetting(ctx, sqlitedb.PutSettingParams{Key: key, Value: value})
	if err != nil {
		return Setting{}, fmt.Errorf("store: put setting %q: %w", key, err)
	}
	return sqliteSetting(r), nil
}

func (s sqliteQuerier) ListSettings(ctx context.Context) ([]Setting, error) {
	rows, err := s.q.ListSettings(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list settings: %w", err)
	}
	out := make([]Setting, len(rows))
	for i, r := range rows {
		out[i] = sqliteSetting(r)
	}
	return out, nil
}

func (s sqliteQuerier) DeleteSetting(ctx context.Context, key string) error {
	n, err := s.q.DeleteSetting(ctx, key)
	if err != nil {
		return fmt.Errorf("store: delete setting %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("store: delete setting %q: %w", key, ErrNotFound)
	}
	return nil
}
