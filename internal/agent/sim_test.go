package agent

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
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

// TestSimMemory measures what a simulated agent costs: heap and stacks of
// the whole process (agents and this test's gateway), per agent, once all
// are connected. Set BCD_SIM_MEMORY_AGENTS to run it (a measurement, not a
// check of the machine's speed).
func TestSimMemory(t *testing.T) {
	agents, _ := strconv.Atoi(os.Getenv("BCD_SIM_MEMORY_AGENTS"))
	if agents == 0 {
		t.Skip("set BCD_SIM_MEMORY_AGENTS=N to measure")
	}
	if os.Getenv("BCD_SIM_MEMORY_PROFILE") != "" {
		runtime.MemProfileRate = 1024
	}
	gw := newFakeGateway(t, newTestPKI(t))
	gw.interval = 5 * time.Second
	gw.sessions = make(chan *gwSession, agents)
	dir := t.TempDir()
	// A first run joins (joins allocate much that is garbage afterwards).
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunSim(ctx, SimConfig{Nodes: agents, Server: gw.url(), Token: gw.pki.token(), DataDir: dir, GPUs: 8})
	}()
	for range agents {
		gw.session(t)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the gateway's side of the sessions ends
	t.Logf("before: %s", rss())
	before := memNow()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- RunSim(ctx, SimConfig{Nodes: agents, DataDir: dir, GPUs: 8}) }()
	for range agents {
		gw.session(t)
	}
	time.Sleep(2 * gw.interval) // heartbeats and a report or two
	after := memNow()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use %d KiB, stacks %d KiB; %s", ms.HeapInuse>>10, ms.StackInuse>>10, rss())
	if p := os.Getenv("BCD_SIM_MEMORY_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	t.Logf("%d agents: %.1f KiB heap+stack per agent (agents and the test gateway), %d goroutines", agents, float64(after-before)/float64(agents)/1024, runtime.NumGoroutine())
	cancel()
	<-done
}

func memNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// rss is the process's resident memory by kind, from /proc/self/status.
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "rss unknown"
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Rss") || strings.HasPrefix(l, "VmRSS") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, ", ")
}
