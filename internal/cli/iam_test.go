package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
)

// TestIdentityLifecycle is the story of a new customer: the platform admin
// creates tenant acme, its people, a group and a CI service account with a
// token; the token is denied until a policy grants its group, and stops
// working once revoked; the audit log shows all of it.
func TestIdentityLifecycle(t *testing.T) {
	t.Parallel()
	admin := startAPI(t)

	// Tenants.
	tc := &apiv1.CreateTenantResponse{}
	admin.do(t, tc, "tenants", "create", "acme", "--display-name", "Acme Corp")
	if got := tc.GetTenant(); got.GetName() != "acme" || got.GetDisplayName() != "Acme Corp" || got.GetPlatform() || got.GetCreateTime() == nil {
		t.Fatalf("tenants create = %v", got)
	}
	tl := &apiv1.ListTenantsResponse{}
	admin.do(t, tl, "tenants", "list")
	platform := map[string]bool{}
	for _, tn := range tl.GetTenants() {
		platform[tn.GetName()] = tn.GetPlatform()
	}
	if p, ok := platform["platform"]; !ok || !p {
		t.Errorf("tenants list has no platform tenant marked platform: %v", platform)
	}
	if p, ok := platform["acme"]; !ok || p {
		t.Errorf("tenants list has no customer tenant acme: %v", platform)
	}
	tu := &apiv1.UpdateTenantResponse{}
	admin.do(t, tu, "tenants", "update", "acme", "--display-name", "ACME")
	tg := &apiv1.GetTenantResponse{}
	admin.do(t, tg, "tenants", "get", "acme")
	if tu.GetTenant().GetDisplayName() != "ACME" || tg.GetTenant().GetDisplayName() != "ACME" {
		t.Errorf("display name after update = %q, then %q; want ACME", tu.GetTenant().GetDisplayName(), tg.GetTenant().GetDisplayName())
	}

	// Users: update sends only the flags given.
	admin.do(t, &apiv1.CreateUserResponse{}, "users", "create", "alice", "--tenant", "acme", "--display-name", "Alice", "--email", "alice@example.com")
	admin.do(t, &apiv1.CreateUserResponse{}, "users", "create", "bob", "--tenant", "acme")
	uu := &apiv1.UpdateUserResponse{}
	admin.do(t, uu, "users", "update", "alice", "--tenant", "acme", "--email", "alice@acme.example")
	if u := uu.GetUser(); u.GetEmail() != "alice@acme.example" || u.GetDisplayName() != "Alice" {
		t.Errorf("after --email only: %v; want the new email and the old display name", u)
	}
	admin.do(t, uu, "users", "update", "alice", "--tenant", "acme", "--display-name", "Alice A.")
	if u := uu.GetUser(); u.GetEmail() != "alice@acme.example" || u.GetDisplayName() != "Alice A." {
		t.Errorf("after --display-name only: %v; want the new display name and the email kept", u)
	}
	ul := &apiv1.ListUsersResponse{}
	admin.do(t, ul, "users", "list", "--tenant", "acme")
	var users []string
	for _, u := range ul.GetUsers() {
		users = append(users, u.GetName())
	}
	if !slices.Equal(users, []string{"alice", "bob"}) {
		t.Errorf("users list = %v, want [alice bob]", users)
	}
	ug := &apiv1.GetUserResponse{}
	admin.do(t, ug, "users", "get", "bob", "--tenant", "acme")
	if ug.GetUser().GetTenant() != "acme" || ug.GetUser().GetName() != "bob" {
		t.Errorf("users get bob = %v", ug.GetUser())
	}

	// Service accounts share the users' namespace.
	admin.do(t, &apiv1.CreateServiceAccountResponse{}, "service-accounts", "create", "ci", "--tenant", "acme", "--description", "CI jobs")
	admin.fails(t, "already exists", "users", "create", "ci", "--tenant", "acme")
	admin.do(t, &apiv1.UpdateServiceAccountResponse{}, "service-accounts", "update", "ci", "--tenant", "acme", "--description", "nightly CI")
	sl := &apiv1.ListServiceAccountsResponse{}
	admin.do(t, sl, "service-accounts", "list", "--tenant", "acme")
	if len(sl.GetServiceAccounts()) != 1 || sl.GetServiceAccounts()[0].GetDescription() != "nightly CI" {
		t.Errorf("service-accounts list = %v", sl.GetServiceAccounts())
	}

	// Groups: acme/admins came with the tenant; ops is ours.
	gl := &apiv1.ListGroupsResponse{}
	admin.do(t, gl, "groups", "list", "--tenant", "acme")
	if !slices.ContainsFunc(gl.GetGroups(), func(g *apiv1.Group) bool { return g.GetName() == "admins" }) {
		t.Errorf("tenant acme has no admins group: %v", gl.GetGroups())
	}
	admin.do(t, &apiv1.CreateGroupResponse{}, "groups", "create", "ops", "--tenant", "acme", "--description", "Operators")
	am := &apiv1.AddGroupMemberResponse{}
	admin.do(t, am, "groups", "add-member", "ops", "alice", "--tenant", "acme")
	admin.do(t, am, "groups", "add-member", "ops", "ci", "--tenant", "acme")
	if got := sorted(am.GetGroup().GetMembers()); !slices.Equal(got, []string{"alice", "ci"}) {
		t.Errorf("members after adding alice and ci = %v", got)
	}
	admin.do(t, &apiv1.RemoveGroupMemberResponse{}, "groups", "remove-member", "ops", "alice", "--tenant", "acme")
	admin.do(t, &apiv1.UpdateGroupResponse{}, "groups", "update", "ops", "--tenant", "acme", "--description", "On call")
	gg := &apiv1.GetGroupResponse{}
	admin.do(t, gg, "groups", "get", "ops", "--tenant", "acme")
	if g := gg.GetGroup(); !slices.Equal(g.GetMembers(), []string{"ci"}) || g.GetDescription() != "On call" {
		t.Errorf("groups get ops = %v; want member ci and description On call", g)
	}
	sg := &apiv1.GetServiceAccountResponse{}
	admin.do(t, sg, "service-accounts", "get", "ci", "--tenant", "acme")
	if !slices.Contains(sg.GetServiceAccount().GetGroups(), "ops") {
		t.Errorf("service account ci's groups = %v, want ops among them", sg.GetServiceAccount().GetGroups())
	}

	// A token for ci: denied while no policy grants it anything.
	tk := &apiv1.CreateTokenResponse{}
	admin.do(t, tk, "tokens", "create", "--tenant", "acme", "--principal", "ci", "--ttl", "1d", "--description", "nightly")
	if !strings.HasPrefix(tk.GetSecret(), "bc_") || tk.GetToken().GetPrincipal() != "ci" {
		t.Fatalf("tokens create = %v", tk)
	}
	if d := time.Until(tk.GetToken().GetExpireTime().AsTime()); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("a 1d token expires in %v", d)
	}
	id := tk.GetToken().GetId()
	ci := admin.as(tk.GetSecret())
	ci.fails(t, "permission denied", "users", "list", "--tenant", "acme")

	// A policy for ops lets it in.
	policy := "// Operators run everything in acme.\npermit(principal in Group::\"acme/ops\", action, resource in Tenant::\"acme\");\n"
	file := writeFile(t, "ops.cedar", policy)
	if out := admin.table(t, "policies", "validate", file, "--tenant", "acme"); out != file+": valid\n" {
		t.Errorf("policies validate = %q, want %q", out, file+": valid\n")
	}
	pp := &apiv1.PutPolicyResponse{}
	admin.do(t, pp, "policies", "put", "ops-all", file, "--tenant", "acme")
	if pp.GetPolicy().GetName() != "ops-all" || pp.GetPolicy().GetTenant() != "acme" {
		t.Errorf("policies put = %v", pp.GetPolicy())
	}
	if out := admin.table(t, "policies", "get", "ops-all", "--tenant", "acme"); out != policy {
		t.Errorf("policies get printed %q, want the body as put, %q", out, policy)
	}
	pl := &apiv1.ListPoliciesResponse{}
	admin.do(t, pl, "policies", "list", "--tenant", "acme")
	if !slices.ContainsFunc(pl.GetPolicies(), func(p *apiv1.Policy) bool { return p.GetName() == "ops-all" }) {
		t.Errorf("policies list = %v, want ops-all among them", pl.GetPolicies())
	}
	asCI := &apiv1.ListUsersResponse{}
	ci.do(t, asCI, "users", "list", "--tenant", "acme")
	if len(asCI.GetUsers()) != 2 {
		t.Errorf("ci's users list = %v, want alice and bob", asCI.GetUsers())
	}

	// Tokens: list, get, revoke; a revoked token no longer authenticates.
	tkl := &apiv1.ListTokensResponse{}
	admin.do(t, tkl, "tokens", "list", "--tenant", "acme", "--principal", "ci")
	if len(tkl.GetTokens()) != 1 || tkl.GetTokens()[0].GetId() != id {
		t.Errorf("tokens list --principal ci = %v, want the one token %s", tkl.GetTokens(), id)
	}
	tkg := &apiv1.GetTokenResponse{}
	admin.do(t, tkg, "tokens", "get", id, "--tenant", "acme")
	if tkg.GetToken().GetId() != id || tkg.GetToken().GetRevokeTime() != nil {
		t.Errorf("tokens get = %v", tkg.GetToken())
	}
	tkr := &apiv1.RevokeTokenResponse{}
	admin.do(t, tkr, "tokens", "revoke", id, "--tenant", "acme")
	if tkr.GetToken().GetRevokeTime() == nil {
		t.Errorf("tokens revoke = %v, want a revoke time", tkr.GetToken())
	}
	ci.fails(t, "unauthenticated", "users", "list", "--tenant", "acme")

	// The audit log has the creations and the denial.
	al := &apiv1.ListAuditEventsResponse{}
	admin.do(t, al, "audit", "list", "--tenant", "acme", "--limit", "1000")
	var created []string
	denied := false
	for _, e := range al.GetEvents() {
		if e.GetAction() == "compute:users:create" && e.GetDecision() == "allow" {
			created = append(created, e.GetResource())
		}
		if e.GetAction() == "compute:users:list" && e.GetDecision() == "deny" && e.GetPrincipal() == `ServiceAccount::"acme/ci"` {
			denied = true
		}
	}
	if len(created) < 2 || !denied {
		t.Errorf("audit list --tenant acme: %d user creations, ci's denial found = %v; want 2 and true\n%v", len(created), denied, al.GetEvents())
	}
	filtered := &apiv1.ListAuditEventsResponse{}
	admin.do(t, filtered, "audit", "list", "--tenant", "acme", "--action", "compute:groups:add-member")
	if len(filtered.GetEvents()) != 2 {
		t.Errorf("audit list --action compute:groups:add-member = %d events, want 2", len(filtered.GetEvents()))
	}
	admin.do(t, filtered, "audit", "list", "--tenant", "acme", "--principal", `ServiceAccount::"acme/ci"`, "--since", "1h")
	for _, e := range filtered.GetEvents() {
		if e.GetPrincipal() != `ServiceAccount::"acme/ci"` {
			t.Errorf("audit list --principal ci returned %v", e)
		}
	}
	if len(filtered.GetEvents()) == 0 {
		t.Error("audit list --principal ci returned nothing; want its denial at least")
	}

	// Deletes.
	for _, args := range [][]string{
		{"groups", "delete", "ops"},
		{"users", "delete", "bob"},
		{"service-accounts", "delete", "ci"},
		{"policies", "delete", "ops-all"},
	} {
		admin.table(t, append(args, "--tenant", "acme")...)
		admin.fails(t, "not found", append([]string{args[0], "get", args[2]}, "--tenant", "acme")...)
	}
	admin.table(t, "tenants", "delete", "acme")
	admin.fails(t, "not found", "tenants", "get", "acme")
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
