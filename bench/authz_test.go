// Package bench holds the benchmarks whose results bench/README.md records.
// They drive real processes: the control plane runs as its own
// `better-compute serve`, built from this tree, so its costs are its own.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

var buildOnce struct {
	sync.Once
	path string
	err  error
}

// binary builds better-compute once per benchmark run.
func binary(b *testing.B) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bc-bench-")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.path = filepath.Join(dir, "better-compute")
		out, err := exec.Command("go", "build", "-o", buildOnce.path, "../cmd/better-compute").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		b.Fatal(buildOnce.err)
	}
	return buildOnce.path
}

// cleanups stop the servers the benchmarks started, once all have run:
// setting a server up takes longer than measuring it, and the testing
// package calls each benchmark several times while it sizes b.N.
var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range slices.Backward(cleanups) {
		c()
	}
	os.Exit(code)
}

var servingURL = regexp.MustCompile(`msg=serving url=(\S+)`)

// serve starts `better-compute serve` on the store named by BENCH_STORE
// (default: SQLite in a temp dir) and returns its URL and admin token.
func serve(b *testing.B) (url, token string) {
	dir, err := os.MkdirTemp("", "bc-bench-serve-")
	if err != nil {
		b.Fatal(err)
	}
	cleanups = append(cleanups, func() { os.RemoveAll(dir) })
	storeURL := os.Getenv("BENCH_STORE")
	if storeURL == "" {
		storeURL = "sqlite:" + filepath.Join(dir, "bc.db")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary(b), "serve", "--store", storeURL, "--listen", "127.0.0.1:0", "--data-dir", dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	cleanups = append(cleanups, func() { cancel(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := servingURL.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	if url == "" {
		b.Fatal("server did not start")
	}
	tok, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		b.Fatalf("admin token: %v (is BENCH_STORE a fresh database?)", err)
	}
	return url, strings.TrimSpace(string(tok))
}

// BenchmarkAuthorizedCalls measures authorized API reads through the whole
// server: HTTP/2, token authentication, tenant isolation, a Cedar decision
// among 1,000 policies of the caller's tenant, the store read and the audit
// path. Each op is one GetUser call by a tenant user who is a member of 3
// of 1,000 groups, each granted by its own policy. Run with -cpu to vary
// the number of concurrent callers.
func BenchmarkAuthorizedCalls(b *testing.B) {
	bob := authzFixture(b)
	ctx := context.Background()
	req := &apiv1.GetUserRequest{Name: "bob"}
	if _, err := bob.Users.GetUser(ctx, connect.NewRequest(req)); err != nil {
		b.Fatal(err)
	}
	measure(b, func() error {
		_, err := bob.Users.GetUser(ctx, connect.NewRequest(req))
		return err
	})
}

var authz struct {
	once sync.Once
	bob  *client.Client
}

// authzFixture starts one server with tenant acme: 1,000 groups, each
// granted one action by its own policy, and bob, a member of three of them.
// It returns a client acting as bob.
func authzFixture(b *testing.B) *client.Client {
	authz.once.Do(func() { authz.bob = setUpAuthz(b) })
	if authz.bob == nil {
		b.Fatal("set-up failed")
	}
	return authz.bob
}

func setUpAuthz(b *testing.B) *client.Client {
	url, adminToken := serve(b)
	ctx := context.Background()
	admin, err := client.New(url, client.Options{Token: adminToken})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Tenants.CreateTenant(ctx, connect.NewRequest(&apiv1.CreateTenantRequest{Name: "acme"})); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Users.CreateUser(ctx, connect.NewRequest(&apiv1.CreateUserRequest{Tenant: "acme", Name: "bob"})); err != nil {
		b.Fatal(err)
	}
	actions := []string{"compute:users:get", "compute:users:list", "compute:groups:get", "compute:tokens:list"}
	for i := range 1000 {
		g := fmt.Sprint("g", i)
		if _, err := admin.Groups.CreateGroup(ctx, connect.NewRequest(&apiv1.CreateGroupRequest{Tenant: "acme", Name: g})); err != nil {
			b.Fatal(err)
		}
		body := fmt.Sprintf(`permit(principal in Group::"acme/%s", action == Action::%q, resource in Tenant::"acme");`, g, actions[i%len(actions)])
		if _, err := admin.Policies.PutPolicy(ctx, connect.NewRequest(&apiv1.PutPolicyRequest{Tenant: "acme", Name: "p" + fmt.Sprint(i), Body: body})); err != nil {
			b.Fatal(err)
		}
	}
	for _, g := range []string{"g8", "g500", "g996"} { // g8 and g996 grant users:get
		if _, err := admin.Groups.AddGroupMember(ctx, connect.NewRequest(&apiv1.AddGroupMemberRequest{Tenant: "acme", Group: g, Member: "bob"})); err != nil {
			b.Fatal(err)
		}
	}
	tok, err := admin.Tokens.CreateToken(ctx, connect.NewRequest(&apiv1.CreateTokenRequest{Tenant: "acme", Principal: "bob", Ttl: durationpb.New(time.Hour)}))
	if err != nil {
		b.Fatal(err)
	}
	bob, err := client.New(url, client.Options{Token: tok.Msg.GetSecret()})
	if err != nil {
		b.Fatal(err)
	}
	return bob
}

// measure runs call in parallel (4 callers per -cpu: enough to keep a 2-core
// server busy) and reports throughput and latency percentiles.
func measure(b *testing.B, call func() error) {
	var mu sync.Mutex
	var all []time.Duration
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if err := call(); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		all = append(all, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
	}
}
