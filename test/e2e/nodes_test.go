package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/better-compute/better-compute/internal/agent"
	"github.com/better-compute/better-compute/internal/agent/inventory"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// heartbeat is short so that liveness is tested in seconds.
const heartbeat = 300 * time.Millisecond

// fleet is a control plane with its admin, and the bcd nodes joined to it.
type fleet struct {
	t        *testing.T
	admin    *user
	server   *server
	args     []string // how the server was started, to restart it
	dataDir  string
	gateway  string
	nodeDirs []string
	hw       []*inventory.FakeHW
	bcds     map[int]*server
}

func newFleet(t *testing.T, engine store.Engine) *fleet {
	return newFleetWith(t, engine, heartbeat)
}

// newFleetWith starts a control plane with the given heartbeat interval.
func newFleetWith(t *testing.T, engine store.Engine, heartbeat time.Duration) *fleet {
	admin := newUser(t)
	dataDir := filepath.Join(admin.home, "data")
	f := &fleet{t: t, admin: admin, dataDir: dataDir, bcds: map[int]*server{}}
	f.args = []string{"serve", "--store", storetest.URL(t, engine), "--listen", "127.0.0.1:0", "--data-dir", dataDir,
		"--heartbeat-interval", heartbeat.String(), "--log-level", "debug"}
	f.startServer()
	return f
}

// startServer (re)starts the control plane; a restart keeps the gateway's
// port, so that nodes come back to it, and the API's.
func (f *fleet) startServer() {
	f.t.Helper()
	args := slices.Clone(f.args)
	if f.gateway != "" {
		args = append(args, "--gateway-listen", strings.TrimPrefix(f.gateway, "https://"))
	}
	if f.server != nil {
		// The API keeps its port too, so that tokens handed to other
		// users (fleet.as) keep working.
		args[slices.Index(args, "--listen")+1] = strings.TrimPrefix(f.server.url, "http://")
	}
	f.server = f.admin.start(args...)
	token, err := os.ReadFile(filepath.Join(f.dataDir, "admin.token"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.admin.env = append(f.admin.env, "BETTER_COMPUTE_SERVER="+f.server.url, "BETTER_COMPUTE_TOKEN="+strings.TrimSpace(string(token)))
	if m := gatewayURL.FindStringSubmatch(f.server.output.String()); m != nil {
		f.gateway = m[1]
	}
}

func (f *fleet) cli(args ...string) string {
	f.t.Helper()
	out, stderr, code := f.admin.run(args...)
	if code != 0 {
		f.t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	return out
}

// joinToken makes a join token for uses joins.
func (f *fleet) joinToken(uses int) string {
	f.t.Helper()
	var res struct{ Secret, GatewayURL string }
	if err := json.Unmarshal([]byte(f.cli("join-tokens", "create", "--uses", fmt.Sprint(uses), "--ttl", "1h", "-o", "json")), &res); err != nil {
		f.t.Fatal(err)
	}
	return res.Secret
}

// bcd runs bcd to completion.
func (f *fleet) bcd(args ...string) (string, int) {
	cmd := exec.Command(binaries.bcd, args...)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

// join joins node i with token.
func (f *fleet) join(i int, token string) {
	f.t.Helper()
	for len(f.nodeDirs) <= i {
		f.nodeDirs = append(f.nodeDirs, filepath.Join(f.admin.home, fmt.Sprintf("node%d", len(f.nodeDirs))))
		hw := inventory.GenerateFakeHW(f.t.Name(), len(f.hw), 8, inventory.DefaultFakeGPUModel)
		f.hw = append(f.hw, hw)
	}
	b, err := yaml.Marshal(f.hw[i])
	if err != nil {
		f.t.Fatal(err)
	}
	hwFile := filepath.Join(f.admin.home, fmt.Sprintf("fakehw%d.yaml", i))
	if err := os.WriteFile(hwFile, b, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if out, code := f.bcd("join", "--server", f.gateway, "--token", token, "--data-dir", f.nodeDirs[i], "--fakehw", hwFile); code != 0 {
		f.t.Fatalf("bcd join %d: exit %d: %s", i, code, out)
	}
}

// startNode runs bcd node i.
func (f *fleet) startNode(i int) {
	f.t.Helper()
	cmd := exec.Command(binaries.bcd, "node", "--data-dir", f.nodeDirs[i], "--fakehw", filepath.Join(f.admin.home, fmt.Sprintf("fakehw%d.yaml", i)))
	s := &server{t: f.t, cmd: cmd, output: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.output, s.output
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	f.t.Cleanup(func() { _ = cmd.Process.Kill(); <-s.done })
	f.bcds[i] = s
}

type nodeView struct {
	ID           string
	Hostname     string
	State        string
	SessionEpoch string
	Inventory    struct {
		Gpus struct {
			Devices []struct{ UUID string }
		}
	}
}

func (f *fleet) nodes() []nodeView {
	var res struct{ Nodes []nodeView }
	if err := json.Unmarshal([]byte(f.cli("nodes", "list", "-o", "json")), &res); err != nil {
		f.t.Fatal(err)
	}
	return res.Nodes
}

func (f *fleet) node(id string) nodeView {
	var res struct{ Node nodeView }
	if err := json.Unmarshal([]byte(f.cli("nodes", "get", id, "-o", "json")), &res); err != nil {
		f.t.Fatal(err)
	}
	return res.Node
}

// nodeID is the id node i joined as, from its data dir.
func (f *fleet) nodeID(i int) string {
	f.t.Helper()
	id, err := agent.JoinedNodeID(f.nodeDirs[i])
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// await polls cond until it holds or the deadline passes.
func (f *fleet) await(what string, within time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not within %s\nserver:\n%s", what, within, tail(f.server.output.String(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (f *fleet) stateOf(id string) string {
	for _, n := range f.nodes() {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

// TestNodes is the nodes issue's story with real processes: three bcd on
// fakehw join and report; the server restarts and they resume without a
// new join; a killed bcd goes unreachable and comes back; a command for a
// node that is down runs exactly once when it returns; a bcd that lost its
// journal re-runs nothing; a revoked node is cut off within a second and
// refused after.
func TestNodes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFleet(t, engine)
		token := f.joinToken(3)
		for i := range 3 {
			f.join(i, token)
			f.startNode(i)
		}
		f.await("three nodes ready", 20*time.Second, func() bool {
			ready := 0
			for _, n := range f.nodes() {
				if n.State == "NODE_STATE_READY" {
					ready++
				}
			}
			return ready == 3
		})
		for i, hw := range f.hw {
			id := f.nodeID(i)
			if got := f.node(id).Hostname; got != hw.Hostname {
				t.Errorf("node %d hostname = %q, want the fakehw's %q", i, got, hw.Hostname)
			}
			var got []string
			f.await("inventory of "+hw.Hostname, 10*time.Second, func() bool {
				got = got[:0]
				for _, g := range f.node(id).Inventory.Gpus.Devices {
					got = append(got, g.UUID)
				}
				return len(got) == len(hw.GPUs)
			})
			for j, g := range hw.GPUs {
				if got[j] != g.UUID {
					t.Errorf("node %d GPU %d = %s, want %s", i, j, got[j], g.UUID)
				}
			}
		}
		// A fourth join with the spent token is refused, clearly.
		if out, code := f.bcd("join", "--server", f.gateway, "--token", token, "--data-dir", filepath.Join(f.admin.home, "extra")); code == 0 || !strings.Contains(out, "no uses left") {
			t.Errorf("join with a spent token: exit %d: %s", code, out)
		}

		// A command runs and reports.
		n0 := f.nodeID(0)
		if out := f.cli("nodes", "exec-command", n0, "diag.nvml"); !strings.Contains(out, "succeeded") {
			t.Errorf("diag.nvml: %s", out)
		}

		// The server restarts: the sessions resume, no new join.
		epoch := f.node(n0).SessionEpoch
		f.server.stop(syscall.SIGTERM)
		f.startServer()
		f.await("sessions resume after a server restart", 10*time.Second, func() bool {
			return f.node(n0).SessionEpoch != epoch && len(f.nodes()) == 3 && f.stateOf(n0) == "NODE_STATE_READY"
		})

		// A killed bcd goes unreachable within 3 intervals, and ready after it restarts.
		n1 := f.nodeID(1)
		_ = f.bcds[1].cmd.Process.Kill()
		<-f.bcds[1].done
		f.await("killed node unreachable", 3*heartbeat+3*time.Second, func() bool { return f.stateOf(n1) == "NODE_STATE_UNREACHABLE" })
		// A command while it is down waits, then runs exactly once.
		var queued struct{ Command struct{ ID string } }
		if err := json.Unmarshal([]byte(f.cli("nodes", "exec-command", n1, "inventory.refresh", "--no-wait", "-o", "json")), &queued); err != nil {
			t.Fatal(err)
		}
		f.startNode(1)
		f.await("restarted node ready", 10*time.Second, func() bool { return f.stateOf(n1) == "NODE_STATE_READY" })
		f.await("queued command ran", 10*time.Second, func() bool {
			return strings.Contains(f.cli("nodes", "commands", n1), "succeeded")
		})
		// With its journal gone, bcd runs nothing twice.
		f.bcds[1].stop(syscall.SIGTERM)
		if err := os.Remove(filepath.Join(f.nodeDirs[1], "journal.db")); err != nil {
			t.Fatal(err)
		}
		f.startNode(1)
		f.await("node back with a fresh journal", 10*time.Second, func() bool { return f.stateOf(n1) == "NODE_STATE_READY" })
		time.Sleep(3 * heartbeat)
		if got := strings.Count(f.cli("nodes", "commands", n1), "inventory.refresh"); got != 1 {
			t.Errorf("inventory.refresh appears %d times after the journal was lost", got)
		}

		// Revocation cuts the session within a second and refuses reconnects.
		n2 := f.nodeID(2)
		start := time.Now()
		f.cli("nodes", "revoke", n2)
		select {
		case <-f.bcds[2].done:
			if d := time.Since(start); d > 2*time.Second { // the CLI round trip included
				t.Errorf("revoked bcd exited after %s", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("revoked bcd still running after 5s")
		}
		if out := f.bcds[2].output.String(); !strings.Contains(out, "revoked") {
			t.Errorf("revoked bcd did not say why:\n%s", tail(out, 10))
		}
		f.startNode(2)
		select {
		case <-f.bcds[2].done:
		case <-time.After(10 * time.Second):
			t.Error("a revoked node's reconnect was not refused")
		}
		f.server.stop(syscall.SIGTERM)
	})
}

// TestJoinRace: two servers racing for a one-use token give one node and
// one clear refusal.
func TestJoinRace(t *testing.T) {
	t.Parallel()
	f := newFleet(t, store.EngineSQLite)
	token := f.joinToken(1)
	var wg sync.WaitGroup
	outs := make([]string, 2)
	codes := make([]int, 2)
	for i := range 2 {
		wg.Go(func() {
			outs[i], codes[i] = f.bcd("join", "--server", f.gateway, "--token", token, "--data-dir", filepath.Join(f.admin.home, fmt.Sprint("racer", i)))
		})
	}
	wg.Wait()
	ok, refused := 0, 0
	for i := range 2 {
		switch {
		case codes[i] == 0:
			ok++
		case strings.Contains(outs[i], "no uses left"):
			refused++
		default:
			t.Errorf("racer %d: exit %d: %s", i, codes[i], outs[i])
		}
	}
	if ok != 1 || refused != 1 || len(f.nodes()) != 1 {
		t.Errorf("%d joined, %d refused, %d nodes; want 1, 1, 1", ok, refused, len(f.nodes()))
	}
}
