-- name: CreateCA :one
INSERT INTO pki_cas (name, cert_der, key_encrypted, created_at)
VALUES (sqlc.arg(name), sqlc.arg(cert_der), sqlc.arg(key_encrypted), CAST(unixepoch('subsec') * 1000000 AS INTEGER))
RETURNING *;

-- name: GetCA :one
SELECT * FROM pki_cas WHERE name = sqlc.arg(name);

-- name: CreateJoinToken :one
-- A new token has not been spent: uses starts at 0.
INSERT INTO join_tokens (id, tenant, pool, secret_hash, max_uses, uses, labels, description, created_at, expires_at)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(pool), sqlc.arg(secret_hash), sqlc.arg(max_uses), 0,
        sqlc.arg(labels), sqlc.arg(description), CAST(unixepoch('subsec') * 1000000 AS INTEGER), sqlc.arg(expires_at))
RETURNING *;

-- name: GetJoinToken :one
SELECT * FROM join_tokens WHERE id = sqlc.arg(id);

-- name: ListJoinTokens :many
SELECT * FROM join_tokens WHERE tenant = sqlc.arg(tenant) ORDER BY created_at DESC, id DESC;

-- name: RevokeJoinToken :one
-- A second revocation keeps the first one's time.
UPDATE join_tokens SET revoked_at = COALESCE(revoked_at, CAST(unixepoch('subsec') * 1000000 AS INTEGER))
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: SpendJoinToken :one
-- One statement, so that two racing joins never both take the last use: no
-- row means the token is missing, revoked, expired or used up.
UPDATE join_tokens SET uses = uses + 1
WHERE id = sqlc.arg(id) AND revoked_at IS NULL
  AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND uses < max_uses
RETURNING *;
