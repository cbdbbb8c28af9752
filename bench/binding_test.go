package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/fleetcheck"
)

// BenchmarkPlaceToBound measures how long a placement takes to be bound on
// its node: BENCH_NODES (default 1,000) agents of `bcd sim` with 8 GPUs
// each join a pool of one `better-compute serve` on SQLite; reservations of
// one GPU are created at BENCH_RATE per second (default 50) until
// BENCH_PLACEMENTS (default 500) are made. Place-to-bound is each
// reservation's bound time minus its create time, both stamped by the
// store's clock, so the figure is the server's own: the NodeSpec sent, the
// CDI spec written on the node, the signed claim verified and recorded.
// Run it once: -benchtime 1x.
func BenchmarkPlaceToBound(b *testing.B) {
	n := envInt("BENCH_NODES", 1000)
	rate := envInt("BENCH_RATE", 50)
	total := envInt("BENCH_PLACEMENTS", 500)
	dir := b.TempDir()
	gateway := gatewayAddr(b)
	ctx := context.Background()

	for range b.N {
		s := startBenchServer(b, dir, gateway, n)
		b.Cleanup(s.srv.stop)
		admin := s.admin
		start := time.Now()
		fleet := startSims(b, n, s.joinURL, s.joinToken, dir)
		await(b, s.url, n, start, 5*time.Minute)
		awaitFree(b, admin, "bench", 8*n, start, 5*time.Minute)

		// Place at the rate, each call in its own goroutine so that a slow
		// one does not hold back the schedule.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var createErrs int
		var creates []time.Duration // each create call, as the client saw it
		tick := time.NewTicker(time.Second / time.Duration(rate))
		placeStart := time.Now()
		placeStartStore := placeStart.UTC()
		for range total {
			<-tick.C
			wg.Go(func() {
				t0 := time.Now()
				_, err := admin.Reservations.CreateReservation(ctx, connect.NewRequest(&apiv1.CreateReservationRequest{
					Pool: "bench", Gpus: 1, End: &apiv1.CreateReservationRequest_Duration{Duration: durationpb.New(time.Hour)},
				}))
				mu.Lock()
				defer mu.Unlock()
				creates = append(creates, time.Since(t0))
				if err != nil {
					createErrs++
					b.Logf("create: %v", err)
				}
			})
		}
		tick.Stop()
		wg.Wait()
		placed := time.Since(placeStart)
		if createErrs > 0 {
			b.Fatalf("%d of %d creates failed", createErrs, total)
		}

		var lat []time.Duration
		for deadline := time.Now().Add(time.Minute); ; {
			res, err := admin.Reservations.ListReservations(ctx, connect.NewRequest(&apiv1.ListReservationsRequest{}))
			if err != nil {
				b.Fatal(err)
			}
			lat = lat[:0]
			for _, r := range res.Msg.GetReservations() {
				if r.GetState() == apiv1.ReservationState_RESERVATION_STATE_BOUND {
					d := r.GetBoundTime().AsTime().Sub(r.GetCreateTime().AsTime())
					lat = append(lat, d)
					if d > 250*time.Millisecond && os.Getenv("BENCH_VERBOSE") != "" {
						b.Logf("slow: %s on %s placed %s, bound after %s", r.GetId(), r.GetNodeId(),
							r.GetCreateTime().AsTime().Sub(placeStartStore).Round(time.Millisecond), d)
					}
				}
			}
			if len(lat) == total {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d reservations bound a minute after the last placement", len(lat), total)
			}
			time.Sleep(200 * time.Millisecond)
		}
		checkFleet(b, s, fleet)
		slices.Sort(lat)
		slices.Sort(creates)
		record(b, fmt.Sprintf("place-to-bound-%d", n), map[string]float64{
			"create-p50-ms": float64(creates[len(creates)/2].Microseconds()) / 1000,
			"create-p99-ms": float64(creates[len(creates)*99/100].Microseconds()) / 1000,
			"placements/s":  float64(total) / placed.Seconds(),
			"p50-ms":        float64(lat[len(lat)/2].Microseconds()) / 1000,
			"p99-ms":        float64(lat[len(lat)*99/100].Microseconds()) / 1000,
			"max-ms":        float64(lat[len(lat)-1].Microseconds()) / 1000,
		})
	}
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// checkFleet fails the benchmark when the fleet broke an invariant during
// the run (fleetcheck): numbers from a fleet that double-booked a GPU or
// lost a node mean nothing. A release or binding may still be on its way,
// so it waits a little for a consistent fleet.
func checkFleet(b *testing.B, s *benchServer, fleet *simFleet) {
	dirs := map[string]string{}
	for i, dir := range fleet.dirs {
		d, err := fleetcheck.SimCDIDirs(dir, fleet.agents[i])
		if err != nil {
			b.Fatal(err)
		}
		maps.Copy(dirs, d)
	}
	check := fleetcheck.Fleet{Client: s.admin, ServerURL: s.url, CDIDirs: dirs}
	var violations []string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if violations, err = check.Violations(context.Background()); err != nil {
			b.Fatal(err)
		}
		if len(violations) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(violations) > 0 {
		b.Fatalf("fleet invariants broken:\n%s", strings.Join(violations, "\n"))
	}
}
