package gateway

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/agent/v1/agentv1connect"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// joinBundle is what a join test drives and inspects: a JoinService over
// HTTP on a real store.
type joinBundle struct {
	st        *store.Store
	authority *pki.Authority
	join      agentv1connect.JoinServiceClient
	node      agentv1connect.NodeServiceClient
	reg       *prometheus.Registry
}

const joinTestTenant = "acme"

func setupJoin(t *testing.T, engine store.Engine) *joinBundle {
	t.Helper()
	ctx := t.Context()
	st := storetest.Open(t, engine)
	if _, err := st.CreateTenant(ctx, store.Tenant{Name: joinTestTenant, DisplayName: "Acme"}); err != nil {
		t.Fatal(err)
	}
	authority, err := pki.LoadOrCreate(ctx, st, filepath.Join(t.TempDir(), "ca.key"), "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := NewJoinService(JoinConfig{
		Store: st, Authority: authority, GatewayAddresses: []string{"gw.example:7443"}, Metrics: reg,
	})
	mux := http.NewServeMux()
	for path, h := range svc.Handlers() {
		mux.Handle(path, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &joinBundle{
		st: st, authority: authority, reg: reg,
		join: agentv1connect.NewJoinServiceClient(srv.Client(), srv.URL),
		node: agentv1connect.NewNodeServiceClient(srv.Client(), srv.URL),
	}
}

// createToken stores a join token sealed to this deployment and returns it.
func (b *joinBundle) createToken(t *testing.T, maxUses int, ttl time.Duration) (id, token string) {
	t.Helper()
	id, token, hash := pki.NewJoinToken(b.authority.ServingPin())
	now, err := b.st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.CreateJoinToken(t.Context(), store.JoinToken{
		ID: id, Tenant: joinTestTenant, Pool: "gpu-a", SecretHash: hash, MaxUses: maxUses,
		Labels: map[string]string{"rack": "r1"}, Description: "test", ExpiresAt: now.Add(ttl),
	}); err != nil {
		t.Fatal(err)
	}
	return id, token
}

// joinRequest asks to join with a fresh P-256 key, returned with it.
func joinRequest(t *testing.T, token string) (*agentv1.JoinRequest, *ecdsa.PrivateKey) {
	t.Helper()
	key := newJoinKey(t)
	return &agentv1.JoinRequest{
		Token:  token,
		CsrDer: joinCSR(t, key),
		Facts:  &agentv1.HostFacts{Hostname: "gpu-01", MachineId: "0123abcd", BcdVersion: "v0.1.0"},
	}, key
}

func newJoinKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func joinCSR(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "ignored"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// wantJoinRefused checks err's code and that its message contains want.
func wantJoinRefused(t *testing.T, err error, code connect.Code, want string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code || !strings.Contains(ce.Message(), want) || strings.Contains(ce.Message(), "\n") {
		t.Fatalf("got %v, want %v containing %q", err, code, want)
	}
}

// auditEvents returns every audit event, oldest first.
func (b *joinBundle) auditEvents(t *testing.T) []store.AuditEvent {
	t.Helper()
	events, err := b.st.ListAuditEvents(t.Context(), store.AuditFilter{AllTenants: true, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(events)-1; i < j; i, j = i+1, j-1 {
		events[i], events[j] = events[j], events[i]
	}
	return events
}

// refusals reads a refusal counter by reason.
func (b *joinBundle) refusals(t *testing.T, name string) map[string]float64 {
	t.Helper()
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestJoin(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupJoin(t, engine)
		ctx := t.Context()
		tokenID, token := b.createToken(t, 2, time.Hour)
		req, key := joinRequest(t, token)
		before := time.Now()

		res, err := b.join.Join(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		m := res.Msg
		if !regexp.MustCompile(`^n-[a-z2-7]{16}$`).MatchString(m.GetNodeId()) {
			t.Fatalf("node id %q", m.GetNodeId())
		}
		cert, err := x509.ParseCertificate(m.GetCertificateDer())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: b.authority.NodeCAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("node certificate does not verify: %v", err)
		}
		if id, err := b.authority.NodeID(cert); err != nil || id != m.GetNodeId() || !key.PublicKey.Equal(cert.PublicKey) {
			t.Fatalf("certificate names %q (%v), want %q and the CSR's key", id, err, m.GetNodeId())
		}
		if d := m.GetNotAfter().AsTime().Sub(before.Add(DefaultCertTTL)); d < -time.Second || d > 5*time.Second || !m.GetNotAfter().AsTime().Equal(cert.NotAfter) {
			t.Fatalf("not_after %v, want about %v from now", m.GetNotAfter().AsTime(), DefaultCertTTL)
		}
		bundle := b.authority.TrustBundleDER()
		if len(m.GetCaCertificatesDer()) != len(bundle) || !bytes.Equal(m.GetCaCertificatesDer()[0], bundle[0]) {
			t.Fatal("CA bundle is not the authority's trust bundle")
		}
		if len(m.GetGatewayAddresses()) != 1 || m.GetGatewayAddresses()[0] != "gw.example:7443" {
			t.Fatalf("gateway addresses %v", m.GetGatewayAddresses())
		}

		n, err := b.st.GetNode(ctx, m.GetNodeId())
		if err != nil {
			t.Fatal(err)
		}
		if n.Tenant != joinTestTenant || n.Pool != "gpu-a" || n.Labels["rack"] != "r1" || n.Hostname != "gpu-01" ||
			n.MachineID != "0123abcd" || n.State != store.NodeJoined || !bytes.Equal(n.CertPublicKey, cert.RawSubjectPublicKeyInfo) ||
			n.CertSerial != cert.SerialNumber.Text(16) || !n.CertNotAfter.Equal(cert.NotAfter.UTC()) {
			t.Fatalf("stored node %+v does not match the join", n)
		}
		tok, err := b.st.GetJoinToken(ctx, tokenID)
		if err != nil || tok.Uses != 1 {
			t.Fatalf("token uses %d (%v), want 1", tok.Uses, err)
		}
		events := b.auditEvents(t)
		want := store.AuditEvent{
			Tenant: joinTestTenant, Action: "compute:nodes:join", Resource: `Node::"acme/` + n.ID + `"`,
			Decision: "allow", Reason: "joined with join token " + tokenID,
		}
		if len(events) != 1 {
			t.Fatalf("audit log has %d events, want 1", len(events))
		}
		e := events[0]
		if e.Tenant != want.Tenant || e.Principal != "" || e.Action != want.Action || e.Resource != want.Resource || e.Decision != want.Decision || e.Reason != want.Reason || e.RequestID == "" {
			t.Fatalf("audit event %+v, want %+v", e, want)
		}
	})
}

func TestJoinRefusals(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupJoin(t, engine)
		ctx := t.Context()
		rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}

		// Tokens in each state; the store holds all of them, so that a
		// refusal that spent a use would show.
		_, goodToken := b.createToken(t, 5, time.Hour)
		expiredID, expired := b.createToken(t, 1, -time.Minute)
		revokedID, revoked := b.createToken(t, 1, time.Hour)
		if _, err := b.st.RevokeJoinToken(ctx, revokedID); err != nil {
			t.Fatal(err)
		}
		usedID, used := b.createToken(t, 1, time.Hour)
		if _, err := b.st.SpendJoinToken(ctx, usedID); err != nil {
			t.Fatal(err)
		}
		_, unknown, _ := pki.NewJoinToken(b.authority.ServingPin())
		wrongSecretID, _ := b.createToken(t, 1, time.Hour)
		_, other, _ := pki.NewJoinToken(b.authority.ServingPin())
		wrongSecret := strings.Replace(other, other[4:20], wrongSecretID, 1)
		otherDeployment := strings.Replace(goodToken, strings.TrimPrefix(b.authority.ServingPin(), "sha256:"), "ab_cd-ef_gh-ij_kl-mn_op-qr_st-uv_wx-yzAB_CE", 1)

		cases := []struct {
			name, token string
			edit        func(*agentv1.JoinRequest)
			code        connect.Code
			reason      string
			want        string
		}{
			{"malformed", "bcj_nope", nil, connect.CodeInvalidArgument, "malformed_token", "malformed join token"},
			{"another deployment's", otherDeployment, nil, connect.CodeFailedPrecondition, "foreign_pin", "this join token was made by another deployment"},
			{"unknown", unknown, nil, connect.CodeUnauthenticated, "unknown_token", "unknown join token"},
			{"wrong secret", wrongSecret, nil, connect.CodeUnauthenticated, "wrong_secret", "unknown join token " + wrongSecretID},
			{"expired", expired, nil, connect.CodePermissionDenied, "expired", "join token " + expiredID + " expired at "},
			{"revoked", revoked, nil, connect.CodePermissionDenied, "revoked", "join token " + revokedID + " was revoked"},
			{"used up", used, nil, connect.CodePermissionDenied, "used_up", "join token " + usedID + " has no uses left (1 of 1 used)"},
			{"RSA key", goodToken, func(r *agentv1.JoinRequest) { r.CsrDer = joinCSR(t, rsaKey) }, connect.CodeInvalidArgument, "bad_csr", "RSA key; nodes need an ECDSA P-256 key"},
			{"P-384 key", goodToken, func(r *agentv1.JoinRequest) { r.CsrDer = joinCSR(t, p384) }, connect.CodeInvalidArgument, "bad_csr", "ECDSA P-384 key"},
			{"garbage CSR", goodToken, func(r *agentv1.JoinRequest) { r.CsrDer = []byte("garbage") }, connect.CodeInvalidArgument, "bad_csr", "not a DER PKCS#10 request"},
			{"long hostname", goodToken, func(r *agentv1.JoinRequest) { r.Facts.Hostname = strings.Repeat("h", 300) }, connect.CodeInvalidArgument, "bad_facts", "facts.hostname is 300 bytes long"},
			{"hostname with a NUL", goodToken, func(r *agentv1.JoinRequest) { r.Facts.Hostname = "gpu-01\x00" }, connect.CodeInvalidArgument, "bad_facts", "facts.hostname holds a control character"},
		}
		t.Run("refused", func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					req, _ := joinRequest(t, tc.token)
					if tc.edit != nil {
						tc.edit(req)
					}
					_, err := b.join.Join(ctx, connect.NewRequest(req))
					wantJoinRefused(t, err, tc.code, tc.want)
				})
			}
		})

		// Nothing but one deny event per refusal was written: no node, no use spent.
		if nodes, err := b.st.ListNodes(ctx, ""); err != nil || len(nodes) != 0 {
			t.Fatalf("refused joins stored nodes: %v %v", nodes, err)
		}
		tokens, err := b.st.ListJoinTokens(ctx, joinTestTenant)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range tokens {
			if want := map[string]int{usedID: 1}[tok.ID]; tok.Uses != want {
				t.Errorf("token %s has %d uses, want %d", tok.ID, tok.Uses, want)
			}
		}
		events := b.auditEvents(t)
		if len(events) != len(cases) {
			t.Fatalf("audit log has %d events, want %d (one per refusal)", len(events), len(cases))
		}
		for _, tc := range cases {
			found := false
			for _, e := range events {
				found = found || strings.Contains(e.Reason, tc.want)
			}
			if !found {
				t.Errorf("no audit event says %q", tc.want)
			}
		}
		for _, e := range events {
			if e.Decision != "deny" || e.Action != "compute:nodes:join" || e.Principal != "" {
				t.Errorf("audit event %+v, want an anonymous join denial", e)
			}
			if strings.Contains(e.Reason, usedID) && (e.Tenant != joinTestTenant || e.Resource != `JoinToken::"acme/`+usedID+`"`) {
				t.Errorf("used-up denial recorded as %+v, want it under the token's tenant and entity", e)
			}
		}
		got := b.refusals(t, "bettercompute_join_refusals_total")
		want := map[string]float64{"malformed_token": 1, "foreign_pin": 1, "unknown_token": 1, "wrong_secret": 1, "expired": 1, "revoked": 1, "used_up": 1, "bad_csr": 3, "bad_facts": 2}
		for reason, n := range want {
			if got[reason] != n {
				t.Errorf("bettercompute_join_refusals_total{reason=%q} = %v, want %v (all: %v)", reason, got[reason], n, got)
			}
		}
	})
}

// Racing joins never spend more uses than a token has: of N racers for a
// token with U uses, exactly U join and the rest are told it is used up.
func TestJoinRace(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		for _, tc := range []struct{ uses, racers int }{{1, 2}, {3, 8}} {
			b := setupJoin(t, engine)
			ctx := t.Context()
			tokenID, token := b.createToken(t, tc.uses, time.Hour)
			errs := make([]error, tc.racers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range errs {
				req, _ := joinRequest(t, token)
				wg.Go(func() {
					<-start
					_, errs[i] = b.join.Join(ctx, connect.NewRequest(req))
				})
			}
			close(start)
			wg.Wait()
			joined := 0
			for _, err := range errs {
				if err == nil {
					joined++
					continue
				}
				wantJoinRefused(t, err, connect.CodePermissionDenied, "join token "+tokenID+" has no uses left")
			}
			nodes, err := b.st.ListNodes(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if joined != tc.uses || len(nodes) != tc.uses {
				t.Fatalf("%d racers for %d uses: %d joined, %d nodes stored", tc.racers, tc.uses, joined, len(nodes))
			}
		}
	})
}

// renewRequest asks for a certificate for next, signed by signer (nil:
// unsigned).
func renewRequest(t *testing.T, nodeID string, next, signer *ecdsa.PrivateKey) *agentv1.RenewRequest {
	t.Helper()
	req := &agentv1.RenewRequest{NodeId: nodeID, CsrDer: joinCSR(t, next)}
	if signer != nil {
		sum := sha256.Sum256(req.CsrDer)
		sig, err := ecdsa.SignASN1(rand.Reader, signer, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		req.Signature = sig
	}
	return req
}

func TestJoinRenew(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		b := setupJoin(t, engine)
		ctx := t.Context()
		_, token := b.createToken(t, 2, time.Hour)
		req, oldKey := joinRequest(t, token)
		joined, err := b.join.Join(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		nodeID := joined.Msg.GetNodeId()

		// Refusals first; none changes the node.
		before, err := b.st.GetNode(ctx, nodeID)
		if err != nil {
			t.Fatal(err)
		}
		stranger := newJoinKey(t)
		forOtherCSR := renewRequest(t, nodeID, newJoinKey(t), oldKey)
		forOtherCSR.CsrDer = joinCSR(t, newJoinKey(t))
		badCSR := renewRequest(t, nodeID, newJoinKey(t), nil)
		badCSR.CsrDer = []byte("garbage")
		sum := sha256.Sum256(badCSR.CsrDer)
		if badCSR.Signature, err = ecdsa.SignASN1(rand.Reader, oldKey, sum[:]); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			req  *agentv1.RenewRequest
			code connect.Code
			want string
		}{
			{"without proof", renewRequest(t, nodeID, newJoinKey(t), nil), connect.CodePermissionDenied, "renewal must be signed by the node's current key"},
			{"signed by another key", renewRequest(t, nodeID, newJoinKey(t), stranger), connect.CodePermissionDenied, "renewal must be signed by the node's current key"},
			{"signature over another CSR", forOtherCSR, connect.CodePermissionDenied, "renewal must be signed by the node's current key"},
			{"bad CSR", badCSR, connect.CodeInvalidArgument, "not a DER PKCS#10 request"},
			{"unknown node", renewRequest(t, "n-unknown", newJoinKey(t), oldKey), connect.CodeNotFound, "node n-unknown is not known"},
			{"no node id", renewRequest(t, "", newJoinKey(t), oldKey), connect.CodeInvalidArgument, "node_id is missing"},
		}
		t.Run("refused", func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					_, err := b.node.Renew(ctx, connect.NewRequest(tc.req))
					wantJoinRefused(t, err, tc.code, tc.want)
				})
			}
		})
		if after, err := b.st.GetNode(ctx, nodeID); err != nil || after.CertSerial != before.CertSerial || !bytes.Equal(after.CertPublicKey, before.CertPublicKey) {
			t.Fatalf("refused renewals changed the node (%v)", err)
		}

		// With proof: a certificate for the new key, recorded on the node.
		nextKey := newJoinKey(t)
		res, err := b.node.Renew(ctx, connect.NewRequest(renewRequest(t, nodeID, nextKey, oldKey)))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(res.Msg.GetCertificateDer())
		if err != nil {
			t.Fatal(err)
		}
		if id, err := b.authority.NodeID(cert); err != nil || id != nodeID || !nextKey.PublicKey.Equal(cert.PublicKey) || !res.Msg.GetNotAfter().AsTime().Equal(cert.NotAfter) {
			t.Fatalf("renewed certificate names %q (%v), want %q and the new key", id, err, nodeID)
		}
		n, err := b.st.GetNode(ctx, nodeID)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(n.CertPublicKey, cert.RawSubjectPublicKeyInfo) || n.CertSerial != cert.SerialNumber.Text(16) || !n.CertNotAfter.Equal(cert.NotAfter.UTC()) {
			t.Fatal("the node's stored certificate was not replaced")
		}
		events := b.auditEvents(t)
		if e := events[len(events)-1]; e.Action != "compute:nodes:renew" || e.Decision != "allow" || e.Resource != `Node::"acme/`+nodeID+`"` || e.Tenant != joinTestTenant {
			t.Fatalf("renewal audited as %+v", e)
		}

		// The old key is no longer the current one.
		_, err = b.node.Renew(ctx, connect.NewRequest(renewRequest(t, nodeID, newJoinKey(t), oldKey)))
		wantJoinRefused(t, err, connect.CodePermissionDenied, "renewal must be signed by the node's current key")

		// A revoked node renews nothing, even with proof.
		if _, err := b.st.RevokeNode(ctx, nodeID); err != nil {
			t.Fatal(err)
		}
		_, err = b.node.Renew(ctx, connect.NewRequest(renewRequest(t, nodeID, newJoinKey(t), nextKey)))
		wantJoinRefused(t, err, connect.CodePermissionDenied, "node "+nodeID+" is revoked")

		got := b.refusals(t, "bettercompute_renew_refusals_total")
		want := map[string]float64{"no_proof": 4, "bad_csr": 1, "unknown_node": 1, "bad_request": 1, "revoked": 1}
		for reason, n := range want {
			if got[reason] != n {
				t.Errorf("bettercompute_renew_refusals_total{reason=%q} = %v, want %v (all: %v)", reason, got[reason], n, got)
			}
		}
		denials := 0
		for _, e := range b.auditEvents(t) {
			if e.Action == "compute:nodes:renew" && e.Decision == "deny" {
				denials++
			}
		}
		if denials != 8 {
			t.Errorf("%d renewal denials audited, want 8", denials)
		}
	})
}

// The service answers store failures without their detail.
func TestJoinInternalError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := store.Open(ctx, storetest.URL(t, store.EngineSQLite), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	authority, err := pki.LoadOrCreate(ctx, st, filepath.Join(t.TempDir(), "ca.key"), "bc-test")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for path, h := range NewJoinService(JoinConfig{Store: st, Authority: authority}).Handlers() {
		mux.Handle(path, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if err := st.Close(); err != nil { // every store call now fails
		t.Fatal(err)
	}
	_, token, _ := pki.NewJoinToken(authority.ServingPin())
	req, _ := joinRequest(t, token)
	_, err = agentv1connect.NewJoinServiceClient(srv.Client(), srv.URL).Join(ctx, connect.NewRequest(req))
	wantJoinRefused(t, err, connect.CodeInternal, "internal error; the control plane's log has the detail under request id ")
	if strings.Contains(err.Error(), "closed") {
		t.Fatalf("the store's error leaked to the caller: %v", err)
	}
}
