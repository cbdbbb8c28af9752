package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/better-compute/internal/controlplane"
)

// startAPI runs a control plane on SQLite in this test process until the test
// ends and returns the platform admin's CLI environment: the server and the
// admin token the first start bootstraps.
func startAPI(t *testing.T) *cliEnv {
	t.Helper()
	dir := t.TempDir()
	storeURL := "sqlite:" + filepath.Join(dir, "bc.db")
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan controlplane.Ready, 1)
	done := make(chan error, 1)
	cfg := controlplane.Config{
		GatewayListen: "127.0.0.1:0",
		StoreURL:      storeURL,
		DataDir:       filepath.Join(dir, "data"),
		Listen:        "127.0.0.1:0",
		OnReady:       func(r controlplane.Ready) error { readyc <- r; return nil },
		// Webhook receivers in tests are on loopback.
		WebhooksAllowPrivate: true,
	}
	go func() { done <- controlplane.Run(ctx, cfg) }()
	var ready controlplane.Ready
	select {
	case ready = <-readyc:
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("server did not start within 30s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("server did not stop within 15s")
		}
	})
	if ready.AdminTokenFile == "" {
		t.Fatal("the server reported no admin token file: the first start should bootstrap the platform admin")
	}
	token, err := os.ReadFile(ready.AdminTokenFile)
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	e := newCLIEnv(t)
	e.vars["BETTER_COMPUTE_SERVER"] = ready.URL
	e.vars["BETTER_COMPUTE_TOKEN"] = strings.TrimSpace(string(token))
	e.storeURL = storeURL
	return e
}

// as returns the same user environment with another token.
func (e *cliEnv) as(token string) *cliEnv {
	vars := make(map[string]string, len(e.vars))
	for k, v := range e.vars {
		vars[k] = v
	}
	vars["BETTER_COMPUTE_TOKEN"] = token
	return &cliEnv{vars: vars}
}

// do runs a command with -o json and decodes its output into res, the API's
// response message: what -o json prints must be that message's protobuf JSON.
func (e *cliEnv) do(t *testing.T, res proto.Message, args ...string) {
	t.Helper()
	out, _, err := e.run(context.Background(), append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	if err := protojson.Unmarshal([]byte(out), res); err != nil {
		t.Fatalf("%s -o json is not a %T: %v\n%s", strings.Join(args, " "), res, err, out)
	}
}

// table runs a command with the default table output and returns it.
func (e *cliEnv) table(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := e.run(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return out
}

// fails runs a command that must fail with one line containing want.
func (e *cliEnv) fails(t *testing.T, want string, args ...string) error {
	t.Helper()
	_, _, err := e.run(context.Background(), args...)
	if err == nil {
		t.Fatalf("%s succeeded; want an error containing %q", strings.Join(args, " "), want)
	}
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%s: error = %q, want one line containing %q", strings.Join(args, " "), err, want)
	}
	return err
}

// runIn runs the CLI with stdin, which Env does not carry, to test FILE "-".
func (e *cliEnv) runIn(stdin string, args ...string) (stdout string, err error) {
	var out, errb syncBuffer
	root := newRoot(Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return e.vars[k] }})
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), err
}

// writeFile writes a file in a fresh temporary directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
