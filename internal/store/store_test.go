package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// Each bad input below must fail Open with one line that names the problem
// and the fix, and leave the database (or file) as it was.

func TestOpenRejectsMalformedURL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"", "foo", "mysql://x", "sqlite:", "sqlite://", "sqlite:x.db?mode=ro",
		"postgres://", "postgres:///db", "postgres://%zz", "postgres://host:port/db",
		"postgres:host/db", "postgresql://bob:secret@/db",
	} {
		_, err := store.Open(t.Context(), raw, store.Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		want := fmt.Sprintf("store: unsupported store URL %q: use sqlite:PATH or postgres://USER@HOST:PORT/DB",
			strings.ReplaceAll(raw, "secret", "xxxxx"))
		if err.Error() != want {
			t.Errorf("Open(%q) error:\n got %s\nwant %s", raw, err, want)
		}
	}
}

func TestOpenUnreachablePostgres(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := store.Open(t.Context(), "postgres://bob:secret@127.0.0.1:1/db?sslmode=disable", store.Options{})
	const want = "store: cannot connect to PostgreSQL at 127.0.0.1:1: connection refused; " +
		"check that it is running and that --store is right"
	if err == nil || err.Error() != want {
		t.Fatalf("Open error:\n got %v\nwant %s", err, want)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open took %v to report an unreachable server", d)
	}
}

func TestOpenRejectsNonSQLiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "notes.txt")
	content := []byte("these are not the tables you are looking for\n")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(t.Context(), "sqlite:"+path, store.Options{})
	want := "store: " + path + " is not a SQLite database; point --store at a new file or a better-compute database"
	if err == nil || err.Error() != want {
		t.Fatalf("Open error:\n got %v\nwant %s", err, want)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, content) {
		t.Errorf("file changed: %q, %v", got, err)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"notes.txt"}) {
		t.Errorf("directory now holds %v, want only notes.txt", got)
	}
}

func TestOpenRejectsDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := store.Open(t.Context(), "sqlite:"+dir, store.Options{})
	if err == nil || !strings.Contains(err.Error(), "is a directory, not a SQLite database") {
		t.Fatalf("Open error = %v, want it to say the path is a directory", err)
	}
}

func TestOpenRejectsMissingDirectory(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	missing := filepath.Join(parent, "missing")
	path := filepath.Join(missing, "store.db")
	_, err := store.Open(t.Context(), "sqlite:"+path, store.Options{})
	want := "store: cannot create SQLite database " + path + ": directory " + missing +
		" does not exist; create it first or point --store at a file in an existing directory"
	if err == nil || err.Error() != want {
		t.Fatalf("Open error:\n got %v\nwant %s", err, want)
	}
	if got := dirNames(t, parent); len(got) != 0 {
		t.Errorf("Open created %v", got)
	}
}

func TestOpenRejectsNewerSchema(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		url := storetest.URL(t, engine)
		s, err := store.Open(ctx, url, store.Options{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		// What a future binary leaves behind.
		future := map[store.Engine]string{
			store.EngineSQLite:   "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)",
			store.EnginePostgres: "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', now())",
		}[engine]
		rawExec(t, engine, url, future)
		before := snapshot(t, engine, url)

		_, err = store.Open(ctx, url, store.Options{})
		want := fmt.Sprintf("store: database schema version 99 is newer than this binary (knows %d); "+
			"upgrade better-compute or point --store at another database", store.LatestSchemaVersion())
		if err == nil || err.Error() != want {
			t.Fatalf("Open error:\n got %v\nwant %s", err, want)
		}
		if after := snapshot(t, engine, url); after != before {
			t.Errorf("refused database changed:\nbefore %s\nafter  %s", before, after)
		}
	})
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		url := storetest.URL(t, engine)
		var logs logBuffer
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				s, err := store.Open(t.Context(), url, store.Options{Logger: logs.logger()})
				if err != nil {
					t.Errorf("Open: %v", err)
					return
				}
				if err := s.Ready(t.Context()); err != nil {
					t.Errorf("Ready: %v", err)
				}
				_ = s.Close()
			})
		}
		wg.Wait()
		if got, want := logs.count("store: applied migration"), store.LatestSchemaVersion(); got != want {
			t.Errorf("4 concurrent Opens applied %d migrations, want %d; log:\n%s", got, want, logs.String())
		}
	})
}

// testInTxGivesUp makes every attempt lose and checks that InTx stops after
// MaxTxAttempts with an error that says so.
func testInTxGivesUp(t *testing.T, engine store.Engine) {
	ctx := t.Context()
	s, err := store.Open(ctx, storetest.URL(t, engine), store.Options{BusyTimeout: 20 * time.Millisecond, MaxTxAttempts: 3})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()

	calls := 0
	fn := func(ctx context.Context, q store.Querier) error {
		calls++
		_, err := q.PutSetting(ctx, "k", "v")
		return err
	}
	switch engine {
	case store.EngineSQLite:
		// Another connection holds the write lock throughout.
		db, err := sql.Open("sqlite", s.Location().Path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		defer conn.ExecContext(context.Background(), "ROLLBACK")
	case store.EnginePostgres:
		// Every attempt ends in a serialization failure.
		fn = func(context.Context, store.Querier) error {
			calls++
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		}
	}

	start := time.Now()
	err = s.InTx(ctx, fn)
	if err == nil || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("InTx error = %v, want it to say it gave up after 3 attempts", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("InTx took %v to give up", d)
	}
	switch engine {
	case store.EngineSQLite:
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
			t.Errorf("InTx error = %v, want it to wrap SQLITE_BUSY", err)
		}
	case store.EnginePostgres:
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" || calls != 3 {
			t.Errorf("InTx error = %v after %d calls, want the 40001 after 3", err, calls)
		}
	}
	if _, err := s.GetSetting(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSetting after giving up = %v, want ErrNotFound", err)
	}
}

// rawExec runs one statement on the database at url, behind the store's back.
func rawExec(t *testing.T, engine store.Engine, url, stmt string) {
	t.Helper()
	ctx := t.Context()
	switch engine {
	case store.EngineSQLite:
		db, err := sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	case store.EnginePostgres:
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// snapshot describes a database's state in a comparable string: for SQLite
// the files and their bytes, for PostgreSQL the migration rows.
func snapshot(t *testing.T, engine store.Engine, url string) string {
	t.Helper()
	switch engine {
	case store.EngineSQLite:
		path := strings.TrimPrefix(url, "sqlite:")
		var b strings.Builder
		for _, name := range dirNames(t, filepath.Dir(path)) {
			content, err := os.ReadFile(filepath.Join(filepath.Dir(path), name))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s:%x ", name, content)
		}
		return b.String()
	default:
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var rows string
		err = conn.QueryRow(t.Context(),
			"SELECT string_agg(version || ':' || name || ':' || applied_at, ',' ORDER BY version) FROM schema_migrations").Scan(&rows)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// logBuffer collects a store's log lines, from any goroutine.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// count returns how many log lines contain s.
func (l *logBuffer) count(s string) int { return strings.Count(l.String(), s) }
