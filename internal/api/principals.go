package api

import (
	"context"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
)

// Users and service accounts are both principals: one table, one set of
// helpers here, two thin services below.

// principals holds the helpers both principal services share.
type principals struct {
	base
	kind store.PrincipalKind
	typ  string // Cedar entity type
	noun string // for messages
}

func (p *principals) create(ctx context.Context, pr store.Principal) (store.Principal, error) {
	pr.Tenant, pr.Kind = callFrom(ctx).tenant(), p.kind
	if err := checkName(p.noun, pr.Name, false); err != nil {
		return store.Principal{}, err
	}
	for f, v := range map[string]string{"display_name": pr.DisplayName, "email": pr.Email, "description": pr.Description} {
		if err := checkLen(f, v, 256); err != nil {
			return store.Principal{}, err
		}
	}
	callFrom(ctx).AuditResource = resourceFor(p.typ, pr.Tenant, pr.Name).String()
	var out store.Principal
	err := p.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		out, err = q.CreatePrincipal(ctx, pr)
		err = alreadyExists(err, "a user or service account "+pr.Tenant+"/"+pr.Name)
		return notFoundAs(err, typeTenant, pr.Tenant, "")
	})
	return out, err
}

// get returns a principal of this service's kind and its groups; one of the
// other kind is not found here.
func (p *principals) get(ctx context.Context, name string) (store.Principal, []string, error) {
	tenant := callFrom(ctx).tenant()
	pr, err := p.store.GetPrincipal(ctx, tenant, name)
	if err == nil && pr.Kind != p.kind {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Principal{}, nil, notFoundAs(err, p.typ, tenant, name)
	}
	groups, err := p.store.ListPrincipalGroups(ctx, tenant, name)
	return pr, groups, err
}

func (p *principals) list(ctx context.Context) ([]store.Principal, [][]string, error) {
	tenant := callFrom(ctx).tenant()
	prs, err := p.store.ListPrincipals(ctx, tenant, p.kind)
	if err != nil {
		return nil, nil, err
	}
	groups := make([][]string, len(prs))
	for i, pr := range prs {
		if groups[i], err = p.store.ListPrincipalGroups(ctx, tenant, pr.Name); err != nil {
			return nil, nil, err
		}
	}
	return prs, groups, nil
}

// update applies change to the stored principal and writes it back.
func (p *principals) update(ctx context.Context, name string, change func(*store.Principal) error) (store.Principal, []string, error) {
	tenant := callFrom(ctx).tenant()
	var out store.Principal
	var groups []string
	err := p.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		pr, err := q.GetPrincipal(ctx, tenant, name)
		if err == nil && pr.Kind != p.kind {
			err = store.ErrNotFound
		}
		if err != nil {
			return notFoundAs(err, p.typ, tenant, name)
		}
		if err := change(&pr); err != nil {
			return err
		}
		if out, err = q.UpdatePrincipal(ctx, pr); err != nil {
			return err
		}
		groups, err = q.ListPrincipalGroups(ctx, tenant, name)
		return err
	})
	return out, groups, err
}

func (p *principals) delete(ctx context.Context, name string) error {
	tenant := callFrom(ctx).tenant()
	return p.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		pr, err := q.GetPrincipal(ctx, tenant, name)
		if err == nil && pr.Kind != p.kind {
			err = store.ErrNotFound
		}
		if err != nil {
			return notFoundAs(err, p.typ, tenant, name)
		}
		return q.DeletePrincipal(ctx, tenant, name)
	})
}

// setIf sets *dst from an optional request field when present, bounded in length.
func setIf(dst *string, field string, v *string) error {
	if v == nil {
		return nil
	}
	if err := checkLen(field, *v, 256); err != nil {
		return err
	}
	*dst = *v
	return nil
}

// userService manages users.
type userService struct{ principals }

var _ apiv1connect.UserServiceHandler = (*userService)(nil)

func (s *userService) CreateUser(ctx context.Context, req *connect.Request[apiv1.CreateUserRequest]) (*connect.Response[apiv1.CreateUserResponse], error) {
	m := req.Msg
	pr, err := s.create(ctx, store.Principal{Name: m.GetName(), DisplayName: m.GetDisplayName(), Email: m.GetEmail()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateUserResponse{User: userProto(pr, nil)}), nil
}

func (s *userService) GetUser(ctx context.Context, req *connect.Request[apiv1.GetUserRequest]) (*connect.Response[apiv1.GetUserResponse], error) {
	pr, groups, err := s.get(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetUserResponse{User: userProto(pr, groups)}), nil
}

func (s *userService) ListUsers(ctx context.Context, _ *connect.Request[apiv1.ListUsersRequest]) (*connect.Response[apiv1.ListUsersResponse], error) {
	prs, groups, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListUsersResponse{}
	for i, pr := range prs {
		res.Users = append(res.Users, userProto(pr, groups[i]))
	}
	return connect.NewResponse(res), nil
}

func (s *userService) UpdateUser(ctx context.Context, req *connect.Request[apiv1.UpdateUserRequest]) (*connect.Response[apiv1.UpdateUserResponse], error) {
	m := req.Msg
	pr, groups, err := s.update(ctx, m.GetName(), func(p *store.Principal) error {
		if err := setIf(&p.DisplayName, "display_name", m.DisplayName); err != nil {
			return err
		}
		return setIf(&p.Email, "email", m.Email)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UpdateUserResponse{User: userProto(pr, groups)}), nil
}

func (s *userService) DeleteUser(ctx context.Context, req *connect.Request[apiv1.DeleteUserRequest]) (*connect.Response[apiv1.DeleteUserResponse], error) {
	if err := s.delete(ctx, req.Msg.GetName()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeleteUserResponse{}), nil
}

// serviceAccountService manages service accounts.
type serviceAccountService struct{ principals }

var _ apiv1connect.ServiceAccountServiceHandler = (*serviceAccountService)(nil)

func (s *serviceAccountService) CreateServiceAccount(ctx context.Context, req *connect.Request[apiv1.CreateServiceAccountRequest]) (*connect.Response[apiv1.CreateServiceAccountResponse], error) {
	m := req.Msg
	pr, err := s.create(ctx, store.Principal{Name: m.GetName(), Description: m.GetDescription()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateServiceAccountResponse{ServiceAccount: serviceAccountProto(pr, nil)}), nil
}

func (s *serviceAccountService) GetServiceAccount(ctx context.Context, req *connect.Request[apiv1.GetServiceAccountRequest]) (*connect.Response[apiv1.GetServiceAccountResponse], error) {
	pr, groups, err := s.get(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetServiceAccountResponse{ServiceAccount: serviceAccountProto(pr, groups)}), nil
}

func (s *serviceAccountService) ListServiceAccounts(ctx context.Context, _ *connect.Request[apiv1.ListServiceAccountsRequest]) (*connect.Response[apiv1.ListServiceAccountsResponse], error) {
	prs, groups, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListServiceAccountsResponse{}
	for i, pr := range prs {
		res.ServiceAccounts = append(res.ServiceAccounts, serviceAccountProto(pr, groups[i]))
	}
	return connect.NewResponse(res), nil
}

func (s *serviceAccountService) UpdateServiceAccount(ctx context.Context, req *connect.Request[apiv1.UpdateServiceAccountRequest]) (*connect.Response[apiv1.UpdateServiceAccountResponse], error) {
	m := req.Msg
	pr, groups, err := s.update(ctx, m.GetName(), func(p *store.Principal) error {
		return setIf(&p.Description, "description", m.Description)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UpdateServiceAccountResponse{ServiceAccount: serviceAccountProto(pr, groups)}), nil
}

func (s *serviceAccountService) DeleteServiceAccount(ctx context.Context, req *connect.Request[apiv1.DeleteServiceAccountRequest]) (*connect.Response[apiv1.DeleteServiceAccountResponse], error) {
	if err := s.delete(ctx, req.Msg.GetName()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeleteServiceAccountResponse{}), nil
}
