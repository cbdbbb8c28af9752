package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDoctor(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	cgroup := filepath.Join(t.TempDir(), "cgroup.controllers")
	if err := os.WriteFile(cgroup, []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newDoctor(dir)
	d.cgroupFile = cgroup
	d.lookPath = func(string) (string, error) { return "", errors.New("not found") }

	var out bytes.Buffer
	if err := d.run(context.Background(), &out); err != nil {
		t.Fatalf("doctor on a healthy node: %v\n%s", err, out.String())
	}
	for _, want := range []string{"ok    identity: node n-test1", "ok    certificate", "ok    gateway: " + gw.addr, "ok    clock skew", "warn  nvidia-smi", "ok    cgroup v2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A key readable by others, a skewed clock, no cgroup v2: each FAILs
	// with a fix, and the run fails.
	if err := os.Chmod(filepath.Join(dir, keyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cgroupFile = filepath.Join(t.TempDir(), "missing")
	d.now = func() time.Time { return time.Now().Add(10 * time.Second) }
	out.Reset()
	err := d.run(context.Background(), &out)
	if err == nil || !strings.Contains(err.Error(), "3 of 6 checks failed") {
		t.Errorf("doctor: %v\n%s", err, out.String())
	}
	for _, want := range []string{"FAIL  identity", "chmod 600", "FAIL  clock skew: this host is 9", "FAIL  cgroup v2", "fix: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDoctorNotJoined(t *testing.T) {
	t.Parallel()
	d := newDoctor(t.TempDir())
	d.lookPath = func(string) (string, error) { return "/usr/bin/nvidia-smi", nil }
	var out bytes.Buffer
	if err := d.run(context.Background(), &out); err == nil || !strings.Contains(out.String(), "FAIL  identity") || !strings.Contains(out.String(), "bcd join") {
		t.Errorf("doctor: %v\n%s", err, out.String())
	}
}

func TestDoctorUnreachable(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := joinedDir(t, gw)
	cfg, _ := readConfig(dir)
	cfg.GatewayAddresses = []string{"127.0.0.1:1"}
	b, _ := json.Marshal(cfg)
	_ = os.WriteFile(filepath.Join(dir, configFile), b, 0o644)
	d := newDoctor(dir)
	var out bytes.Buffer
	_ = d.run(context.Background(), &out)
	if !strings.Contains(out.String(), "FAIL  gateway: 127.0.0.1:1") || !strings.Contains(out.String(), "warn  clock skew") {
		t.Errorf("output:\n%s", out.String())
	}
}
