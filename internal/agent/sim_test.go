package agent

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"
)

func TestSim(t *testing.T) {
	t.Parallel()
	gw := newFakeGateway(t, newTestPKI(t))
	dir := t.TempDir()
	const nodes = 5
	run := func() []string {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- RunSim(ctx, SimConfig{Nodes: nodes, Server: gw.url(), Token: gw.pki.token(), DataDir: dir, GPUs: 4, JoinConcurrency: 2})
		}()
		var ids []string
		for range nodes {
			s := gw.session(t)
			if !s.hello.GetFreshJournal() && len(ids) == 0 && gw.joins == 0 {
				t.Error("hello not fresh on the first run")
			}
			ids = append(ids, s.hello.GetNodeId())
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("RunSim: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("RunSim did not return")
		}
		sort.Strings(ids)
		return ids
	}
	first := run()
	second := run()
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Errorf("the second run's nodes %v differ from the first's %v", second, first)
	}
	for i := 1; i < len(first); i++ {
		if first[i] == first[i-1] {
			t.Errorf("two agents share node id %s", first[i])
		}
	}
	gw.mu.Lock()
	joins := gw.joins
	gw.mu.Unlock()
	if joins != nodes {
		t.Errorf("%d joins for %d nodes over two runs", joins, nodes)
	}
	if _, err := os.Stat(dir + "/sim/4/" + journalFile); err != nil {
		t.Errorf("agent 4's journal: %v", err)
	}
}

func TestSimNeedsToken(t *testing.T) {
	t.Parallel()
	err := RunSim(context.Background(), SimConfig{Nodes: 2, DataDir: t.TempDir()})
	if err == nil || err.Error() != "sim: 2 agents have not joined yet: pass --server and --token" {
		t.Errorf("RunSim: %v", err)
	}
}
