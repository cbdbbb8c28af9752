package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// user is one person's environment: their own config and data directories.
type user struct {
	t    *testing.T
	home string
	env  []string
}

func newUser(t *testing.T) *user {
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"), "PATH=" + os.Getenv("PATH"),
		// Tests run side by side: each server takes a free gateway port.
		"BETTER_COMPUTE_GATEWAY_LISTEN=127.0.0.1:0"}
	return &user{t: t, home: home, env: env}
}

// run runs better-compute to completion.
func (u *user) run(args ...string) (stdout, stderr string, exitCode int) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binaries.betterCompute, args...)
	cmd.Env = u.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			u.t.Fatalf("run %v: %v", args, err)
		}
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// statusJSON runs `status -o json` with extra args and decodes it.
func (u *user) statusJSON(args ...string) map[string]any {
	u.t.Helper()
	out, stderr, code := u.run(append([]string{"status", "-o", "json"}, args...)...)
	if code != 0 {
		u.t.Fatalf("status exited %d: %s", code, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		u.t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return got
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// server is a running better-compute process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	output *lockedBuffer
	url    string
	done   chan struct{} // closed when the process has exited
}

var (
	servingURL = regexp.MustCompile(`msg=serving url=(\S+)`)
	gatewayURL = regexp.MustCompile(`msg=serving url=\S+ gateway=(\S+)`)
)

// start runs better-compute with args (serve or dev) and waits until it
// logs that it serves.
func (u *user) start(args ...string) *server {
	u.t.Helper()
	cmd := exec.Command(binaries.betterCompute, args...)
	cmd.Env = u.env
	s := &server{t: u.t, cmd: cmd, output: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.output, s.output
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	u.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
		s.logErrors()
	})
	deadline := time.After(60 * time.Second)
	for {
		if m := servingURL.FindStringSubmatch(s.output.String()); m != nil {
			s.url = m[1]
			return s
		}
		select {
		case <-s.done:
			u.t.Fatalf("%v exited before serving:\n%s", args, s.output.String())
		case <-deadline:
			u.t.Fatalf("%v did not serve within 60s:\n%s", args, s.output.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logErrors puts the server's error lines in the test log when the test
// failed: an API error names only a request id, and the cause is here.
func (s *server) logErrors() {
	if !s.t.Failed() {
		return
	}
	for line := range strings.Lines(s.output.String()) {
		if strings.Contains(line, "level=ERROR") {
			s.t.Log("server: " + strings.TrimSpace(line))
		}
	}
}

// await waits until the process has printed text.
func (s *server) await(text string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.output.String(), text) {
		if time.Now().After(deadline) {
			s.t.Fatalf("no %q within 30s:\n%s", text, s.output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits for a clean exit.
func (s *server) stop(sig syscall.Signal) {
	s.t.Helper()
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.t.Fatalf("server did not exit within 20s of %v", sig)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		s.t.Errorf("server exited %d after %v:\n%s", code, sig, s.output.String())
	}
	if s.cmd.Path == binaries.betterCompute && !strings.Contains(s.output.String(), "msg=stopped") {
		s.t.Errorf("server did not log a graceful stop:\n%s", s.output.String())
	}
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
