package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// process is a started better-compute or bcd.
type process struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.cancel()
		<-done
	}
}

// rssKiB reads a process's resident set size.
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// sessions scrapes the gateway's session gauge.
func sessions(apiURL string) int {
	res, err := http.Get(apiURL + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "bettercompute_gateway_sessions "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// startServe runs `better-compute serve` on dir's SQLite store with a fixed
// gateway port, so that a restart keeps the address nodes dial.
func startServe(b *testing.B, dir, gateway string) (*process, string) {
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"serve", "--store", "sqlite:" + filepath.Join(dir, "bc.db"),
		"--listen", "127.0.0.1:0", "--gateway-listen", gateway, "--data-dir", dir, "--log-level", "info"}
	if addr := os.Getenv("BENCH_DEBUG_LISTEN"); addr != "" {
		args = append(args, "--debug-listen", addr) // profile the server while the benchmark runs
	}
	cmd := exec.CommandContext(ctx, binary(b), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	url := ""
	for sc.Scan() {
		if m := servingURL.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	// BENCH_SERVER_LOG keeps the server's log (appended, across restarts),
	// to find what a slow figure waited on.
	var sink io.Writer = io.Discard
	if path := os.Getenv("BENCH_SERVER_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		sink = f
	}
	go func() { _, _ = io.Copy(sink, stderr) }()
	p := &process{cmd: cmd, cancel: cancel}
	if url == "" {
		p.stop()
		b.Fatal("server did not start")
	}
	return p, url
}

// await polls until all n sessions are up and returns how long it took.
func await(b *testing.B, apiURL string, n int, start time.Time, within time.Duration) time.Duration {
	for sessions(apiURL) < n {
		if time.Since(start) > within {
			b.Fatalf("only %d of %d sessions after %s", sessions(apiURL), n, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// benchServer is a `better-compute serve` for a fleet benchmark, with its
// admin client and a join token for BENCH_NODES agents into pool "bench",
// so that their GPUs are schedulable.
type benchServer struct {
	srv        *process
	url        string // the API
	adminToken string
	admin      *client.Client
	joinURL    string // the gateway, as bcd join takes it
	joinToken  string
}

// startBenchServer starts serve on dir's SQLite store with its gateway at
// gateway, and makes the pool and a join token for n agents.
func startBenchServer(b *testing.B, dir, gateway string, n int) *benchServer {
	ctx := context.Background()
	srv, url := startServe(b, dir, gateway)
	token, _ := os.ReadFile(filepath.Join(dir, "admin.token"))
	s := &benchServer{srv: srv, url: url, adminToken: strings.TrimSpace(string(token))}
	s.connect(b)
	if _, err := s.admin.Pools.CreatePool(ctx, connect.NewRequest(&apiv1.CreatePoolRequest{Name: "bench"})); err != nil {
		b.Fatal(err)
	}
	jt, err := s.admin.JoinTokens.CreateJoinToken(ctx, connect.NewRequest(&apiv1.CreateJoinTokenRequest{
		Pool: "bench", MaxUses: int32(n), Ttl: durationpb.New(time.Hour)}))
	if err != nil {
		b.Fatal(err)
	}
	s.joinURL, s.joinToken = jt.Msg.GetGatewayUrl(), jt.Msg.GetSecret()
	return s
}

// restart starts serve again on the same store and ports.
func (s *benchServer) restart(b *testing.B, dir, gateway string) {
	s.srv, s.url = startServe(b, dir, gateway)
	b.Cleanup(s.srv.stop)
	s.connect(b)
}

func (s *benchServer) connect(b *testing.B) {
	admin, err := client.New(s.url, client.Options{Token: s.adminToken})
	if err != nil {
		b.Fatal(err)
	}
	s.admin = admin
}

// gatewayAddr picks a free loopback port for the gateway, kept across
// restarts so that the agents come back to it.
func gatewayAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// BenchmarkSessions holds BENCH_NODES (default 1,000) real agents, run by
// `bcd sim` in its own process, against one `better-compute serve` on
// SQLite, and reports: the time for the first join and session of all of
// them, the server's RSS per idle session (after 15 s of heartbeats), and
// the time for all sessions to return after the server restarts. With
// BENCH_SOAK (a duration such as 30m) it then holds the idle fleet that
// long and reports how much the server's RSS grew, sampled each minute.
// Run it once: -benchtime 1x.
func BenchmarkSessions(b *testing.B) {
	n := envInt("BENCH_NODES", 1000)
	dir := b.TempDir()
	gateway := gatewayAddr(b)

	for range b.N {
		s := startBenchServer(b, dir, gateway, n)
		time.Sleep(time.Second) // let the idle server settle
		rss0 := rssKiB(s.srv.cmd.Process.Pid)

		start := time.Now()
		fleet := startSims(b, n, s.joinURL, s.joinToken, dir)
		joined := await(b, s.url, n, start, 5*time.Minute)

		time.Sleep(15 * time.Second) // several heartbeats: steady state
		rss1 := rssKiB(s.srv.cmd.Process.Pid)
		simRSS := fleet.rssKiB()
		checkFleet(b, s, fleet)
		soak := soakGrowth(b, s, rss1)

		s.srv.stop()
		restart := time.Now()
		s.restart(b, dir, gateway)
		back := await(b, s.url, n, restart, 5*time.Minute)
		checkFleet(b, s, fleet)

		// Cold start: the control plane and the joined agents all stop,
		// then start together; done when every agent is connected and
		// every GPU is free to place on.
		fleet.stop()
		s.srv.stop()
		cold := time.Now()
		s.restart(b, dir, gateway)
		fleet = startSims(b, n, s.joinURL, s.joinToken, dir)
		await(b, s.url, n, cold, 5*time.Minute)
		awaitFree(b, s.admin, "bench", 8*n, cold, 5*time.Minute)
		coldStart := time.Since(cold)
		checkFleet(b, s, fleet)
		revocation := revocations(b, s.admin, s.url, min(100, n))

		record(b, fmt.Sprintf("sessions-%d", n), map[string]float64{
			"cold-start-s":       coldStart.Seconds(),
			"revocation-p50-ms":  float64(revocation[len(revocation)/2].Microseconds()) / 1000,
			"revocation-p99-ms":  float64(revocation[len(revocation)*99/100].Microseconds()) / 1000,
			"first-join-s":       joined.Seconds(),
			"joins/s":            float64(n) / joined.Seconds(),
			"server-KiB/session": float64(rss1-rss0) / float64(n),
			"sim-KiB/agent":      float64(simRSS) / float64(n),
			"restart-return-s":   back.Seconds(),
			"soak-growth-%":      soak,
		})
	}
}

// soakGrowth holds the fleet for BENCH_SOAK, logging the server's RSS each
// minute, and returns its growth over the soak in percent of rss (0 when
// BENCH_SOAK is unset). The caller checks the fleet after it.
func soakGrowth(b *testing.B, s *benchServer, rss int64) float64 {
	d, err := time.ParseDuration(cmp.Or(os.Getenv("BENCH_SOAK"), "0s"))
	if err != nil {
		b.Fatalf("BENCH_SOAK: %v", err)
	}
	if d <= 0 {
		return 0
	}
	pid := s.srv.cmd.Process.Pid
	end := time.Now().Add(d)
	peak := rss
	for time.Now().Before(end) {
		time.Sleep(min(time.Minute, time.Until(end)))
		now := rssKiB(pid)
		peak = max(peak, now)
		b.Logf("soak: %s left, server RSS %d KiB (%+.1f%%)", time.Until(end).Round(time.Second), now, 100*float64(now-rss)/float64(rss))
	}
	last := rssKiB(pid)
	b.Logf("soak: server RSS %d KiB at the start, %d at the end, %d at the peak", rss, last, peak)
	return 100 * float64(last-rss) / float64(rss)
}

// simFleet is the bcd sim processes of a benchmark, each with its own data
// dir and share of the agents.
type simFleet struct {
	procs  []*process
	dirs   []string
	agents []int
}

// simsPerProcess bounds the agents of one bcd sim: each holds about two
// file descriptors, and these machines allow a process 20,000.
const simsPerProcess = 5000

// startSims starts n agents of `bcd sim` under dir, in as many processes as
// simsPerProcess needs, joining with token at gateway. They stop with the
// benchmark.
func startSims(b *testing.B, n int, gateway, token, dir string) *simFleet {
	f := &simFleet{}
	for k := 0; n > 0; k++ {
		share := min(n, simsPerProcess)
		n -= share
		simDir := filepath.Join(dir, fmt.Sprintf("sim-%d", k))
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bcdBinary(b), "sim", "--nodes", strconv.Itoa(share), "--server", gateway,
			"--token", token, "--data-dir", simDir, "--gpus", "8")
		cmd.Stderr = os.Stderr // its warnings and errors: a failing agent says why
		if err := cmd.Start(); err != nil {
			cancel()
			b.Fatal(err)
		}
		p := &process{cmd: cmd, cancel: cancel}
		b.Cleanup(p.stop) // also when a Fatal ends the run early
		f.procs, f.dirs, f.agents = append(f.procs, p), append(f.dirs, simDir), append(f.agents, share)
	}
	return f
}

// revocations revokes k nodes one at a time through the API and returns,
// sorted, how long each took from the call to its session's end (the
// gateway's session_closes_total{reason="revoked"} counting it).
func revocations(b *testing.B, c *client.Client, apiURL string, k int) []time.Duration {
	nodes, err := c.Nodes.ListNodes(context.Background(), connect.NewRequest(&apiv1.ListNodesRequest{}))
	if err != nil {
		b.Fatal(err)
	}
	closed := func() int {
		return int(metric(b, apiURL, `bettercompute_gateway_session_closes_total{reason="revoked"}`))
	}
	before := closed()
	out := make([]time.Duration, 0, k)
	for i, n := range nodes.Msg.GetNodes()[:k] {
		start := time.Now()
		if _, err := c.Nodes.RevokeNode(context.Background(), connect.NewRequest(&apiv1.RevokeNodeRequest{Id: n.GetId()})); err != nil {
			b.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			b.Logf("revoking %s: the API call alone took %s", n.GetId(), d)
		}
		for closed() < before+i+1 {
			if time.Since(start) > 10*time.Second {
				b.Fatalf("node %s's session still open 10 s after its revocation", n.GetId())
			}
			time.Sleep(2 * time.Millisecond)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// metric reads one series of the server's metrics; 0 when absent.
func metric(b *testing.B, apiURL, series string) float64 {
	res, err := http.Get(apiURL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// stop stops every simulator.
func (f *simFleet) stop() {
	for _, p := range f.procs {
		p.stop()
	}
}

// awaitFree polls until pool has want GPUs free to place on.
func awaitFree(b *testing.B, c *client.Client, pool string, want int, start time.Time, within time.Duration) {
	for {
		res, err := c.Pools.GetPool(context.Background(), connect.NewRequest(&apiv1.GetPoolRequest{Name: pool}))
		if err != nil {
			b.Fatal(err)
		}
		free := 0
		for _, n := range res.Msg.GetPool().GetFreeGpus() {
			free += int(n)
		}
		if free >= want {
			return
		}
		if time.Since(start) > within {
			b.Fatalf("only %d of %d GPUs free after %s", free, want, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rssKiB is the simulators' resident set size, together.
func (f *simFleet) rssKiB() int64 {
	var sum int64
	for _, p := range f.procs {
		sum += rssKiB(p.cmd.Process.Pid)
	}
	return sum
}

var bcdOnce struct {
	path string
	err  error
	done bool
}

// bcdBinary builds bcd once per run, beside better-compute.
func bcdBinary(b *testing.B) string {
	if !bcdOnce.done {
		bcdOnce.done = true
		bcdOnce.path = filepath.Join(filepath.Dir(binary(b)), "bcd")
		if out, err := exec.Command("go", "build", "-o", bcdOnce.path, "../cmd/bcd").CombinedOutput(); err != nil {
			bcdOnce.err = fmt.Errorf("build bcd: %v\n%s", err, out)
		}
	}
	if bcdOnce.err != nil {
		b.Fatal(bcdOnce.err)
	}
	return bcdOnce.path
}
