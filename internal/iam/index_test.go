package iam

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// TestIndexMatchesFullEvaluation checks the engine's index against plain
// Cedar: random policies and requests, each decided by the engine (which
// evaluates only the statements its index selects) and by cedar.Authorize
// over every statement of the platform and the principal's tenant with a
// full entity map. The two must agree on the decision and on the deciding
// statements, so the index never leaves out a statement that matters.
func TestIndexMatchesFullEvaluation(t *testing.T) {
	t.Parallel()
	var allowed, forbidden int
	for seed := range uint64(20) {
		func() {
			rng := rand.New(rand.NewPCG(seed, 1))
			d := randomDirectory(rng)
			e, errs := NewEngine(d)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			for range 300 {
				r := randomRequest(rng)
				got := e.Authorize(r)
				want := oracle(t, d, r)
				if got.Allow {
					allowed++
				} else if len(got.Policies) > 0 {
					forbidden++
				}
				slices.Sort(got.Policies)
				if got.Allow != want.Allow || !slices.Equal(got.Policies, want.Policies) || len(got.Errors) != len(want.Errors) {
					t.Fatalf("seed %d, request %+v:\nengine: %+v\noracle: %+v", seed, r, got, want)
				}
			}
		}()
	}
	// A test where everything is denied by default proves nothing.
	if allowed < 600 || forbidden < 300 {
		t.Errorf("%d allowed and %d forbidden of 6000: the random policies are too tame", allowed, forbidden)
	}
}

var (
	diffTenants = []string{"platform", "acme", "globex"}
	diffNames   = []string{"u0", "u1", "u2", "u3"}
	diffGroups  = []string{"g0", "g1", "g2"}
	// diffActions pairs each action with a resource type it applies to.
	diffActions = [][2]string{
		{"compute:reservations:create", "Pool"},
		{"compute:users:get", "User"},
		{"compute:users:list", "Tenant"},
		{"compute:system:read", "System"},
		{"compute:tenants:list", "System"},
	}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func randomDirectory(rng *rand.Rand) Directory {
	d := Directory{Epoch: 1}
	for _, t := range diffTenants {
		d.Tenants = append(d.Tenants, DirTenant{Name: t, Platform: t == "platform"})
		for _, g := range diffGroups {
			for _, n := range diffNames {
				if rng.IntN(3) == 0 {
					d.Members = append(d.Members, DirMember{Tenant: t, Group: g, Member: n})
				}
			}
		}
		for p := range 8 {
			var stmts []string
			for range 1 + rng.IntN(3) {
				stmts = append(stmts, randomStatement(rng, t))
			}
			d.Policies = append(d.Policies, DirPolicy{Tenant: t, Name: fmt.Sprint("p", p), Body: strings.Join(stmts, "\n")})
		}
	}
	return d
}

func randomStatement(rng *rand.Rand, tenant string) string {
	effect := "permit"
	if rng.IntN(5) == 0 {
		effect = "forbid"
	}
	g := fmt.Sprintf(`Group::"%s/%s"`, tenant, pick(rng, diffGroups))
	u := fmt.Sprintf(`User::"%s/%s"`, tenant, pick(rng, diffNames))
	principal := pick(rng, []string{
		"principal", "principal == " + u, "principal in " + g, "principal is User",
		"principal is ServiceAccount in " + g, fmt.Sprintf(`principal in Tenant::"%s"`, tenant), "principal in " + u,
	})
	a1 := fmt.Sprintf(`Action::"%s"`, pick(rng, diffActions)[0])
	a2 := fmt.Sprintf(`Action::"%s"`, pick(rng, diffActions)[0])
	action := pick(rng, []string{"action", "action == " + a1, "action in [" + a1 + ", " + a2 + "]", "action in [" + a1 + ", " + a2 + ", " + a1 + "]", "action in " + a1})
	resource := pick(rng, []string{"resource", fmt.Sprintf(`resource in Tenant::"%s"`, pick(rng, diffTenants)), "resource is Pool", "resource in " + g})
	cond := pick(rng, []string{
		"", "", fmt.Sprintf(`when { principal.name == "%s" }`, pick(rng, diffNames)),
		fmt.Sprintf(`when { context has gpus && context.gpus <= %d }`, rng.IntN(12)),
		"when { context.gpus > 4 }", // errs outside reservations:create
		"when { resource has offeredTo && resource.offeredTo.contains(principal.tenant) }",
		"unless { principal.tenant.platform }",
	})
	return fmt.Sprintf("%s(%s, %s, %s) %s;", effect, principal, action, resource, cond)
}

func randomRequest(rng *rand.Rand) Request {
	a := pick(rng, diffActions)
	tenant := pick(rng, diffTenants)
	r := Request{
		Principal: Principal{Type: pick(rng, []string{"User", "ServiceAccount"}), Tenant: tenant, Name: pick(rng, diffNames)},
		Action:    a[0],
	}
	switch a[1] {
	case "Pool":
		r.Resource = Resource{Type: "Pool", Tenant: "platform", ID: "a100", Attrs: map[string]any{"offeredTo": []EntityRef{TenantRef(pick(rng, diffTenants))}}}
		r.Context = map[string]any{"gpus": rng.IntN(12), "durationHours": 1, "gpuModel": "A100", "pool": "platform/a100"}
	case "User":
		r.Resource = Resource{Type: "User", Tenant: tenant, ID: pick(rng, diffNames)}
	case "Tenant":
		r.Resource = Resource{Type: "Tenant", Tenant: pick(rng, diffTenants)}
	case "System":
		r.Resource = Resource{Type: "System"}
	}
	return r
}

// oracle decides r the slow, obvious way.
func oracle(t *testing.T, d Directory, r Request) Decision {
	t.Helper()
	ps := cedar.NewPolicySet()
	forbids := map[cedar.PolicyID]bool{}
	for _, p := range d.Policies {
		if p.Tenant != "platform" && p.Tenant != r.Principal.Tenant {
			continue
		}
		list, err := cedar.NewPolicyListFromBytes("", []byte(p.Body))
		if err != nil {
			t.Fatal(err)
		}
		for n, pol := range list {
			id := cedar.PolicyID(fmt.Sprintf("%s/%s#%d", p.Tenant, p.Name, n))
			ps.Add(id, pol)
			forbids[id] = pol.Effect() == cedar.Forbid
		}
	}
	em := types.EntityMap{}
	groupsOf := map[string][]types.EntityUID{}
	for _, m := range d.Members {
		g := types.NewEntityUID("Group", types.String(m.Tenant+"/"+m.Group))
		em[g] = types.Entity{UID: g, Parents: types.NewEntityUIDSet(types.NewEntityUID("Tenant", types.String(m.Tenant))),
			Attributes: types.NewRecord(types.RecordMap{"tenant": types.NewEntityUID("Tenant", types.String(m.Tenant)), "name": types.String(m.Group)})}
		groupsOf[m.Tenant+"/"+m.Member] = append(groupsOf[m.Tenant+"/"+m.Member], g)
	}
	for _, tn := range d.Tenants {
		uid := types.NewEntityUID("Tenant", types.String(tn.Name))
		em[uid] = types.Entity{UID: uid, Attributes: types.NewRecord(types.RecordMap{"name": types.String(tn.Name), "platform": types.Boolean(tn.Platform)})}
	}
	principalLike := func(typ, tenant, name string) types.Entity {
		uid := types.NewEntityUID(types.EntityType(typ), types.String(tenant+"/"+name))
		parents := append(slices.Clone(groupsOf[tenant+"/"+name]), types.NewEntityUID("Tenant", types.String(tenant)))
		return types.Entity{UID: uid, Parents: types.NewEntityUIDSet(parents...),
			Attributes: types.NewRecord(types.RecordMap{"tenant": types.NewEntityUID("Tenant", types.String(tenant)), "name": types.String(name)})}
	}
	p := principalLike(r.Principal.Type, r.Principal.Tenant, r.Principal.Name)
	em[p.UID] = p
	var res types.EntityUID
	switch r.Resource.Type {
	case "Pool":
		res = types.NewEntityUID("Pool", "platform/a100")
		var offered []types.Value
		for _, o := range r.Resource.Attrs["offeredTo"].([]EntityRef) {
			offered = append(offered, types.NewEntityUID("Tenant", types.String(o.ID)))
		}
		em[res] = types.Entity{UID: res, Parents: types.NewEntityUIDSet(types.NewEntityUID("Tenant", "platform")),
			Attributes: types.NewRecord(types.RecordMap{"tenant": types.NewEntityUID("Tenant", "platform"), "name": types.String("a100"), "offeredTo": types.NewSet(offered...)})}
	case "User":
		e := principalLike("User", r.Resource.Tenant, r.Resource.ID)
		res, em[e.UID] = e.UID, e
	case "Tenant":
		res = types.NewEntityUID("Tenant", types.String(r.Resource.Tenant))
	case "System":
		res = types.NewEntityUID("System", "deployment")
		em[res] = types.Entity{UID: res}
	}
	ctx := types.RecordMap{}
	for k, v := range r.Context {
		switch v := v.(type) {
		case int:
			ctx[types.String(k)] = types.Long(v)
		case string:
			ctx[types.String(k)] = types.String(v)
		}
	}
	ok, diag := cedar.Authorize(ps, em, cedar.Request{Principal: p.UID, Action: types.NewEntityUID("Action", types.String(r.Action)), Resource: res, Context: types.NewRecord(ctx)})
	var dec Decision
	var erred []string
	for _, e := range diag.Errors {
		dec.Errors = append(dec.Errors, e.Message)
		if forbids[e.PolicyID] {
			erred = append(erred, string(e.PolicyID))
		}
	}
	for _, rs := range diag.Reasons {
		dec.Policies = append(dec.Policies, string(rs.PolicyID))
	}
	dec.Allow = bool(ok)
	if len(erred) > 0 {
		if ok {
			dec.Policies = nil
		}
		dec.Allow = false
		dec.Policies = append(dec.Policies, erred...)
	}
	slices.Sort(dec.Policies)
	return dec
}
