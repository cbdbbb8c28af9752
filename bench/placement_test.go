package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// Unlike the other benchmarks here, BenchmarkPlacement drives the store
// directly, in the benchmark process: what it measures is the placement
// transaction, not the API around it.

// placementFleet is the pool a placement benchmark draws from: nodes ready
// nodes adopted into one pool, with gpus H100s each.
type placementFleet struct{ nodes, gpus int }

// placementFleets is BENCH_PLACEMENT_FLEETS ("1000x8,10000x10" by
// default): the fleets to seed, nodes x GPUs per node.
func placementFleets(b *testing.B) []placementFleet {
	spec := os.Getenv("BENCH_PLACEMENT_FLEETS")
	if spec == "" {
		spec = "1000x8,10000x10"
	}
	var out []placementFleet
	for _, f := range strings.Split(spec, ",") {
		n, g, ok := strings.Cut(strings.TrimSpace(f), "x")
		nodes, err1 := strconv.Atoi(n)
		gpus, err2 := strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil || nodes < 1 || gpus < 1 {
			b.Fatalf("BENCH_PLACEMENT_FLEETS: %q is not NODESxGPUS (e.g. 1000x8)", f)
		}
		out = append(out, placementFleet{nodes, gpus})
	}
	return out
}

// envInts is the comma-separated positive integers in env, or def.
func envInts(b *testing.B, env string, def []int) []int {
	spec := os.Getenv(env)
	if spec == "" {
		return def
	}
	var out []int
	for _, v := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			b.Fatalf("%s: %q is not a positive integer", env, v)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkPlacement measures PlaceReservation on both engines against one
// pool of ready H100 nodes: for each fleet of BENCH_PLACEMENT_FLEETS
// (default 1,000 nodes x 8 GPUs and 10,000 x 10), each request size of
// BENCH_PLACEMENT_ASKS (default 1 GPU, and 8 GPUs on one node) and each
// number of concurrent placers of BENCH_PLACERS (default 1 and 8), and each
// transaction mode of BENCH_PLACEMENT_TX (default both): "own" runs each
// placement in a transaction of its own (InTx), "shared" as the API runs
// it, in a transaction shared with the placements made at the same time
// (InSharedTx); either runs again on ErrConflict. Placements run in rounds that fill at most 90% of the
// pool; each round's reservations are released off the clock before the
// next, so the pool fills up as in use but never runs out. It reports
// placements/s (wall clock of the placement rounds, all placers together)
// and the p50 and p99 latency of the placement transaction; conflicts/op
// counts the ErrConflict retries the
// caller made, tx-retries/op the transactions InTx ran again (PostgreSQL
// serialization failures, SQLITE_BUSY), counted from the store's log.
//
// The pool is seeded once per engine and fleet, a thousand nodes per
// transaction, and its seed time logged. The PostgreSQL half needs
// BETTER_COMPUTE_TEST_POSTGRES_URL, as the tests do (storetest decides, and
// BETTER_COMPUTE_REQUIRE_POSTGRES=1 makes its absence a failure). Run it
// with -benchtime 5s.
func BenchmarkPlacement(b *testing.B) {
	fleets := placementFleets(b)
	asks := envInts(b, "BENCH_PLACEMENT_ASKS", []int{1, 8})
	placers := envInts(b, "BENCH_PLACERS", []int{1, 8})
	modes := strings.Split(cmp.Or(os.Getenv("BENCH_PLACEMENT_TX"), "own,shared"), ",")
	for _, engine := range []store.Engine{store.EngineSQLite, store.EnginePostgres} {
		b.Run(string(engine), func(b *testing.B) {
			for _, f := range fleets {
				// A parent benchmark runs once: the store and its seed
				// outlive every sub-benchmark below, and go with it.
				b.Run(fmt.Sprintf("nodes=%dx%d", f.nodes, f.gpus), func(b *testing.B) {
					s, retries, seeded := seedPlacementPool(b, engine, f)
					for _, ask := range asks {
						if ask > f.gpus {
							continue // cannot be placed on one node
						}
						b.Run(fmt.Sprintf("ask=%d", ask), func(b *testing.B) {
							for _, p := range placers {
								for _, mode := range modes {
									if p == 1 && mode == "shared" {
										continue // alone, a shared transaction is its own
									}
									b.Run(fmt.Sprintf("placers=%d/tx=%s", p, mode), func(b *testing.B) {
										// Logged here, once: a parent
										// benchmark's log is not shown.
										if seeded != "" {
											b.Logf("%s", seeded)
											seeded = ""
										}
										benchPlacements(b, s, retries, ask, p, f.nodes*(f.gpus/ask), mode == "shared")
									})
								}
							}
						})
					}
				})
			}
		})
	}
}

// seedPlacementPool opens a fresh store on engine and seeds tenant acme,
// pool acme/gpu and f.nodes ready nodes adopted into it with f.gpus H100s
// each, a thousand nodes per transaction. It returns the store, the count
// of transactions InTx retried on it, and a line that says how long seeding
// took.
func seedPlacementPool(b *testing.B, engine store.Engine, f placementFleet) (*store.Store, *atomic.Int64, string) {
	ctx := context.Background()
	retries := new(atomic.Int64)
	// Enough attempts for a storm of placements that lose races to each
	// other; the store logs each retry, which is how they are counted.
	s, err := store.Open(ctx, storetest.URL(b, engine), store.Options{
		MaxTxAttempts: 50, Logger: slog.New(retryCounter{retries}),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })

	start := time.Now()
	if _, err := s.CreateTenant(ctx, store.Tenant{Name: "acme"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.CreatePool(ctx, store.Pool{Tenant: "acme", Name: "gpu"}); err != nil {
		b.Fatal(err)
	}
	notAfter := time.Now().Add(24 * time.Hour).Truncate(time.Microsecond)
	const perTx = 1000
	for first := 0; first < f.nodes; first += perTx {
		err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
			for i := first; i < min(first+perTx, f.nodes); i++ {
				id := fmt.Sprintf("n%05d", i)
				if _, err := q.CreateNode(ctx, store.Node{
					ID: id, Tenant: "acme", Hostname: id, MachineID: id, CertSerial: id,
					CertPublicKey: []byte(id), CertNotAfter: notAfter,
				}); err != nil {
					return err
				}
				if _, err := q.BeginSession(ctx, id, "bench", "boot"); err != nil {
					return err
				}
				if _, err := q.AdoptNode(ctx, id, "acme", "gpu"); err != nil {
					return err
				}
				devices := make([]store.Device, f.gpus)
				for j := range devices {
					devices[j] = store.Device{
						UUID: fmt.Sprintf("GPU-%s-%02d", id, j), Index: j, ModelKey: "h100-sxm",
						ModelName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
					}
				}
				if _, err := q.SyncNodeDevices(ctx, id, devices); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatalf("seed nodes %d..: %v", first, err)
		}
	}
	free, err := s.FreeDevices(ctx, "acme", "gpu", "")
	if err != nil {
		b.Fatal(err)
	}
	if free["h100-sxm"] != f.nodes*f.gpus {
		b.Fatalf("seeded %v free GPUs, want %d", free, f.nodes*f.gpus)
	}
	return s, retries, fmt.Sprintf("%s: seeded %d nodes x %d GPUs (%d GPUs) in %s", engine, f.nodes, f.gpus, f.nodes*f.gpus,
		time.Since(start).Round(time.Millisecond))
}

// placementSeq names reservations uniquely across every run of a store.
var placementSeq atomic.Int64

// benchPlacements runs b.N placements of ask GPUs (on one node when more
// than one) by placers concurrent placers, and times them alone: they run
// in rounds that fit in the pool (slots placements of ask GPUs at most),
// and the reservations of a round are released between rounds, off the
// clock. retries counts the transactions InTx ran again. shared runs each
// placement with InSharedTx instead of InTx.
func benchPlacements(b *testing.B, s *store.Store, retries *atomic.Int64, ask, placers, slots int, shared bool) {
	inTx := s.InTx
	if shared {
		inTx = s.InSharedTx
	}
	ctx := context.Background()
	now, err := s.Now(ctx)
	if err != nil {
		b.Fatal(err)
	}
	endsAt := now.Add(24 * time.Hour)
	perRound := max(1, slots*9/10) // leave some room: fewest-free-first never has to scrape
	latencies := make([][]time.Duration, placers)
	var conflicts atomic.Int64
	var elapsed time.Duration
	retried := retries.Load()
	b.ResetTimer()
	for done := 0; done < b.N; {
		round := min(perRound, b.N-done)
		ids := make([]string, round)
		var next atomic.Int64
		var failed atomic.Bool
		var wg sync.WaitGroup
		start := time.Now()
		for w := range placers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(round) && !failed.Load(); i = next.Add(1) - 1 {
					p := store.Placement{
						ID:     fmt.Sprintf("r%08d", placementSeq.Add(1)),
						Tenant: "acme", Principal: "bench", PoolTenant: "acme", Pool: "gpu",
						GPUs: ask, ModelKey: "h100-sxm", SameNode: ask > 1, EndsAt: endsAt,
					}
					t0 := time.Now()
					var err error
					for {
						err = inTx(ctx, func(ctx context.Context, q store.Querier) error {
							_, err := q.PlaceReservation(ctx, p)
							return err
						})
						if !errors.Is(err, store.ErrConflict) {
							break
						}
						conflicts.Add(1)
					}
					latencies[w] = append(latencies[w], time.Since(t0))
					if err != nil {
						failed.Store(true)
						b.Error(err)
						return
					}
					ids[i] = p.ID
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		if failed.Load() {
			return
		}
		done += round
		b.StopTimer()
		releaseAll(b, s, ids, placers)
		b.StartTimer()
	}
	b.StopTimer()

	all := slices.Concat(latencies...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()) / 1000
	}
	record(b, resultName(b), map[string]float64{
		"placements/s":  float64(b.N) / elapsed.Seconds(),
		"p50-ms":        pct(0.50),
		"p99-ms":        pct(0.99),
		"conflicts/op":  float64(conflicts.Load()) / float64(b.N),
		"tx-retries/op": float64(retries.Load()-retried) / float64(b.N),
	})
}

// releaseAll releases the reservations ids with workers concurrent callers.
func releaseAll(b *testing.B, s *store.Store, ids []string, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ids)); i = next.Add(1) - 1 {
				if _, err := s.ReleaseReservation(context.Background(), ids[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// retryCounter is a slog.Handler that counts the store's "retrying
// transaction" records (serialization failures on PostgreSQL, SQLITE_BUSY)
// and drops everything.
type retryCounter struct{ n *atomic.Int64 }

func (h retryCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h retryCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "retrying transaction") {
		h.n.Add(1)
	}
	return nil
}

func (h retryCounter) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h retryCounter) WithGroup(string) slog.Handler { return h }
