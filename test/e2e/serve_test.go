package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestServeReportsItsEngine: `serve --store URL`, then `status -o json`
// against it, on each engine.
func TestServeReportsItsEngine(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		u := newUser(t)
		dataDir := filepath.Join(u.home, "data")
		s := u.start("serve", "--store", storetest.URL(t, engine), "--listen", "127.0.0.1:0", "--data-dir", dataDir)

		tokenFile := filepath.Join(dataDir, "admin.token")
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatalf("the first start wrote no admin token: %v", err)
		}
		if fi, _ := os.Stat(tokenFile); fi.Mode().Perm() != 0o600 {
			t.Errorf("admin.token mode %v, want 0600", fi.Mode().Perm())
		}
		if out := s.output.String(); !strings.Contains(out, tokenFile) || strings.Contains(out, strings.TrimSpace(string(token))) {
			t.Errorf("the log must say where the admin token is and never what it is:\n%s", out)
		}
		u.env = append(u.env, "BETTER_COMPUTE_TOKEN="+strings.TrimSpace(string(token)))

		got := u.statusJSON("--server", s.url)
		if got["engine"] != string(engine) {
			t.Errorf("engine = %v, want %q", got["engine"], engine)
		}
		if v, _ := got["schemaVersion"].(float64); int(v) != store.LatestSchemaVersion() {
			t.Errorf("schemaVersion = %v, want %d", got["schemaVersion"], store.LatestSchemaVersion())
		}
		if fi, err := os.Stat(dataDir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("data dir: %v, %v; want mode 0700", fi, err)
		}
		s.stop(syscall.SIGTERM)
	})
}

// TestDevThenStatus is the README's path with the real binary: dev in one
// terminal, status with no flags in another, Ctrl-C, and again.
func TestDevThenStatus(t *testing.T) {
	t.Parallel()
	u := newUser(t)
	s := u.start("dev", "--listen", "127.0.0.1:0")
	s.await("Better Compute dev is running")
	got := u.statusJSON()
	if got["engine"] != "sqlite" {
		t.Errorf("engine = %v, want sqlite", got["engine"])
	}
	if v, _ := got["schemaVersion"].(float64); int(v) != store.LatestSchemaVersion() {
		t.Errorf("schemaVersion = %v", got["schemaVersion"])
	}
	if !strings.Contains(s.output.String(), "In another terminal: better-compute status") {
		t.Errorf("dev printed no summary:\n%s", s.output.String())
	}
	// A newcomer sees nodes at once: three simulated bcd agents join, in the
	// pool default, which is offered to the tenant demo.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, _ := u.run("nodes", "list")
		if strings.Count(out, " ready ") == 3 && strings.Count(out, " default ") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev's simulated nodes are not ready:\n%s\n%s", out, tail(s.output.String(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _, code := u.run("pools", "get", "default", "-o", "json"); code != 0 || !strings.Contains(out, `"demo"`) {
		t.Errorf("pools get default: exit %d: %s", code, out)
	}
	s.stop(syscall.SIGINT)

	s = u.start("dev", "--listen", "127.0.0.1:0")
	s.await("Better Compute dev is running")
	if again := u.statusJSON(); again["deploymentId"] != got["deploymentId"] {
		t.Errorf("deploymentId changed across restarts: %v -> %v", got["deploymentId"], again["deploymentId"])
	}
	s.stop(syscall.SIGTERM)
}

// TestBadInput: each operator mistake exits non-zero with one line that names
// the problem and the fix, and leaves nothing behind.
func TestBadInput(t *testing.T) {
	t.Parallel()
	u := newUser(t)
	notDB := filepath.Join(u.home, "notes.txt")
	if err := os.WriteFile(notDB, []byte("not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := u.start("serve", "--store", "sqlite:"+filepath.Join(u.home, "busy.db"), "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(u.home, "busy"))
	busyAddr := strings.TrimPrefix(s.url, "http://")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"malformed store URL", []string{"--store", "sqlite"}, "unsupported store URL"},
		{"unreachable postgres", []string{"--store", "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}, "cannot connect to PostgreSQL at 127.0.0.1:1"},
		{"not a sqlite database", []string{"--store", "sqlite:" + notDB}, "is not a SQLite database"},
		{"port in use", []string{"--store", "sqlite:" + filepath.Join(u.home, "x", "bc.db"), "--listen", busyAddr}, "already in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := filepath.Join(u.home, strings.ReplaceAll(tt.name, " ", "-"))
			args := append([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"}, tt.args...)
			stdout, stderr, code := u.run(args...)
			if code == 0 {
				t.Fatal("exited 0")
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "better-compute: ") || !strings.Contains(lines[0], tt.want) {
				t.Errorf("stderr = %q, want one line containing %q", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data dir written: %v", err)
			}
		})
	}
	if b, _ := os.ReadFile(notDB); string(b) != "not a database\n" {
		t.Errorf("the non-database file changed: %q", b)
	}
	s.stop(syscall.SIGINT)
}

func TestBcdVersion(t *testing.T) {
	t.Parallel()
	out, err := execOutput(binaries.bcd, "version")
	if err != nil || !strings.HasPrefix(out, "bcd ") {
		t.Errorf("bcd version = %q, %v", out, err)
	}
}
