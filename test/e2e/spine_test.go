package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// reservationView is what the spine reads of `reservations get -o json`.
type reservationView struct {
	ID          string
	State       string
	NodeIDs     []string
	DeviceUUIDs []string
	CdiDevice   string
}

// as is another user of the fleet's server, holding token.
func (f *fleet) as(token string) *user {
	u := newUser(f.t)
	u.env = append(u.env, "BETTER_COMPUTE_SERVER="+f.server.url, "BETTER_COMPUTE_TOKEN="+token)
	return u
}

// token makes a token for a principal of tenant.
func (f *fleet) token(tenant, principal string) string {
	f.t.Helper()
	var res struct{ Secret string }
	if err := json.Unmarshal([]byte(f.cli("tokens", "create", "--tenant", tenant, "--principal", principal, "--ttl", "1h", "-o", "json")), &res); err != nil {
		f.t.Fatal(err)
	}
	return res.Secret
}

// run runs better-compute as u and fails the test on a non-zero exit.
func mustRun(t *testing.T, u *user, args ...string) string {
	t.Helper()
	out, stderr, code := u.run(args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	return out
}

// refused runs better-compute as u and wants one line of stderr holding want.
func refused(t *testing.T, u *user, want string, args ...string) {
	t.Helper()
	_, stderr, code := u.run(args...)
	if code == 0 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("%v: exit %d, stderr %q; want one line containing %q", args, code, stderr, want)
	}
}

func getReservation(t *testing.T, u *user, id string) reservationView {
	t.Helper()
	var res struct{ Reservation reservationView }
	if err := json.Unmarshal([]byte(mustRun(t, u, "reservations", "get", id, "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	return res.Reservation
}

// cdiSpec returns the CDI spec file of reservation id on node i, if any.
func (f *fleet) cdiSpec(i int, id string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(f.nodeDirs[i], "cdi", "bettercompute-"+id+".json"))
	return string(b), err == nil
}

// nodeIndex is the index of the node with id.
func (f *fleet) nodeIndex(id string) int {
	f.t.Helper()
	for i := range f.nodeDirs {
		if f.nodeID(i) == id {
			return i
		}
	}
	f.t.Fatalf("no node %s", id)
	return -1
}

// setupSpine starts the capacity issue's fleet: three fakehw nodes with 8
// GPUs each adopted into the platform pool "gpus", offered to acme but not
// globex; alice of acme may reserve under pool-users, reserve-bounded and
// bounded-extend; carol administers globex.
func setupSpine(t *testing.T, engine store.Engine, heartbeat time.Duration) (f *fleet, alice, carol *user) {
	f = newFleetWith(t, engine, heartbeat)
	token := f.joinToken(3)
	for i := range 3 {
		f.join(i, token)
		f.startNode(i)
	}
	f.cli("pools", "create", "gpus", "--description", "the shared H100s")
	for i := range 3 {
		f.cli("nodes", "adopt", f.nodeID(i), "--pool", "gpus")
	}
	for _, tenant := range []string{"acme", "globex"} {
		f.cli("tenants", "create", tenant)
	}
	f.cli("pools", "offer", "gpus", "--to", "acme")
	f.cli("users", "create", "alice", "--tenant", "acme")
	f.cli("groups", "create", "gpu-users", "--tenant", "acme")
	f.cli("groups", "add-member", "gpu-users", "alice", "--tenant", "acme")
	for _, p := range []string{"pool-users", "reserve-bounded", "bounded-extend"} {
		f.cli("policies", "put", p, filepath.Join("..", "..", "examples", "policies", p+".cedar"), "--tenant", "acme")
	}
	f.cli("users", "create", "carol", "--tenant", "globex")
	f.cli("groups", "add-member", "admins", "carol", "--tenant", "globex")
	f.await("24 free GPUs", 20*time.Second, func() bool {
		var res struct {
			Pool struct{ FreeGpus map[string]int }
		}
		if err := json.Unmarshal([]byte(f.cli("pools", "get", "gpus", "-o", "json")), &res); err != nil {
			t.Fatal(err)
		}
		free := 0
		for _, n := range res.Pool.FreeGpus {
			free += n
		}
		return free == 24
	})
	return f, f.as(f.token("acme", "alice")), f.as(f.token("globex", "carol"))
}

// TestSpine is the capacity issue's story with real processes on both
// engines: alice reserves 4 GPUs; exactly those are bound on their node as
// a CDI spec and the reservation shows bound; her policies deny 9 GPUs and
// an extension past 72 hours; globex can neither see her reservation nor
// reserve from a pool not offered to it; a release removes the spec.
func TestSpine(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f, alice, carol := setupSpine(t, engine, heartbeat)

		var created struct{ Reservation reservationView }
		out := mustRun(t, alice, "reservations", "create", "--pool", "gpus", "--pool-tenant", "platform", "--gpus", "4", "--same-node", "--duration", "2h", "-o", "json")
		if err := json.Unmarshal([]byte(out), &created); err != nil {
			t.Fatal(err)
		}
		id := created.Reservation.ID
		var r reservationView
		f.await("the reservation bound", 15*time.Second, func() bool {
			r = getReservation(t, alice, id)
			return r.State == "RESERVATION_STATE_BOUND"
		})
		if len(r.NodeIDs) != 1 || len(r.DeviceUUIDs) != 4 || r.CdiDevice != "bettercompute.dev/gpu="+id {
			t.Fatalf("reservation = %+v; want one node, 4 GPUs, CDI device bettercompute.dev/gpu=%s", r, id)
		}
		holder := f.nodeIndex(r.NodeIDs[0])
		spec, ok := f.cdiSpec(holder, id)
		if !ok {
			t.Fatalf("no CDI spec for %s on node %d", id, holder)
		}
		var parsed struct {
			Kind    string
			Devices []struct {
				Name           string
				ContainerEdits struct{ Env []string }
			}
		}
		if err := json.Unmarshal([]byte(spec), &parsed); err != nil {
			t.Fatal(err)
		}
		wantEnv := "NVIDIA_VISIBLE_DEVICES=" + strings.Join(r.DeviceUUIDs, ",")
		if parsed.Kind != "bettercompute.dev/gpu" || len(parsed.Devices) != 1 || parsed.Devices[0].Name != id ||
			!slices.Contains(parsed.Devices[0].ContainerEdits.Env, wantEnv) {
			// The env lists the UUIDs in index order; compare as sets.
			var got []string
			for _, e := range parsed.Devices[0].ContainerEdits.Env {
				if v, ok := strings.CutPrefix(e, "NVIDIA_VISIBLE_DEVICES="); ok {
					got = strings.Split(v, ",")
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, r.DeviceUUIDs) {
				t.Errorf("CDI spec on node %d names %v; want exactly %v:\n%s", holder, got, r.DeviceUUIDs, spec)
			}
		}
		for i := range f.nodeDirs {
			if _, ok := f.cdiSpec(i, id); ok != (i == holder) {
				t.Errorf("node %d has a spec for %s: %v", i, id, ok)
			}
		}

		// Policies and isolation.
		refused(t, alice, "permission denied", "reservations", "create", "--pool", "gpus", "--pool-tenant", "platform", "--gpus", "9", "--duration", "1h")
		refused(t, alice, "permission denied", "reservations", "extend", id, "--duration", "71h")
		mustRun(t, alice, "reservations", "extend", id, "--duration", "70h")
		refused(t, carol, "not found", "reservations", "get", id)
		refused(t, carol, "not found", "reservations", "release", id)
		refused(t, carol, "not found", "reservations", "create", "--pool", "gpus", "--pool-tenant", "platform", "--gpus", "1", "--duration", "1h")
		if out := mustRun(t, carol, "reservations", "list"); strings.Contains(out, id) {
			t.Errorf("globex's list shows acme's reservation:\n%s", out)
		}

		// A release removes the spec.
		mustRun(t, alice, "reservations", "release", id)
		f.await("the CDI spec removed", 10*time.Second, func() bool {
			_, ok := f.cdiSpec(holder, id)
			return !ok
		})

		// The node's inventory labels it; the operator adds a label.
		holderID := f.nodeID(holder)
		var got struct {
			Node struct{ Labels, InventoryLabels map[string]string }
		}
		if err := json.Unmarshal([]byte(f.cli("nodes", "label", holderID, "rack=r7", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		if got.Node.Labels["rack"] != "r7" || got.Node.InventoryLabels["gpu.count"] != "8" || got.Node.InventoryLabels["gpu.model"] == "" {
			t.Errorf("node labels = %v, inventory labels = %v", got.Node.Labels, got.Node.InventoryLabels)
		}

		// Draining with release ends alice's new reservation on the node,
		// which unbinds it, and cordons the node.
		again := reserve(t, alice, "8")
		r = f.awaitBound(alice, again)
		drained := r.NodeIDs[0]
		if out := f.cli("nodes", "drain", drained, "--release"); !strings.Contains(out, again+" of acme, RELEASED") {
			t.Errorf("nodes drain --release:\n%s", out)
		}
		f.await("the drained node's CDI spec removed", 10*time.Second, func() bool {
			_, ok := f.cdiSpec(f.nodeIndex(drained), again)
			return !ok
		})
		f.server.stop(syscall.SIGTERM)
	})
}

// reserve makes a reservation of n GPUs on one node as u and returns its id.
func reserve(t *testing.T, u *user, n string) string {
	t.Helper()
	var created struct{ Reservation reservationView }
	out := mustRun(t, u, "reservations", "create", "--pool", "gpus", "--pool-tenant", "platform", "--gpus", n, "--same-node", "--duration", "2h", "-o", "json")
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	return created.Reservation.ID
}

// awaitBound waits for reservation id to be bound and returns it.
func (f *fleet) awaitBound(u *user, id string) reservationView {
	f.t.Helper()
	var r reservationView
	f.await(id+" bound", 20*time.Second, func() bool {
		r = getReservation(f.t, u, id)
		return r.State == "RESERVATION_STATE_BOUND"
	})
	return r
}

// TestSpineFaults: the server killed between a placement and its binding
// comes back and binds it once; a node that restarts brings its CDI specs
// back in line with what it holds, whatever changed while it was down.
func TestSpineFaults(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		// A longer heartbeat: frozen nodes must stay ready (3 intervals)
		// while the placement is made.
		f, alice, _ := setupSpine(t, engine, time.Second)

		// Freeze every bcd, place, and kill the server before any node can
		// bind: the placement is committed, the binding not.
		for _, b := range f.bcds {
			_ = b.cmd.Process.Signal(syscall.SIGSTOP)
		}
		x := reserve(t, alice, "4")
		if r := getReservation(t, alice, x); r.State != "RESERVATION_STATE_PLACED" {
			t.Fatalf("with every node frozen the reservation is %s, want placed", r.State)
		}
		_ = f.server.cmd.Process.Kill()
		<-f.server.done
		f.startServer()
		for _, b := range f.bcds {
			_ = b.cmd.Process.Signal(syscall.SIGCONT)
		}
		rx := f.awaitBound(alice, x)
		audit := f.cli("audit", "list", "--tenant", "acme", "-o", "json")
		if got := strings.Count(audit, `Reservation::\"acme/`+x+`\"`); got != 2 { // the create, and one bind
			t.Errorf("acme's audit log names %s %d times, want 2 (create and bind):\n%s", x, got, audit)
		}

		// A second reservation lands on the same node (fewest free first).
		y := reserve(t, alice, "4")
		ry := f.awaitBound(alice, y)
		if ry.NodeIDs[0] != rx.NodeIDs[0] {
			t.Fatalf("%s on %s and %s on %s; want one node", x, rx.NodeIDs[0], y, ry.NodeIDs[0])
		}
		h := f.nodeIndex(rx.NodeIDs[0])

		// The node goes down; x is released meanwhile and y's spec is lost
		// from its disk. Back, it holds exactly y.
		_ = f.bcds[h].cmd.Process.Kill()
		<-f.bcds[h].done
		mustRun(t, alice, "reservations", "release", x)
		if err := os.Remove(filepath.Join(f.nodeDirs[h], "cdi", "bettercompute-"+y+".json")); err != nil {
			t.Fatal(err)
		}
		f.startNode(h)
		f.await("the node's CDI specs match its spec", 20*time.Second, func() bool {
			_, hasX := f.cdiSpec(h, x)
			_, hasY := f.cdiSpec(h, y)
			return !hasX && hasY
		})
		if r := getReservation(t, alice, y); r.State != "RESERVATION_STATE_BOUND" {
			t.Errorf("%s is %s after the node restarted, want bound", y, r.State)
		}
		f.server.stop(syscall.SIGTERM)
	})
}
