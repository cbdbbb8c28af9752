package store_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/better-compute/better-compute/internal/store"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw    string
		want   store.Location
		String string
	}{
		{"sqlite:store.db", store.Location{Engine: store.EngineSQLite, Path: "store.db"}, "sqlite:store.db"},
		{"sqlite:/var/lib/bc/store.db", store.Location{Engine: store.EngineSQLite, Path: "/var/lib/bc/store.db"}, "sqlite:/var/lib/bc/store.db"},
		{"sqlite://data/store.db", store.Location{Engine: store.EngineSQLite, Path: "data/store.db"}, "sqlite:data/store.db"},
		{"sqlite:///abs/store.db", store.Location{Engine: store.EngineSQLite, Path: "/abs/store.db"}, "sqlite:/abs/store.db"},
		{"sqlite:////net/share.db", store.Location{Engine: store.EngineSQLite, Path: "//net/share.db"}, "sqlite:////net/share.db"},
		{"SQLite:a b.db", store.Location{Engine: store.EngineSQLite, Path: "a b.db"}, "sqlite:a b.db"},
		{
			"postgres://bc@db.internal:5432/bc",
			store.Location{Engine: store.EnginePostgres, DSN: "postgres://bc@db.internal:5432/bc"},
			"postgres://bc@db.internal:5432/bc",
		},
		{
			"postgresql://bc:s3cret@db:5432/bc?sslmode=require",
			store.Location{Engine: store.EnginePostgres, DSN: "postgresql://bc:s3cret@db:5432/bc?sslmode=require"},
			"postgresql://bc:xxxxx@db:5432/bc?sslmode=require",
		},
		{
			"postgres://bc@h1:5432,h2:5433/bc?password=s3cret&sslpassword=k3y&target_session_attrs=read-write",
			store.Location{Engine: store.EnginePostgres, DSN: "postgres://bc@h1:5432,h2:5433/bc?password=s3cret&sslpassword=k3y&target_session_attrs=read-write"},
			"postgres://bc@h1:5432,h2:5433/bc?password=xxxxx&sslpassword=xxxxx&target_session_attrs=read-write",
		},
		{
			"POSTGRES://bc@[::1]:5432/bc",
			store.Location{Engine: store.EnginePostgres, DSN: "postgres://bc@[::1]:5432/bc"},
			"postgres://bc@[::1]:5432/bc",
		},
	} {
		got, err := store.ParseURL(tc.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.raw, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tc.raw, got, tc.want)
		}
		if s := got.String(); s != tc.String {
			t.Errorf("ParseURL(%q).String() = %q, want %q", tc.raw, s, tc.String)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	// pgx fills a missing password from the environment and ~/.pgpass; keep
	// both out so that only the URL can supply one.
	f.Setenv("PGPASSWORD", "")
	f.Setenv("PGPASSFILE", "/nonexistent")
	f.Setenv("PGSERVICEFILE", "/nonexistent")
	for _, seed := range []string{
		"sqlite:x.db", "sqlite:///abs/x.db", "sqlite:////x", "sqlite:", "foo", "mysql://x",
		"postgres://u:pw@h:5432/db", "postgresql://u:p%40ss@h/db?sslmode=disable",
		"postgres://u@h1,h2:5433/db?password=secret", "postgres://u@[::1]:5432/db?sslpassword=abc",
		"postgres://u:a?b@h/db", "postgres://%zz", "postgres://u:pw@", "postgres://h/db?%70assword=secret",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		loc, err := store.ParseURL(raw)
		if err != nil {
			return
		}
		s := loc.String()
		again, err := store.ParseURL(s)
		if err != nil {
			t.Fatalf("ParseURL(%q) accepted, but not its String() %q: %v", raw, s, err)
		}
		if again.Engine != loc.Engine || again.Path != loc.Path {
			t.Fatalf("ParseURL(%q) = %+v, but its String() %q parses as %+v", raw, loc, s, again)
		}
		if loc.Engine != store.EnginePostgres {
			return
		}
		cfg, err := pgconn.ParseConfig(loc.DSN)
		if err != nil {
			t.Fatalf("ParseURL(%q) accepted a DSN pgx refuses: %v", raw, err)
		}
		pw := cfg.Password
		if pw == "" || pw == "xxxxx" {
			return
		}
		// The password must not survive in any position pgx reads...
		if shown, err := pgconn.ParseConfig(s); err == nil && shown.Password == pw {
			t.Fatalf("String() of %q is %q, which still carries password %q", raw, s, pw)
		}
		// ...nor appear in the text, where it is distinctive enough to tell.
		unmasked := strings.NewReplacer(":xxxxx@", ":@", "=xxxxx", "=").Replace(s)
		if len(pw) >= 3 && strings.Count(raw, pw) == 1 && strings.Contains(unmasked, pw) {
			t.Fatalf("String() of %q is %q, which contains password %q", raw, s, pw)
		}
	})
}
