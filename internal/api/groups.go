package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
)

// groupService manages groups and their members.
type groupService struct{ base }

var _ apiv1connect.GroupServiceHandler = (*groupService)(nil)

func (s *groupService) CreateGroup(ctx context.Context, req *connect.Request[apiv1.CreateGroupRequest]) (*connect.Response[apiv1.CreateGroupResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	if err := checkName("group", m.GetName(), false); err != nil {
		return nil, err
	}
	if err := checkLen("description", m.GetDescription(), 256); err != nil {
		return nil, err
	}
	callFrom(ctx).AuditResource = resourceFor(typeGroup, tenant, m.GetName()).String()
	var g store.Group
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		var err error
		g, err = q.CreateGroup(ctx, store.Group{Tenant: tenant, Name: m.GetName(), Description: m.GetDescription()})
		err = alreadyExists(err, "group "+tenant+"/"+m.GetName())
		return notFoundAs(err, typeTenant, tenant, "")
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateGroupResponse{Group: groupProto(g, nil)}), nil
}

// getGroup reads a group with its members through q.
func getGroup(ctx context.Context, q store.Querier, tenant, name string) (*apiv1.Group, error) {
	g, err := q.GetGroup(ctx, tenant, name)
	if err != nil {
		return nil, notFoundAs(err, typeGroup, tenant, name)
	}
	members, err := q.ListGroupMembers(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	return groupProto(g, members), nil
}

func (s *groupService) GetGroup(ctx context.Context, req *connect.Request[apiv1.GetGroupRequest]) (*connect.Response[apiv1.GetGroupResponse], error) {
	g, err := getGroup(ctx, s.store, callFrom(ctx).tenant(), req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetGroupResponse{Group: g}), nil
}

func (s *groupService) ListGroups(ctx context.Context, _ *connect.Request[apiv1.ListGroupsRequest]) (*connect.Response[apiv1.ListGroupsResponse], error) {
	tenant := callFrom(ctx).tenant()
	groups, err := s.store.ListGroups(ctx, tenant)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListGroupsResponse{}
	for _, g := range groups {
		members, err := s.store.ListGroupMembers(ctx, tenant, g.Name)
		if err != nil {
			return nil, err
		}
		res.Groups = append(res.Groups, groupProto(g, members))
	}
	return connect.NewResponse(res), nil
}

func (s *groupService) UpdateGroup(ctx context.Context, req *connect.Request[apiv1.UpdateGroupRequest]) (*connect.Response[apiv1.UpdateGroupResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	var out *apiv1.Group
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		g, err := q.GetGroup(ctx, tenant, m.GetName())
		if err != nil {
			return notFoundAs(err, typeGroup, tenant, m.GetName())
		}
		if err := setIf(&g.Description, "description", m.Description); err != nil {
			return err
		}
		if _, err := q.UpdateGroup(ctx, g); err != nil {
			return err
		}
		out, err = getGroup(ctx, q, tenant, m.GetName())
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UpdateGroupResponse{Group: out}), nil
}

func (s *groupService) DeleteGroup(ctx context.Context, req *connect.Request[apiv1.DeleteGroupRequest]) (*connect.Response[apiv1.DeleteGroupResponse], error) {
	tenant, name := callFrom(ctx).tenant(), req.Msg.GetName()
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		return notFoundAs(q.DeleteGroup(ctx, tenant, name), typeGroup, tenant, name)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeleteGroupResponse{}), nil
}

func (s *groupService) AddGroupMember(ctx context.Context, req *connect.Request[apiv1.AddGroupMemberRequest]) (*connect.Response[apiv1.AddGroupMemberResponse], error) {
	m := req.Msg
	out, err := s.changeMembers(ctx, m.GetGroup(), m.GetMember(), func(ctx context.Context, q store.Querier, tenant string) error {
		if _, err := q.GetPrincipal(ctx, tenant, m.GetMember()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return connect.NewError(connect.CodeNotFound, errors.New("no user or service account "+tenant+"/"+m.GetMember()))
			}
			return err
		}
		return q.AddGroupMember(ctx, tenant, m.GetGroup(), m.GetMember())
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.AddGroupMemberResponse{Group: out}), nil
}

func (s *groupService) RemoveGroupMember(ctx context.Context, req *connect.Request[apiv1.RemoveGroupMemberRequest]) (*connect.Response[apiv1.RemoveGroupMemberResponse], error) {
	m := req.Msg
	out, err := s.changeMembers(ctx, m.GetGroup(), m.GetMember(), func(ctx context.Context, q store.Querier, tenant string) error {
		err := q.RemoveGroupMember(ctx, tenant, m.GetGroup(), m.GetMember())
		if errors.Is(err, store.ErrNotFound) {
			return connect.NewError(connect.CodeNotFound, errors.New(m.GetMember()+" is not a member of group "+tenant+"/"+m.GetGroup()))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.RemoveGroupMemberResponse{Group: out}), nil
}

// changeMembers checks the group exists, applies change and returns the
// group as changed, all in one audited transaction.
func (s *groupService) changeMembers(ctx context.Context, group, member string, change func(context.Context, store.Querier, string) error) (*apiv1.Group, error) {
	tenant := callFrom(ctx).tenant()
	if member == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("member is required: name a user or service account"))
	}
	var out *apiv1.Group
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := q.GetGroup(ctx, tenant, group); err != nil {
			return notFoundAs(err, typeGroup, tenant, group)
		}
		if err := change(ctx, q, tenant); err != nil {
			return err
		}
		var err error
		out, err = getGroup(ctx, q, tenant, group)
		return err
	})
	return out, err
}
