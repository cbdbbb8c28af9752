package store

import (
	"strings"
	"testing"
	"testing/fstest"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// TestMigrationsMatch: one schema version means one schema, so both engines
// have the same steps under the same numbers and names.
func TestMigrationsMatch(t *testing.T) {
	t.Parallel()
	lite, err := loadMigrations(sqlitedb.Migrations)
	if err != nil {
		t.Fatalf("sqlite migrations: %v", err)
	}
	pg, err := loadMigrations(pgdb.Migrations)
	if err != nil {
		t.Fatalf("postgres migrations: %v", err)
	}
	if err := compareMigrations(lite, pg); err != nil {
		t.Fatal(err)
	}
	if got, want := LatestSchemaVersion(), len(lite); got != want {
		t.Errorf("LatestSchemaVersion = %d, want %d", got, want)
	}
}

func TestLoadMigrationsRefusesBadSets(t *testing.T) {
	t.Parallel()
	file := &fstest.MapFile{Data: []byte("SELECT 1;")}
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"empty", fstest.MapFS{}, "no migrations"},
		{"gap", fstest.MapFS{"migrations/0001_a.sql": file, "migrations/0003_c.sql": file}, "expected migration 0002 next"},
		{"duplicate", fstest.MapFS{"migrations/0001_a.sql": file, "migrations/0001_b.sql": file}, "expected migration 0002 next"},
		{"bad name", fstest.MapFS{"migrations/1_init.sql": file}, "not NNNN_name.sql"},
	} {
		_, err := loadMigrations(tc.files)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: loadMigrations = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestCompareMigrations(t *testing.T) {
	t.Parallel()
	a := []migration{{Version: 1, Name: "init"}, {Version: 2, Name: "nodes"}}
	for _, tc := range []struct {
		name   string
		sqlite []migration
		pg     []migration
		want   string
	}{
		{"postgres ahead", a[:1], a, "0002_nodes exists for postgres only"},
		{"sqlite ahead", a, a[:1], "0002_nodes exists for sqlite only"},
		{"renamed", a, []migration{a[0], {Version: 2, Name: "hosts"}}, `0002 is "nodes" on sqlite but "hosts" on postgres`},
	} {
		err := compareMigrations(tc.sqlite, tc.pg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: compareMigrations = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if err := compareMigrations(a, a); err != nil {
		t.Errorf("compareMigrations(same) = %v", err)
	}
}

func TestTxBackoff(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 40; n++ {
		d := txBackoff(n)
		ceiling := min(txBackoffBase<<min(n-1, 15), txBackoffMax)
		if d < ceiling/2 || d > ceiling {
			t.Errorf("txBackoff(%d) = %v, want within [%v, %v]", n, d, ceiling/2, ceiling)
		}
	}
}
