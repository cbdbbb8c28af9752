package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	pgdb "github.com/better-compute/better-compute/internal/store/postgres"
)

// The identity half of pgQuerier (IAMQuerier). The schema is
// postgres/migrations/0002_iam.sql; its triggers bump the authorization epoch.

// pgTenantsOnePlatform is the unique index that keeps a second platform
// tenant out; its violation gets its own words.
const pgTenantsOnePlatform = "tenants_one_platform"

// pgClassify turns what PostgreSQL says about a failed statement into the
// store's sentinels: no row is ErrNotFound, unique_violation (23505) is
// ErrConflict, and foreign_key_violation (23503: a missing tenant, group,
// member or principal) is ErrNotFound. Any other error is returned as it is.
func pgClassify(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			if pgErr.ConstraintName == pgTenantsOnePlatform {
				return fmt.Errorf("a platform tenant already exists: %w", ErrConflict)
			}
			return ErrConflict
		case "23503":
			return ErrNotFound
		}
	}
	return err
}

// pgAffected is the error of a delete or update that reported n rows
// affected: ErrNotFound for none. what and args say what was being done.
func pgAffected(n int64, err error, what string, args ...any) error {
	switch {
	case err != nil:
		return fmt.Errorf("store: "+what+": %w", append(args, pgClassify(err))...)
	case n == 0:
		return fmt.Errorf("store: "+what+": %w", append(args, ErrNotFound)...)
	}
	return nil
}

// fromNullTime is a nullable column's time in UTC: NULL is the zero time.
func fromNullTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// toNullTime is a time filter's value: NULL, matching everything, when t is
// zero.
func toNullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// toPgText is a text filter's value: NULL, matching everything, when s is
// empty.
func toPgText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

func pgTenant(r pgdb.Tenant) Tenant {
	return Tenant{
		Name: r.Name, DisplayName: r.DisplayName, Platform: r.Platform,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgPrincipal(r pgdb.Principal) Principal {
	return Principal{
		Tenant: r.Tenant, Name: r.Name, Kind: PrincipalKind(r.Kind),
		DisplayName: r.DisplayName, Email: r.Email, Description: r.Description,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgGroup(r pgdb.Group) Group {
	return Group{
		Tenant: r.Tenant, Name: r.Name, Description: r.Description,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgGroupMember(r pgdb.GroupMember) GroupMember {
	return GroupMember{Tenant: r.Tenant, Group: r.GroupName, Member: r.Member}
}

func pgToken(r pgdb.ApiToken) Token {
	return Token{
		ID: r.ID, Tenant: r.Tenant, Principal: r.Principal,
		SecretHash: r.SecretHash, Description: r.Description,
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
		LastUsedAt: fromNullTime(r.LastUsedAt), RevokedAt: fromNullTime(r.RevokedAt),
	}
}

func pgPolicy(r pgdb.Policy) Policy {
	return Policy{
		Tenant: r.Tenant, Name: r.Name, Body: r.Body,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func pgAuditEvent(r pgdb.AuditEvent) AuditEvent {
	policies := r.Policies
	if len(policies) == 0 {
		policies = nil // as SQLite gives it
	}
	return AuditEvent{
		ID: r.ID, At: r.At.UTC(), Tenant: r.Tenant, Principal: r.Principal,
		Action: r.Action, Resource: r.Resource, Decision: r.Decision, Policies: policies,
		Reason: r.Reason, RequestID: r.RequestID,
	}
}

// pgNames turns the rows of a LEFT JOIN from a parent (ListGroupMembers,
// ListPrincipalGroups) into names: no row means no parent, a NULL is the one
// row of a parent without children.
func pgNames(rows []pgtype.Text) ([]string, error) {
	if len(rows) == 0 {
		return nil, ErrNotFound
	}
	var out []string
	for _, r := range rows {
		if r.Valid {
			out = append(out, r.String)
		}
	}
	return out, nil
}

func (p pgQuerier) CreateTenant(ctx context.Context, t Tenant) (Tenant, error) {
	r, err := p.q.CreateTenant(ctx, pgdb.CreateTenantParams{
		Name: t.Name, DisplayName: t.DisplayName, Platform: t.Platform,
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("store: create tenant %q: %w", t.Name, pgClassify(err))
	}
	return pgTenant(r), nil
}

func (p pgQuerier) GetTenant(ctx context.Context, name string) (Tenant, error) {
	r, err := p.q.GetTenant(ctx, name)
	if err != nil {
		return Tenant{}, fmt.Errorf("store: get tenant %q: %w", name, pgClassify(err))
	}
	return pgTenant(r), nil
}

func (p pgQuerier) ListTenants(ctx context.Context) ([]Tenant, error) {
	rows, err := p.q.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list tenants: %w", err)
	}
	return convertRows(rows, pgTenant), nil
}

func (p pgQuerier) UpdateTenant(ctx context.Context, name, displayName string) (Tenant, error) {
	r, err := p.q.UpdateTenant(ctx, pgdb.UpdateTenantParams{Name: name, DisplayName: displayName})
	if err != nil {
		return Tenant{}, fmt.Errorf("store: update tenant %q: %w", name, pgClassify(err))
	}
	return pgTenant(r), nil
}

func (p pgQuerier) DeleteTenant(ctx context.Context, name string) error {
	n, err := p.q.DeleteTenant(ctx, name)
	// Everything else of a tenant goes with it (ON DELETE CASCADE) but its
	// nodes, which refuse the delete (RESTRICT).
	if pgTenantHasNodes(err) {
		return fmt.Errorf("store: delete tenant %q: it still has nodes; delete them first: %w", name, ErrConflict)
	}
	return pgAffected(n, err, "delete tenant %q", name)
}

func (p pgQuerier) CreatePrincipal(ctx context.Context, pr Principal) (Principal, error) {
	r, err := p.q.CreatePrincipal(ctx, pgdb.CreatePrincipalParams{
		Tenant: pr.Tenant, Name: pr.Name, Kind: string(pr.Kind),
		DisplayName: pr.DisplayName, Email: pr.Email, Description: pr.Description,
	})
	if err != nil {
		return Principal{}, fmt.Errorf("store: create principal %q: %w", key(pr.Tenant, pr.Name), pgClassify(err))
	}
	return pgPrincipal(r), nil
}

func (p pgQuerier) GetPrincipal(ctx context.Context, tenant, name string) (Principal, error) {
	r, err := p.q.GetPrincipal(ctx, pgdb.GetPrincipalParams{Tenant: tenant, Name: name})
	if err != nil {
		return Principal{}, fmt.Errorf("store: get principal %q: %w", key(tenant, name), pgClassify(err))
	}
	return pgPrincipal(r), nil
}

func (p pgQuerier) ListPrincipals(ctx context.Context, tenant string, kind PrincipalKind) ([]Principal, error) {
	rows, err := p.q.ListPrincipals(ctx, pgdb.ListPrincipalsParams{Tenant: tenant, Kind: string(kind)})
	if err != nil {
		return nil, fmt.Errorf("store: list principals of %q: %w", tenant, err)
	}
	return convertRows(rows, pgPrincipal), nil
}

func (p pgQuerier) UpdatePrincipal(ctx context.Context, pr Principal) (Principal, error) {
	r, err := p.q.UpdatePrincipal(ctx, pgdb.UpdatePrincipalParams{
		Tenant: pr.Tenant, Name: pr.Name,
		DisplayName: pr.DisplayName, Email: pr.Email, Description: pr.Description,
	})
	if err != nil {
		return Principal{}, fmt.Errorf("store: update principal %q: %w", key(pr.Tenant, pr.Name), pgClassify(err))
	}
	return pgPrincipal(r), nil
}

func (p pgQuerier) DeletePrincipal(ctx context.Context, tenant, name string) error {
	n, err := p.q.DeletePrincipal(ctx, pgdb.DeletePrincipalParams{Tenant: tenant, Name: name})
	return pgAffected(n, err, "delete principal %q", key(tenant, name))
}

func (p pgQuerier) CreateGroup(ctx context.Context, g Group) (Group, error) {
	r, err := p.q.CreateGroup(ctx, pgdb.CreateGroupParams{Tenant: g.Tenant, Name: g.Name, Description: g.Description})
	if err != nil {
		return Group{}, fmt.Errorf("store: create group %q: %w", key(g.Tenant, g.Name), pgClassify(err))
	}
	return pgGroup(r), nil
}

func (p pgQuerier) GetGroup(ctx context.Context, tenant, name string) (Group, error) {
	r, err := p.q.GetGroup(ctx, pgdb.GetGroupParams{Tenant: tenant, Name: name})
	if err != nil {
		return Group{}, fmt.Errorf("store: get group %q: %w", key(tenant, name), pgClassify(err))
	}
	return pgGroup(r), nil
}

func (p pgQuerier) ListGroups(ctx context.Context, tenant string) ([]Group, error) {
	rows, err := p.q.ListGroups(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list groups of %q: %w", tenant, err)
	}
	return convertRows(rows, pgGroup), nil
}

func (p pgQuerier) UpdateGroup(ctx context.Context, g Group) (Group, error) {
	r, err := p.q.UpdateGroup(ctx, pgdb.UpdateGroupParams{Tenant: g.Tenant, Name: g.Name, Description: g.Description})
	if err != nil {
		return Group{}, fmt.Errorf("store: update group %q: %w", key(g.Tenant, g.Name), pgClassify(err))
	}
	return pgGroup(r), nil
}

func (p pgQuerier) DeleteGroup(ctx context.Context, tenant, name string) error {
	n, err := p.q.DeleteGroup(ctx, pgdb.DeleteGroupParams{Tenant: tenant, Name: name})
	return pgAffected(n, err, "delete group %q", key(tenant, name))
}

func (p pgQuerier) AddGroupMember(ctx context.Context, tenant, group, member string) error {
	err := p.q.AddGroupMember(ctx, pgdb.AddGroupMemberParams{Tenant: tenant, GroupName: group, Member: member})
	if err != nil {
		return fmt.Errorf("store: add %q to group %q: %w", member, key(tenant, group), pgClassify(err))
	}
	return nil
}

func (p pgQuerier) RemoveGroupMember(ctx context.Context, tenant, group, member string) error {
	n, err := p.q.RemoveGroupMember(ctx, pgdb.RemoveGroupMemberParams{Tenant: tenant, GroupName: group, Member: member})
	return pgAffected(n, err, "remove %q from group %q", member, key(tenant, group))
}

func (p pgQuerier) ListGroupMembers(ctx context.Context, tenant, group string) ([]string, error) {
	rows, err := p.q.ListGroupMembers(ctx, pgdb.ListGroupMembersParams{Tenant: tenant, GroupName: group})
	if err == nil {
		var names []string
		if names, err = pgNames(rows); err == nil {
			return names, nil
		}
	}
	return nil, fmt.Errorf("store: list members of group %q: %w", key(tenant, group), err)
}

func (p pgQuerier) ListPrincipalGroups(ctx context.Context, tenant, principal string) ([]string, error) {
	rows, err := p.q.ListPrincipalGroups(ctx, pgdb.ListPrincipalGroupsParams{Tenant: tenant, Principal: principal})
	if err == nil {
		var names []string
		if names, err = pgNames(rows); err == nil {
			return names, nil
		}
	}
	return nil, fmt.Errorf("store: list groups of principal %q: %w", key(tenant, principal), err)
}

func (p pgQuerier) ListAllGroupMembers(ctx context.Context) ([]GroupMember, error) {
	rows, err := p.q.ListAllGroupMembers(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list all group members: %w", err)
	}
	return convertRows(rows, pgGroupMember), nil
}

func (p pgQuerier) CreateToken(ctx context.Context, t Token) (Token, error) {
	r, err := p.q.CreateToken(ctx, pgdb.CreateTokenParams{
		ID: t.ID, Tenant: t.Tenant, Principal: t.Principal, SecretHash: t.SecretHash,
		Description: t.Description, ExpiresAt: t.ExpiresAt,
	})
	if err != nil {
		return Token{}, fmt.Errorf("store: create token %q for %q: %w", t.ID, key(t.Tenant, t.Principal), pgClassify(err))
	}
	return pgToken(r), nil
}

func (p pgQuerier) GetToken(ctx context.Context, id string) (Token, error) {
	r, err := p.q.GetToken(ctx, id)
	if err != nil {
		return Token{}, fmt.Errorf("store: get token %q: %w", id, pgClassify(err))
	}
	return pgToken(r), nil
}

func (p pgQuerier) ListTokens(ctx context.Context, tenant, principal string) ([]Token, error) {
	rows, err := p.q.ListTokens(ctx, pgdb.ListTokensParams{Tenant: tenant, Principal: principal})
	if err != nil {
		return nil, fmt.Errorf("store: list tokens of %q: %w", key(tenant, principal), err)
	}
	return convertRows(rows, pgToken), nil
}

func (p pgQuerier) RevokeToken(ctx context.Context, id string) (Token, error) {
	r, err := p.q.RevokeToken(ctx, id)
	if err != nil {
		return Token{}, fmt.Errorf("store: revoke token %q: %w", id, pgClassify(err))
	}
	return pgToken(r), nil
}

func (p pgQuerier) TouchToken(ctx context.Context, id string) error {
	n, err := p.q.TouchToken(ctx, id)
	return pgAffected(n, err, "touch token %q", id)
}

func (p pgQuerier) AuthenticateToken(ctx context.Context, id string) (TokenAuth, error) {
	r, err := p.q.AuthenticateToken(ctx, id)
	if err != nil {
		return TokenAuth{}, fmt.Errorf("store: authenticate token %q: %w", id, pgClassify(err))
	}
	return TokenAuth{
		Token: pgToken(r.ApiToken), Kind: PrincipalKind(r.Kind), Platform: r.Platform,
		Epoch: r.Epoch, Now: r.Now.UTC(),
	}, nil
}

func (p pgQuerier) PutPolicy(ctx context.Context, pol Policy) (Policy, error) {
	r, err := p.q.PutPolicy(ctx, pgdb.PutPolicyParams{Tenant: pol.Tenant, Name: pol.Name, Body: pol.Body})
	if err != nil {
		return Policy{}, fmt.Errorf("store: put policy %q: %w", key(pol.Tenant, pol.Name), pgClassify(err))
	}
	return pgPolicy(r), nil
}

func (p pgQuerier) GetPolicy(ctx context.Context, tenant, name string) (Policy, error) {
	r, err := p.q.GetPolicy(ctx, pgdb.GetPolicyParams{Tenant: tenant, Name: name})
	if err != nil {
		return Policy{}, fmt.Errorf("store: get policy %q: %w", key(tenant, name), pgClassify(err))
	}
	return pgPolicy(r), nil
}

func (p pgQuerier) ListPolicies(ctx context.Context, tenant string) ([]Policy, error) {
	rows, err := p.q.ListPolicies(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list policies of %q: %w", tenant, err)
	}
	return convertRows(rows, pgPolicy), nil
}

func (p pgQuerier) ListAllPolicies(ctx context.Context) ([]Policy, error) {
	rows, err := p.q.ListAllPolicies(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list all policies: %w", err)
	}
	return convertRows(rows, pgPolicy), nil
}

func (p pgQuerier) DeletePolicy(ctx context.Context, tenant, name string) error {
	n, err := p.q.DeletePolicy(ctx, pgdb.DeletePolicyParams{Tenant: tenant, Name: name})
	return pgAffected(n, err, "delete policy %q", key(tenant, name))
}

func (p pgQuerier) AuthzEpoch(ctx context.Context) (int64, error) {
	e, err := p.q.AuthzEpoch(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: authorization epoch: %w", err)
	}
	return e, nil
}

func (p pgQuerier) InsertAuditEvent(ctx context.Context, e AuditEvent) (AuditEvent, error) {
	policies := e.Policies
	if policies == nil {
		policies = []string{} // NOT NULL: an empty array, not NULL
	}
	r, err := p.q.InsertAuditEvent(ctx, pgdb.InsertAuditEventParams{
		Tenant: e.Tenant, Principal: e.Principal, Action: e.Action, Resource: e.Resource,
		Decision: e.Decision, Policies: policies, Reason: e.Reason, RequestID: e.RequestID,
	})
	if err != nil {
		return AuditEvent{}, fmt.Errorf("store: insert audit event %s %s: %w", e.Action, e.Decision, err)
	}
	return pgAuditEvent(r), nil
}

func (p pgQuerier) ListAuditEvents(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	if err := checkAuditFilter(f); err != nil {
		return nil, err
	}
	var rows []pgdb.AuditEvent
	var err error
	if f.AllTenants {
		rows, err = p.q.ListAllAuditEvents(ctx, pgdb.ListAllAuditEventsParams{
			BeforeID:  auditBeforeID(f),
			Principal: toPgText(f.Principal), Action: toPgText(f.Action), Resource: toPgText(f.Resource),
			Since: toNullTime(f.Since), Until: toNullTime(f.Until),
			Lim: int32(min(f.Limit, math.MaxInt32)),
		})
	} else {
		rows, err = p.q.ListTenantAuditEvents(ctx, pgdb.ListTenantAuditEventsParams{
			Tenant: f.Tenant, BeforeID: auditBeforeID(f),
			Principal: toPgText(f.Principal), Action: toPgText(f.Action), Resource: toPgText(f.Resource),
			Since: toNullTime(f.Since), Until: toNullTime(f.Until),
			Lim: int32(min(f.Limit, math.MaxInt32)),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("store: list audit events: %w", err)
	}
	return convertRows(rows, pgAuditEvent), nil
}
