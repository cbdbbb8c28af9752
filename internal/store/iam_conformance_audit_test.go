package store_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
)

// The authorization epoch and the audit log, run by TestIAMConformance.

// exerciseEpoch makes each kind of change once, each on a fresh tenant, and
// checks that the epoch grew after every change to tenants, principals,
// groups, memberships and policies (one case per table and operation; the
// memberships table has no update) and stood still after token and audit
// writes.
func exerciseEpoch(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	type change func(ctx context.Context, q store.Querier, tenant string) error
	for i, tc := range []struct {
		name   string
		change change
		bumps  bool
	}{
		{"tenants/insert", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.CreateTenant(ctx, store.Tenant{Name: tn + "-new"})
			return err
		}, true},
		{"tenants/update", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.UpdateTenant(ctx, tn, "renamed")
			return err
		}, true},
		{"tenants/delete", func(ctx context.Context, q store.Querier, tn string) error {
			return q.DeleteTenant(ctx, tn)
		}, true},
		{"principals/insert", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.CreatePrincipal(ctx, store.Principal{Tenant: tn, Name: "carol", Kind: store.PrincipalUser})
			return err
		}, true},
		{"principals/update", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.UpdatePrincipal(ctx, store.Principal{Tenant: tn, Name: "alice", Email: "a@example.test"})
			return err
		}, true},
		{"principals/delete", func(ctx context.Context, q store.Querier, tn string) error {
			return q.DeletePrincipal(ctx, tn, "bob")
		}, true},
		{"groups/insert", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.CreateGroup(ctx, store.Group{Tenant: tn, Name: "ops"})
			return err
		}, true},
		{"groups/update", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.UpdateGroup(ctx, store.Group{Tenant: tn, Name: "devs", Description: "d"})
			return err
		}, true},
		{"groups/delete", func(ctx context.Context, q store.Querier, tn string) error {
			return q.DeleteGroup(ctx, tn, "devs")
		}, true},
		{"group_members/insert", func(ctx context.Context, q store.Querier, tn string) error {
			return q.AddGroupMember(ctx, tn, "devs", "bob")
		}, true},
		{"group_members/delete", func(ctx context.Context, q store.Querier, tn string) error {
			return q.RemoveGroupMember(ctx, tn, "devs", "alice")
		}, true},
		{"policies/insert", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.PutPolicy(ctx, store.Policy{Tenant: tn, Name: "new", Body: "x"})
			return err
		}, true},
		{"policies/update", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.PutPolicy(ctx, store.Policy{Tenant: tn, Name: "p", Body: "y"})
			return err
		}, true},
		{"policies/delete", func(ctx context.Context, q store.Querier, tn string) error {
			return q.DeletePolicy(ctx, tn, "p")
		}, true},
		{"CreateToken", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.CreateToken(ctx, newToken(ctx, t, q, tn+"-new", tn, "alice"))
			return err
		}, false},
		{"TouchToken", func(ctx context.Context, q store.Querier, tn string) error {
			return q.TouchToken(ctx, tn+"-tok")
		}, false},
		{"RevokeToken", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.RevokeToken(ctx, tn+"-tok")
			return err
		}, false},
		{"AuthenticateToken", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.AuthenticateToken(ctx, tn+"-tok")
			return err
		}, false},
		{"InsertAuditEvent", func(ctx context.Context, q store.Querier, tn string) error {
			_, err := q.InsertAuditEvent(ctx, store.AuditEvent{Tenant: tn, Action: "a", Decision: "deny"})
			return err
		}, false},
	} {
		// Subtests in sequence: they share the store and its one epoch.
		t.Run(tc.name, func(t *testing.T) {
			tenant := "e" + strconv.Itoa(i)
			must(q.CreateTenant(ctx, store.Tenant{Name: tenant}))(t)
			for _, p := range []string{"alice", "bob"} {
				must(q.CreatePrincipal(ctx, store.Principal{Tenant: tenant, Name: p, Kind: store.PrincipalUser}))(t)
			}
			must(q.CreateGroup(ctx, store.Group{Tenant: tenant, Name: "devs"}))(t)
			if err := q.AddGroupMember(ctx, tenant, "devs", "alice"); err != nil {
				t.Fatalf("AddGroupMember: %v", err)
			}
			must(q.PutPolicy(ctx, store.Policy{Tenant: tenant, Name: "p", Body: "x"}))(t)
			must(q.CreateToken(ctx, newToken(ctx, t, q, tenant+"-tok", tenant, "alice")))(t)

			before := must(q.AuthzEpoch(ctx))(t)
			if err := tc.change(ctx, q, tenant); err != nil {
				t.Fatalf("change: %v", err)
			}
			after := must(q.AuthzEpoch(ctx))(t)
			if tc.bumps && after <= before {
				t.Errorf("epoch %d, then %d after %s: want it to grow", before, after, tc.name)
			}
			if !tc.bumps && after != before {
				t.Errorf("epoch %d, then %d after %s: want it unchanged", before, after, tc.name)
			}
		})
	}
}

// auditEvents are the log exerciseAuditEvents writes, oldest first.
var auditEvents = []store.AuditEvent{
	{Tenant: "acme", Principal: `User::"acme/alice"`, Action: "compute:jobs:create", Resource: `Job::"acme/j1"`,
		Decision: "allow", Policies: []string{"acme/devs#0"}, Reason: "ok", RequestID: "r0"},
	{Tenant: "acme", Principal: `User::"acme/alice"`, Action: "compute:jobs:delete", Resource: `Job::"acme/j1"`,
		Decision: "deny", Reason: "no policy permits it", RequestID: "r1"},
	{Tenant: "acme", Principal: `User::"acme/bob"`, Action: "compute:jobs:create", Resource: `Job::"acme/j2"`,
		Decision: "allow", Policies: []string{"acme/devs#0", "acme/admins#1"}, RequestID: "r2"},
	{Tenant: "globex", Principal: `User::"globex/carol"`, Action: "compute:jobs:create", Resource: `Job::"globex/j3"`,
		Decision: "allow", RequestID: "r3"},
	{Action: "compute:tenants:list", Decision: "deny", Reason: "unauthenticated", RequestID: "r4"},
	{Tenant: "acme", Principal: `User::"acme/bob"`, Action: "compute:jobs:delete", Resource: `Job::"acme/j2"`,
		Decision: "allow", RequestID: "r5"},
}

// exerciseAuditEvents writes auditEvents and reads them back through each
// filter, alone and combined, starting from an empty log.
func exerciseAuditEvents(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	var got []store.AuditEvent // as inserted, oldest first
	before := must(q.Now(ctx))(t)
	for i, e := range auditEvents {
		if i > 0 {
			time.Sleep(2 * time.Millisecond) // distinct times on SQLite's millisecond clock
		}
		ins := must(q.InsertAuditEvent(ctx, e))(t)
		want := e
		want.ID, want.At = ins.ID, ins.At
		if !auditEqual(ins, want) {
			t.Errorf("InsertAuditEvent = %+v, want %+v", ins, want)
		}
		if i > 0 && (ins.ID <= got[i-1].ID || !ins.At.After(got[i-1].At)) {
			t.Errorf("InsertAuditEvent #%d = id %d at %v, after id %d at %v: want both to grow", i, ins.ID, ins.At, got[i-1].ID, got[i-1].At)
		}
		got = append(got, ins)
	}
	checkStamped(t, "InsertAuditEvent", before, must(q.Now(ctx))(t), got[0].At, got[len(got)-1].At)
	if got[0].At.Location() != time.UTC {
		t.Errorf("At location = %v, want UTC", got[0].At.Location())
	}
	if _, err := q.ListAuditEvents(ctx, store.AuditFilter{AllTenants: true}); err == nil {
		t.Errorf("ListAuditEvents(Limit 0) succeeded")
	}

	const alice, bob, carol = `User::"acme/alice"`, `User::"acme/bob"`, `User::"globex/carol"`
	for _, tc := range []struct {
		name string
		f    store.AuditFilter
		want []int // indexes into got, newest first
	}{
		{"tenant", store.AuditFilter{Tenant: "acme"}, []int{5, 2, 1, 0}},
		{"other tenant", store.AuditFilter{Tenant: "globex"}, []int{3}},
		{"no tenant", store.AuditFilter{}, []int{4}},
		{"all tenants", store.AuditFilter{AllTenants: true}, []int{5, 4, 3, 2, 1, 0}},
		{"all tenants ignores tenant", store.AuditFilter{Tenant: "globex", AllTenants: true}, []int{5, 4, 3, 2, 1, 0}},
		{"principal", store.AuditFilter{AllTenants: true, Principal: alice}, []int{1, 0}},
		{"principal in another tenant", store.AuditFilter{Tenant: "acme", Principal: carol}, nil},
		{"action", store.AuditFilter{AllTenants: true, Action: "compute:jobs:create"}, []int{3, 2, 0}},
		{"resource", store.AuditFilter{AllTenants: true, Resource: `Job::"acme/j2"`}, []int{5, 2}},
		{"tenant and action", store.AuditFilter{Tenant: "acme", Action: "compute:jobs:create"}, []int{2, 0}},
		{"principal and action", store.AuditFilter{Tenant: "acme", Principal: bob, Action: "compute:jobs:delete"}, []int{5}},
		{"principal, action and resource", store.AuditFilter{Tenant: "acme", Principal: alice, Action: "compute:jobs:delete", Resource: `Job::"acme/j1"`}, []int{1}},
		{"since", store.AuditFilter{AllTenants: true, Since: got[3].At}, []int{5, 4, 3}},
		{"until", store.AuditFilter{AllTenants: true, Until: got[1].At}, []int{0}},
		{"since and until", store.AuditFilter{AllTenants: true, Since: got[1].At, Until: got[4].At}, []int{3, 2, 1}},
		{"tenant and time range", store.AuditFilter{Tenant: "acme", Since: got[1].At, Until: got[4].At}, []int{2, 1}},
		{"before id", store.AuditFilter{Tenant: "acme", BeforeID: got[2].ID}, []int{1, 0}},
		{"before id and action", store.AuditFilter{AllTenants: true, Action: "compute:jobs:create", BeforeID: got[3].ID}, []int{2, 0}},
		{"limit", store.AuditFilter{AllTenants: true, Limit: 2}, []int{5, 4}},
		{"nothing", store.AuditFilter{AllTenants: true, Action: "compute:nodes:drain"}, nil},
	} {
		f := tc.f
		if f.Limit == 0 {
			f.Limit = 100
		}
		list := must(q.ListAuditEvents(ctx, f))(t)
		var want []store.AuditEvent
		for _, i := range tc.want {
			want = append(want, got[i])
		}
		if !slices.EqualFunc(list, want, auditEqual) {
			t.Errorf("ListAuditEvents(%s) = %v, want %v", tc.name, requestIDs(list), requestIDs(want))
		}
	}
}

// exerciseAuditPagination pages through one tenant's events three at a
// time, with another tenant's events in between, and checks that the pages
// join up with no gap and no duplicate.
func exerciseAuditPagination(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	var want []int64 // acme's IDs, newest first
	for i := range 12 {
		tenant := "acme"
		if i%3 == 2 {
			tenant = "globex"
		}
		e := must(q.InsertAuditEvent(ctx, store.AuditEvent{Tenant: tenant, Action: "a", Decision: "allow", RequestID: strconv.Itoa(i)}))(t)
		if tenant == "acme" {
			want = append([]int64{e.ID}, want...)
		}
	}
	for _, all := range []bool{false, true} {
		var ids []int64
		var sizes []int
		f := store.AuditFilter{Tenant: "acme", Action: "a", Limit: 3}
		if all {
			f = store.AuditFilter{AllTenants: true, Limit: 5}
		}
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatalf("pagination does not end: %v", ids)
			}
			list := must(q.ListAuditEvents(ctx, f))(t)
			if len(list) == 0 {
				break
			}
			sizes = append(sizes, len(list))
			for _, e := range list {
				if all && e.Tenant != "acme" {
					continue
				}
				ids = append(ids, e.ID)
			}
			f.BeforeID = list[len(list)-1].ID
		}
		wantSizes := "[3 3 2]"
		if all {
			wantSizes = "[5 5 2]"
		}
		if fmt.Sprint(sizes) != wantSizes || !slices.Equal(ids, want) {
			t.Errorf("all tenants %t: pages of %v with acme's %v; want pages of %s with %v", all, sizes, ids, wantSizes, want)
		}
	}
}

// auditEqual compares events field by field, the time with Equal and nil
// and empty policies alike.
func auditEqual(a, b store.AuditEvent) bool {
	return a.ID == b.ID && a.At.Equal(b.At) && a.Tenant == b.Tenant && a.Principal == b.Principal &&
		a.Action == b.Action && a.Resource == b.Resource && a.Decision == b.Decision &&
		slices.Equal(a.Policies, b.Policies) && a.Reason == b.Reason && a.RequestID == b.RequestID
}

// requestIDs names events by their request IDs in failure messages.
func requestIDs(es []store.AuditEvent) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.RequestID)
	}
	return out
}
