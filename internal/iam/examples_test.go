package iam_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/examples/policies"
	"github.com/better-compute/better-compute/internal/iam"
)

// The shipped examples must validate against the schema and do what their
// headers say. Each is exercised through the Engine, in a deployment where
// acme has admins (alice), gpu-users (bob, the service account ci) and a
// person in no group (dave), beside globex with its own admin (gina).

func TestExamplesValidate(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(policies.Files, "*.cedar")
	if err != nil || len(files) < 5 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(f, ".cedar")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := fs.ReadFile(policies.Files, f)
			if err != nil {
				t.Fatal(err)
			}
			header := string(raw)
			if !strings.HasPrefix(header, "// "+name+": ") || !strings.Contains(header, "better-compute policies put "+name+" examples/policies/"+f+" --tenant ") {
				t.Errorf("%s: the header must start with %q and say how to install it", f, "// "+name+": ")
			}
			if probs := iam.ValidatePolicy(string(raw)); probs != nil {
				t.Errorf("%s does not validate: %v", f, probs)
			}
			body, err := iam.ExamplePolicy(name, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(body, "// "+name) || !strings.Contains(string(raw), body) {
				t.Errorf("ExamplePolicy(%q) must be the file without its header:\n%s", name, body)
			}
		})
	}
	if _, err := iam.ExamplePolicy("nope", "acme"); err == nil {
		t.Error("ExamplePolicy of a missing example succeeded")
	}
}

func TestInstalledPoliciesAreTheExamples(t *testing.T) {
	t.Parallel()
	acme, err := iam.ExamplePolicy("tenant-admins", "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := iam.TenantAdminsPolicy("acme"); got != acme {
		t.Errorf("TenantAdminsPolicy(acme) = %q, want the example %q", got, acme)
	}
	globex := iam.TenantAdminsPolicy("globex")
	if want := strings.NewReplacer(`"acme/`, `"globex/`, `"acme"`, `"globex"`).Replace(acme); globex != want {
		t.Errorf("TenantAdminsPolicy(globex) = %q, want %q", globex, want)
	}
	if strings.Contains(globex, "acme") || iam.ValidatePolicy(globex) != nil {
		t.Errorf("TenantAdminsPolicy(globex) still names acme or does not validate: %q", globex)
	}
	// A name Cedar must escape stays one string literal.
	if odd := iam.TenantAdminsPolicy(`a"b`); !strings.Contains(odd, `Tenant::"a\"b"`) || iam.ValidatePolicy(odd) != nil {
		t.Errorf("TenantAdminsPolicy with a quote = %q", odd)
	}
	platform, _ := iam.ExamplePolicy("platform-admins", "acme")
	if got := iam.PlatformAdminsPolicy(); got != platform || !strings.Contains(got, `Group::"platform/admins"`) {
		t.Errorf("PlatformAdminsPolicy() = %q, want the example", got)
	}
}

// exampleEngine builds the deployment with the named examples installed in
// acme (and globex's tenant-admins, and the platform's platform-admins).
func exampleEngine(t *testing.T, names ...string) *iam.Engine {
	t.Helper()
	d := iam.Directory{
		Epoch:   1,
		Tenants: []iam.DirTenant{{Name: "platform", Platform: true}, {Name: "acme"}, {Name: "globex"}},
		Members: []iam.DirMember{
			{Tenant: "platform", Group: "admins", Member: "root"},
			{Tenant: "acme", Group: "admins", Member: "alice"},
			{Tenant: "acme", Group: "gpu-users", Member: "bob"},
			{Tenant: "acme", Group: "gpu-users", Member: "ci"},
			{Tenant: "globex", Group: "admins", Member: "gina"},
			{Tenant: "globex", Group: "gpu-users", Member: "gus"},
		},
		Policies: []iam.DirPolicy{
			{Tenant: "platform", Name: "platform-admins", Body: iam.PlatformAdminsPolicy()},
			{Tenant: "globex", Name: "tenant-admins", Body: iam.TenantAdminsPolicy("globex")},
		},
	}
	for _, n := range names {
		body, err := iam.ExamplePolicy(n, "acme")
		if err != nil {
			t.Fatal(err)
		}
		d.Policies = append(d.Policies, iam.DirPolicy{Tenant: "acme", Name: n, Body: body})
	}
	// globex installs acme's examples too, for globex: they must never
	// reach acme, nor acme's reach globex.
	for _, n := range names {
		if n == "tenant-admins" {
			continue // globex has it already
		}
		body, _ := iam.ExamplePolicy(n, "globex")
		d.Policies = append(d.Policies, iam.DirPolicy{Tenant: "globex", Name: n, Body: body})
	}
	return newEngine(t, d)
}

var (
	sharedPool  = iam.Resource{Type: "Pool", Tenant: "platform", ID: "a100", Attrs: map[string]any{"offeredTo": []iam.EntityRef{iam.TenantRef("acme")}}}
	privatePool = iam.Resource{Type: "Pool", Tenant: "platform", ID: "h100", Attrs: map[string]any{"offeredTo": []iam.EntityRef{iam.TenantRef("globex")}}}
	acmeRes     = iam.Resource{Type: "Reservation", Tenant: "acme", ID: "r1", Parents: []iam.EntityRef{iam.ScopedRef("Pool", "platform", "a100")}}
)

func reserve(p iam.Principal, pool iam.Resource, gpus, hours int) iam.Request {
	return iam.Request{Principal: p, Action: "compute:reservations:create", Resource: pool,
		Context: map[string]any{"gpus": gpus, "durationHours": hours, "gpuModel": "A100", "pool": pool.Tenant + "/" + pool.ID}}
}

func extend(p iam.Principal, by, total int) iam.Request {
	return iam.Request{Principal: p, Action: "compute:reservations:extend", Resource: acmeRes,
		Context: map[string]any{"gpus": 4, "durationHours": by, "totalDurationHours": total, "gpuModel": "A100", "pool": "platform/a100"}}
}

func TestExampleDecisions(t *testing.T) {
	t.Parallel()
	alice, bob, dave, gina, gus := user("acme", "alice"), user("acme", "bob"), user("acme", "dave"), user("globex", "gina"), user("globex", "gus")
	ci := iam.Principal{Type: "ServiceAccount", Tenant: "acme", Name: "ci"}
	tests := []struct {
		name     string
		examples []string
		req      iam.Request
		allow    bool
		policies []string
	}{
		// tenant-admins
		{"TenantAdmins on the tenant", []string{"tenant-admins"}, iam.Request{Principal: alice, Action: "compute:tenants:update", Resource: tenantRes("acme")}, true, []string{"acme/tenant-admins#0"}},
		{"TenantAdmins on a user", []string{"tenant-admins"}, iam.Request{Principal: alice, Action: "compute:users:delete", Resource: iam.Resource{Type: "User", Tenant: "acme", ID: "bob"}}, true, []string{"acme/tenant-admins#0"}},
		{"TenantAdmins on a policy", []string{"tenant-admins"}, iam.Request{Principal: alice, Action: "compute:policies:put", Resource: iam.Resource{Type: "Policy", Tenant: "acme", ID: "x"}}, true, []string{"acme/tenant-admins#0"}},
		{"TenantAdmins not on another tenant", []string{"tenant-admins"}, iam.Request{Principal: alice, Action: "compute:users:list", Resource: tenantRes("globex")}, false, nil},
		{"TenantAdmins not on another tenant's user", []string{"tenant-admins"}, iam.Request{Principal: alice, Action: "compute:users:get", Resource: iam.Resource{Type: "User", Tenant: "globex", ID: "gina"}}, false, nil},
		{"TenantAdmins not on the deployment", []string{"tenant-admins"}, iam.Request{Principal: alice, Action: "compute:tenants:create", Resource: iam.Resource{Type: "System"}}, false, nil},
		{"TenantAdmins: acme's set never applies to globex's admin", []string{"tenant-admins"}, iam.Request{Principal: gina, Action: "compute:users:list", Resource: tenantRes("acme")}, false, nil},
		{"TenantAdmins: globex's admin in globex", []string{"tenant-admins"}, iam.Request{Principal: gina, Action: "compute:users:list", Resource: tenantRes("globex")}, true, []string{"globex/tenant-admins#0"}},
		{"no matching policy denies", []string{"tenant-admins", "pool-users"}, iam.Request{Principal: dave, Action: "compute:users:list", Resource: tenantRes("acme")}, false, nil},
		{"gpu-users are no admins", []string{"tenant-admins", "pool-users"}, iam.Request{Principal: bob, Action: "compute:users:list", Resource: tenantRes("acme")}, false, nil},

		// platform-admins
		{"PlatformAdmins everywhere", nil, iam.Request{Principal: user("platform", "root"), Action: "compute:users:delete", Resource: iam.Resource{Type: "User", Tenant: "acme", ID: "bob"}}, true, []string{"platform/platform-admins#0"}},
		{"PlatformAdmins on the deployment", nil, iam.Request{Principal: user("platform", "root"), Action: "compute:tenants:create", Resource: iam.Resource{Type: "System"}}, true, []string{"platform/platform-admins#0"}},
		{"PlatformAdmins: not for other platform users", nil, iam.Request{Principal: user("platform", "ops"), Action: "compute:system:read", Resource: iam.Resource{Type: "System"}}, false, nil},

		// pool-users
		{"PoolUsers reserve from an offered pool", []string{"pool-users"}, reserve(bob, sharedPool, 4, 8), true, []string{"acme/pool-users#0"}},
		{"PoolUsers: service accounts too", []string{"pool-users"}, reserve(ci, sharedPool, 4, 8), true, []string{"acme/pool-users#0"}},
		{"PoolUsers: not from a pool offered to others", []string{"pool-users"}, reserve(bob, privatePool, 4, 8), false, nil},
		{"PoolUsers: not for non-members", []string{"pool-users"}, reserve(dave, sharedPool, 4, 8), false, nil},
		{"PoolUsers: globex's members use globex's copy", []string{"pool-users"}, reserve(gus, privatePool, 4, 8), true, []string{"globex/pool-users#0"}},
		{"PoolUsers: globex's members not from acme's pool", []string{"pool-users"}, reserve(gus, sharedPool, 4, 8), false, nil},
		{"PoolUsers release", []string{"pool-users"}, iam.Request{Principal: bob, Action: "compute:reservations:release", Resource: acmeRes}, true, []string{"acme/pool-users#1"}},
		{"PoolUsers list", []string{"pool-users"}, iam.Request{Principal: bob, Action: "compute:reservations:list", Resource: tenantRes("acme")}, true, []string{"acme/pool-users#1"}},
		{"PoolUsers extend", []string{"pool-users"}, extend(bob, 4, 12), true, []string{"acme/pool-users#1"}},
		{"PoolUsers: not another tenant's reservations", []string{"pool-users"}, iam.Request{Principal: bob, Action: "compute:reservations:get", Resource: iam.Resource{Type: "Reservation", Tenant: "globex", ID: "r9"}}, false, nil},

		// reserve-bounded
		{"ReserveBounded 8 allowed", []string{"pool-users", "reserve-bounded"}, reserve(bob, sharedPool, 8, 8), true, []string{"acme/pool-users#0"}},
		{"ReserveBounded 9 denied", []string{"pool-users", "reserve-bounded"}, reserve(bob, sharedPool, 9, 8), false, []string{"acme/reserve-bounded#0"}},
		{"ReserveBounded binds admins too", []string{"tenant-admins", "reserve-bounded"}, reserve(alice, iam.Resource{Type: "Pool", Tenant: "acme", ID: "own", Attrs: map[string]any{"offeredTo": []iam.EntityRef{}}}, 9, 8), false, []string{"acme/reserve-bounded#0"}},
		{"ReserveBounded alone grants nothing", []string{"reserve-bounded"}, reserve(bob, sharedPool, 1, 1), false, nil},
		{"ReserveBounded: acme's ceiling is not globex's", []string{"pool-users"}, reserve(gus, privatePool, 9, 8), true, []string{"globex/pool-users#0"}},

		// bounded-extend
		{"BoundedExtend total 72 allowed", []string{"pool-users", "bounded-extend"}, extend(bob, 24, 72), true, []string{"acme/pool-users#1"}},
		{"BoundedExtend total 73 denied", []string{"pool-users", "bounded-extend"}, extend(bob, 25, 73), false, []string{"acme/bounded-extend#0"}},
		{"BoundedExtend: reserving 72 h allowed", []string{"pool-users", "bounded-extend"}, reserve(bob, sharedPool, 4, 72), true, []string{"acme/pool-users#0"}},
		{"BoundedExtend: reserving 73 h denied", []string{"pool-users", "bounded-extend"}, reserve(bob, sharedPool, 4, 73), false, []string{"acme/bounded-extend#1"}},
		{"all together: 9 GPUs for 73 h", []string{"tenant-admins", "pool-users", "reserve-bounded", "bounded-extend"}, reserve(bob, sharedPool, 9, 73), false, []string{"acme/reserve-bounded#0", "acme/bounded-extend#1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := exampleEngine(t, tt.examples...).Authorize(tt.req)
			if d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) || len(d.Errors) > 0 {
				t.Errorf("Authorize = allow %v by %q (errors %q), want allow %v by %q", d.Allow, d.Policies, d.Errors, tt.allow, tt.policies)
			}
		})
	}
}
