package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// syncBuffer is a bytes.Buffer safe for a running command and a test to share.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cliEnv is one user's environment: their own config and data directories.
type cliEnv struct {
	vars map[string]string
	// storeURL is the store of the server startAPI started, for tests that
	// must seed what no command can make (nodes with GPUs).
	storeURL string
}

func newCLIEnv(t *testing.T) *cliEnv {
	dir := t.TempDir()
	return &cliEnv{vars: map[string]string{
		"XDG_CONFIG_HOME": filepath.Join(dir, "config"),
		"XDG_DATA_HOME":   filepath.Join(dir, "data"),
		"HOME":            dir,
	}}
}

// run runs the CLI to completion and returns what it printed.
func (e *cliEnv) run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errb syncBuffer
	err = Execute(ctx, Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return e.vars[k] }})
	return out.String(), errb.String(), err
}

// startDev runs `dev` until the test ends and returns once its CLI context exists.
func (e *cliEnv) startDev(t *testing.T) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Execute(ctx, Env{Args: []string{"dev", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0", "--log-level", "warn"}, Stdout: &out, Stderr: &out,
			Getenv: func(k string) string { return e.vars[k] }})
	}()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(out.String(), "Better Compute dev is running") {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("dev exited: %v\n%s", err, out.String())
		case <-deadline:
			cancel()
			t.Fatalf("dev did not start:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func (e *cliEnv) status(t *testing.T) map[string]any {
	t.Helper()
	out, _, err := e.run(context.Background(), "status", "-o", "json")
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
	}
	return got
}

// TestDevThenStatus is the newcomer's path: dev in one terminal, status with
// no flags in another, and the data still there after a restart.
func TestDevThenStatus(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	stop := e.startDev(t)

	got := e.status(t)
	if got["engine"] != "sqlite" {
		t.Errorf(`engine = %v, want "sqlite"`, got["engine"])
	}
	if v, _ := got["schemaVersion"].(float64); int(v) != store.LatestSchemaVersion() {
		t.Errorf("schemaVersion = %v, want %d", got["schemaVersion"], store.LatestSchemaVersion())
	}
	id, _ := got["deploymentId"].(string)
	if id == "" {
		t.Fatalf("no deploymentId in %v", got)
	}
	if out, _, err := e.run(context.Background(), "status", "-o", "yaml"); err != nil || !strings.Contains(out, "engine: sqlite") {
		t.Errorf("status -o yaml = %q, %v", out, err)
	}
	if out, _, err := e.run(context.Background(), "status"); err != nil || !strings.Contains(out, "schema version") {
		t.Errorf("status = %q, %v", out, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("dev stopped with %v", err)
	}

	// The database is in the XDG data dir, and a second run keeps it.
	if _, err := os.Stat(filepath.Join(e.vars["XDG_DATA_HOME"], "better-compute", "dev", "better-compute.db")); err != nil {
		t.Fatalf("dev database: %v", err)
	}
	e.startDev(t)
	if again := e.status(t)["deploymentId"]; again != id {
		t.Errorf("deploymentId after restart = %v, want %v (data lost)", again, id)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	out, _, err := e.run(context.Background(), "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Client map[string]any `json:"client"`
		Server map[string]any `json:"server"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if got.Client["version"] == "" || got.Server != nil {
		t.Errorf("version without a server = %s", out)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tests := []struct {
		args     []string
		want     string
		exitCode int
	}{
		{[]string{"status", "-o", "xml"}, `unknown output format "xml"`, 2},
		{[]string{"status"}, "no server configured", 1},
		{[]string{"status", "--server", "http://127.0.0.1:1"}, "cannot reach the server at http://127.0.0.1:1", 1},
		{[]string{"status", "--server", "ftp://x"}, "is not a URL", 1},
		{[]string{"nosuchcommand"}, "unknown command", 2},
		{[]string{"status", "--bogus"}, "unknown flag", 2},
		{[]string{"serve", "--store", "sqlite:/tmp/x.db", "--log-format", "xml"}, `unknown log format "xml"`, 2},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			_, _, err := e.run(context.Background(), tt.args...)
			if err == nil {
				t.Fatal("succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error = %q, want one line containing %q", err, tt.want)
			}
			if got := ExitCode(err); got != tt.exitCode {
				t.Errorf("exit code = %d, want %d", got, tt.exitCode)
			}
		})
	}
	if ExitCode(errors.New("x")) != 1 {
		t.Error("plain errors exit 1")
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, _, err := e.run(context.Background(), "completion", shell)
		if err != nil || !strings.Contains(out, "better-compute") {
			t.Errorf("completion %s: %v (%d bytes)", shell, err, len(out))
		}
	}
}
