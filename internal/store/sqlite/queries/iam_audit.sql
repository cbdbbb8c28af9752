-- name: InsertAuditEvent :one
INSERT INTO audit_events (at, tenant, principal, action, resource, decision, policies, reason, request_id)
VALUES (CAST(unixepoch('subsec') * 1000000 AS INTEGER), sqlc.arg(tenant), sqlc.arg(principal), sqlc.arg(action),
        sqlc.arg(resource), sqlc.arg(decision), sqlc.arg(policies), sqlc.arg(reason), sqlc.arg(request_id))
RETURNING *;

-- name: ListTenantAuditEvents :many
-- One tenant's events (an empty tenant: those with no tenant), newest first,
-- walking the (tenant, id) index backwards. Unset filters are NULL; before_id
-- is always set (the largest int64 for the first page), so that it is a
-- plain range the planner can seek on.
SELECT * FROM audit_events
WHERE tenant = sqlc.arg(tenant)
  AND id < sqlc.arg(before_id)
  AND (principal = sqlc.narg(principal) OR sqlc.narg(principal) IS NULL)
  AND (action = sqlc.narg(action) OR sqlc.narg(action) IS NULL)
  AND (resource = sqlc.narg(resource) OR sqlc.narg(resource) IS NULL)
  AND (at >= sqlc.narg(since) OR sqlc.narg(since) IS NULL)
  AND (at < sqlc.narg(until) OR sqlc.narg(until) IS NULL)
ORDER BY id DESC
LIMIT sqlc.arg(lim);

-- name: ListAllAuditEvents :many
-- Every tenant's events, newest first, walking the table backwards from
-- before_id; filters as in ListTenantAuditEvents.
SELECT * FROM audit_events
WHERE id < sqlc.arg(before_id)
  AND (principal = sqlc.narg(principal) OR sqlc.narg(principal) IS NULL)
  AND (action = sqlc.narg(action) OR sqlc.narg(action) IS NULL)
  AND (resource = sqlc.narg(resource) OR sqlc.narg(resource) IS NULL)
  AND (at >= sqlc.narg(since) OR sqlc.narg(since) IS NULL)
  AND (at < sqlc.narg(until) OR sqlc.narg(until) IS NULL)
ORDER BY id DESC
LIMIT sqlc.arg(lim);
