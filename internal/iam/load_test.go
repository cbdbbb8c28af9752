package iam_test

import (
	"context"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
	"github.com/better-compute/better-compute/internal/store/storetest"
)

// TestLoadDirectory reads the directory from a real store on both engines
// and decides with it through an Authorizer that follows the epoch.
func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, engine store.Engine) {
		t.Parallel()
		ctx := t.Context()
		s := storetest.Open(t, engine)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, tn := range []store.Tenant{{Name: "platform", Platform: true}, {Name: "acme"}} {
			_, err := s.CreateTenant(ctx, tn)
			must(err)
			_, err = s.CreateGroup(ctx, store.Group{Tenant: tn.Name, Name: "admins"})
			must(err)
		}
		for _, p := range []store.Principal{{Tenant: "acme", Name: "alice", Kind: store.PrincipalUser}, {Tenant: "acme", Name: "bob", Kind: store.PrincipalUser}} {
			_, err := s.CreatePrincipal(ctx, p)
			must(err)
		}
		must(s.AddGroupMember(ctx, "acme", "admins", "alice"))
		_, err := s.PutPolicy(ctx, store.Policy{Tenant: "acme", Name: "tenant-admins", Body: iam.TenantAdminsPolicy("acme")})
		must(err)
		_, err = s.PutPolicy(ctx, store.Policy{Tenant: "platform", Name: "platform-admins", Body: iam.PlatformAdminsPolicy()})
		must(err)

		d, err := iam.LoadDirectory(ctx, s)
		must(err)
		epoch, err := s.AuthzEpoch(ctx)
		must(err)
		if d.Epoch != epoch || d.Epoch == 0 {
			t.Errorf("directory epoch %d, store epoch %d", d.Epoch, epoch)
		}
		if want := []iam.DirTenant{{Name: "acme"}, {Name: "platform", Platform: true}}; !slices.Equal(d.Tenants, want) {
			t.Errorf("tenants %v, want %v", d.Tenants, want)
		}
		if want := []iam.DirMember{{Tenant: "acme", Group: "admins", Member: "alice"}}; !slices.Equal(d.Members, want) {
			t.Errorf("members %v, want %v", d.Members, want)
		}
		if len(d.Policies) != 2 || d.Policies[0].Tenant != "acme" || d.Policies[0].Body != iam.TenantAdminsPolicy("acme") {
			t.Errorf("policies %+v", d.Policies)
		}

		a := iam.NewAuthorizer(func(ctx context.Context) (iam.Directory, error) { return iam.LoadDirectory(ctx, s) })
		bob := iam.Request{Principal: user("acme", "bob"), Action: "compute:users:list", Resource: tenantRes("acme")}
		if dec, err := a.Authorize(ctx, epoch, bob); err != nil || dec.Allow {
			t.Fatalf("bob before joining = %+v, %v; want deny", dec, err)
		}
		// A membership bumps the epoch; the next call at the new epoch
		// sees it.
		must(s.AddGroupMember(ctx, "acme", "admins", "bob"))
		next, err := s.AuthzEpoch(ctx)
		must(err)
		if next <= epoch {
			t.Fatalf("epoch %d after a membership change, was %d", next, epoch)
		}
		if dec, err := a.Authorize(ctx, next, bob); err != nil || !dec.Allow {
			t.Fatalf("bob after joining = %+v, %v; want allow", dec, err)
		}
	})
}
