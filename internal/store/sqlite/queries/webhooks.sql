-- name: CreateWebhook :one
-- The cursor starts at the newest event: a webhook delivers what happens
-- after it is made.
INSERT INTO webhooks (id, tenant, url, events, secret, cursor_seq, created_at)
VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(url), sqlc.arg(events), sqlc.arg(secret),
        (SELECT CAST(COALESCE(MAX(seq), 0) AS INTEGER) FROM events),
        CAST(unixepoch('subsec') * 1000000 AS INTEGER))
RETURNING *;

-- name: GetWebhook :one
SELECT * FROM webhooks WHERE id = sqlc.arg(id);

-- name: ListWebhooks :many
SELECT * FROM webhooks WHERE tenant = sqlc.arg(tenant) ORDER BY created_at, id;

-- name: DeleteWebhook :execrows
DELETE FROM webhooks WHERE id = sqlc.arg(id);

-- name: DeleteWebhookDeliveries :exec
DELETE FROM webhook_deliveries WHERE webhook_id = sqlc.arg(webhook_id);

-- name: EnableWebhook :one
-- Active again, its retries from scratch; the cursor stays where it was.
UPDATE webhooks SET state = 'active', attempts = 0, failing_since = NULL, next_attempt_at = NULL
WHERE id = sqlc.arg(id)
RETURNING *;

-- name: DueWebhooks :many
-- Active webhooks whose retry wait is over, unclaimed, with an event of
-- their tenant after their cursor.
SELECT w.* FROM webhooks w
WHERE w.state = 'active'
  AND (w.next_attempt_at IS NULL OR w.next_attempt_at <= CAST(sqlc.arg(now) AS INTEGER))
  AND (w.lease_until IS NULL OR w.lease_until <= CAST(sqlc.arg(now) AS INTEGER))
  AND EXISTS (SELECT 1 FROM events e WHERE e.tenant = w.tenant AND e.seq > w.cursor_seq)
ORDER BY w.id
LIMIT sqlc.arg(lim);

-- name: ClaimWebhook :execrows
-- Takes or renews the claim, only while the cursor is where the caller saw
-- it and no other owner holds an unexpired claim.
UPDATE webhooks SET lease_owner = sqlc.arg(owner), lease_until = CAST(sqlc.arg(lease_until) AS INTEGER)
WHERE id = sqlc.arg(id) AND cursor_seq = sqlc.arg(cursor_seq) AND state = 'active'
  AND (lease_owner = sqlc.arg(owner) OR lease_until IS NULL
       OR lease_until <= CAST(unixepoch('subsec') * 1000000 AS INTEGER));

-- name: ReleaseWebhook :execrows
UPDATE webhooks SET lease_owner = '', lease_until = NULL
WHERE id = sqlc.arg(id) AND lease_owner = sqlc.arg(owner);

-- name: AdvanceWebhook :execrows
-- Compare-and-set: only from the cursor the caller delivered after.
UPDATE webhooks SET cursor_seq = CAST(sqlc.arg(to_seq) AS INTEGER), attempts = 0, failing_since = NULL, next_attempt_at = NULL
WHERE id = sqlc.arg(id) AND cursor_seq = CAST(sqlc.arg(from_seq) AS INTEGER)
  AND CAST(sqlc.arg(to_seq) AS INTEGER) > CAST(sqlc.arg(from_seq) AS INTEGER);

-- name: FailWebhookAttempt :one
-- One more failed attempt at the event after cursor_seq; failing stops the
-- retries until the webhook is enabled.
UPDATE webhooks SET attempts = attempts + 1,
    failing_since = COALESCE(failing_since, CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
    next_attempt_at = CAST(sqlc.arg(next_attempt_at) AS INTEGER),
    state = CASE WHEN CAST(sqlc.arg(failing) AS INTEGER) = 1 THEN 'failing' ELSE state END
WHERE id = sqlc.arg(id) AND cursor_seq = CAST(sqlc.arg(cursor_seq) AS INTEGER)
RETURNING *;

-- name: InsertWebhookDelivery :one
INSERT INTO webhook_deliveries (webhook_id, event_seq, event_type, attempt, http_status, error, duration_us)
VALUES (sqlc.arg(webhook_id), sqlc.arg(event_seq), sqlc.arg(event_type), sqlc.arg(attempt),
        sqlc.arg(http_status), sqlc.arg(error), sqlc.arg(duration_us))
RETURNING *;

-- name: ListWebhookDeliveries :many
-- Newest first; before is the id of the last row of the previous page, 0
-- for the first page.
SELECT * FROM webhook_deliveries
WHERE webhook_id = sqlc.arg(webhook_id)
  AND (CAST(sqlc.arg(before) AS INTEGER) = 0 OR id < CAST(sqlc.arg(before) AS INTEGER))
ORDER BY id DESC
LIMIT sqlc.arg(lim);

-- name: RotateWebhookSecret :one
-- Compare-and-set on the secret the caller read and sealed again as the
-- previous one: of two rotations at once only one applies, so neither
-- keeps a secret the other replaced. keep_us 0 drops the old secret now;
-- otherwise it signs until the store's now plus keep_us.
UPDATE webhooks SET secret = sqlc.arg(secret),
    previous_secret = CASE WHEN CAST(sqlc.arg(keep_us) AS INTEGER) > 0
        THEN CAST(sqlc.arg(previous_secret) AS TEXT) ELSE '' END,
    previous_until = CASE WHEN CAST(sqlc.arg(keep_us) AS INTEGER) > 0
        THEN CAST(unixepoch('subsec') * 1000000 AS INTEGER) + CAST(sqlc.arg(keep_us) AS INTEGER) ELSE NULL END
WHERE id = sqlc.arg(id) AND secret = sqlc.arg(old_secret)
RETURNING *;
