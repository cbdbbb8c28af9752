package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/store"
)

// poolService manages pools and their offers.
//
// Every method but ListPools acts on a pool of the call's tenant: a pool of
// another tenant, even one offered to the caller's, answers not_found
// through the authorizer's tenant isolation, as a missing one does. Offered
// pools are visible read-only in ListPools; reservations will add access to
// shared pools.
type poolService struct{ base }

var _ apiv1connect.PoolServiceHandler = (*poolService)(nil)

func (s *poolService) CreatePool(ctx context.Context, req *connect.Request[apiv1.CreatePoolRequest]) (*connect.Response[apiv1.CreatePoolResponse], error) {
	m := req.Msg
	call := callFrom(ctx)
	tenant := call.tenant()
	if err := checkName("pool", m.GetName(), false); err != nil {
		return nil, err
	}
	if err := checkLen("description", m.GetDescription(), 256); err != nil {
		return nil, err
	}
	call.AuditResource = resourceFor(typePool, tenant, m.GetName()).String()
	var p *apiv1.Pool
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		created, err := q.CreatePool(ctx, store.Pool{Tenant: tenant, Name: m.GetName(), Description: m.GetDescription()})
		if err != nil {
			return alreadyExists(notFoundAs(err, typeTenant, tenant, ""), fmt.Sprintf("pool %s/%s", tenant, m.GetName()))
		}
		p, err = poolProto(ctx, q, created, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreatePoolResponse{Pool: p}), nil
}

func (s *poolService) ListPools(ctx context.Context, _ *connect.Request[apiv1.ListPoolsRequest]) (*connect.Response[apiv1.ListPoolsResponse], error) {
	tenant := callFrom(ctx).tenant()
	own, err := s.store.ListPools(ctx, tenant)
	if err != nil {
		return nil, err
	}
	offered, err := s.store.ListPoolsOfferedTo(ctx, tenant)
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListPoolsResponse{}
	for _, p := range own {
		pp, err := poolProto(ctx, s.store, p, true)
		if err != nil {
			return nil, err
		}
		res.Pools = append(res.Pools, pp)
	}
	for _, p := range offered {
		pp, err := poolProto(ctx, s.store, p, false)
		if err != nil {
			return nil, err
		}
		res.Pools = append(res.Pools, pp)
	}
	return connect.NewResponse(res), nil
}

func (s *poolService) GetPool(ctx context.Context, req *connect.Request[apiv1.GetPoolRequest]) (*connect.Response[apiv1.GetPoolResponse], error) {
	tenant, name := callFrom(ctx).tenant(), req.Msg.GetName()
	p, err := s.store.GetPool(ctx, tenant, name)
	if err != nil {
		return nil, notFoundAs(err, typePool, tenant, name)
	}
	pp, err := poolProto(ctx, s.store, p, true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetPoolResponse{Pool: pp}), nil
}

func (s *poolService) UpdatePool(ctx context.Context, req *connect.Request[apiv1.UpdatePoolRequest]) (*connect.Response[apiv1.UpdatePoolResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	if err := checkLen("description", m.GetDescription(), 256); err != nil {
		return nil, err
	}
	var p *apiv1.Pool
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := q.GetPool(ctx, tenant, m.GetName())
		if err != nil {
			return notFoundAs(err, typePool, tenant, m.GetName())
		}
		if m.Description != nil {
			if cur, err = q.UpdatePool(ctx, tenant, m.GetName(), m.GetDescription()); err != nil {
				return err
			}
		}
		p, err = poolProto(ctx, q, cur, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UpdatePoolResponse{Pool: p}), nil
}

func (s *poolService) DeletePool(ctx context.Context, req *connect.Request[apiv1.DeletePoolRequest]) (*connect.Response[apiv1.DeletePoolResponse], error) {
	tenant, name := callFrom(ctx).tenant(), req.Msg.GetName()
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		err := q.DeletePool(ctx, tenant, name)
		if errors.Is(err, store.ErrConflict) {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("pool %s/%s has adopted nodes or active reservations: adopt its nodes elsewhere and let its reservations end first", tenant, name))
		}
		return notFoundAs(err, typePool, tenant, name)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.DeletePoolResponse{}), nil
}

func (s *poolService) OfferPool(ctx context.Context, req *connect.Request[apiv1.OfferPoolRequest]) (*connect.Response[apiv1.OfferPoolResponse], error) {
	p, err := s.offer(ctx, req.Msg.GetName(), req.Msg.GetToTenant(), true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.OfferPoolResponse{Pool: p}), nil
}

func (s *poolService) UnofferPool(ctx context.Context, req *connect.Request[apiv1.UnofferPoolRequest]) (*connect.Response[apiv1.UnofferPoolResponse], error) {
	p, err := s.offer(ctx, req.Msg.GetName(), req.Msg.GetToTenant(), false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.UnofferPoolResponse{Pool: p}), nil
}

// offer offers a pool of the call's tenant to another tenant, or withdraws
// the offer, and returns the pool as it is then.
func (s *poolService) offer(ctx context.Context, name, to string, offer bool) (*apiv1.Pool, error) {
	tenant := callFrom(ctx).tenant()
	if to == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("to_tenant is required: name the tenant to offer the pool to"))
	}
	var p *apiv1.Pool
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := q.GetPool(ctx, tenant, name)
		if err != nil {
			return notFoundAs(err, typePool, tenant, name)
		}
		if offer {
			if err := q.OfferPool(ctx, tenant, name, to); errors.Is(err, store.ErrNotFound) {
				return connect.NewError(connect.CodeNotFound, fmt.Errorf("tenant %q not found: list tenants with better-compute tenants list", to))
			} else if err != nil {
				return err
			}
		} else {
			if err := q.UnofferPool(ctx, tenant, name, to); errors.Is(err, store.ErrNotFound) {
				return connect.NewError(connect.CodeNotFound, fmt.Errorf("pool %s/%s is not offered to tenant %q", tenant, name, to))
			} else if err != nil {
				return err
			}
		}
		p, err = poolProto(ctx, q, cur, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// poolQuerier is what poolProto reads: a transaction or the store.
type poolQuerier interface {
	ListPoolOffers(ctx context.Context, poolTenant, pool string) ([]store.PoolOffer, error)
	FreeDevices(ctx context.Context, poolTenant, pool, modelKey string) (map[string]int, error)
}

// poolProto converts a pool with its free GPUs; owner adds its offers,
// which only the owning tenant sees.
func poolProto(ctx context.Context, q poolQuerier, p store.Pool, owner bool) (*apiv1.Pool, error) {
	pp := &apiv1.Pool{
		Tenant:      p.Tenant,
		Name:        p.Name,
		Description: p.Description,
		CreateTime:  ts(p.CreatedAt),
		UpdateTime:  ts(p.UpdatedAt),
	}
	if owner {
		offers, err := q.ListPoolOffers(ctx, p.Tenant, p.Name)
		if err != nil {
			return nil, err
		}
		for _, o := range offers {
			pp.OfferedTo = append(pp.OfferedTo, o.Tenant)
		}
	}
	free, err := q.FreeDevices(ctx, p.Tenant, p.Name, "")
	if err != nil {
		return nil, err
	}
	if len(free) > 0 {
		pp.FreeGpus = make(map[string]int32, len(free))
		for k, n := range free {
			pp.FreeGpus[k] = int32(n)
		}
	}
	return pp, nil
}
