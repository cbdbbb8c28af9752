package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/api"
	"github.com/better-compute/better-compute/internal/events"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/requestid"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// fixture is the API over a real store, with a small world in it:
//
//	platform: admin (in admins; platform-admins policy)
//	acme:     alice (in admins; tenant-admins policy), bob (no groups),
//	          carl (in staff), gone, service accounts ci and gone-sa,
//	          groups admins, staff, doomed-group; policies tenant-admins, spare
//	globex:   carol (in admins), bob; the same policy set
//	doomed:   a tenant to delete
//
// acme and globex each have pools main (offered to the platform) and
// spare-pool, nodes and join tokens.
type fixture struct {
	t      *testing.T
	store  *store.Store
	url    string
	tokens map[string]string // "tenant/name" -> token secret
	// tokenIDs are ids of things made for the tests, by "tenant/purpose".
	tokenIDs map[string]string
	// authority seals join tokens.
	authority *pki.Authority
}

func newFixture(t *testing.T, engine store.Engine) *fixture {
	t.Helper()
	st := storetest.Open(t, engine)
	authority, err := pki.LoadOrCreate(context.Background(), st, filepath.Join(t.TempDir(), "ca.key"), "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	hub := events.NewHub(st, 20*time.Millisecond, 0, nil)
	hubCtx, stopHub := context.WithCancel(context.Background())
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); _ = hub.Run(hubCtx) }()
	t.Cleanup(func() { stopHub(); <-hubDone })
	if err := api.Mount(mux, api.Config{Store: st, Started: time.Now(), Events: hub, Nodes: api.NodeAccess{
		Authority:   authority,
		GatewayURL:  "https://127.0.0.1:7443",
		DownloadURL: "http://127.0.0.1:7400/downloads/bcd-linux-amd64",
		BcdSHA256:   strings.Repeat("0", 64),
	}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(requestid.Middleware(mux))
	t.Cleanup(srv.Close)
	f := &fixture{t: t, store: st, url: srv.URL, tokens: map[string]string{}, tokenIDs: map[string]string{}, authority: authority}

	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tenant := func(name string, platform bool) {
		_, err := st.CreateTenant(ctx, store.Tenant{Name: name, DisplayName: name, Platform: platform})
		must(err)
		_, err = st.CreateGroup(ctx, store.Group{Tenant: name, Name: "admins"})
		must(err)
		body := iam.TenantAdminsPolicy(name)
		if platform {
			body = iam.PlatformAdminsPolicy()
		}
		_, err = st.PutPolicy(ctx, store.Policy{Tenant: name, Name: "tenant-admins", Body: body})
		must(err)
	}
	principal := func(tenant, name string, kind store.PrincipalKind, groups ...string) {
		_, err := st.CreatePrincipal(ctx, store.Principal{Tenant: tenant, Name: name, Kind: kind})
		must(err)
		for _, g := range groups {
			must(st.AddGroupMember(ctx, tenant, g, name))
		}
	}
	tenant("platform", true)
	tenant("acme", false)
	tenant("globex", false)
	tenant("doomed", false)
	principal("platform", "admin", store.PrincipalUser, "admins")
	_, err = st.CreateGroup(ctx, store.Group{Tenant: "acme", Name: "staff"})
	must(err)
	_, err = st.CreateGroup(ctx, store.Group{Tenant: "acme", Name: "doomed-group"})
	must(err)
	principal("acme", "alice", store.PrincipalUser, "admins")
	principal("acme", "bob", store.PrincipalUser)
	principal("acme", "carl", store.PrincipalUser, "staff")
	principal("acme", "gone", store.PrincipalUser)
	principal("acme", "ci", store.PrincipalServiceAccount)
	principal("acme", "gone-sa", store.PrincipalServiceAccount)
	principal("globex", "carol", store.PrincipalUser, "admins")
	principal("globex", "bob", store.PrincipalUser)
	_, err = st.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "spare", Body: iam.TenantAdminsPolicy("acme")})
	must(err)
	for _, p := range []string{"platform/admin", "acme/alice", "acme/bob", "globex/carol"} {
		tn, name, _ := strings.Cut(p, "/")
		f.tokens[p] = f.newToken(tn, name, time.Hour)
	}
	for _, purpose := range []string{"acme/get", "acme/revoke", "globex/get"} {
		tn, _, _ := strings.Cut(purpose, "/")
		owner := map[string]string{"acme": "ci", "globex": "bob"}[tn]
		secret := f.newToken(tn, owner, time.Hour)
		id, _, err := iam.ParseToken(secret)
		must(err)
		f.tokenIDs[purpose] = id
	}
	// Per tenant: pool main (offered to the platform), adopted into and
	// offered by the tests, and pool spare-pool, deleted by the test.
	for _, tn := range []string{"acme", "globex"} {
		for _, name := range []string{"main", "spare-pool"} {
			_, err := st.CreatePool(ctx, store.Pool{Tenant: tn, Name: name})
			must(err)
		}
		must(st.OfferPool(ctx, tn, "main", "platform"))
	}
	// Per tenant: node 1 (inspected, gets commands), node 2 (revoked by the
	// test), node 3 (already revoked, deleted by the test), a command on
	// node 1 and a join token.
	for _, tn := range []string{"acme", "globex"} {
		for i := 1; i <= 3; i++ {
			id := fmt.Sprintf("n-%s-%d", tn, i)
			_, err := st.CreateNode(ctx, store.Node{ID: id, Tenant: tn, Hostname: id, CertSerial: "1", CertPublicKey: []byte{1}, CertNotAfter: time.Now().Add(time.Hour)})
			must(err)
		}
		_, err := st.RevokeNode(ctx, fmt.Sprintf("n-%s-3", tn))
		must(err)
		c, err := st.CreateNodeCommand(ctx, store.NodeCommand{ID: "c-" + tn, NodeID: "n-" + tn + "-1", Kind: "diag.nvml", Deadline: time.Now().Add(time.Hour)})
		must(err)
		f.tokenIDs[tn+"/command"] = c.ID
		id, _, hash := pki.NewJoinToken(authority.ServingPin())
		_, err = st.CreateJoinToken(ctx, store.JoinToken{ID: id, Tenant: tn, SecretHash: hash, MaxUses: 1, ExpiresAt: time.Now().Add(time.Hour)})
		must(err)
		f.tokenIDs[tn+"/join"] = id
	}
	// Per tenant: node gpu with 4 GPUs, ready and adopted into main, and
	// two reservations from it: one inspected and extended, one released.
	for _, tn := range []string{"acme", "globex"} {
		f.gpuNode("n-"+tn+"-gpu", tn, "main", 4)
		for _, purpose := range []string{"reservation", "release"} {
			f.tokenIDs[tn+"/"+purpose] = f.reserve(tn, tn, "main", 1)
		}
	}
	return f
}

// gpuNode makes a ready node of tenant with gpus GPUs, adopted into pool.
func (f *fixture) gpuNode(id, tenant, pool string, gpus int) {
	f.t.Helper()
	ctx := context.Background()
	st := f.store
	_, err := st.CreateNode(ctx, store.Node{ID: id, Tenant: tenant, Hostname: id, CertSerial: "1", CertPublicKey: []byte{1}, CertNotAfter: time.Now().Add(time.Hour)})
	if err == nil {
		_, err = st.BeginSession(ctx, id, "test", "boot-1")
	}
	if err == nil {
		_, err = st.AdoptNode(ctx, id, tenant, pool)
	}
	if err == nil {
		var devs []store.Device
		for i := range gpus {
			devs = append(devs, store.Device{UUID: fmt.Sprintf("GPU-%s-%d", id, i), NodeID: id, Index: i, ModelKey: "h100-sxm", ModelName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30})
		}
		_, err = st.SyncNodeDevices(ctx, id, devs)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// reserve places a one-hour reservation of tenant in poolTenant/pool and
// returns its id.
func (f *fixture) reserve(tenant, poolTenant, pool string, gpus int) string {
	f.t.Helper()
	id := "r-" + strings.ToLower(rand.Text())
	err := f.store.InTx(context.Background(), func(ctx context.Context, q store.Querier) error {
		now, err := q.Now(ctx)
		if err != nil {
			return err
		}
		_, err = q.PlaceReservation(ctx, store.Placement{ID: id, Tenant: tenant, Principal: tenant + "/admin", PoolTenant: poolTenant, Pool: pool, GPUs: gpus, EndsAt: now.Add(time.Hour)})
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// newToken stores a token for tenant/principal and returns its secret.
func (f *fixture) newToken(tenant, principal string, ttl time.Duration) string {
	f.t.Helper()
	id, secret, hash := iam.NewToken()
	now, err := f.store.Now(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.store.CreateToken(context.Background(), store.Token{ID: id, Tenant: tenant, Principal: principal, SecretHash: hash, ExpiresAt: now.Add(ttl)}); err != nil {
		f.t.Fatal(err)
	}
	return secret
}

// result is a call's outcome as the Connect protocol reports it.
type result struct {
	code string // "ok" or the Connect code, e.g. "not_found"
	msg  string
	body map[string]any
}

// call makes one unary call with the Connect JSON protocol, as curl would.
func (f *fixture) call(procedure, token string, req map[string]any) result {
	f.t.Helper()
	b, _ := json.Marshal(req)
	hr, err := http.NewRequest(http.MethodPost, f.url+procedure, bytes.NewReader(b))
	if err != nil {
		f.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		f.t.Fatalf("%s: %v", procedure, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	if res.StatusCode == http.StatusOK {
		return result{code: "ok", body: body}
	}
	code, _ := body["code"].(string)
	msg, _ := body["message"].(string)
	if code == "" {
		code = res.Status
	}
	return result{code: code, msg: msg, body: body}
}

// lastAudit returns the newest audit event.
func (f *fixture) lastAudit() store.AuditEvent {
	f.t.Helper()
	evs, err := f.store.ListAuditEvents(context.Background(), store.AuditFilter{AllTenants: true, Limit: 1})
	if err != nil || len(evs) == 0 {
		f.t.Fatalf("no audit event: %v", err)
	}
	return evs[0]
}
