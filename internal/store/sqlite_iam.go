package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	sqlitedb "github.com/better-compute/better-compute/internal/store/sqlite"
)

// The identity half of sqliteQuerier (IAMQuerier). The schema is
// sqlite/migrations/0002_iam.sql; its triggers bump the authorization epoch.

// sqliteClassify turns what SQLite says about a failed statement into the
// store's sentinels: no row is ErrNotFound, a taken primary or unique key is
// ErrConflict, and a failed foreign key (a missing tenant, group, member or
// principal: SQLite does not say which) is ErrNotFound. Any other error is
// returned as it is.
func sqliteClassify(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			if strings.Contains(se.Error(), "tenants.platform") {
				return fmt.Errorf("a platform tenant already exists: %w", ErrConflict)
			}
			return ErrConflict
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return ErrNotFound
		}
	}
	return err
}

// sqliteAffected is the error of a delete or update that reported n rows
// affected: ErrNotFound for none. what and args say what was being done.
func sqliteAffected(n int64, err error, what string, args ...any) error {
	switch {
	case err != nil:
		return fmt.Errorf("store: "+what+": %w", append(args, sqliteClassify(err))...)
	case n == 0:
		return fmt.Errorf("store: "+what+": %w", append(args, ErrNotFound)...)
	}
	return nil
}

// fromNullMicros is fromMicros for a nullable column: NULL is the zero time.
func fromNullMicros(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromMicros(n.Int64)
}

// toNullMicros is a time filter's value: NULL, matching everything, when t
// is zero.
func toNullMicros(t time.Time) sql.NullInt64 {
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: !t.IsZero()}
}

// toNullString is a text filter's value: NULL, matching everything, when s
// is empty.
func toNullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}

// boolInt is a bool in an INTEGER column: STRICT tables have no BOOLEAN.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func sqliteTenant(r sqlitedb.Tenant) Tenant {
	return Tenant{
		Name: r.Name, DisplayName: r.DisplayName, Platform: r.Platform != 0,
		CreatedAt: fromMicros(r.CreatedAt), UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

func sqlitePrincipal(r sqlitedb.Principal) Principal {
	return Principal{
		Tenant: r.Tenant, Name: r.Name, Kind: PrincipalKind(r.Kind),
		DisplayName: r.DisplayName, Email: r.Email, Description: r.Description,
		CreatedAt: fromMicros(r.CreatedAt), UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

func sqliteGroup(r sqlitedb.Group) Group {
	return Group{
		Tenant: r.Tenant, Name: r.Name, Description: r.Description,
		CreatedAt: fromMicros(r.CreatedAt), UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

func sqliteGroupMember(r sqlitedb.GroupMember) GroupMember {
	return GroupMember{Tenant: r.Tenant, Group: r.GroupName, Member: r.Member}
}

func sqliteToken(r sqlitedb.ApiToken) Token {
	return Token{
		ID: r.ID, Tenant: r.Tenant, Principal: r.Principal,
		SecretHash: r.SecretHash, Description: r.Description,
		CreatedAt: fromMicros(r.CreatedAt), ExpiresAt: fromMicros(r.ExpiresAt),
		LastUsedAt: fromNullMicros(r.LastUsedAt), RevokedAt: fromNullMicros(r.RevokedAt),
	}
}

func sqlitePolicy(r sqlitedb.Policy) Policy {
	return Policy{
		Tenant: r.Tenant, Name: r.Name, Body: r.Body,
		CreatedAt: fromMicros(r.CreatedAt), UpdatedAt: fromMicros(r.UpdatedAt),
	}
}

// sqliteAuditEvent converts a row whose policies column is a JSON array, as
// InsertAuditEvent writes it.
func sqliteAuditEvent(r sqlitedb.AuditEvent) (AuditEvent, error) {
	var policies []string
	if err := json.Unmarshal([]byte(r.Policies), &policies); err != nil {
		return AuditEvent{}, fmt.Errorf("audit event %d: policies: %w", r.ID, err)
	}
	if len(policies) == 0 {
		policies = nil // as PostgreSQL gives it
	}
	return AuditEvent{
		ID: r.ID, At: fromMicros(r.At), Tenant: r.Tenant, Principal: r.Principal,
		Action: r.Action, Resource: r.Resource, Decision: r.Decision, Policies: policies,
		Reason: r.Reason, RequestID: r.RequestID,
	}, nil
}

// sqliteNames turns the rows of a LEFT JOIN from a parent (ListGroupMembers,
// ListPrincipalGroups) into names: no row means no parent, a NULL is the one
// row of a parent without children.
func sqliteNames(rows []sql.NullString) ([]string, error) {
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

func (s sqliteQuerier) CreateTenant(ctx context.Context, t Tenant) (Tenant, error) {
	r, err := s.q.CreateTenant(ctx, sqlitedb.CreateTenantParams{
		Name: t.Name, DisplayName: t.DisplayName, Platform: boolInt(t.Platform),
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("store: create tenant %q: %w", t.Name, sqliteClassify(err))
	}
	return sqliteTenant(r), nil
}

func (s sqliteQuerier) GetTenant(ctx context.Context, name string) (Tenant, error) {
	r, err := s.q.GetTenant(ctx, name)
	if err != nil {
		return Tenant{}, fmt.Errorf("store: get tenant %q: %w", name, sqliteClassify(err))
	}
	return sqliteTenant(r), nil
}

func (s sqliteQuerier) ListTenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.q.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list tenants: %w", err)
	}
	return convertRows(rows, sqliteTenant), nil
}

func (s sqliteQuerier) UpdateTenant(ctx context.Context, name, displayName string) (Tenant, error) {
	r, err := s.q.UpdateTenant(ctx, sqlitedb.UpdateTenantParams{Name: name, DisplayName: displayName})
	if err != nil {
		return Tenant{}, fmt.Errorf("store: update tenant %q: %w", name, sqliteClassify(err))
	}
	return sqliteTenant(r), nil
}

func (s sqliteQuerier) DeleteTenant(ctx context.Context, name string) error {
	n, err := s.q.DeleteTenant(ctx, name)
	// Everything else of a tenant goes with it (ON DELETE CASCADE) but its
	// nodes, which refuse the delete (RESTRICT): that is the only foreign key
	// a tenant delete can fail.
	if sqliteForeignKey(err) {
		return fmt.Errorf("store: delete tenant %q: it still has nodes; delete them first: %w", name, ErrConflict)
	}
	return sqliteAffected(n, err, "delete tenant %q", name)
}

func (s sqliteQuerier) CreatePrincipal(ctx context.Context, p Principal) (Principal, error) {
	r, err := s.q.CreatePrincipal(ctx, sqlitedb.CreatePrincipalParams{
		Tenant: p.Tenant, Name: p.Name, Kind: string(p.Kind),
		DisplayName: p.DisplayName, Email: p.Email, Description: p.Description,
	})
	if err != nil {
		return Principal{}, fmt.Errorf("store: create principal %q: %w", key(p.Tenant, p.Name), sqliteClassify(err))
	}
	return sqlitePrincipal(r), nil
}

func (s sqliteQuerier) GetPrincipal(ctx context.Context, tenant, name string) (Principal, error) {
	r, err := s.q.GetPrincipal(ctx, sqlitedb.GetPrincipalParams{Tenant: tenant, Name: name})
	if err != nil {
		return Principal{}, fmt.Errorf("store: get principal %q: %w", key(tenant, name), sqliteClassify(err))
	}
	return sqlitePrincipal(r), nil
}

func (s sqliteQuerier) ListPrincipals(ctx context.Context, tenant string, kind PrincipalKind) ([]Principal, error) {
	rows, err := s.q.ListPrincipals(ctx, sqlitedb.ListPrincipalsParams{Tenant: tenant, Kind: string(kind)})
	if err != nil {
		return nil, fmt.Errorf("store: list principals of %q: %w", tenant, err)
	}
	return convertRows(rows, sqlitePrincipal), nil
}

func (s sqliteQuerier) UpdatePrincipal(ctx context.Context, p Principal) (Principal, error) {
	r, err := s.q.UpdatePrincipal(ctx, sqlitedb.UpdatePrincipalParams{
		Tenant: p.Tenant, Name: p.Name,
		DisplayName: p.DisplayName, Email: p.Email, Description: p.Description,
	})
	if err != nil {
		return Principal{}, fmt.Errorf("store: update principal %q: %w", key(p.Tenant, p.Name), sqliteClassify(err))
	}
	return sqlitePrincipal(r), nil
}

func (s sqliteQuerier) DeletePrincipal(ctx context.Context, tenant, name string) error {
	n, err := s.q.DeletePrincipal(ctx, sqlitedb.DeletePrincipalParams{Tenant: tenant, Name: name})
	return sqliteAffected(n, err, "delete principal %q", key(tenant, name))
}

func (s sqliteQuerier) CreateGroup(ctx context.Context, g Group) (Group, error) {
	r, err := s.q.CreateGroup(ctx, sqlitedb.CreateGroupParams{Tenant: g.Tenant, Name: g.Name, Description: g.Description})
	if err != nil {
		return Group{}, fmt.Errorf("store: create group %q: %w", key(g.Tenant, g.Name), sqliteClassify(err))
	}
	return sqliteGroup(r), nil
}

func (s sqliteQuerier) GetGroup(ctx context.Context, tenant, name string) (Group, error) {
	r, err := s.q.GetGroup(ctx, sqlitedb.GetGroupParams{Tenant: tenant, Name: name})
	if err != nil {
		return Group{}, fmt.Errorf("store: get group %q: %w", key(tenant, name), sqliteClassify(err))
	}
	return sqliteGroup(r), nil
}

func (s sqliteQuerier) ListGroups(ctx context.Context, tenant string) ([]Group, error) {
	rows, err := s.q.ListGroups(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list groups of %q: %w", tenant, err)
	}
	return convertRows(rows, sqliteGroup), nil
}

func (s sqliteQuerier) UpdateGroup(ctx context.Context, g Group) (Group, error) {
	r, err := s.q.UpdateGroup(ctx, sqlitedb.UpdateGroupParams{Tenant: g.Tenant, Name: g.Name, Description: g.Description})
	if err != nil {
		return Group{}, fmt.Errorf("store: update group %q: %w", key(g.Tenant, g.Name), sqliteClassify(err))
	}
	return sqliteGroup(r), nil
}

func (s sqliteQuerier) DeleteGroup(ctx context.Context, tenant, name string) error {
	n, err := s.q.DeleteGroup(ctx, sqlitedb.DeleteGroupParams{Tenant: tenant, Name: name})
	return sqliteAffected(n, err, "delete group %q", key(tenant, name))
}

func (s sqliteQuerier) AddGroupMember(ctx context.Context, tenant, group, member string) error {
	err := s.q.AddGroupMember(ctx, sqlitedb.AddGroupMemberParams{Tenant: tenant, GroupName: group, Member: member})
	if err != nil {
		return fmt.Errorf("store: add %q to group %q: %w", member, key(tenant, group), sqliteClassify(err))
	}
	return nil
}

func (s sqliteQuerier) RemoveGroupMember(ctx context.Context, tenant, group, member string) error {
	n, err := s.q.RemoveGroupMember(ctx, sqlitedb.RemoveGroupMemberParams{Tenant: tenant, GroupName: group, Member: member})
	return sqliteAffected(n, err, "remove %q from group %q", member, key(tenant, group))
}

func (s sqliteQuerier) ListGroupMembers(ctx context.Context, tenant, group string) ([]string, error) {
	rows, err := s.q.ListGroupMembers(ctx, sqlitedb.ListGroupMembersParams{Tenant: tenant, GroupName: group})
	if err == nil {
		var names []string
		if names, err = sqliteNames(rows); err == nil {
			return names, nil
		}
	}
	return nil, fmt.Errorf("store: list members of group %q: %w", key(tenant, group), err)
}

func (s sqliteQuerier) ListPrincipalGroups(ctx context.Context, tenant, principal string) ([]string, error) {
	rows, err := s.q.ListPrincipalGroups(ctx, sqlitedb.ListPrincipalGroupsParams{Tenant: tenant, Principal: principal})
	if err == nil {
		var names []string
		if names, err = sqliteNames(rows); err == nil {
			return names, nil
		}
	}
	return nil, fmt.Errorf("store: list groups of principal %q: %w", key(tenant, principal), err)
}

func (s sqliteQuerier) ListAllGroupMembers(ctx context.Context) ([]GroupMember, error) {
	rows, err := s.q.ListAllGroupMembers(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list all group members: %w", err)
	}
	return convertRows(rows, sqliteGroupMember), nil
}

func (s sqliteQuerier) CreateToken(ctx context.Context, t Token) (Token, error) {
	r, err := s.q.CreateToken(ctx, sqlitedb.CreateTokenParams{
		ID: t.ID, Tenant: t.Tenant, Principal: t.Principal, SecretHash: t.SecretHash,
		Description: t.Description, ExpiresAt: t.ExpiresAt.UnixMicro(),
	})
	if err != nil {
		return Token{}, fmt.Errorf("store: create token %q for %q: %w", t.ID, key(t.Tenant, t.Principal), sqliteClassify(err))
	}
	return sqliteToken(r), nil
}

func (s sqliteQuerier) GetToken(ctx context.Context, id string) (Token, error) {
	r, err := s.q.GetToken(ctx, id)
	if err != nil {
		return Token{}, fmt.Errorf("store: get token %q: %w", id, sqliteClassify(err))
	}
	return sqliteToken(r), nil
}

func (s sqliteQuerier) ListTokens(ctx context.Context, tenant, principal string) ([]Token, error) {
	rows, err := s.q.ListTokens(ctx, sqlitedb.ListTokensParams{Tenant: tenant, Principal: principal})
	if err != nil {
		return nil, fmt.Errorf("store: list tokens of %q: %w", key(tenant, principal), err)
	}
	return convertRows(rows, sqliteToken), nil
}

func (s sqliteQuerier) RevokeToken(ctx context.Context, id string) (Token, error) {
	r, err := s.q.RevokeToken(ctx, id)
	if err != nil {
		return Token{}, fmt.Errorf("store: revoke token %q: %w", id, sqliteClassify(err))
	}
	return sqliteToken(r), nil
}

func (s sqliteQuerier) TouchToken(ctx context.Context, id string) error {
	n, err := s.q.TouchToken(ctx, id)
	return sqliteAffected(n, err, "touch token %q", id)
}

func (s sqliteQuerier) AuthenticateToken(ctx context.Context, id string) (TokenAuth, error) {
	r, err := s.q.AuthenticateToken(ctx, id)
	if err != nil {
		return TokenAuth{}, fmt.Errorf("store: authenticate token %q: %w", id, sqliteClassify(err))
	}
	return TokenAuth{
		Token: sqliteToken(r.ApiToken), Kind: PrincipalKind(r.Kind), Platform: r.Platform != 0,
		Epoch: r.Epoch, Now: fromMicros(r.NowUs),
	}, nil
}

func (s sqliteQuerier) PutPolicy(ctx context.Context, p Policy) (Policy, error) {
	r, err := s.q.PutPolicy(ctx, sqlitedb.PutPolicyParams{Tenant: p.Tenant, Name: p.Name, Body: p.Body})
	if err != nil {
		return Policy{}, fmt.Errorf("store: put policy %q: %w", key(p.Tenant, p.Name), sqliteClassify(err))
	}
	return sqlitePolicy(r), nil
}

func (s sqliteQuerier) GetPolicy(ctx context.Context, tenant, name string) (Policy, error) {
	r, err := s.q.GetPolicy(ctx, sqlitedb.GetPolicyParams{Tenant: tenant, Name: name})
	if err != nil {
		return Policy{}, fmt.Errorf("store: get policy %q: %w", key(tenant, name), sqliteClassify(err))
	}
	return sqlitePolicy(r), nil
}

func (s sqliteQuerier) ListPolicies(ctx context.Context, tenant string) ([]Policy, error) {
	rows, err := s.q.ListPolicies(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("store: list policies of %q: %w", tenant, err)
	}
	return convertRows(rows, sqlitePolicy), nil
}

func (s sqliteQuerier) ListAllPolicies(ctx context.Context) ([]Policy, error) {
	rows, err := s.q.ListAllPolicies(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: list all policies: %w", err)
	}
	return convertRows(rows, sqlitePolicy), nil
}

func (s sqliteQuerier) DeletePolicy(ctx context.Context, tenant, name string) error {
	n, err := s.q.DeletePolicy(ctx, sqlitedb.DeletePolicyParams{Tenant: tenant, Name: name})
	return sqliteAffected(n, err, "delete policy %q", key(tenant, name))
}

func (s sqliteQuerier) AuthzEpoch(ctx context.Context) (int64, error) {
	e, err := s.q.AuthzEpoch(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: authorization epoch: %w", err)
	}
	return e, nil
}

func (s sqliteQuerier) InsertAuditEvent(ctx context.Context, e AuditEvent) (AuditEvent, error) {
	policies := []byte("[]")
	if len(e.Policies) > 0 {
		policies, _ = json.Marshal(e.Policies) // a []string always marshals
	}
	r, err := s.q.InsertAuditEvent(ctx, sqlitedb.InsertAuditEventParams{
		Tenant: e.Tenant, Principal: e.Principal, Action: e.Action, Resource: e.Resource,
		Decision: e.Decision, Policies: string(policies), Reason: e.Reason, RequestID: e.RequestID,
	})
	var out AuditEvent
	if err == nil {
		out, err = sqliteAuditEvent(r)
	}
	if err != nil {
		return AuditEvent{}, fmt.Errorf("store: insert audit event %s %s: %w", e.Action, e.Decision, err)
	}
	return out, nil
}

func (s sqliteQuerier) ListAuditEvents(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	if err := checkAuditFilter(f); err != nil {
		return nil, err
	}
	var rows []sqlitedb.AuditEvent
	var err error
	if f.AllTenants {
		rows, err = s.q.ListAllAuditEvents(ctx, sqlitedb.ListAllAuditEventsParams{
			BeforeID:  auditBeforeID(f),
			Principal: toNullString(f.Principal), Action: toNullString(f.Action), Resource: toNullString(f.Resource),
			Since: toNullMicros(f.Since), Until: toNullMicros(f.Until),
			Lim: int64(f.Limit),
		})
	} else {
		rows, err = s.q.ListTenantAuditEvents(ctx, sqlitedb.ListTenantAuditEventsParams{
			Tenant: f.Tenant, BeforeID: auditBeforeID(f),
			Principal: toNullString(f.Principal), Action: toNullString(f.Action), Resource: toNullString(f.Resource),
			Since: toNullMicros(f.Since), Until: toNullMicros(f.Until),
			Lim: int64(f.Limit),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("store: list audit events: %w", err)
	}
	out := make([]AuditEvent, len(rows))
	for i, r := range rows {
		if out[i], err = sqliteAuditEvent(r); err != nil {
			return nil, fmt.Errorf("store: list audit events: %w", err)
		}
	}
	return out, nil
}
