package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

const listUsers = "/bettercompute.api.v1.UserService/ListUsers"

// TestBadTokens: each kind of bad credential is unauthenticated with a
// message that says what is wrong, and leaves only its audit event.
func TestBadTokens(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		ctx := context.Background()

		expired := f.newToken("acme", "alice", time.Minute)
		id := strings.Split(expired, "_")[1]
		// Age it through the store clock's view: expiry is compared with store time.
		if _, err := f.store.RevokeToken(ctx, f.tokenIDs["acme/revoke"]); err != nil {
			t.Fatal(err)
		}
		revokedSecret := f.newToken("acme", "alice", time.Hour)
		if _, err := f.store.RevokeToken(ctx, strings.Split(revokedSecret, "_")[1]); err != nil {
			t.Fatal(err)
		}
		deletedSecret := f.newToken("acme", "gone", time.Hour)
		if err := f.store.DeletePrincipal(ctx, "acme", "gone"); err != nil {
			t.Fatal(err)
		}
		wrongSecret := f.tokens["acme/alice"][:len(f.tokens["acme/alice"])-1] + "a"
		if wrongSecret == f.tokens["acme/alice"] {
			wrongSecret = wrongSecret[:len(wrongSecret)-1] + "b"
		}

		tests := []struct {
			name, header, want string
		}{
			{"malformed", "bc_123", "malformed API token"},
			{"unknown", "bc_aaaaaaaaaaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "unknown API token"},
			{"wrong secret", wrongSecret, "unknown API token"},
			{"revoked", revokedSecret, "was revoked at"},
			{"deleted principal", deletedSecret, "unknown API token"},
		}
		for _, tt := range tests {
			res := f.call(listUsers, tt.header, map[string]any{})
			if res.code != "unauthenticated" || !strings.Contains(res.msg, tt.want) {
				t.Errorf("%s: got %s %q, want unauthenticated containing %q", tt.name, res.code, res.msg, tt.want)
			}
			if e := f.lastAudit(); e.Decision != "deny" || !strings.HasPrefix(e.Reason, "unauthenticated") || e.Principal != "" {
				t.Errorf("%s: audit event %+v", tt.name, e)
			}
		}

		// Expiry: wait out a one-minute token would be slow; a token whose
		// expiry is already past by the store clock is refused.
		past := f.newToken("acme", "alice", -time.Minute)
		if res := f.call(listUsers, past, map[string]any{}); res.code != "unauthenticated" || !strings.Contains(res.msg, "expired at") {
			t.Errorf("expired: got %s %q", res.code, res.msg)
		}
		if res := f.call(listUsers, expired, map[string]any{}); res.code != "ok" {
			t.Errorf("a live token (%s) was refused: %s %s", id, res.code, res.msg)
		}
	})
}

// TestIsolation: lists leave other tenants out, and nothing counts them.
func TestIsolation(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		alice := f.tokens["acme/alice"]

		res := f.call("/bettercompute.api.v1.TenantService/ListTenants", f.tokens["platform/admin"], map[string]any{})
		if n := len(res.body["tenants"].([]any)); res.code != "ok" || n != 4 {
			t.Errorf("platform ListTenants: %s, %d tenants", res.code, n)
		}
		// alice may not list tenants (a System action) at all...
		if res := f.call("/bettercompute.api.v1.TenantService/ListTenants", alice, map[string]any{}); res.code != "permission_denied" {
			t.Errorf("acme admin ListTenants: %s", res.code)
		}
		// ...and sees only acme's audit events.
		res = f.call("/bettercompute.api.v1.AuditService/ListAuditEvents", alice, map[string]any{})
		if res.code != "ok" {
			t.Fatalf("ListAuditEvents: %s %s", res.code, res.msg)
		}
		events, _ := res.body["events"].([]any)
		if len(events) == 0 {
			t.Error("acme's admin sees no events, not even its own denial")
		}
		for _, e := range events {
			if tn := e.(map[string]any)["tenant"]; tn != "acme" {
				t.Errorf("acme's admin saw an event of tenant %v", tn)
			}
		}
		if res := f.call("/bettercompute.api.v1.AuditService/ListAuditEvents", alice, map[string]any{"allTenants": true}); res.code != "permission_denied" {
			t.Errorf("all_tenants as acme's admin: %s", res.code)
		}
		// A missing object and another tenant's answer alike.
		missing := f.call("/bettercompute.api.v1.UserService/GetUser", alice, map[string]any{"name": "nobody"})
		foreign := f.call("/bettercompute.api.v1.UserService/GetUser", alice, map[string]any{"tenant": "globex", "name": "carol"})
		if missing.code != "not_found" || foreign.code != "not_found" {
			t.Errorf("missing: %s, foreign: %s", missing.code, foreign.code)
		}
		if strings.Replace(missing.msg, "acme/nobody", "X", 1) != strings.Replace(foreign.msg, "globex/carol", "X", 1) {
			t.Errorf("messages differ beyond the name: %q vs %q", missing.msg, foreign.msg)
		}
		// A token id from another tenant, asked for as one's own, is not found.
		if res := f.call("/bettercompute.api.v1.TokenService/GetToken", alice, map[string]any{"id": f.tokenIDs["globex/get"]}); res.code != "not_found" {
			t.Errorf("globex token through acme: %s", res.code)
		}
	})
}

// TestDecisionsFollowChanges: a cached decision never outlives the change
// it depended on.
func TestDecisionsFollowChanges(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		f := newFixture(t, engine)
		bob, alice := f.tokens["acme/bob"], f.tokens["acme/alice"]
		addMember := "/bettercompute.api.v1.GroupService/AddGroupMember"
		removeMember := "/bettercompute.api.v1.GroupService/RemoveGroupMember"

		for range 2 { // the second call may be served from the cache
			if res := f.call(listUsers, bob, map[string]any{}); res.code != "permission_denied" {
				t.Fatalf("bob before: %s", res.code)
			}
		}
		if res := f.call(addMember, alice, map[string]any{"group": "admins", "member": "bob"}); res.code != "ok" {
			t.Fatalf("add bob: %s %s", res.code, res.msg)
		}
		if res := f.call(listUsers, bob, map[string]any{}); res.code != "ok" {
			t.Fatalf("bob as admin: %s %s", res.code, res.msg)
		}
		if res := f.call(removeMember, alice, map[string]any{"group": "admins", "member": "bob"}); res.code != "ok" {
			t.Fatalf("remove bob: %s %s", res.code, res.msg)
		}
		if res := f.call(listUsers, bob, map[string]any{}); res.code != "permission_denied" {
			t.Fatalf("bob after removal: %s", res.code)
		}
		// Deleting the policy that permits alice takes effect at once too.
		if res := f.call("/bettercompute.api.v1.PolicyService/DeletePolicy", alice, map[string]any{"name": "spare"}); res.code != "ok" {
			t.Fatal(res.msg)
		}
		if res := f.call("/bettercompute.api.v1.PolicyService/DeletePolicy", alice, map[string]any{"name": "tenant-admins"}); res.code != "ok" {
			t.Fatal(res.msg)
		}
		if res := f.call(listUsers, alice, map[string]any{}); res.code != "permission_denied" {
			t.Errorf("alice without policies: %s", res.code)
		}
	})
}

// TestBadPolicy: a policy that does not parse or validate is refused with
// where and what, and nothing is stored but the audit event.
func TestBadPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, store.EngineSQLite)
	alice := f.tokens["acme/alice"]
	put := "/bettercompute.api.v1.PolicyService/PutPolicy"
	for _, body := range []string{
		"permit(principal, action, resource",
		"permit(principal, action == Action::\"compute:users:lsit\", resource);",
		"permit(principal, action, resource) when { resource.nosuchattr == 1 };",
	} {
		res := f.call(put, alice, map[string]any{"name": "bad", "body": body})
		if res.code != "invalid_argument" || !strings.Contains(res.msg, "line 1") {
			t.Errorf("put %q: %s %q, want invalid_argument naming line 1", body, res.code, res.msg)
		}
		if e := f.lastAudit(); e.Action != "compute:policies:put" || e.Reason != "failed: invalid_argument" {
			t.Errorf("put %q: last audit event %+v, want the refused put", body, e)
		}
	}
	if res := f.call("/bettercompute.api.v1.PolicyService/GetPolicy", alice, map[string]any{"name": "bad"}); res.code != "not_found" {
		t.Errorf("a refused policy was stored: %s", res.code)
	}
	res := f.call("/bettercompute.api.v1.PolicyService/ValidatePolicy", alice, map[string]any{"body": "permit(principal, action, resource);\nforbid(principal, action, resource) when { context.gpus > };"})
	probs, _ := res.body["problems"].([]any)
	if res.code != "ok" || len(probs) == 0 || probs[0].(map[string]any)["line"] != float64(2) {
		t.Errorf("ValidatePolicy: %s %v", res.code, res.body)
	}
}
