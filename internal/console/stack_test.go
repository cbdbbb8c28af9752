package console_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/better-compute/better-compute/client"
	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/controlplane"
	"github.com/better-compute/better-compute/internal/devstack"
)

// stack is what `better-compute dev` runs, in this test process: the
// control plane with the console, and simulated nodes (real agents on fake
// hardware) in the default pool, which is offered to the demo tenant.
type stack struct {
	url     string
	gateway string // where nodes join and connect
	admin   string // the platform admin's token
	api     *client.Client
	// nodes and gpus are how many simulated nodes run, and GPUs each.
	nodes, gpus int
}

// maxDemoGPUs is the demo tenant's policy ceiling on one reservation.
const maxDemoGPUs = 4

// startStack runs a dev stack of 2 nodes with 4 GPUs each and waits until
// every node is ready and its GPUs are free to reserve.
func startStack(t *testing.T) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan controlplane.Ready, 1)
	done := make(chan error, 1)
	st := &stack{nodes: 2, gpus: 4}
	go func() {
		done <- devstack.Run(ctx, devstack.Config{
			DataDir: t.TempDir(), Listen: "127.0.0.1:0", GatewayListen: "127.0.0.1:0",
			Nodes: st.nodes, GPUs: st.gpus,
			OnReady: func(r controlplane.Ready) error { readyc <- r; return nil },
		})
	}()
	var r controlplane.Ready
	select {
	case r = <-readyc:
	case err := <-done:
		cancel()
		t.Fatalf("the dev stack did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the dev stack did not start within 60s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the dev stack did not stop within 20s")
		}
	})
	b, err := os.ReadFile(r.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	st.url, st.gateway, st.admin = r.URL, r.GatewayURL, strings.TrimSpace(string(b))
	st.api = newClient(t, st.url, st.admin)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ready, free := 0, int32(0)
		nodes, err := st.api.Nodes.ListNodes(ctx, connect.NewRequest(&apiv1.ListNodesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Msg.GetNodes() {
			if n.GetState() == apiv1.NodeState_NODE_STATE_READY {
				ready++
			}
		}
		pool, err := st.api.Pools.GetPool(ctx, connect.NewRequest(&apiv1.GetPoolRequest{Name: devstack.DefaultPool}))
		if err == nil {
			for _, n := range pool.Msg.GetPool().GetFreeGpus() {
				free += n
			}
		}
		if ready == st.nodes && int(free) == st.nodes*st.gpus {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s, %d of %d nodes ready and %d of %d GPUs free", ready, st.nodes, free, st.nodes*st.gpus)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return st
}

func newClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tenantUser makes user in tenant (creating the tenant, offering it the
// default pool, and letting its admins reserve up to maxDemoGPUs GPUs from
// offered pools, once), and returns a token for the user.
func (st *stack) tenantUser(t *testing.T, tenant, user string) string {
	t.Helper()
	ctx := context.Background()
	ok := func(err error) {
		t.Helper()
		if err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Fatal(err)
		}
	}
	_, err := st.api.Tenants.CreateTenant(ctx, connect.NewRequest(&apiv1.CreateTenantRequest{Name: tenant}))
	ok(err)
	_, err = st.api.Pools.OfferPool(ctx, connect.NewRequest(&apiv1.OfferPoolRequest{Name: devstack.DefaultPool, ToTenant: tenant}))
	ok(err)
	_, err = st.api.Policies.PutPolicy(ctx, connect.NewRequest(&apiv1.PutPolicyRequest{Tenant: tenant, Name: "pool-users", Body: `
permit (
  principal in Group::"` + tenant + `/admins",
  action == Action::"compute:reservations:create",
  resource
)
when { resource.offeredTo.contains(principal.tenant) };`}))
	ok(err)
	_, err = st.api.Policies.PutPolicy(ctx, connect.NewRequest(&apiv1.PutPolicyRequest{Tenant: tenant, Name: "reserve-bounded", Body: `
forbid (
  principal,
  action == Action::"compute:reservations:create",
  resource
)
when { context.gpus > 4 };`}))
	ok(err)
	_, err = st.api.Users.CreateUser(ctx, connect.NewRequest(&apiv1.CreateUserRequest{Tenant: tenant, Name: user}))
	ok(err)
	_, err = st.api.Groups.AddGroupMember(ctx, connect.NewRequest(&apiv1.AddGroupMemberRequest{Tenant: tenant, Group: "admins", Member: user}))
	ok(err)
	tok, err := st.api.Tokens.CreateToken(ctx, connect.NewRequest(&apiv1.CreateTokenRequest{Tenant: tenant, Principal: user, Ttl: durationpb.New(time.Hour)}))
	if err != nil {
		t.Fatal(err)
	}
	return tok.Msg.GetSecret()
}

// httpClient is a cookie-keeping client that does not follow redirects,
// so that tests see where each answer sends the browser.
func httpClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func connectReq() *connect.Request[apiv1.ListReservationsRequest] {
	return connect.NewRequest(&apiv1.ListReservationsRequest{})
}
