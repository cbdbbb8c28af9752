package iam_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/internal/iam"
)

// fixture is a small deployment: the platform, acme and globex, each with
// an admins group and the matching admins policy.
func fixture(extra ...iam.DirPolicy) iam.Directory {
	d := iam.Directory{
		Epoch: 7,
		Tenants: []iam.DirTenant{
			{Name: "platform", Platform: true},
			{Name: "acme"},
			{Name: "globex"},
		},
		Members: []iam.DirMember{
			{Tenant: "platform", Group: "admins", Member: "root"},
			{Tenant: "acme", Group: "admins", Member: "alice"},
			{Tenant: "acme", Group: "gpu-users", Member: "bob"},
			{Tenant: "acme", Group: "gpu-users", Member: "ci"},
			{Tenant: "globex", Group: "admins", Member: "gina"},
		},
		Policies: []iam.DirPolicy{
			{Tenant: "platform", Name: "platform-admins", Body: iam.PlatformAdminsPolicy()},
			{Tenant: "acme", Name: "tenant-admins", Body: iam.TenantAdminsPolicy("acme")},
			{Tenant: "globex", Name: "tenant-admins", Body: iam.TenantAdminsPolicy("globex")},
		},
	}
	d.Policies = append(d.Policies, extra...)
	return d
}

func newEngine(t *testing.T, d iam.Directory) *iam.Engine {
	t.Helper()
	e, errs := iam.NewEngine(d)
	if len(errs) > 0 {
		t.Fatalf("NewEngine: %v", errs)
	}
	return e
}

func user(tenant, name string) iam.Principal {
	return iam.Principal{Type: "User", Tenant: tenant, Name: name}
}

func tenantRes(name string) iam.Resource { return iam.Resource{Type: "Tenant", Tenant: name} }

func TestEngineDecisions(t *testing.T) {
	t.Parallel()
	e := newEngine(t, fixture(
		// globex permits everything to everyone: it must never reach acme.
		iam.DirPolicy{Tenant: "globex", Name: "open", Body: `permit(principal, action, resource);`},
		iam.DirPolicy{Tenant: "acme", Name: "readers", Body: `
permit(principal == User::"acme/carol", action == Action::"compute:users:list", resource);
permit(principal is ServiceAccount in Group::"acme/gpu-users", action in [Action::"compute:users:get", Action::"compute:users:list"], resource);
forbid(principal == User::"acme/alice", action == Action::"compute:policies:delete", resource);
permit(principal in Group::"acme/admins", action == Action::"compute:users:get", resource in Group::"acme/gpu-users");
`},
	))
	sa := iam.Principal{Type: "ServiceAccount", Tenant: "acme", Name: "ci"}
	tests := []struct {
		name     string
		req      iam.Request
		allow    bool
		policies []string
		errSub   string
	}{
		{"tenant admin on own tenant", iam.Request{Principal: user("acme", "alice"), Action: "compute:users:list", Resource: tenantRes("acme")}, true, []string{"acme/tenant-admins#0"}, ""},
		{"tenant admin on a user of the tenant", iam.Request{Principal: user("acme", "alice"), Action: "compute:users:delete", Resource: iam.Resource{Type: "User", Tenant: "acme", ID: "bob"}}, true, []string{"acme/tenant-admins#0"}, ""},
		{"tenant admin not on the deployment", iam.Request{Principal: user("acme", "alice"), Action: "compute:tenants:create", Resource: iam.Resource{Type: "System"}}, false, nil, ""},
		{"tenant admin not on another tenant", iam.Request{Principal: user("acme", "alice"), Action: "compute:tenants:get", Resource: tenantRes("globex")}, false, nil, ""},
		{"another tenant's permit-all never applies", iam.Request{Principal: user("acme", "bob"), Action: "compute:users:list", Resource: tenantRes("acme")}, false, nil, ""},
		{"another tenant's permit-all applies to its own", iam.Request{Principal: user("globex", "nobody"), Action: "compute:users:list", Resource: tenantRes("globex")}, true, []string{"globex/open#0"}, ""},
		{"platform admin everywhere", iam.Request{Principal: user("platform", "root"), Action: "compute:tenants:delete", Resource: tenantRes("acme")}, true, []string{"platform/platform-admins#0"}, ""},
		{"platform admin on the deployment", iam.Request{Principal: user("platform", "root"), Action: "compute:tenants:create", Resource: iam.Resource{Type: "System"}}, true, []string{"platform/platform-admins#0"}, ""},
		{"platform non-admin denied", iam.Request{Principal: user("platform", "eve"), Action: "compute:system:read", Resource: iam.Resource{Type: "System"}}, false, nil, ""},
		{"principal == in a multi-statement document", iam.Request{Principal: user("acme", "carol"), Action: "compute:users:list", Resource: tenantRes("acme")}, true, []string{"acme/readers#0"}, ""},
		{"principal == other action", iam.Request{Principal: user("acme", "carol"), Action: "compute:users:create", Resource: tenantRes("acme")}, false, nil, ""},
		{"is ServiceAccount in group", iam.Request{Principal: sa, Action: "compute:users:get", Resource: iam.Resource{Type: "User", Tenant: "acme", ID: "bob"}}, true, []string{"acme/readers#1"}, ""},
		{"is ServiceAccount: a user of the group is not one", iam.Request{Principal: user("acme", "bob"), Action: "compute:users:get", Resource: iam.Resource{Type: "User", Tenant: "acme", ID: "bob"}}, false, nil, ""},
		{"forbid wins over the admins' permit", iam.Request{Principal: user("acme", "alice"), Action: "compute:policies:delete", Resource: iam.Resource{Type: "Policy", Tenant: "acme", ID: "x"}}, false, []string{"acme/readers#2"}, ""},
		{"both permits reported", iam.Request{Principal: user("acme", "alice"), Action: "compute:users:get", Resource: iam.Resource{Type: "User", Tenant: "acme", ID: "bob"}}, true, []string{"acme/tenant-admins#0", "acme/readers#3"}, ""},
		{"unknown action denied even for the platform", iam.Request{Principal: user("platform", "root"), Action: "compute:users:frobnicate", Resource: tenantRes("acme")}, false, nil, "unknown action"},
		{"resource type the action does not apply to", iam.Request{Principal: user("platform", "root"), Action: "compute:users:get", Resource: tenantRes("acme")}, false, nil, "does not apply to resources"},
		{"principal type unknown", iam.Request{Principal: iam.Principal{Type: "Robot", Tenant: "acme", Name: "r"}, Action: "compute:users:list", Resource: tenantRes("acme")}, false, nil, "does not apply to principals"},
		{"principal of an unknown tenant", iam.Request{Principal: user("initech", "alice"), Action: "compute:users:list", Resource: tenantRes("acme")}, false, nil, "unknown tenant"},
		{"context value of an unsupported type", iam.Request{Principal: user("platform", "root"), Action: "compute:users:list", Resource: tenantRes("acme"), Context: map[string]any{"x": 1.5}}, false, nil, "unsupported value type float64"},
		{"scoped resource without its id", iam.Request{Principal: user("platform", "root"), Action: "compute:users:get", Resource: iam.Resource{Type: "User", Tenant: "acme"}}, false, nil, "needs its tenant and id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := e.Authorize(tt.req)
			if d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) {
				t.Errorf("Authorize = allow %v by %q (errors %q), want allow %v by %q", d.Allow, d.Policies, d.Errors, tt.allow, tt.policies)
			}
			if got := strings.Join(d.Errors, "; "); tt.errSub == "" && got != "" || !strings.Contains(got, tt.errSub) {
				t.Errorf("errors %q, want them to mention %q", got, tt.errSub)
			}
		})
	}
}

// TestEngineFailsClosedOnErrors: Cedar skips a statement that fails to
// evaluate; for a forbid that would lift a restriction, so the engine
// denies instead.
func TestEngineFailsClosedOnErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, fixture(
		iam.DirPolicy{Tenant: "acme", Name: "cap", Body: `forbid(principal, action == Action::"compute:reservations:create", resource) when { context.gpus > 8 };`},
		iam.DirPolicy{Tenant: "acme", Name: "grant", Body: `permit(principal in Group::"acme/gpu-users", action == Action::"compute:reservations:create", resource) when { resource.offeredTo.contains(principal.tenant) };`},
	))
	pool := iam.Resource{Type: "Pool", Tenant: "platform", ID: "a100", Attrs: map[string]any{"offeredTo": []iam.EntityRef{iam.TenantRef("acme")}}}
	poolNoOffer := iam.Resource{Type: "Pool", Tenant: "platform", ID: "a100"}
	full := map[string]any{"gpus": 4, "durationHours": int64(2), "gpuModel": "A100", "pool": "platform/a100"}
	tests := []struct {
		name     string
		res      iam.Resource
		ctx      map[string]any
		allow    bool
		policies []string
		errs     int
	}{
		{"everything present", pool, full, true, []string{"acme/grant#0"}, 0},
		{"context without gpus: the forbid errs and denies", pool, map[string]any{"durationHours": 2}, false, []string{"acme/cap#0"}, 1},
		{"gpus of the wrong type: the forbid errs and denies", pool, map[string]any{"gpus": "4"}, false, []string{"acme/cap#0"}, 1},
		{"pool without offeredTo: the permit errs and grants nothing", poolNoOffer, full, false, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := e.Authorize(iam.Request{Principal: user("acme", "bob"), Action: "compute:reservations:create", Resource: tt.res, Context: tt.ctx})
			if d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) || len(d.Errors) != tt.errs {
				t.Errorf("Authorize = allow %v by %q errors %q; want allow %v by %q with %d errors", d.Allow, d.Policies, d.Errors, tt.allow, tt.policies, tt.errs)
			}
		})
	}
}

func TestEngineResourceParentsAndAttrs(t *testing.T) {
	t.Parallel()
	e := newEngine(t, fixture(
		iam.DirPolicy{Tenant: "acme", Name: "pools", Body: `
permit(principal in Group::"acme/gpu-users", action == Action::"compute:reservations:extend", resource in Pool::"platform/a100")
  when { resource.pool == Pool::"platform/a100" && resource.pool.name == "a100" && resource.tenant == principal.tenant };
permit(principal in Group::"acme/gpu-users", action == Action::"compute:nodes:get", resource) when { resource in Pool::"acme/p" };
`},
	))
	res := iam.Resource{Type: "Reservation", Tenant: "acme", ID: "r1", Parents: []iam.EntityRef{iam.ScopedRef("Pool", "platform", "a100")}}
	ctx := map[string]any{"gpus": 1, "durationHours": 1, "totalDurationHours": 2, "gpuModel": "A100", "pool": "platform/a100"}
	if d := e.Authorize(iam.Request{Principal: user("acme", "bob"), Action: "compute:reservations:extend", Resource: res, Context: ctx}); !d.Allow {
		t.Errorf("extend in the pool = %+v, want allow (pool derived from the Pool parent)", d)
	}
	res.Parents = []iam.EntityRef{iam.ScopedRef("Pool", "platform", "h100")}
	if d := e.Authorize(iam.Request{Principal: user("acme", "bob"), Action: "compute:reservations:extend", Resource: res, Context: ctx}); d.Allow {
		t.Errorf("extend in another pool = %+v, want deny", d)
	}
	node := iam.Resource{Type: "Node", Tenant: "acme", ID: "n1", Parents: []iam.EntityRef{iam.ScopedRef("Pool", "acme", "p")}}
	if d := e.Authorize(iam.Request{Principal: user("acme", "bob"), Action: "compute:nodes:get", Resource: node}); !d.Allow {
		t.Errorf("node in pool = %+v, want allow", d)
	}
	node.Parents = nil
	if d := e.Authorize(iam.Request{Principal: user("acme", "bob"), Action: "compute:nodes:get", Resource: node}); d.Allow {
		t.Errorf("node in no pool = %+v, want deny", d)
	}
}

func TestNewEngineSkipsBrokenPolicies(t *testing.T) {
	t.Parallel()
	d := fixture(
		iam.DirPolicy{Tenant: "acme", Name: "broken", Body: `permit(principal, action resource);`},
		iam.DirPolicy{Tenant: "acme", Name: "deep", Body: "permit(principal, action, resource) when { " + strings.Repeat("(", 100) + "true" + strings.Repeat(")", 100) + " };"},
		iam.DirPolicy{Tenant: "acme", Name: "huge", Body: strings.Repeat(" ", iam.MaxPolicyBytes+1)},
	)
	d.Tenants = append(d.Tenants, iam.DirTenant{Name: "second", Platform: true})
	e, errs := iam.NewEngine(d)
	all := fmt.Sprint(errs)
	if len(errs) != 4 || !strings.Contains(all, "acme/broken") || !strings.Contains(all, "acme/deep") || !strings.Contains(all, "acme/huge") || !strings.Contains(all, "two platform tenants") {
		t.Fatalf("NewEngine errors = %v, want the three bad policies and the two platforms reported", errs)
	}
	if e.Epoch() != 7 {
		t.Errorf("Epoch = %d, want 7", e.Epoch())
	}
	dec := e.Authorize(iam.Request{Principal: user("acme", "alice"), Action: "compute:users:list", Resource: tenantRes("acme")})
	if !dec.Allow {
		t.Errorf("the other policies must still work: %+v", dec)
	}
	dec = e.Authorize(iam.Request{Principal: user("platform", "root"), Action: "compute:users:list", Resource: tenantRes("acme")})
	if !dec.Allow {
		t.Errorf("the platform (first by name) must keep its policies: %+v", dec)
	}
}

func TestEngineEmptyDirectory(t *testing.T) {
	t.Parallel()
	e := newEngine(t, iam.Directory{})
	d := e.Authorize(iam.Request{Principal: user("acme", "alice"), Action: "compute:users:list", Resource: tenantRes("acme")})
	if d.Allow {
		t.Errorf("Authorize on an empty directory = %+v, want deny", d)
	}
}
