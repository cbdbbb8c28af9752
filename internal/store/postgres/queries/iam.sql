-- name: CreateTenant :one
-- clock_timestamp() is read once, in the subquery, so that created_at and
-- updated_at are equal, here and in every other insert below.
INSERT INTO tenants (name, display_name, platform, created_at, updated_at)
SELECT sqlc.arg(name), sqlc.arg(display_name), sqlc.arg(platform), c.now, c.now
FROM (SELECT clock_timestamp() AS now) c
RETURNING *;

-- name: GetTenant :one
SELECT * FROM tenants WHERE name = sqlc.arg(name);

-- name: ListTenants :many
SELECT * FROM tenants ORDER BY name;

-- name: UpdateTenant :one
UPDATE tenants
SET display_name = sqlc.arg(display_name), updated_at = clock_timestamp()
WHERE name = sqlc.arg(name)
RETURNING *;

-- name: DeleteTenant :execrows
DELETE FROM tenants WHERE name = sqlc.arg(name);

-- name: CreatePrincipal :one
INSERT INTO principals (tenant, name, kind, display_name, email, description, created_at, updated_at)
SELECT sqlc.arg(tenant), sqlc.arg(name), sqlc.arg(kind), sqlc.arg(display_name), sqlc.arg(email), sqlc.arg(description), c.now, c.now
FROM (SELECT clock_timestamp() AS now) c
RETURNING *;

-- name: GetPrincipal :one
SELECT * FROM principals WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: ListPrincipals :many
-- An empty kind lists both kinds.
SELECT * FROM principals
WHERE tenant = sqlc.arg(tenant) AND (kind = sqlc.arg(kind) OR sqlc.arg(kind)::text = '')
ORDER BY name;

-- name: UpdatePrincipal :one
UPDATE principals
SET display_name = sqlc.arg(display_name), email = sqlc.arg(email), description = sqlc.arg(description),
    updated_at = clock_timestamp()
WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name)
RETURNING *;

-- name: DeletePrincipal :execrows
DELETE FROM principals WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: CreateGroup :one
INSERT INTO groups (tenant, name, description, created_at, updated_at)
SELECT sqlc.arg(tenant), sqlc.arg(name), sqlc.arg(description), c.now, c.now
FROM (SELECT clock_timestamp() AS now) c
RETURNING *;

-- name: GetGroup :one
SELECT * FROM groups WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: ListGroups :many
SELECT * FROM groups WHERE tenant = sqlc.arg(tenant) ORDER BY name;

-- name: UpdateGroup :one
UPDATE groups
SET description = sqlc.arg(description), updated_at = clock_timestamp()
WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name)
RETURNING *;

-- name: DeleteGroup :execrows
DELETE FROM groups WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: AddGroupMember :exec
-- A missing group or member fails its foreign key; an existing membership
-- is left alone.
INSERT INTO group_members (tenant, group_name, member)
VALUES (sqlc.arg(tenant), sqlc.arg(group_name), sqlc.arg(member))
ON CONFLICT (tenant, group_name, member) DO NOTHING;

-- name: RemoveGroupMember :execrows
DELETE FROM group_members
WHERE tenant = sqlc.arg(tenant) AND group_name = sqlc.arg(group_name) AND member = sqlc.arg(member);

-- name: ListGroupMembers :many
-- No row when the group is missing, one row with a NULL member when it is
-- empty: the caller tells the two apart in one round trip.
SELECT m.member FROM groups g
LEFT JOIN group_members m ON m.tenant = g.tenant AND m.group_name = g.name
WHERE g.tenant = sqlc.arg(tenant) AND g.name = sqlc.arg(group_name)
ORDER BY m.member;

-- name: ListPrincipalGroups :many
-- As ListGroupMembers: no row when the principal is missing.
SELECT m.group_name FROM principals p
LEFT JOIN group_members m ON m.tenant = p.tenant AND m.member = p.name
WHERE p.tenant = sqlc.arg(tenant) AND p.name = sqlc.arg(principal)
ORDER BY m.group_name;

-- name: ListAllGroupMembers :many
SELECT * FROM group_members ORDER BY tenant, group_name, member;

-- name: PutPolicy :one
INSERT INTO policies (tenant, name, body, created_at, updated_at)
SELECT sqlc.arg(tenant), sqlc.arg(name), sqlc.arg(body), c.now, c.now
FROM (SELECT clock_timestamp() AS now) c
ON CONFLICT (tenant, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
RETURNING *;

-- name: GetPolicy :one
SELECT * FROM policies WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: ListPolicies :many
SELECT * FROM policies WHERE tenant = sqlc.arg(tenant) ORDER BY name;

-- name: ListAllPolicies :many
SELECT * FROM policies ORDER BY tenant, name;

-- name: DeletePolicy :execrows
DELETE FROM policies WHERE tenant = sqlc.arg(tenant) AND name = sqlc.arg(name);

-- name: AuthzEpoch :one
SELECT epoch FROM authz_epoch;
