package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
)

// tenantService manages tenants.
type tenantService struct{ base }

var _ apiv1connect.TenantServiceHandler = (*tenantService)(nil)

// adminsGroup is the group every new tenant gets, which its tenant-admins
// policy lets do everything in the tenant.
const adminsGroup = "admins"

// tenantAdminsPolicy names the policy installed with each tenant.
const tenantAdminsPolicy = "tenant-admins"

func (s *tenantService) CreateTenant(ctx context.Context, req *connect.Request[apiv1.CreateTenantRequest]) (*connect.Response[apiv1.CreateTenantResponse], error) {
	m := req.Msg
	if err := checkName("tenant", m.GetName(), true); err != nil {
		return nil, err
	}
	if err := checkLen("display_name", m.GetDisplayName(), 200); err != nil {
		return nil, err
	}
	display := m.GetDisplayName()
	if display == "" {
		display = m.GetName()
	}
	callFrom(ctx).AuditResource = resourceFor(typeTenant, m.GetName(), "").String()
	var t store.Tenant
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		if t, err = q.CreateTenant(ctx, store.Tenant{Name: m.GetName(), DisplayName: display}); err != nil {
			return alreadyExists(err, "tenant "+m.GetName())
		}
		if _, err := q.CreateGroup(ctx, store.Group{Tenant: t.Name, Name: adminsGroup, Description: "Administrators of the tenant"}); err != nil {
			return err
		}
		_, err = q.PutPolicy(ctx, store.Policy{Tenant: t.Name, Name: tenantAdminsPolicy, Body: iam.TenantAdminsPolicy(t.Name)})
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateTenantResponse{Tenant: tenantProto(t)}), nil
}

func (s *tenantService) GetTenant(ctx context.Context, req *connect.Request[apiv1.GetTenantRequest]) (*connect.Response[apiv1.GetTenantResponse], error) {
	t, err := s.store.GetTenant(ctx, req.Msg.GetName())
	if err != nil {
		return nil, notFoundAs(err, typeTenant, req.Msg.GetName(), "")
	}
	return connect.NewResponse(&apiv1.GetTenantResponse{Tenant: tenantProto(t)}), nil
}

func (s *tenantService) ListTenants(ctx context.Context, _ *connect.Request[apiv1.ListTenantsRequest]) (*connect.Response[apiv1.ListTenantsResponse], error) {
	call := callFrom(ctx)
	var tenants []store.Tenant
	if call.Platform {
		var err error
		if tenants, err = s.store.ListTenants(ctx); err != nil {
			return nil, err
		}
	} else {
		// Anyone else sees only their own tenant: not a count, not a name more.
		t, err := s.store.GetTenant(ctx, call.Caller.Tenant)
		if err != nil {
			return nil, err
		}
		tenants = []store.Tenant{t}
	}
	res := &apiv1.ListTenantsResponse{}
	for _, t := range tenants {
		res.Tenants = append(res.Tenants, tenantProto(t))
	}
	return connect.NewResponse(res), nil
}

func (s *tenantService) UpdateTenant(ctx context.Context, req *connect.Request[apiv1.UpdateTenantRequest]) (*connect.Response[apiv1.UpdateTenantResponse], error) {
	m := req.Msg
	if err := checkLen("display_name", m.GetDisplayName(), 200); err != nil {
		return nil, err
	}
	var t store.Tenant
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		if m.DisplayName == nil {
			t, err = q.GetTenant(ctx, m.GetName())
		} else {
			t, err = q.UpdateTenant(ctx, m.GetName(), m.GetDisplayName())
		}
		return notFoundAs(err, typeTenant, m.GetName(), "")
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UpdateTenantResponse{Tenant: tenantProto(t)}), nil
}

func (s *tenantService) DeleteTenant(ctx context.Context, req *connect.Request[apiv1.DeleteTenantRequest]) (*connect.Response[apiv1.DeleteTenantResponse], error) {
	name := req.Msg.GetName()
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		t, err := q.GetTenant(ctx, name)
		if err != nil {
			return notFoundAs(err, typeTenant, name, "")
		}
		if t.Platform {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("the platform tenant cannot be deleted"))
		}
		// Nodes are the one thing a tenant delete does not take with it
		// (the store's RESTRICT, its only ErrConflict): they hold
		// certificates and live sessions, so they are revoked and deleted
		// on purpose, one by one. Unmapped, the conflict would read as
		// already_exists.
		err = q.DeleteTenant(ctx, name)
		if errors.Is(err, store.ErrConflict) {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("tenant %s still has nodes: revoke and delete them first (better-compute nodes list --tenant %s)", name, name))
		}
		return notFoundAs(err, typeTenant, name, "")
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeleteTenantResponse{}), nil
}
