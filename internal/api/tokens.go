package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
)

// Token lifetimes: long enough to be useful, short enough that a leaked
// token dies on its own.
const (
	minTokenTTL = time.Minute
	maxTokenTTL = 366 * 24 * time.Hour
)

// tokenService manages API tokens.
type tokenService struct{ base }

var _ apiv1connect.TokenServiceHandler = (*tokenService)(nil)

func (s *tokenService) CreateToken(ctx context.Context, req *connect.Request[apiv1.CreateTokenRequest]) (*connect.Response[apiv1.CreateTokenResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	if m.GetPrincipal() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("principal is required: name the user or service account the token acts as"))
	}
	ttl := m.GetTtl().AsDuration()
	if m.GetTtl() == nil || ttl < minTokenTTL || ttl > maxTokenTTL {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ttl must be between %s and %s (one year)", minTokenTTL, maxTokenTTL))
	}
	if err := checkLen("description", m.GetDescription(), 256); err != nil {
		return nil, err
	}
	id, secret, hash := iam.NewToken()
	callFrom(ctx).AuditResource = resourceFor(typeToken, tenant, id).String()
	var t store.Token
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := q.GetPrincipal(ctx, tenant, m.GetPrincipal()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return connect.NewError(connect.CodeNotFound, errors.New("no user or service account "+tenant+"/"+m.GetPrincipal()))
			}
			return err
		}
		now, err := q.Now(ctx)
		if err != nil {
			return err
		}
		t, err = q.CreateToken(ctx, store.Token{
			ID: id, Tenant: tenant, Principal: m.GetPrincipal(), SecretHash: hash,
			Description: m.GetDescription(), ExpiresAt: now.Add(ttl),
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateTokenResponse{Token: tokenProto(t), Secret: secret}), nil
}

// getToken reads a token by id and answers not_found unless it belongs to
// the call's tenant: a token id alone must not reach across tenants.
func getToken(ctx context.Context, q store.Querier, tenant, id string) (store.Token, error) {
	t, err := q.GetToken(ctx, id)
	if err == nil && t.Tenant != tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Token{}, notFoundAs(err, typeToken, tenant, id)
	}
	return t, nil
}

func (s *tokenService) GetToken(ctx context.Context, req *connect.Request[apiv1.GetTokenRequest]) (*connect.Response[apiv1.GetTokenResponse], error) {
	t, err := getToken(ctx, s.store, callFrom(ctx).tenant(), req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.GetTokenResponse{Token: tokenProto(t)}), nil
}

func (s *tokenService) ListTokens(ctx context.Context, req *connect.Request[apiv1.ListTokensRequest]) (*connect.Response[apiv1.ListTokensResponse], error) {
	tokens, err := s.store.ListTokens(ctx, callFrom(ctx).tenant(), req.Msg.GetPrincipal())
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListTokensResponse{}
	for _, t := range tokens {
		res.Tokens = append(res.Tokens, tokenProto(t))
	}
	return connect.NewResponse(res), nil
}

func (s *tokenService) RevokeToken(ctx context.Context, req *connect.Request[apiv1.RevokeTokenRequest]) (*connect.Response[apiv1.RevokeTokenResponse], error) {
	tenant, id := callFrom(ctx).tenant(), req.Msg.GetId()
	var t store.Token
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if _, err := getToken(ctx, q, tenant, id); err != nil {
			return err
		}
		var err error
		t, err = q.RevokeToken(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.RevokeTokenResponse{Token: tokenProto(t)}), nil
}
