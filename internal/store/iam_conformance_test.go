package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestIAMConformance runs every IAMQuerier method on both engines: keys,
// conflicts, missing parents, cascades, the authorization epoch and its
// triggers, token authentication and the audit log's filters.
func TestIAMConformance(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()

		t.Run("Tenants", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseTenants(ctx, t, s)
		})

		t.Run("PlatformTenant", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			ops := must(s.CreateTenant(ctx, store.Tenant{Name: "ops", Platform: true}))(t)
			if !ops.Platform {
				t.Errorf("CreateTenant(platform) = %+v, want Platform", ops)
			}
			must(s.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
			must(s.CreateTenant(ctx, store.Tenant{Name: "globex"}))(t)
			_, err := s.CreateTenant(ctx, store.Tenant{Name: "ops2", Platform: true})
			wantIs(t, "CreateTenant(second platform)", err, store.ErrConflict)
			if err := s.DeleteTenant(ctx, "ops"); err != nil {
				t.Fatalf("DeleteTenant(ops): %v", err)
			}
			if got := must(s.CreateTenant(ctx, store.Tenant{Name: "ops2", Platform: true}))(t); !got.Platform {
				t.Errorf("CreateTenant(platform after delete) = %+v, want Platform", got)
			}
		})

		t.Run("Principals", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exercisePrincipals(ctx, t, s)
		})

		t.Run("Groups", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseGroups(ctx, t, s)
		})

		t.Run("GroupMembers", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseGroupMembers(ctx, t, s)
		})

		t.Run("Tokens", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseTokens(ctx, t, s)
		})

		t.Run("AuthenticateToken", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseAuthenticateToken(ctx, t, s)
		})

		t.Run("Policies", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exercisePolicies(ctx, t, s)
		})

		t.Run("Cascades", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseCascades(ctx, t, s)
		})

		t.Run("Epoch", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseEpoch(ctx, t, s)
		})

		t.Run("EpochRollsBack", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			before := must(s.AuthzEpoch(ctx))(t)
			boom := errors.New("boom")
			err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				if _, err := q.CreateTenant(ctx, store.Tenant{Name: "acme"}); err != nil {
					return err
				}
				if inside, err := q.AuthzEpoch(ctx); err != nil || inside <= before {
					t.Errorf("AuthzEpoch inside the transaction = %d, %v; want > %d", inside, err, before)
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("InTx = %v, want boom", err)
			}
			if after := must(s.AuthzEpoch(ctx))(t); after != before {
				t.Errorf("AuthzEpoch after rollback = %d, want %d", after, before)
			}
			err = s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				_, err := q.CreateTenant(ctx, store.Tenant{Name: "acme"})
				return err
			})
			if err != nil {
				t.Fatalf("InTx: %v", err)
			}
			if after := must(s.AuthzEpoch(ctx))(t); after <= before {
				t.Errorf("AuthzEpoch after commit = %d, want > %d", after, before)
			}
		})

		t.Run("InTx", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseIAMInTx(ctx, t, s)
		})

		t.Run("AuditEvents", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseAuditEvents(ctx, t, s)
			// Not in exerciseAuditEvents: on PostgreSQL a failed statement
			// ends the transaction that AuditEventsInTx runs it in.
			if _, err := s.InsertAuditEvent(ctx, store.AuditEvent{Action: "a", Decision: "maybe"}); err == nil {
				t.Errorf("InsertAuditEvent(decision maybe) succeeded")
			}
		})

		t.Run("AuditEventsInTx", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
				exerciseAuditEvents(ctx, t, q)
				return nil
			})
			if err != nil {
				t.Fatalf("InTx: %v", err)
			}
		})

		t.Run("AuditPagination", func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, engine)
			exerciseAuditPagination(ctx, t, s)
		})
	})
}

// must returns a function that returns v, or ends the test on err; it
// takes a call's two results whole: must(s.GetTenant(ctx, "acme"))(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// wantIs reports an error unless errors.Is(err, target).
func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s = %v, want %v", what, err, target)
	}
}

// checkStamped reports an error unless created and updated were stamped by
// the store's clock between before and after, in UTC, created first.
func checkStamped(t *testing.T, what string, before, after, created, updated time.Time) {
	t.Helper()
	if created.Location() != time.UTC || updated.Location() != time.UTC {
		t.Errorf("%s: times in %v and %v, want UTC", what, created.Location(), updated.Location())
	}
	if created.Before(before) || updated.Before(created) || after.Before(updated) {
		t.Errorf("%s: store clock %v, created %v, updated %v, store clock %v: want non-decreasing",
			what, before, created, updated, after)
	}
}

func exerciseTenants(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	before := must(q.Now(ctx))(t)
	for _, name := range []string{"globex", "acme", "initech"} {
		got := must(q.CreateTenant(ctx, store.Tenant{Name: name, DisplayName: "The " + name}))(t)
		if got.Name != name || got.DisplayName != "The "+name || got.Platform {
			t.Errorf("CreateTenant(%s) = %+v", name, got)
		}
		if !got.CreatedAt.Equal(got.UpdatedAt) {
			t.Errorf("CreateTenant(%s): CreatedAt %v != UpdatedAt %v", name, got.CreatedAt, got.UpdatedAt)
		}
		checkStamped(t, "CreateTenant", before, must(q.Now(ctx))(t), got.CreatedAt, got.UpdatedAt)
	}
	_, err := q.CreateTenant(ctx, store.Tenant{Name: "acme"})
	wantIs(t, "CreateTenant(taken)", err, store.ErrConflict)
	if err != nil && err.Error() != `store: create tenant "acme": conflict` {
		t.Errorf("CreateTenant(taken) error text = %q", err)
	}
	_, err = q.GetTenant(ctx, "missing")
	wantIs(t, "GetTenant(missing)", err, store.ErrNotFound)
	_, err = q.UpdateTenant(ctx, "missing", "x")
	wantIs(t, "UpdateTenant(missing)", err, store.ErrNotFound)
	wantIs(t, "DeleteTenant(missing)", q.DeleteTenant(ctx, "missing"), store.ErrNotFound)

	created := must(q.GetTenant(ctx, "acme"))(t)
	updated := must(q.UpdateTenant(ctx, "acme", "ACME Corp"))(t)
	if updated.DisplayName != "ACME Corp" || !updated.CreatedAt.Equal(created.CreatedAt) || updated.UpdatedAt.Before(created.UpdatedAt) {
		t.Errorf("UpdateTenant = %+v, after %+v", updated, created)
	}
	if got := must(q.GetTenant(ctx, "acme"))(t); got != updated {
		t.Errorf("GetTenant = %+v, want %+v", got, updated)
	}
	if err := q.DeleteTenant(ctx, "initech"); err != nil {
		t.Errorf("DeleteTenant: %v", err)
	}
	var names []string
	for _, tn := range must(q.ListTenants(ctx))(t) {
		names = append(names, tn.Name+"="+tn.DisplayName)
	}
	if want := "[acme=ACME Corp globex=The globex]"; fmt.Sprint(names) != want {
		t.Errorf("ListTenants = %v, want %s", names, want)
	}
}

func exercisePrincipals(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	must(q.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
	must(q.CreateTenant(ctx, store.Tenant{Name: "globex"}))(t)
	before := must(q.Now(ctx))(t)
	alice := store.Principal{Tenant: "acme", Name: "alice", Kind: store.PrincipalUser, DisplayName: "Alice", Email: "alice@acme.test"}
	got := must(q.CreatePrincipal(ctx, alice))(t)
	checkStamped(t, "CreatePrincipal", before, must(q.Now(ctx))(t), got.CreatedAt, got.UpdatedAt)
	if alice.CreatedAt, alice.UpdatedAt = got.CreatedAt, got.UpdatedAt; got != alice {
		t.Errorf("CreatePrincipal = %+v, want %+v", got, alice)
	}
	for _, p := range []store.Principal{
		{Tenant: "acme", Name: "ci", Kind: store.PrincipalServiceAccount, Description: "builds"},
		{Tenant: "acme", Name: "bob", Kind: store.PrincipalUser},
		{Tenant: "globex", Name: "alice", Kind: store.PrincipalUser}, // names are per tenant
	} {
		must(q.CreatePrincipal(ctx, p))(t)
	}

	for _, tc := range []struct {
		name string
		p    store.Principal
		want error
	}{
		{"taken", store.Principal{Tenant: "acme", Name: "alice", Kind: store.PrincipalUser}, store.ErrConflict},
		{"taken by the other kind", store.Principal{Tenant: "acme", Name: "ci", Kind: store.PrincipalUser}, store.ErrConflict},
		{"missing tenant", store.Principal{Tenant: "missing", Name: "x", Kind: store.PrincipalUser}, store.ErrNotFound},
	} {
		_, err := q.CreatePrincipal(ctx, tc.p)
		wantIs(t, "CreatePrincipal("+tc.name+")", err, tc.want)
	}
	if _, err := q.CreatePrincipal(ctx, store.Principal{Tenant: "acme", Name: "x", Kind: "robot"}); err == nil {
		t.Errorf("CreatePrincipal(kind robot) succeeded")
	}

	if got := must(q.GetPrincipal(ctx, "acme", "alice"))(t); got != alice {
		t.Errorf("GetPrincipal = %+v, want %+v", got, alice)
	}
	_, err := q.GetPrincipal(ctx, "acme", "carol")
	wantIs(t, "GetPrincipal(missing)", err, store.ErrNotFound)

	for _, tc := range []struct {
		tenant string
		kind   store.PrincipalKind
		want   string
	}{
		{"acme", store.PrincipalUser, "[alice bob]"},
		{"acme", store.PrincipalServiceAccount, "[ci]"},
		{"acme", "", "[alice bob ci]"},
		{"globex", store.PrincipalUser, "[alice]"},
		{"missing", store.PrincipalUser, "[]"},
	} {
		var names []string
		for _, p := range must(q.ListPrincipals(ctx, tc.tenant, tc.kind))(t) {
			names = append(names, p.Name)
		}
		if fmt.Sprint(names) != tc.want {
			t.Errorf("ListPrincipals(%s, %q) = %v, want %s", tc.tenant, tc.kind, names, tc.want)
		}
	}

	upd := store.Principal{Tenant: "acme", Name: "alice", DisplayName: "Alice A.", Email: "a@acme.test", Description: "lead"}
	got = must(q.UpdatePrincipal(ctx, upd))(t)
	if got.DisplayName != upd.DisplayName || got.Email != upd.Email || got.Description != upd.Description ||
		got.Kind != store.PrincipalUser || !got.CreatedAt.Equal(alice.CreatedAt) || got.UpdatedAt.Before(alice.UpdatedAt) {
		t.Errorf("UpdatePrincipal = %+v, after %+v", got, alice)
	}
	_, err = q.UpdatePrincipal(ctx, store.Principal{Tenant: "acme", Name: "carol"})
	wantIs(t, "UpdatePrincipal(missing)", err, store.ErrNotFound)

	if err := q.DeletePrincipal(ctx, "acme", "bob"); err != nil {
		t.Errorf("DeletePrincipal: %v", err)
	}
	wantIs(t, "DeletePrincipal(deleted)", q.DeletePrincipal(ctx, "acme", "bob"), store.ErrNotFound)
	if _, err := q.GetPrincipal(ctx, "globex", "alice"); err != nil {
		t.Errorf("GetPrincipal(globex/alice) after acme's changes: %v", err)
	}
}

func exerciseGroups(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	must(q.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
	before := must(q.Now(ctx))(t)
	devs := must(q.CreateGroup(ctx, store.Group{Tenant: "acme", Name: "devs", Description: "developers"}))(t)
	checkStamped(t, "CreateGroup", before, must(q.Now(ctx))(t), devs.CreatedAt, devs.UpdatedAt)
	if devs.Tenant != "acme" || devs.Name != "devs" || devs.Description != "developers" {
		t.Errorf("CreateGroup = %+v", devs)
	}
	must(q.CreateGroup(ctx, store.Group{Tenant: "acme", Name: "admins"}))(t)
	_, err := q.CreateGroup(ctx, store.Group{Tenant: "acme", Name: "devs"})
	wantIs(t, "CreateGroup(taken)", err, store.ErrConflict)
	_, err = q.CreateGroup(ctx, store.Group{Tenant: "missing", Name: "devs"})
	wantIs(t, "CreateGroup(missing tenant)", err, store.ErrNotFound)

	if got := must(q.GetGroup(ctx, "acme", "devs"))(t); got != devs {
		t.Errorf("GetGroup = %+v, want %+v", got, devs)
	}
	_, err = q.GetGroup(ctx, "acme", "ops")
	wantIs(t, "GetGroup(missing)", err, store.ErrNotFound)

	got := must(q.UpdateGroup(ctx, store.Group{Tenant: "acme", Name: "devs", Description: "engineers"}))(t)
	if got.Description != "engineers" || !got.CreatedAt.Equal(devs.CreatedAt) || got.UpdatedAt.Before(devs.UpdatedAt) {
		t.Errorf("UpdateGroup = %+v, after %+v", got, devs)
	}
	_, err = q.UpdateGroup(ctx, store.Group{Tenant: "acme", Name: "ops"})
	wantIs(t, "UpdateGroup(missing)", err, store.ErrNotFound)

	var names []string
	for _, g := range must(q.ListGroups(ctx, "acme"))(t) {
		names = append(names, g.Name)
	}
	if want := "[admins devs]"; fmt.Sprint(names) != want {
		t.Errorf("ListGroups = %v, want %s", names, want)
	}
	if err := q.DeleteGroup(ctx, "acme", "admins"); err != nil {
		t.Errorf("DeleteGroup: %v", err)
	}
	wantIs(t, "DeleteGroup(deleted)", q.DeleteGroup(ctx, "acme", "admins"), store.ErrNotFound)
	if got := must(q.ListGroups(ctx, "acme"))(t); len(got) != 1 {
		t.Errorf("ListGroups after delete = %+v, want devs only", got)
	}
}

// seedDirectory creates tenants acme and globex, each with users alice and
// bob and groups devs and ops.
func seedDirectory(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	for _, tenant := range []string{"acme", "globex"} {
		must(q.CreateTenant(ctx, store.Tenant{Name: tenant}))(t)
		for _, p := range []string{"alice", "bob"} {
			must(q.CreatePrincipal(ctx, store.Principal{Tenant: tenant, Name: p, Kind: store.PrincipalUser}))(t)
		}
		for _, g := range []string{"devs", "ops"} {
			must(q.CreateGroup(ctx, store.Group{Tenant: tenant, Name: g}))(t)
		}
	}
}

func exerciseGroupMembers(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	seedDirectory(ctx, t, q)
	for _, m := range []store.GroupMember{
		{Tenant: "acme", Group: "devs", Member: "bob"},
		{Tenant: "acme", Group: "devs", Member: "alice"},
		{Tenant: "acme", Group: "devs", Member: "alice"}, // again: a no-op
		{Tenant: "acme", Group: "ops", Member: "alice"},
		{Tenant: "globex", Group: "devs", Member: "bob"},
	} {
		if err := q.AddGroupMember(ctx, m.Tenant, m.Group, m.Member); err != nil {
			t.Errorf("AddGroupMember(%+v): %v", m, err)
		}
	}
	for _, tc := range []struct{ name, tenant, group, member string }{
		{"missing group", "acme", "admins", "alice"},
		{"missing member", "acme", "devs", "carol"},
		{"missing tenant", "initech", "devs", "alice"},
	} {
		wantIs(t, "AddGroupMember("+tc.name+")", q.AddGroupMember(ctx, tc.tenant, tc.group, tc.member), store.ErrNotFound)
	}

	for _, tc := range []struct {
		list           func(ctx context.Context, tenant, name string) ([]string, error)
		what, tenant   string
		name, wantList string
	}{
		{q.ListGroupMembers, "ListGroupMembers", "acme", "devs", "[alice bob]"},
		{q.ListGroupMembers, "ListGroupMembers", "acme", "ops", "[alice]"},
		{q.ListGroupMembers, "ListGroupMembers", "globex", "ops", "[]"},
		{q.ListPrincipalGroups, "ListPrincipalGroups", "acme", "alice", "[devs ops]"},
		{q.ListPrincipalGroups, "ListPrincipalGroups", "globex", "alice", "[]"},
	} {
		if got := must(tc.list(ctx, tc.tenant, tc.name))(t); fmt.Sprint(got) != tc.wantList {
			t.Errorf("%s(%s, %s) = %v, want %s", tc.what, tc.tenant, tc.name, got, tc.wantList)
		}
	}
	_, err := q.ListGroupMembers(ctx, "acme", "admins")
	wantIs(t, "ListGroupMembers(missing group)", err, store.ErrNotFound)
	_, err = q.ListPrincipalGroups(ctx, "acme", "carol")
	wantIs(t, "ListPrincipalGroups(missing principal)", err, store.ErrNotFound)

	all := must(q.ListAllGroupMembers(ctx))(t)
	want := []store.GroupMember{
		{Tenant: "acme", Group: "devs", Member: "alice"},
		{Tenant: "acme", Group: "devs", Member: "bob"},
		{Tenant: "acme", Group: "ops", Member: "alice"},
		{Tenant: "globex", Group: "devs", Member: "bob"},
	}
	if !slices.Equal(all, want) {
		t.Errorf("ListAllGroupMembers = %+v, want %+v", all, want)
	}

	if err := q.RemoveGroupMember(ctx, "acme", "devs", "bob"); err != nil {
		t.Errorf("RemoveGroupMember: %v", err)
	}
	wantIs(t, "RemoveGroupMember(not a member)", q.RemoveGroupMember(ctx, "acme", "devs", "bob"), store.ErrNotFound)
	wantIs(t, "RemoveGroupMember(missing group)", q.RemoveGroupMember(ctx, "acme", "admins", "bob"), store.ErrNotFound)
	if got := must(q.ListGroupMembers(ctx, "acme", "devs"))(t); fmt.Sprint(got) != "[alice]" {
		t.Errorf("ListGroupMembers after remove = %v, want [alice]", got)
	}
}

// newToken returns a token record for tenant/principal expiring in an hour
// of the store's clock, to the microsecond both engines keep.
func newToken(ctx context.Context, t *testing.T, q store.Querier, id, tenant, principal string) store.Token {
	t.Helper()
	return store.Token{
		ID: id, Tenant: tenant, Principal: principal,
		SecretHash:  []byte("hash of " + id),
		Description: "token " + id,
		ExpiresAt:   must(q.Now(ctx))(t).Add(time.Hour).Truncate(time.Microsecond),
	}
}

func exerciseTokens(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	seedDirectory(ctx, t, q)
	before := must(q.Now(ctx))(t)
	want := newToken(ctx, t, q, "t1", "acme", "alice")
	t1 := must(q.CreateToken(ctx, want))(t)
	if t1.CreatedAt.Before(before) || t1.CreatedAt.Location() != time.UTC {
		t.Errorf("CreateToken CreatedAt = %v, want UTC, at or after %v", t1.CreatedAt, before)
	}
	want.CreatedAt = t1.CreatedAt
	if !tokensEqual(t1, want) {
		t.Errorf("CreateToken = %+v, want %+v", t1, want)
	}
	if !t1.LastUsedAt.IsZero() || !t1.RevokedAt.IsZero() {
		t.Errorf("CreateToken = %+v, want never used nor revoked", t1)
	}
	for _, id := range []string{"t2", "t3"} {
		time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
		principal := map[string]string{"t2": "bob", "t3": "alice"}[id]
		must(q.CreateToken(ctx, newToken(ctx, t, q, id, "acme", principal)))(t)
	}
	must(q.CreateToken(ctx, newToken(ctx, t, q, "g1", "globex", "alice")))(t)

	for _, tc := range []struct {
		name string
		tok  store.Token
		want error
	}{
		{"taken id", newToken(ctx, t, q, "t1", "acme", "bob"), store.ErrConflict},
		{"missing principal", newToken(ctx, t, q, "x1", "acme", "carol"), store.ErrNotFound},
		{"missing tenant", newToken(ctx, t, q, "x2", "initech", "alice"), store.ErrNotFound},
	} {
		_, err := q.CreateToken(ctx, tc.tok)
		wantIs(t, "CreateToken("+tc.name+")", err, tc.want)
	}

	if got := must(q.GetToken(ctx, "t1"))(t); !tokensEqual(got, t1) {
		t.Errorf("GetToken = %+v, want %+v", got, t1)
	}
	_, err := q.GetToken(ctx, "missing")
	wantIs(t, "GetToken(missing)", err, store.ErrNotFound)

	for _, tc := range []struct{ tenant, principal, want string }{
		{"acme", "", "[t3 t2 t1]"},
		{"acme", "alice", "[t3 t1]"},
		{"globex", "", "[g1]"},
		{"globex", "bob", "[]"},
	} {
		var ids []string
		for _, tok := range must(q.ListTokens(ctx, tc.tenant, tc.principal))(t) {
			ids = append(ids, tok.ID)
		}
		if fmt.Sprint(ids) != tc.want {
			t.Errorf("ListTokens(%s, %q) = %v, want %s", tc.tenant, tc.principal, ids, tc.want)
		}
	}

	if err := q.TouchToken(ctx, "t1"); err != nil {
		t.Fatalf("TouchToken: %v", err)
	}
	touched := must(q.GetToken(ctx, "t1"))(t)
	if touched.LastUsedAt.Before(t1.CreatedAt) || touched.LastUsedAt.Location() != time.UTC {
		t.Errorf("after TouchToken LastUsedAt = %v, want UTC, at or after %v", touched.LastUsedAt, t1.CreatedAt)
	}
	wantIs(t, "TouchToken(missing)", q.TouchToken(ctx, "missing"), store.ErrNotFound)

	revoked := must(q.RevokeToken(ctx, "t1"))(t)
	if revoked.RevokedAt.Before(touched.LastUsedAt) || !revoked.LastUsedAt.Equal(touched.LastUsedAt) {
		t.Errorf("RevokeToken = %+v, want RevokedAt stamped after %v", revoked, touched.LastUsedAt)
	}
	time.Sleep(2 * time.Millisecond)
	again := must(q.RevokeToken(ctx, "t1"))(t)
	if !again.RevokedAt.Equal(revoked.RevokedAt) {
		t.Errorf("RevokeToken again: RevokedAt = %v, want the first revocation's %v", again.RevokedAt, revoked.RevokedAt)
	}
	_, err = q.RevokeToken(ctx, "missing")
	wantIs(t, "RevokeToken(missing)", err, store.ErrNotFound)
}

// tokensEqual compares tokens field by field: times with Equal, the hash
// with bytes.Equal.
func tokensEqual(a, b store.Token) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Principal == b.Principal &&
		bytes.Equal(a.SecretHash, b.SecretHash) && a.Description == b.Description &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.LastUsedAt.Equal(b.LastUsedAt) && a.RevokedAt.Equal(b.RevokedAt)
}

func exerciseAuthenticateToken(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	must(q.CreateTenant(ctx, store.Tenant{Name: "ops", Platform: true}))(t)
	must(q.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
	must(q.CreatePrincipal(ctx, store.Principal{Tenant: "ops", Name: "ci", Kind: store.PrincipalServiceAccount}))(t)
	must(q.CreatePrincipal(ctx, store.Principal{Tenant: "acme", Name: "alice", Kind: store.PrincipalUser}))(t)
	opsTok := must(q.CreateToken(ctx, newToken(ctx, t, q, "ops1", "ops", "ci")))(t)
	acmeTok := must(q.CreateToken(ctx, newToken(ctx, t, q, "acme1", "acme", "alice")))(t)

	for _, tc := range []struct {
		tok      store.Token
		kind     store.PrincipalKind
		platform bool
	}{
		{opsTok, store.PrincipalServiceAccount, true},
		{acmeTok, store.PrincipalUser, false},
	} {
		epoch := must(q.AuthzEpoch(ctx))(t)
		before := must(q.Now(ctx))(t)
		got := must(q.AuthenticateToken(ctx, tc.tok.ID))(t)
		after := must(q.Now(ctx))(t)
		if !tokensEqual(got.Token, tc.tok) || got.Kind != tc.kind || got.Platform != tc.platform || got.Epoch != epoch {
			t.Errorf("AuthenticateToken(%s) = %+v, want token %+v, kind %s, platform %t, epoch %d",
				tc.tok.ID, got, tc.tok, tc.kind, tc.platform, epoch)
		}
		if got.Now.Before(before) || after.Before(got.Now) || got.Now.Location() != time.UTC {
			t.Errorf("AuthenticateToken(%s).Now = %v, want UTC between %v and %v", tc.tok.ID, got.Now, before, after)
		}
	}

	// The epoch it reads is the current one; a revoked token still comes
	// back, for the caller to refuse.
	must(q.UpdateTenant(ctx, "acme", "ACME"))(t)
	must(q.RevokeToken(ctx, "acme1"))(t)
	got := must(q.AuthenticateToken(ctx, "acme1"))(t)
	if epoch := must(q.AuthzEpoch(ctx))(t); got.Epoch != epoch || got.Token.RevokedAt.IsZero() {
		t.Errorf("AuthenticateToken after a change = %+v, want epoch %d and RevokedAt set", got, epoch)
	}
	_, err := q.AuthenticateToken(ctx, "missing")
	wantIs(t, "AuthenticateToken(missing)", err, store.ErrNotFound)
}

func exercisePolicies(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	must(q.CreateTenant(ctx, store.Tenant{Name: "acme"}))(t)
	must(q.CreateTenant(ctx, store.Tenant{Name: "globex"}))(t)
	before := must(q.Now(ctx))(t)
	first := must(q.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "devs", Body: "permit(principal, action, resource);"}))(t)
	checkStamped(t, "PutPolicy", before, must(q.Now(ctx))(t), first.CreatedAt, first.UpdatedAt)
	if !first.CreatedAt.Equal(first.UpdatedAt) || first.Body != "permit(principal, action, resource);" {
		t.Errorf("PutPolicy(new) = %+v", first)
	}
	time.Sleep(2 * time.Millisecond) // SQLite's clock ticks in milliseconds
	replaced := must(q.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "devs", Body: "forbid(principal, action, resource);"}))(t)
	if !replaced.CreatedAt.Equal(first.CreatedAt) || !replaced.UpdatedAt.After(first.UpdatedAt) || replaced.Body != "forbid(principal, action, resource);" {
		t.Errorf("PutPolicy(replace) = %+v, want CreatedAt %v kept, UpdatedAt after %v, the new body", replaced, first.CreatedAt, first.UpdatedAt)
	}
	if got := must(q.GetPolicy(ctx, "acme", "devs"))(t); got != replaced {
		t.Errorf("GetPolicy = %+v, want %+v", got, replaced)
	}
	_, err := q.GetPolicy(ctx, "acme", "ops")
	wantIs(t, "GetPolicy(missing)", err, store.ErrNotFound)
	_, err = q.PutPolicy(ctx, store.Policy{Tenant: "missing", Name: "p", Body: "x"})
	wantIs(t, "PutPolicy(missing tenant)", err, store.ErrNotFound)

	must(q.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "admins", Body: "a"}))(t)
	must(q.PutPolicy(ctx, store.Policy{Tenant: "globex", Name: "base", Body: "b"}))(t)
	names := func(ps []store.Policy) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Tenant+"/"+p.Name)
		}
		return fmt.Sprint(out)
	}
	if got, want := names(must(q.ListPolicies(ctx, "acme"))(t)), "[acme/admins acme/devs]"; got != want {
		t.Errorf("ListPolicies = %s, want %s", got, want)
	}
	if got, want := names(must(q.ListAllPolicies(ctx))(t)), "[acme/admins acme/devs globex/base]"; got != want {
		t.Errorf("ListAllPolicies = %s, want %s", got, want)
	}
	if err := q.DeletePolicy(ctx, "acme", "devs"); err != nil {
		t.Errorf("DeletePolicy: %v", err)
	}
	wantIs(t, "DeletePolicy(deleted)", q.DeletePolicy(ctx, "acme", "devs"), store.ErrNotFound)
	if got, want := names(must(q.ListAllPolicies(ctx))(t)), "[acme/admins globex/base]"; got != want {
		t.Errorf("ListAllPolicies after delete = %s, want %s", got, want)
	}
}

func exerciseCascades(ctx context.Context, t *testing.T, q store.Querier) {
	t.Helper()
	seedDirectory(ctx, t, q)
	for _, tenant := range []string{"acme", "globex"} {
		for _, m := range [][2]string{{"devs", "alice"}, {"devs", "bob"}, {"ops", "bob"}} {
			if err := q.AddGroupMember(ctx, tenant, m[0], m[1]); err != nil {
				t.Fatalf("AddGroupMember: %v", err)
			}
		}
		for _, p := range []string{"alice", "bob"} {
			must(q.CreateToken(ctx, newToken(ctx, t, q, tenant+"-"+p, tenant, p)))(t)
		}
		must(q.PutPolicy(ctx, store.Policy{Tenant: tenant, Name: "base", Body: "x"}))(t)
		must(q.InsertAuditEvent(ctx, store.AuditEvent{Tenant: tenant, Action: "compute:tenants:create", Decision: "allow"}))(t)
	}

	// A principal takes its memberships and tokens with it.
	if err := q.DeletePrincipal(ctx, "acme", "bob"); err != nil {
		t.Fatalf("DeletePrincipal: %v", err)
	}
	_, err := q.GetToken(ctx, "acme-bob")
	wantIs(t, "GetToken(deleted principal's)", err, store.ErrNotFound)
	if got := must(q.ListGroupMembers(ctx, "acme", "devs"))(t); fmt.Sprint(got) != "[alice]" {
		t.Errorf("ListGroupMembers(devs) after DeletePrincipal(bob) = %v, want [alice]", got)
	}
	if got := must(q.ListGroupMembers(ctx, "acme", "ops"))(t); len(got) != 0 {
		t.Errorf("ListGroupMembers(ops) after DeletePrincipal(bob) = %v, want none", got)
	}

	// A group takes its memberships, not its members.
	if err := q.DeleteGroup(ctx, "acme", "devs"); err != nil {
		t.Fatalf("DeleteGroup: %v", err)
	}
	if got := must(q.ListPrincipalGroups(ctx, "acme", "alice"))(t); len(got) != 0 {
		t.Errorf("ListPrincipalGroups(alice) after DeleteGroup(devs) = %v, want none", got)
	}

	// A tenant takes everything in it, except its audit events.
	if err := q.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("DeleteTenant: %v", err)
	}
	if got := must(q.ListPrincipals(ctx, "acme", ""))(t); len(got) != 0 {
		t.Errorf("ListPrincipals after DeleteTenant = %+v", got)
	}
	if got := must(q.ListGroups(ctx, "acme"))(t); len(got) != 0 {
		t.Errorf("ListGroups after DeleteTenant = %+v", got)
	}
	if got := must(q.ListTokens(ctx, "acme", ""))(t); len(got) != 0 {
		t.Errorf("ListTokens after DeleteTenant = %+v", got)
	}
	if got := must(q.ListPolicies(ctx, "acme"))(t); len(got) != 0 {
		t.Errorf("ListPolicies after DeleteTenant = %+v", got)
	}
	for _, m := range must(q.ListAllGroupMembers(ctx))(t) {
		if m.Tenant == "acme" {
			t.Errorf("ListAllGroupMembers after DeleteTenant has %+v", m)
		}
	}
	if got := must(q.ListAuditEvents(ctx, store.AuditFilter{Tenant: "acme", Limit: 10}))(t); len(got) != 1 {
		t.Errorf("ListAuditEvents(acme) after DeleteTenant = %+v, want its one event", got)
	}

	// The other tenant is untouched.
	if got := must(q.ListAllGroupMembers(ctx))(t); len(got) != 3 {
		t.Errorf("ListAllGroupMembers = %+v, want globex's 3", got)
	}
	if got := must(q.ListTokens(ctx, "globex", ""))(t); len(got) != 2 {
		t.Errorf("ListTokens(globex) = %+v, want 2", got)
	}
}

// exerciseIAMInTx runs a tenant's setup in one transaction and checks that
// a failure inside a transaction (a conflict, a missing parent) comes back
// through InTx as itself, undoing the writes before it.
func exerciseIAMInTx(ctx context.Context, t *testing.T, s *store.Store) {
	t.Helper()
	err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		seedDirectory(ctx, t, q)
		if err := q.AddGroupMember(ctx, "acme", "devs", "alice"); err != nil {
			return err
		}
		must(q.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "p", Body: "x"}))(t)
		tok := must(q.CreateToken(ctx, newToken(ctx, t, q, "tok", "acme", "alice")))(t)
		if err := q.TouchToken(ctx, tok.ID); err != nil {
			return err
		}
		auth := must(q.AuthenticateToken(ctx, tok.ID))(t)
		if epoch := must(q.AuthzEpoch(ctx))(t); auth.Epoch != epoch || auth.Kind != store.PrincipalUser {
			t.Errorf("AuthenticateToken in a transaction = %+v, want epoch %d", auth, epoch)
		}
		must(q.InsertAuditEvent(ctx, store.AuditEvent{Tenant: "acme", Action: "a", Decision: "allow"}))(t)
		return nil
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if got := must(s.ListGroupMembers(ctx, "acme", "devs"))(t); fmt.Sprint(got) != "[alice]" {
		t.Errorf("after commit ListGroupMembers = %v, want [alice]", got)
	}
	if got := must(s.GetToken(ctx, "tok"))(t); got.LastUsedAt.IsZero() {
		t.Errorf("after commit GetToken = %+v, want LastUsedAt set", got)
	}

	for _, tc := range []struct {
		name string
		fail func(ctx context.Context, q store.Querier) error
		want error
	}{
		{"conflict", func(ctx context.Context, q store.Querier) error {
			_, err := q.CreateTenant(ctx, store.Tenant{Name: "acme"})
			return err
		}, store.ErrConflict},
		{"missing parent", func(ctx context.Context, q store.Querier) error {
			return q.AddGroupMember(ctx, "acme", "devs", "carol")
		}, store.ErrNotFound},
		{"missing row", func(ctx context.Context, q store.Querier) error {
			return q.DeletePolicy(ctx, "acme", "missing")
		}, store.ErrNotFound},
	} {
		calls := 0
		err := s.InTx(ctx, func(ctx context.Context, q store.Querier) error {
			calls++
			if _, err := q.CreateTenant(ctx, store.Tenant{Name: "initech"}); err != nil {
				return err
			}
			return tc.fail(ctx, q)
		})
		wantIs(t, "InTx("+tc.name+")", err, tc.want)
		if calls != 1 {
			t.Errorf("InTx(%s) ran fn %d times, want 1", tc.name, calls)
		}
		_, err = s.GetTenant(ctx, "initech")
		wantIs(t, "GetTenant(initech) after InTx("+tc.name+")", err, store.ErrNotFound)
	}
}
