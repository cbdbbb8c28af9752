package iam

import (
	"context"
	"fmt"

	"github.com/better-compute/better-compute/internal/store"
)

// LoadDirectory reads the directory from the store: the authorization epoch
// first, then every tenant, membership and policy. Reading the epoch first
// makes the directory at least as new as the epoch it is labeled with (a
// change that lands between the reads makes it newer, which only costs one
// more reload), never older, which could let a stale decision pass for a
// current one. Pass a transaction's Querier to read one consistent snapshot.
func LoadDirectory(ctx context.Context, q store.IAMQuerier) (Directory, error) {
	epoch, err := q.AuthzEpoch(ctx)
	if err != nil {
		return Directory{}, fmt.Errorf("load directory: read the authorization epoch: %w", err)
	}
	tenants, err := q.ListTenants(ctx)
	if err != nil {
		return Directory{}, fmt.Errorf("load directory: list tenants: %w", err)
	}
	members, err := q.ListAllGroupMembers(ctx)
	if err != nil {
		return Directory{}, fmt.Errorf("load directory: list group members: %w", err)
	}
	pols, err := q.ListAllPolicies(ctx)
	if err != nil {
		return Directory{}, fmt.Errorf("load directory: list policies: %w", err)
	}
	d := Directory{
		Epoch:    epoch,
		Tenants:  make([]DirTenant, len(tenants)),
		Members:  make([]DirMember, len(members)),
		Policies: make([]DirPolicy, len(pols)),
	}
	for i, t := range tenants {
		d.Tenants[i] = DirTenant{Name: t.Name, Platform: t.Platform}
	}
	for i, m := range members {
		d.Members[i] = DirMember{Tenant: m.Tenant, Group: m.Group, Member: m.Member}
	}
	for i, p := range pols {
		d.Policies[i] = DirPolicy{Tenant: p.Tenant, Name: p.Name, Body: p.Body}
	}
	return d, nil
}
