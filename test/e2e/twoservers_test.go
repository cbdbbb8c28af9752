package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// twoServersWait bounds each step of TestTwoServers: the gateway compares
// the store with its sessions twice a second, so a few seconds is plenty
// even on a loaded machine, and far less than a command's expiry.
const twoServersWait = 15 * time.Second

// TestTwoServers is the deployment of several control-plane processes on
// one PostgreSQL database: a node holds its session with server A while
// every call goes to server B. A command, a placement, a release and a
// revocation made through B reach the node on A, through A's comparison of
// the store with the sessions it holds, within seconds. Only PostgreSQL
// can be shared by processes, so there is no SQLite half.
func TestTwoServers(t *testing.T) {
	t.Parallel()
	// A longer heartbeat than the other tests': a node taken for
	// unreachable under load would fail the placement, which is not what
	// this test is about.
	const heartbeat = time.Second
	// The database comes from storetest.URL: without PostgreSQL the test
	// skips, or fails under BETTER_COMPUTE_REQUIRE_POSTGRES=1.
	a := newFleetWith(t, store.EnginePostgres, heartbeat)

	// B runs as A does (the same store and heartbeat interval: either
	// process marks silent nodes of any gateway unreachable, so they must
	// agree on what silent is) with its own data dir, API and gateway
	// ports, and A's key file, without which it could not open the CA keys
	// sealed in the store.
	operatorB := newUser(t)
	dataDirB := filepath.Join(operatorB.home, "data")
	argsB := slices.Clone(a.args)
	argsB[slices.Index(argsB, "--data-dir")+1] = dataDirB
	argsB = append(argsB, "--key-file", filepath.Join(a.dataDir, "ca.key"))
	b := operatorB.start(argsB...)
	// The store was bootstrapped by A; B writes no second admin token, and
	// A's works on B, since both read the same tokens.
	if _, err := os.Stat(filepath.Join(dataDirB, "admin.token")); !os.IsNotExist(err) {
		t.Errorf("B wrote an admin token on a store A had bootstrapped: %v", err)
	}
	adminToken, err := os.ReadFile(filepath.Join(a.dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	adminB := userOn(t, b.url, strings.TrimSpace(string(adminToken)))

	// One node joins through A and holds its session there: the join
	// hands it A's gateway only.
	a.join(0, a.joinToken(1))
	a.startNode(0)
	node := a.nodeID(0)
	a.server.await(`msg="gateway: session open" node=` + node)
	if strings.Contains(b.output.String(), "gateway: session open") {
		t.Fatalf("the node opened its session with B, not A: nothing here would cross processes:\n%s", tail(b.output.String(), 20))
	}

	// The node in a pool offered to acme, whose gpu-users may reserve
	// from it, as in the spine.
	a.cli("pools", "create", "gpus")
	a.cli("nodes", "adopt", node, "--pool", "gpus")
	a.cli("tenants", "create", "acme")
	a.cli("pools", "offer", "gpus", "--to", "acme")
	a.cli("users", "create", "alice", "--tenant", "acme")
	a.cli("groups", "create", "gpu-users", "--tenant", "acme")
	a.cli("groups", "add-member", "gpu-users", "alice", "--tenant", "acme")
	a.cli("policies", "put", "pool-users", filepath.Join("..", "..", "examples", "policies", "pool-users.cedar"), "--tenant", "acme")
	aliceB := userOn(t, b.url, a.token("acme", "alice"))
	a.await("B sees the node's 8 GPUs free", twoServersWait, func() bool {
		var res struct {
			Pool struct{ FreeGpus map[string]int }
		}
		if err := json.Unmarshal([]byte(mustRun(t, adminB, "pools", "get", "gpus", "-o", "json")), &res); err != nil {
			t.Fatal(err)
		}
		free := 0
		for _, n := range res.Pool.FreeGpus {
			free += n
		}
		return free == 8
	})

	// 1. A command through B runs on the node, which B holds no session
	// for: it would stay queued until it expired if A did not look.
	start := time.Now()
	out, stderr, code := adminB.run("nodes", "exec-command", node, "diag.nvml", "--timeout", twoServersWait.String())
	if code != 0 || !strings.Contains(out, "succeeded") {
		t.Fatalf("diag.nvml through B for a node on A: exit %d after %s: %s%s\nA:\n%s",
			code, time.Since(start).Round(time.Millisecond), out, stderr, tail(a.server.output.String(), 30))
	}
	t.Logf("a command through B ran on A's node in %s", time.Since(start).Round(time.Millisecond))

	// 2. A placement through B is bound on the node as a CDI spec.
	start = time.Now()
	id := reserve(t, aliceB, "2")
	r := a.awaitBound(aliceB, id)
	if len(r.NodeIDs) != 1 || r.NodeIDs[0] != node || len(r.DeviceUUIDs) != 2 {
		t.Fatalf("reservation = %+v; want 2 GPUs of node %s", r, node)
	}
	a.await("the CDI spec of "+id+" written on the node", twoServersWait, func() bool {
		_, ok := a.cdiSpec(0, id)
		return ok
	})
	t.Logf("a reservation through B was bound on A's node in %s", time.Since(start).Round(time.Millisecond))

	// 3. A release through B removes the spec.
	start = time.Now()
	mustRun(t, aliceB, "reservations", "release", id)
	a.await("the CDI spec of "+id+" removed after a release through B", twoServersWait, func() bool {
		_, ok := a.cdiSpec(0, id)
		return !ok
	})
	t.Logf("a release through B reached A's node in %s", time.Since(start).Round(time.Millisecond))

	// 4. A revocation through B ends the session A holds, and bcd with it.
	start = time.Now()
	mustRun(t, adminB, "nodes", "revoke", node)
	select {
	case <-a.bcds[0].done:
		t.Logf("a revocation through B ended the bcd on A in %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(twoServersWait):
		t.Fatalf("the bcd connected to A still runs %s after its revocation through B\nbcd:\n%s\nA:\n%s",
			twoServersWait, tail(a.bcds[0].output.String(), 10), tail(a.server.output.String(), 30))
	}
	if out := a.bcds[0].output.String(); !strings.Contains(out, "revoked") {
		t.Errorf("the revoked bcd did not say why:\n%s", tail(out, 10))
	}
}

// userOn is a user of the server at url, holding token.
func userOn(t *testing.T, url, token string) *user {
	u := newUser(t)
	u.env = append(u.env, "BETTER_COMPUTE_SERVER="+url, "BETTER_COMPUTE_TOKEN="+token)
	return u
}
