package store

import (
	"context"
	"time"
)

// The identity rows: tenants, their principals (users and service
// accounts), groups, API tokens, Cedar policies, and the audit log. Names are
// the keys: a tenant's name is unique in the deployment; a principal's and a
// group's are unique in their tenant (users and service accounts share one
// namespace). Names never change, since policies refer to them.
//
// Every change to tenants, principals, groups, memberships and policies bumps
// the authorization epoch in the same transaction (database triggers do it, so
// no caller can forget), which lets authorizers cache decisions for exactly as
// long as nothing they depend on has changed.

// Tenant is an organization using the fleet.
type Tenant struct {
	// Name is the unique, immutable key.
	Name string
	// DisplayName is for people.
	DisplayName string
	// Platform marks the fleet operator's tenant; there is exactly one.
	Platform bool
	// CreatedAt and UpdatedAt come from the store's clock.
	CreatedAt, UpdatedAt time.Time
}

// PrincipalKind tells users from service accounts.
type PrincipalKind string

const (
	// PrincipalUser is a person.
	PrincipalUser PrincipalKind = "user"
	// PrincipalServiceAccount is a program: CI, an agent.
	PrincipalServiceAccount PrincipalKind = "service_account"
)

// Principal is a user or service account in a tenant.
type Principal struct {
	// Tenant and Name are the key.
	Tenant, Name string
	// Kind is user or service_account.
	Kind PrincipalKind
	// DisplayName and Email describe a user.
	DisplayName, Email string
	// Description says what a service account is for.
	Description string
	// CreatedAt and UpdatedAt come from the store's clock.
	CreatedAt, UpdatedAt time.Time
}

// Group is a named set of principals of one tenant.
type Group struct {
	// Tenant and Name are the key.
	Tenant, Name string
	// Description says what the group is for.
	Description string
	// CreatedAt and UpdatedAt come from the store's clock.
	CreatedAt, UpdatedAt time.Time
}

// GroupMember is one membership.
type GroupMember struct {
	// Tenant of both the group and the member.
	Tenant string
	// Group and Member are names within Tenant.
	Group, Member string
}

// Token is an API token's stored record. The secret itself is never stored.
type Token struct {
	// ID is the token's public, unique part.
	ID string
	// Tenant and Principal name whom the token acts as.
	Tenant, Principal string
	// SecretHash is SHA-256 of the secret part.
	SecretHash []byte
	// Description says what the token is for.
	Description string
	// CreatedAt and ExpiresAt come from the store's clock.
	CreatedAt, ExpiresAt time.Time
	// LastUsedAt is zero when the token was never used.
	LastUsedAt time.Time
	// RevokedAt is zero unless the token was revoked.
	RevokedAt time.Time
}

// TokenAuth is what authenticating one call needs, read in one round trip.
type TokenAuth struct {
	// Token is the token's record.
	Token Token
	// Kind is the kind of the token's principal.
	Kind PrincipalKind
	// Platform reports whether the principal's tenant is the platform tenant.
	Platform bool
	// Epoch is the authorization epoch at the time of the read.
	Epoch int64
	// Now is the store's clock at the time of the read, to check expiry by.
	Now time.Time
}

// Policy is a tenant's named Cedar policy document.
type Policy struct {
	// Tenant and Name are the key.
	Tenant, Name string
	// Body is the Cedar source.
	Body string
	// CreatedAt and UpdatedAt come from the store's clock.
	CreatedAt, UpdatedAt time.Time
}

// AuditEvent records one mutating call or one denial.
type AuditEvent struct {
	// ID is assigned by the store and increases with time.
	ID int64
	// At is stamped by the store's clock on insert.
	At time.Time
	// Tenant is the tenant whose resource the call concerned; "" when unknown.
	Tenant string
	// Principal is the caller's Cedar entity (User::"acme/alice"); "" when unauthenticated.
	Principal string
	// Action is the Cedar action, compute:<group>:<verb>.
	Action string
	// Resource is the resource's Cedar entity.
	Resource string
	// Decision is "allow" or "deny".
	Decision string
	// Policies are the ids of the policies that decided.
	Policies []string
	// Reason says why a call was denied, or the result of an allowed one.
	Reason string
	// RequestID matches the X-Request-Id response header.
	RequestID string
}

// AuditFilter selects audit events. Zero fields match everything.
type AuditFilter struct {
	// Tenant restricts to one tenant's events (ignored when AllTenants).
	Tenant string
	// AllTenants includes every tenant's events and tenant-less ones.
	AllTenants bool
	// Principal, Action and Resource match exactly when set.
	Principal, Action, Resource string
	// Since (inclusive) and Until (exclusive) bound the time when set.
	Since, Until time.Time
	// BeforeID, when non-zero, returns only events with a smaller ID (the
	// previous page's last ID), for keyset pagination.
	BeforeID int64
	// Limit caps the number of events returned (newest first); must be > 0.
	Limit int
}

// IAMQuerier is the identity part of Querier. Conventions: a missing row is
// ErrNotFound, a taken key ErrConflict, a missing parent (tenant, group or
// member) ErrNotFound; times are stamped by the store's clock; lists are
// ordered by name unless said otherwise.
type IAMQuerier interface {
	// CreateTenant inserts t, stamping its times.
	CreateTenant(ctx context.Context, t Tenant) (Tenant, error)
	// GetTenant returns one tenant.
	GetTenant(ctx context.Context, name string) (Tenant, error)
	// ListTenants returns every tenant.
	ListTenants(ctx context.Context) ([]Tenant, error)
	// UpdateTenant sets the display name.
	UpdateTenant(ctx context.Context, name, displayName string) (Tenant, error)
	// DeleteTenant deletes a tenant with its principals, groups, tokens and
	// policies; its audit events stay.
	DeleteTenant(ctx context.Context, name string) error

	// CreatePrincipal inserts p, stamping its times.
	CreatePrincipal(ctx context.Context, p Principal) (Principal, error)
	// GetPrincipal returns one user or service account.
	GetPrincipal(ctx context.Context, tenant, name string) (Principal, error)
	// ListPrincipals returns a tenant's principals of one kind.
	ListPrincipals(ctx context.Context, tenant string, kind PrincipalKind) ([]Principal, error)
	// UpdatePrincipal writes p's DisplayName, Email and Description.
	UpdatePrincipal(ctx context.Context, p Principal) (Principal, error)
	// DeletePrincipal deletes a principal with its memberships and tokens.
	DeletePrincipal(ctx context.Context, tenant, name string) error

	// CreateGroup inserts g, stamping its times.
	CreateGroup(ctx context.Context, g Group) (Group, error)
	// GetGroup returns one group.
	GetGroup(ctx context.Context, tenant, name string) (Group, error)
	// ListGroups returns a tenant's groups.
	ListGroups(ctx context.Context, tenant string) ([]Group, error)
	// UpdateGroup writes g's Description.
	UpdateGroup(ctx context.Context, g Group) (Group, error)
	// DeleteGroup deletes a group and its memberships.
	DeleteGroup(ctx context.Context, tenant, name string) error
	// AddGroupMember adds member to group; adding an existing member is a no-op.
	AddGroupMember(ctx context.Context, tenant, group, member string) error
	// RemoveGroupMember removes member from group; ErrNotFound when it is not one.
	RemoveGroupMember(ctx context.Context, tenant, group, member string) error
	// ListGroupMembers returns a group's member names.
	ListGroupMembers(ctx context.Context, tenant, group string) ([]string, error)
	// ListPrincipalGroups returns the names of the groups a principal is in.
	ListPrincipalGroups(ctx context.Context, tenant, principal string) ([]string, error)
	// ListAllGroupMembers returns every membership in the deployment,
	// ordered by tenant, group, member (the authorizer's directory).
	ListAllGroupMembers(ctx context.Context) ([]GroupMember, error)

	// CreateToken inserts t (ID, Tenant, Principal, SecretHash, Description,
	// ExpiresAt), stamping CreatedAt; ErrNotFound when the principal is missing.
	CreateToken(ctx context.Context, t Token) (Token, error)
	// GetToken returns one token.
	GetToken(ctx context.Context, id string) (Token, error)
	// ListTokens returns a tenant's tokens, all or one principal's, newest first.
	ListTokens(ctx context.Context, tenant, principal string) ([]Token, error)
	// RevokeToken stamps RevokedAt unless already revoked, and returns the token.
	RevokeToken(ctx context.Context, id string) (Token, error)
	// TouchToken stamps LastUsedAt with the store's clock.
	TouchToken(ctx context.Context, id string) error
	// AuthenticateToken returns a token with what authenticating needs, in
	// one round trip; ErrNotFound for an unknown id.
	AuthenticateToken(ctx context.Context, id string) (TokenAuth, error)

	// PutPolicy inserts or replaces a policy, stamping its times (CreatedAt
	// is kept on replace).
	PutPolicy(ctx context.Context, p Policy) (Policy, error)
	// GetPolicy returns one policy.
	GetPolicy(ctx context.Context, tenant, name string) (Policy, error)
	// ListPolicies returns a tenant's policies.
	ListPolicies(ctx context.Context, tenant string) ([]Policy, error)
	// ListAllPolicies returns every policy, ordered by tenant and name.
	ListAllPolicies(ctx context.Context) ([]Policy, error)
	// DeletePolicy removes a policy.
	DeletePolicy(ctx context.Context, tenant, name string) error

	// AuthzEpoch returns the authorization epoch: a number that grows with
	// every change to tenants, principals, groups, memberships or policies.
	AuthzEpoch(ctx context.Context) (int64, error)

	// InsertAuditEvent appends e, stamping At and assigning ID.
	InsertAuditEvent(ctx context.Context, e AuditEvent) (AuditEvent, error)
	// ListAuditEvents returns matching events, newest first.
	ListAuditEvents(ctx context.Context, f AuditFilter) ([]AuditEvent, error)
}
