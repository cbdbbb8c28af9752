package bench

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// BenchmarkReconcile measures what each gateway asks of the store twice a
// second to act on other processes' changes (gateway.reconcile): the sync
// states of every node it holds a session for, and the nodes with commands
// to send. Nodes: BENCH_NODES (10,000), on both engines.
func BenchmarkReconcile(b *testing.B) {
	nodes := 10000
	if v := os.Getenv("BENCH_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_NODES=%q: give a positive count", v)
		}
		nodes = n
	}
	for _, engine := range []store.Engine{store.EngineSQLite, store.EnginePostgres} {
		b.Run(fmt.Sprintf("%s/nodes=%d", engine, nodes), func(b *testing.B) {
			s, _, seeded := seedPlacementPool(b, engine, placementFleet{nodes: nodes, gpus: 1})
			b.Log(seeded)
			ids := make([]string, nodes)
			for i := range ids {
				ids[i] = fmt.Sprintf("n%05d", i)
			}
			ctx := b.Context()
			var took []time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				states, err := s.NodeSyncStates(ctx, ids)
				if err != nil || len(states) != nodes {
					b.Fatalf("NodeSyncStates: %d states, %v", len(states), err)
				}
				if _, err := s.NodesWithPendingCommands(ctx); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.SortFunc(took, func(x, y time.Duration) int { return cmp.Compare(x, y) })
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			p50, p99 := took[len(took)/2], took[len(took)*99/100]
			record(b, fmt.Sprintf("reconcile-%s-nodes-%d", engine, nodes), map[string]float64{
				"p50-ms": ms(p50), "p99-ms": ms(p99),
				// Twice a second: the share of one core the sweep takes.
				"core-%": 100 * 2 * p50.Seconds(),
			})
		})
	}
}
