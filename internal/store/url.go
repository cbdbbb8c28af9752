package store

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Location is a parsed store URL: which engine, and where its data lives.
// It keeps the PostgreSQL password (DSN is what the store connects with), so
// print it only through String, which masks it.
type Location struct {
	// Engine is the engine the URL names.
	Engine Engine
	// Path is the SQLite database file exactly as the URL gave it (relative
	// paths are relative to the working directory). Empty for PostgreSQL.
	Path string
	// DSN is the full PostgreSQL URL, password included. Empty for SQLite.
	DSN string
}

// redactedPassword replaces every password in Location.String, the same mask
// pgx uses in its own messages.
const redactedPassword = "xxxxx"

// urlHelp is the fix every unsupported-URL error suggests.
const urlHelp = "use sqlite:PATH or postgres://USER@HOST:PORT/DB"

// ParseURL parses a --store URL: "sqlite:PATH" (also written "sqlite://PATH",
// so "sqlite:///abs/path" is an absolute path), or "postgres://..." /
// "postgresql://..." in the form libpq and pgx accept, including several
// comma-separated hosts. A SQLite path takes no query parameters: the store
// sets the pragmas it relies on itself, so a '?' in a SQLite URL is refused
// rather than silently becoming part of a file name. Errors never contain a
// password.
func ParseURL(raw string) (Location, error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return Location{}, unsupportedURL(raw)
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" || strings.ContainsAny(path, "?#\x00") {
			return Location{}, unsupportedURL(raw)
		}
		return Location{Engine: EngineSQLite, Path: path}, nil
	case "postgres", "postgresql":
		return parsePostgresURL(raw)
	default:
		return Location{}, unsupportedURL(raw)
	}
}

// parsePostgresURL accepts what pgx accepts, provided it names a host: pgx
// would otherwise quietly fall back to a local socket or $PGHOST, and a
// --store that says nothing about where the database is is a mistake.
func parsePostgresURL(raw string) (Location, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	lower := strings.ToLower(scheme)
	if lower != "postgres" && lower != "postgresql" {
		return Location{}, unsupportedURL(raw)
	}
	// pgx only recognizes the lower-case schemes.
	dsn := lower + "://" + rest
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		rest = rest[i+1:]
	}
	if rest == "" || strings.ContainsRune("/?:,", rune(rest[0])) {
		return Location{}, unsupportedURL(raw)
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return Location{}, unsupportedURL(raw)
	}
	return Location{Engine: EnginePostgres, DSN: dsn}, nil
}

// unsupportedURL is the one-line error for a URL the store cannot use. The
// reason pgx gives is deliberately left out: its text can quote the URL, and
// with it the password.
func unsupportedURL(raw string) error {
	return fmt.Errorf("store: unsupported store URL %q: %s", redactURL(raw), urlHelp)
}

// String returns the URL in a form safe to log and show: the SQLite path, or
// the PostgreSQL URL with every password (userinfo, password= and
// sslpassword= parameters) masked. ParseURL accepts it again, naming the same
// engine and, for SQLite, the same file.
func (l Location) String() string {
	switch l.Engine {
	case EngineSQLite:
		if strings.HasPrefix(l.Path, "//") {
			// "sqlite:" followed by "//" would be read as the "sqlite://" form.
			return "sqlite://" + l.Path
		}
		return "sqlite:" + l.Path
	case EnginePostgres:
		return redactURL(l.DSN)
	default:
		return ""
	}
}

// redactURL masks the passwords in a postgres:// URL, following the structure
// pgx parses (userinfo ends at the first '@' before any '/'; the query starts
// at the first '?' after the host list). Other URLs come back unchanged but
// for a userinfo password, masked on the same rule, so that even a mistyped
// scheme does not print one.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	var b strings.Builder
	b.WriteString(scheme + "://")
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, _, hasPassword := strings.Cut(rest[:i], ":")
		b.WriteString(user)
		if hasPassword {
			b.WriteString(":" + redactedPassword)
		}
		b.WriteByte('@')
		rest = rest[i+1:]
	}
	q := queryStart(rest)
	if q < 0 {
		b.WriteString(rest)
		return b.String()
	}
	b.WriteString(rest[:q+1])
	for i, pair := range strings.Split(rest[q+1:], "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		rawKey, _, hasValue := strings.Cut(pair, "=")
		key, err := url.PathUnescape(rawKey)
		if err != nil {
			key = rawKey
		}
		if hasValue && (key == "password" || key == "sslpassword") {
			b.WriteString(rawKey + "=" + redactedPassword)
			continue
		}
		b.WriteString(pair)
	}
	return b.String()
}

// queryStart returns the index of the '?' that starts the query of p (a URL
// after its scheme and userinfo), or -1. A '?' inside an IPv6 bracket is host
// data, as pgx reads it; an unterminated bracket falls back to the first '?',
// which masks more rather than less.
func queryStart(p string) int {
	i := 0
	for {
		if i < len(p) && p[i] == '[' {
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return strings.IndexByte(p, '?')
			}
			i += end + 1
		}
		for i < len(p) && p[i] != '/' && p[i] != '?' && p[i] != ',' {
			i++
		}
		if i < len(p) && p[i] == ',' {
			i++
			continue
		}
		break
	}
	if i == len(p) {
		return -1
	}
	if p[i] == '?' {
		return i
	}
	if j := strings.IndexByte(p[i:], '?'); j >= 0 {
		return i + j
	}
	return -1
}
