// Package storetest hands tests real, isolated store databases on both
// engines: a file in t.TempDir() for SQLite, a fresh database on the server
// named by BETTER_COMPUTE_TEST_POSTGRES_URL for PostgreSQL. Every package
// whose tests touch the store uses it, so that every such test can run on
// both engines:
//
//	storetest.Each(t, func(t *testing.T, engine store.Engine) {
//		t.Parallel()
//		s := storetest.Open(t, engine)
//		...
//	})
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/better-compute/internal/store"
)

// Environment variables that choose how the PostgreSQL half of the tests
// runs.
const (
	// PostgresURLEnv names a PostgreSQL server tests may create and drop
	// databases on, e.g.
	// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
	PostgresURLEnv = "BETTER_COMPUTE_TEST_POSTGRES_URL"
	// RequirePostgresEnv set to 1 turns a missing PostgresURLEnv from a
	// skip into a failure; CI sets it so that the PostgreSQL half never
	// silently stops running.
	RequirePostgresEnv = "BETTER_COMPUTE_REQUIRE_POSTGRES"
)

// adminTimeout bounds creating and dropping a test database.
const adminTimeout = 30 * time.Second

// Each runs fn as one subtest per engine, named "sqlite" and "postgres".
// The PostgreSQL subtest skips, saying how to enable it, when
// BETTER_COMPUTE_TEST_POSTGRES_URL is unset, and fails instead when
// BETTER_COMPUTE_REQUIRE_POSTGRES=1. fn may call t.Parallel.
func Each(t *testing.T, fn func(t *testing.T, engine store.Engine)) {
	t.Helper()
	for _, engine := range []store.Engine{store.EngineSQLite, store.EnginePostgres} {
		t.Run(string(engine), func(t *testing.T) {
			if engine == store.EnginePostgres {
				postgresAdminURL(t)
			}
			fn(t, engine)
		})
	}
}

// Open returns an isolated, migrated store on engine, closed (and on
// PostgreSQL dropped) when the test ends.
func Open(t testing.TB, engine store.Engine) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	s, err := store.Open(ctx, URL(t, engine), store.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("storetest: %v", err)
		}
	})
	return s
}

// URL returns the URL of a new, empty, unmigrated database on engine, for
// tests of store.Open itself and for processes that end-to-end tests start.
// The database is removed when the test ends: on PostgreSQL it is dropped,
// with any connections still open to it.
func URL(t testing.TB, engine store.Engine) string {
	t.Helper()
	switch engine {
	case store.EngineSQLite:
		return "sqlite:" + filepath.Join(t.TempDir(), "store.db")
	case store.EnginePostgres:
		return createPostgresDatabase(t)
	default:
		t.Fatalf("storetest: unknown engine %q", engine)
		return ""
	}
}

// postgresAdminURL returns BETTER_COMPUTE_TEST_POSTGRES_URL, or ends the
// test: a skip normally, a failure when PostgreSQL is required.
func postgresAdminURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(PostgresURLEnv)
	if raw != "" {
		return raw
	}
	const how = PostgresURLEnv + " is unset; set it to a PostgreSQL server tests may create databases on, " +
		"e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if os.Getenv(RequirePostgresEnv) == "1" {
		t.Fatalf("storetest: %s=1 but %s", RequirePostgresEnv, how)
	}
	t.Skipf("storetest: skipping PostgreSQL: %s (and %s=1 to make this a failure)", how, RequirePostgresEnv)
	return ""
}

// createPostgresDatabase creates bctest_<random> on the admin server and
// returns its URL: the admin URL with the database name replaced.
func createPostgresDatabase(t testing.TB) string {
	t.Helper()
	admin := postgresAdminURL(t)
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("storetest: %s is not a URL: %v", PostgresURLEnv, err)
	}
	name := "bctest_" + randomHex(8)

	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("storetest: %s does not answer: %v", PostgresURLEnv, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("storetest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropPostgresDatabase(t, admin, name) })

	u.Path = "/" + name
	return u.String()
}

func dropPostgresDatabase(t testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("storetest: drop database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	// FORCE ends sessions a test left open, such as a process it started.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Errorf("storetest: drop database %s: %v", name, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails, per crypto/rand
	return hex.EncodeToString(b)
}

// testLogger sends the store's log lines to the test's output, shown for
// failing tests and with -v.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
