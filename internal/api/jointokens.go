package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/gen/bettercompute/api/v1/apiv1connect"
	"github.com/better-compute/better-compute/internal/pki"
	"github.com/better-compute/better-compute/internal/store"
)

// Join token limits: a token is a credential, so it is short-lived by
// default and never lives long.
const (
	minJoinTokenTTL = time.Minute
	maxJoinTokenTTL = 30 * 24 * time.Hour
	maxJoinUses     = 100_000
)

// NodeAccess is what the join-token service needs to know about the node side.
type NodeAccess struct {
	// Authority signs node certificates; its serving pin seals join tokens.
	Authority *pki.Authority
	// GatewayURL is what bcd join --server takes, https://host:port.
	GatewayURL string
	// DownloadURL is where the bcd binary is served, for install scripts;
	// BcdSHA256 is its SHA-256 in hex. Both empty when there is none.
	DownloadURL, BcdSHA256 string
}

// joinTokenService manages join tokens.
type joinTokenService struct {
	base
	nodes NodeAccess
}

var _ apiv1connect.JoinTokenServiceHandler = (*joinTokenService)(nil)

func (s *joinTokenService) CreateJoinToken(ctx context.Context, req *connect.Request[apiv1.CreateJoinTokenRequest]) (*connect.Response[apiv1.CreateJoinTokenResponse], error) {
	m := req.Msg
	tenant := callFrom(ctx).tenant()
	if s.nodes.Authority == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this server runs no gateway, so nodes cannot join it"))
	}
	uses := int(m.GetMaxUses())
	if uses == 0 {
		uses = 1
	}
	if uses < 0 || uses > maxJoinUses {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("max_uses must be between 1 and %d", maxJoinUses))
	}
	ttl := m.GetTtl().AsDuration()
	if m.GetTtl() == nil || ttl < minJoinTokenTTL || ttl > maxJoinTokenTTL {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ttl must be between %s and %s (30 days)", minJoinTokenTTL, maxJoinTokenTTL))
	}
	if err := checkLabels(m.GetLabels()); err != nil {
		return nil, err
	}
	if err := checkLen("description", m.GetDescription(), 256); err != nil {
		return nil, err
	}
	if p := m.GetPool(); p != "" {
		if err := checkName("pool", p, false); err != nil {
			return nil, err
		}
	}
	id, secret, hash := pki.NewJoinToken(s.nodes.Authority.ServingPin())
	callFrom(ctx).AuditResource = resourceFor(typeJoinToken, tenant, id).String()
	var t store.JoinToken
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		if p := m.GetPool(); p != "" {
			// The nodes it admits are adopted into this pool: it must exist now.
			if _, err := q.GetPool(ctx, tenant, p); err != nil {
				return notFoundAs(err, typePool, tenant, p)
			}
		}
		now, err := q.Now(ctx)
		if err != nil {
			return err
		}
		t, err = q.CreateJoinToken(ctx, store.JoinToken{
			ID: id, Tenant: tenant, Pool: m.GetPool(), SecretHash: hash, MaxUses: uses,
			Labels: m.GetLabels(), Description: m.GetDescription(), ExpiresAt: now.Add(ttl),
		})
		return notFoundAs(err, typeTenant, tenant, "")
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.CreateJoinTokenResponse{JoinToken: joinTokenProto(t), Secret: secret, GatewayUrl: s.nodes.GatewayURL}), nil
}

func (s *joinTokenService) ListJoinTokens(ctx context.Context, _ *connect.Request[apiv1.ListJoinTokensRequest]) (*connect.Response[apiv1.ListJoinTokensResponse], error) {
	ts, err := s.store.ListJoinTokens(ctx, callFrom(ctx).tenant())
	if err != nil {
		return nil, err
	}
	res := &apiv1.ListJoinTokensResponse{}
	for _, t := range ts {
		res.JoinTokens = append(res.JoinTokens, joinTokenProto(t))
	}
	return connect.NewResponse(res), nil
}

func (s *joinTokenService) RevokeJoinToken(ctx context.Context, req *connect.Request[apiv1.RevokeJoinTokenRequest]) (*connect.Response[apiv1.RevokeJoinTokenResponse], error) {
	tenant, id := callFrom(ctx).tenant(), req.Msg.GetId()
	var t store.JoinToken
	err := s.mutate(ctx, func(ctx context.Context, q store.Querier) error {
		cur, err := q.GetJoinToken(ctx, id)
		if err == nil && cur.Tenant != tenant {
			err = store.ErrNotFound
		}
		if err != nil {
			return notFoundAs(err, typeJoinToken, tenant, id)
		}
		t, err = q.RevokeJoinToken(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&apiv1.RevokeJoinTokenResponse{JoinToken: joinTokenProto(t)}), nil
}

func (s *joinTokenService) GetInstallScript(_ context.Context, req *connect.Request[apiv1.GetInstallScriptRequest]) (*connect.Response[apiv1.GetInstallScriptResponse], error) {
	if _, _, _, err := pki.ParseJoinToken(req.Msg.GetJoinToken()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("join_token: %w; create one with better-compute join-tokens create", err))
	}
	if s.nodes.GatewayURL == "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this server runs no gateway, so nodes cannot join it"))
	}
	if s.nodes.DownloadURL == "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this server has no bcd binary to serve: put bcd beside better-compute or pass --bcd-binary"))
	}
	script := installScript(s.nodes.DownloadURL, s.nodes.BcdSHA256, s.nodes.GatewayURL, req.Msg.GetJoinToken())
	return connect.NewResponse(&apiv1.GetInstallScriptResponse{Script: script}), nil
}

func joinTokenProto(t store.JoinToken) *apiv1.JoinToken {
	return &apiv1.JoinToken{
		Id:          t.ID,
		Tenant:      t.Tenant,
		Pool:        t.Pool,
		MaxUses:     int32(t.MaxUses),
		Uses:        int32(t.Uses),
		Labels:      t.Labels,
		CreateTime:  ts(t.CreatedAt),
		ExpireTime:  ts(t.ExpiresAt),
		RevokeTime:  ts(t.RevokedAt),
		Description: t.Description,
	}
}
