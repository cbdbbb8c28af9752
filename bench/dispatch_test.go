package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// BenchmarkDispatch measures the command round trip, gateway to node and
// back: BENCH_NODES (default 1,000) agents of `bcd sim` hold sessions to one
// `better-compute serve` on SQLite, and commands (diag.nvml, which a fakehw
// node answers at once) go to them through the API at BENCH_RATE per second
// (default 1,000) until BENCH_COMMANDS (default 5,000) are sent, spread over
// the nodes. The round trip is each command's finish time minus its create
// time, both stamped by the store's clock: the queueing, the dispatch on
// the session, the node's journal and run, and the stored result. Run it
// once: -benchtime 1x.
func BenchmarkDispatch(b *testing.B) {
	n := envInt("BENCH_NODES", 1000)
	rate := envInt("BENCH_RATE", 1000)
	total := envInt("BENCH_COMMANDS", 5000)
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
		time.Sleep(5 * time.Second) // the first reports settle
		nodes, err := admin.Nodes.ListNodes(ctx, connect.NewRequest(&apiv1.ListNodesRequest{}))
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, 0, n)
		for _, node := range nodes.Msg.GetNodes() {
			ids = append(ids, node.GetId())
		}

		type sent struct{ node, id string }
		var mu sync.Mutex
		var commands []sent
		var failed int
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / time.Duration(rate))
		sendStart := time.Now()
		for i := range total {
			<-tick.C
			wg.Go(func() {
				node := ids[i%len(ids)]
				res, err := admin.Nodes.ExecCommand(ctx, connect.NewRequest(&apiv1.ExecCommandRequest{NodeId: node, Kind: "diag.nvml"}))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				commands = append(commands, sent{node, res.Msg.GetCommand().GetId()})
			})
		}
		tick.Stop()
		wg.Wait()
		sending := time.Since(sendStart)
		if failed > 0 {
			b.Fatalf("%d of %d commands were not accepted", failed, total)
		}

		var rtt []time.Duration
		for deadline := time.Now().Add(2 * time.Minute); ; {
			rtt = rtt[:0]
			pending := 0
			for _, c := range commands {
				res, err := admin.Nodes.GetCommand(ctx, connect.NewRequest(&apiv1.GetCommandRequest{NodeId: c.node, Id: c.id}))
				if err != nil {
					b.Fatal(err)
				}
				cmd := res.Msg.GetCommand()
				switch cmd.GetState() {
				case apiv1.NodeCommandState_NODE_COMMAND_STATE_SUCCEEDED:
					rtt = append(rtt, cmd.GetFinishTime().AsTime().Sub(cmd.GetCreateTime().AsTime()))
				case apiv1.NodeCommandState_NODE_COMMAND_STATE_QUEUED, apiv1.NodeCommandState_NODE_COMMAND_STATE_SENT:
					pending++
				default:
					b.Fatalf("command %s on %s ended %s: %s", c.id, c.node, cmd.GetState(), cmd.GetError())
				}
			}
			if pending == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d commands still pending 2 minutes after the last was sent", pending, total)
			}
			time.Sleep(time.Second)
		}
		checkFleet(b, s, fleet)
		slices.Sort(rtt)
		record(b, fmt.Sprintf("dispatch-%d", n), map[string]float64{
			"commands/s": float64(total) / sending.Seconds(),
			"p50-ms":     float64(rtt[len(rtt)/2].Microseconds()) / 1000,
			"p99-ms":     float64(rtt[len(rtt)*99/100].Microseconds()) / 1000,
			"max-ms":     float64(rtt[len(rtt)-1].Microseconds()) / 1000,
		})
	}
}
