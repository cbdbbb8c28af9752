package store

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// migration is one numbered schema step of one engine.
type migration struct {
	Version int    // NNNN in NNNN_name.sql: 1, 2, 3... without gaps
	Name    string // name in NNNN_name.sql
	SQL     string // the file, run as one script inside a transaction
}

// Both engines' migrations are read once, when the package loads. They are
// compiled into the binary, so a malformed set is a build mistake: the
// package panics at load rather than letting a binary with mismatched
// engines reach a database. TestMigrationsMatch says the same thing earlier.
var (
	sqliteMigrations   = mustLoadMigrations("sqlite", sqlitedb.Migrations)
	postgresMigrations = mustLoadMigrations("postgres", pgdb.Migrations)
	_                  = mustMatch(sqliteMigrations, postgresMigrations)
)

// LatestSchemaVersion is the highest migration this binary knows; both
// engines share the numbering. A database at a higher version was migrated
// by a newer binary and Open refuses it.
func LatestSchemaVersion() int {
	return sqliteMigrations[len(sqliteMigrations)-1].Version
}

var migrationFile = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)

// loadMigrations reads migrations/NNNN_name.sql from fsys, sorted, and checks
// that they number 1, 2, 3... with no gap or duplicate.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []migration
	for _, name := range names {
		base := path.Base(name)
		m := migrationFile.FindStringSubmatch(base)
		if m == nil {
			return nil, fmt.Errorf("%s: name is not NNNN_name.sql", name)
		}
		version, _ := strconv.Atoi(m[1])
		if want := len(out) + 1; version != want {
			return nil, fmt.Errorf("%s: expected migration %04d next", name, want)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{Version: version, Name: m[2], SQL: string(body)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no migrations/NNNN_name.sql files")
	}
	return out, nil
}

func mustLoadMigrations(engine string, fsys fs.FS) []migration {
	ms, err := loadMigrations(fsys)
	if err != nil {
		panic(fmt.Sprintf("store: %s migrations: %v", engine, err))
	}
	return ms
}

// mustMatch panics unless both engines have the same steps under the same
// numbers and names: one schema version must mean one schema.
func mustMatch(a, b []migration) bool {
	if err := compareMigrations(a, b); err != nil {
		panic("store: " + err.Error())
	}
	return true
}

func compareMigrations(sqlite, postgres []migration) error {
	for i := range max(len(sqlite), len(postgres)) {
		switch {
		case i >= len(sqlite):
			return fmt.Errorf("migration %04d_%s exists for postgres only", postgres[i].Version, postgres[i].Name)
		case i >= len(postgres):
			return fmt.Errorf("migration %04d_%s exists for sqlite only", sqlite[i].Version, sqlite[i].Name)
		case sqlite[i].Name != postgres[i].Name:
			return fmt.Errorf("migration %04d is %q on sqlite but %q on postgres", sqlite[i].Version, sqlite[i].Name, postgres[i].Name)
		}
	}
	return nil
}

// migrate brings the database to LatestSchemaVersion, each migration in its
// own transaction. It reads the applied version before writing anything, so
// that a database from a newer binary is refused untouched.
func (s *Store) migrate(ctx context.Context) error {
	unlock, err := s.eng.lockMigrations(ctx)
	if err != nil {
		return fmt.Errorf("store: lock %s for migration: %w", s.loc, err)
	}
	defer unlock()

	current, err := s.eng.appliedVersion(ctx)
	if err != nil {
		return fmt.Errorf("store: read schema version of %s: %w", s.loc, err)
	}
	latest := LatestSchemaVersion()
	if current > latest {
		return fmt.Errorf("store: database schema version %d is newer than this binary (knows %d); "+
			"upgrade better-compute or point --store at another database", current, latest)
	}
	for _, m := range s.eng.migrations() {
		if m.Version <= current {
			continue
		}
		applied, err := s.eng.applyMigration(ctx, m)
		if err != nil {
			return fmt.Errorf("store: migrate %04d_%s: %w", m.Version, m.Name, err)
		}
		if applied {
			s.log.InfoContext(ctx, "store: applied migration", "version", m.Version, "name", m.Name)
		}
	}
	return nil
}
