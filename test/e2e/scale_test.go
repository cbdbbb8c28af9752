package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/fleetcheck"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// scaleAgents is the CI-sized fleet: the scale benchmarks' scenarios with
// real processes, small enough for every run.
const scaleAgents = 200

// TestScaleInvariants runs the scale scenarios at CI size on both engines:
// 200 agents of `bcd sim` join one pool with one multi-use token; 300
// placements of 1 to 8 GPUs arrive at once, a third are released, and
// commands go to 50 nodes. Once the fleet settles, fleetcheck finds no
// GPU booked twice, every bound reservation held by exactly the CDI specs
// on its nodes, no command run twice and no node taken for unreachable. It
// asserts the invariants, not the times.
func TestScaleInvariants(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		// The default heartbeat: under the race detector, beside the other
		// tests, a shorter one can starve past its 3 intervals, which the
		// invariants would rightly count as a node taken for unreachable.
		f := newFleetWith(t, engine, 5*time.Second)
		f.cli("pools", "create", "scale")
		var jt struct{ Secret, GatewayURL string }
		if err := json.Unmarshal([]byte(f.cli("join-tokens", "create", "--pool", "scale", "--uses", strconv.Itoa(scaleAgents), "--ttl", "1h", "-o", "json")), &jt); err != nil {
			t.Fatal(err)
		}
		simDir := filepath.Join(f.admin.home, "sim")
		sim := exec.Command(binaries.bcd, "sim", "--nodes", strconv.Itoa(scaleAgents), "--server", f.gateway,
			"--token", jt.Secret, "--data-dir", simDir, "--gpus", "8")
		out := &lockedBuffer{}
		sim.Stdout, sim.Stderr = out, out
		if err := sim.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = sim.Wait(); close(done) }()
		t.Cleanup(func() { _ = sim.Process.Kill(); <-done })

		token, err := os.ReadFile(filepath.Join(f.dataDir, "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(f.server.url, client.Options{Token: strings.TrimSpace(string(token))})
		if err != nil {
			t.Fatal(err)
		}
		f.await("every GPU of the fleet free", 60*time.Second, func() bool {
			res, err := c.Pools.GetPool(ctx, connect.NewRequest(&apiv1.GetPoolRequest{Name: "scale"}))
			if err != nil {
				t.Fatal(err)
			}
			free := 0
			for _, n := range res.Msg.GetPool().GetFreeGpus() {
				free += int(n)
			}
			return free == 8*scaleAgents
		})

		// 300 placements at once, a third released, and commands.
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for i := range 300 {
			wg.Go(func() {
				gpus := 1 + i%4
				if i%10 == 0 {
					gpus = 8
				}
				r, err := c.Reservations.CreateReservation(ctx, connect.NewRequest(&apiv1.CreateReservationRequest{
					Pool: "scale", Gpus: int32(gpus), SameNode: gpus == 8,
					End: &apiv1.CreateReservationRequest_Duration{Duration: durationpb.New(time.Hour)},
				}))
				if err == nil && i%3 == 0 {
					_, err = c.Reservations.ReleaseReservation(ctx, connect.NewRequest(&apiv1.ReleaseReservationRequest{Id: r.Msg.GetReservation().GetId()}))
				}
				if err != nil {
					errs <- fmt.Errorf("reservation %d: %w", i, err)
				}
			})
		}
		nodes, err := c.Nodes.ListNodes(ctx, connect.NewRequest(&apiv1.ListNodesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var commands []string
		for _, n := range nodes.Msg.GetNodes()[:50] {
			res, err := c.Nodes.ExecCommand(ctx, connect.NewRequest(&apiv1.ExecCommandRequest{NodeId: n.GetId(), Kind: "diag.nvml"}))
			if err != nil {
				t.Fatal(err)
			}
			commands = append(commands, n.GetId()+"/"+res.Msg.GetCommand().GetId())
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		// Settled: every command finished, every reservation bound.
		f.await("the commands finished", 60*time.Second, func() bool {
			for _, nc := range commands {
				node, id, _ := strings.Cut(nc, "/")
				res, err := c.Nodes.GetCommand(ctx, connect.NewRequest(&apiv1.GetCommandRequest{NodeId: node, Id: id}))
				if err != nil {
					t.Fatal(err)
				}
				if res.Msg.GetCommand().GetState() != apiv1.NodeCommandState_NODE_COMMAND_STATE_SUCCEEDED {
					return false
				}
			}
			return true
		})
		f.await("the reservations bound", 60*time.Second, func() bool {
			res, err := c.Reservations.ListReservations(ctx, connect.NewRequest(&apiv1.ListReservationsRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Msg.GetReservations() {
				if r.GetState() == apiv1.ReservationState_RESERVATION_STATE_PLACED {
					return false
				}
			}
			return true
		})

		dirs, err := fleetcheck.SimCDIDirs(simDir, scaleAgents)
		if err != nil {
			t.Fatal(err)
		}
		check := fleetcheck.Fleet{Client: c, ServerURL: f.server.url, CDIDirs: dirs}
		// A release reaches its node a moment after the API answers.
		var violations []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			violations, err = check.Violations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(violations) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(violations) > 0 {
			t.Errorf("fleet invariants broken:\n%s\nsim:\n%s", strings.Join(violations, "\n"), tail(out.String(), 20))
		}
	})
}
