-- name: CreateToken :one
-- No token query bumps the authorization epoch: a token's validity is read
-- on every call (AuthenticateToken).
INSERT INTO api_tokens (id, tenant, principal, secret_hash, description, created_at, expires_at)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(principal), sqlc.arg(secret_hash), sqlc.arg(description),
        CAST(unixepoch('subsec') * 1000000 AS INTEGER), sqlc.arg(expires_at))
RETURNING *;

-- name: GetToken :one
SELECT * FROM api_tokens WHERE id = sqlc.arg(id);

-- name: ListTokens :many
-- An empty principal lists the whole tenant's tokens.
SELECT * FROM api_tokens
WHERE tenant = sqlc.arg(tenant) AND (principal = sqlc.arg(principal) OR sqlc.arg(principal) = '')
ORDER BY created_at DESC, id DESC;

-- name: RevokeToken :one
-- A second revocation keeps the first one's time.
UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, CAST(unixepoch('subsec') * 1000000 AS INTEGER))
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: TouchToken :execrows
UPDATE api_tokens SET last_used_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) WHERE id = sqlc.arg(id);

-- name: AuthenticateToken :one
-- Everything authenticating a call needs, in one statement: it runs on
-- every API call.
SELECT sqlc.embed(api_tokens), principals.kind, tenants.platform, authz_epoch.epoch,
       CAST(unixepoch('subsec') * 1000000 AS INTEGER) AS now_us
FROM api_tokens
JOIN principals ON principals.tenant = api_tokens.tenant AND principals.name = api_tokens.principal
JOIN tenants ON tenants.name = api_tokens.tenant
CROSS JOIN authz_epoch
WHERE api_tokens.id = sqlc.arg(id);
