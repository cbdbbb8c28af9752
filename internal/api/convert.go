package api

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/better-compute/gen/bettercompute/api/v1"
	"github.com/better-compute/better-compute/internal/store"
)

// Store rows become API messages here and only here.

// ts converts a store time; a zero time (never happened) stays unset.
func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func tenantProto(t store.Tenant) *apiv1.Tenant {
	return &apiv1.Tenant{
		Name:        t.Name,
		DisplayName: t.DisplayName,
		Platform:    t.Platform,
		CreateTime:  ts(t.CreatedAt),
		UpdateTime:  ts(t.UpdatedAt),
	}
}

func userProto(p store.Principal, groups []string) *apiv1.User {
	return &apiv1.User{
		Tenant:      p.Tenant,
		Name:        p.Name,
		DisplayName: p.DisplayName,
		Email:       p.Email,
		Groups:      groups,
		CreateTime:  ts(p.CreatedAt),
		UpdateTime:  ts(p.UpdatedAt),
	}
}

func serviceAccountProto(p store.Principal, groups []string) *apiv1.ServiceAccount {
	return &apiv1.ServiceAccount{
		Tenant:      p.Tenant,
		Name:        p.Name,
		Description: p.Description,
		Groups:      groups,
		CreateTime:  ts(p.CreatedAt),
		UpdateTime:  ts(p.UpdatedAt),
	}
}

func groupProto(g store.Group, members []string) *apiv1.Group {
	return &apiv1.Group{
		Tenant:      g.Tenant,
		Name:        g.Name,
		Description: g.Description,
		Members:     members,
		CreateTime:  ts(g.CreatedAt),
		UpdateTime:  ts(g.UpdatedAt),
	}
}

func tokenProto(t store.Token) *apiv1.Token {
	return &apiv1.Token{
		Id:          t.ID,
		Tenant:      t.Tenant,
		Principal:   t.Principal,
		Description: t.Description,
		CreateTime:  ts(t.CreatedAt),
		ExpireTime:  ts(t.ExpiresAt),
		LastUseTime: ts(t.LastUsedAt),
		RevokeTime:  ts(t.RevokedAt),
	}
}

func policyProto(p store.Policy) *apiv1.Policy {
	return &apiv1.Policy{
		Tenant:     p.Tenant,
		Name:       p.Name,
		Body:       p.Body,
		CreateTime: ts(p.CreatedAt),
		UpdateTime: ts(p.UpdatedAt),
	}
}

func auditEventProto(e store.AuditEvent) *apiv1.AuditEvent {
	return &apiv1.AuditEvent{
		Id:        e.ID,
		Time:      ts(e.At),
		Tenant:    e.Tenant,
		Principal: e.Principal,
		Action:    e.Action,
		Resource:  e.Resource,
		Decision:  e.Decision,
		Policies:  e.Policies,
		Reason:    e.Reason,
		RequestId: e.RequestID,
	}
}
