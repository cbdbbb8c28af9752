-- name: ReservationsToMeter :many
-- Reservations with closed time not yet metered: from metered_until (or
-- created_at) to their release when they ended by now, else to the start of
-- the current hour. The first condition repeats reservations_to_meter's
-- predicate so that the partial index answers.
SELECT * FROM reservations
WHERE (released_at IS NULL OR COALESCE(metered_until, created_at) < released_at)
  AND COALESCE(metered_until, created_at) <
      CASE WHEN released_at IS NOT NULL AND released_at <= sqlc.arg(now)::timestamptz THEN released_at
           ELSE sqlc.arg(hour_start)::timestamptz END
ORDER BY created_at, id
LIMIT sqlc.arg(lim);

-- name: InsertUsageWindow :execrows
-- A window written before (same key) is skipped: 0 rows.
INSERT INTO usage_windows (key, tenant, principal, pool_tenant, pool, reservation_id, model_key, meter,
                           gpus, window_start, window_end, quantity, created_at)
VALUES (sqlc.arg(key), sqlc.arg(tenant), sqlc.arg(principal), sqlc.arg(pool_tenant), sqlc.arg(pool),
        sqlc.arg(reservation_id), sqlc.arg(model_key), sqlc.arg(meter), sqlc.arg(gpus),
        sqlc.arg(window_start), sqlc.arg(window_end), sqlc.arg(quantity), clock_timestamp())
ON CONFLICT (key) DO NOTHING;

-- name: AdvanceMeteredUntil :execrows
-- Never backwards: a slower worker finishing late changes nothing.
UPDATE reservations SET metered_until = sqlc.arg(metered_until)::timestamptz
WHERE id = sqlc.arg(id) AND (metered_until IS NULL OR metered_until < sqlc.arg(metered_until)::timestamptz);

-- name: ListUsage :many
-- Unset filters are NULL. after is the key of the last row of the previous
-- page: rows follow it in (window_start, key) order.
SELECT u.* FROM usage_windows u
WHERE (u.tenant = sqlc.narg(tenant) OR sqlc.narg(tenant)::text IS NULL)
  AND (u.principal = sqlc.narg(principal) OR sqlc.narg(principal)::text IS NULL)
  AND (u.pool_tenant = sqlc.narg(pool_tenant) OR sqlc.narg(pool_tenant)::text IS NULL)
  AND (u.pool = sqlc.narg(pool) OR sqlc.narg(pool)::text IS NULL)
  AND (u.meter = sqlc.narg(meter) OR sqlc.narg(meter)::text IS NULL)
  AND (u.window_start >= sqlc.narg(since)::timestamptz OR sqlc.narg(since)::timestamptz IS NULL)
  AND (u.window_start < sqlc.narg(until)::timestamptz OR sqlc.narg(until)::timestamptz IS NULL)
  AND (sqlc.narg(after)::text IS NULL
       OR (u.window_start, u.key) > (SELECT a.window_start, a.key FROM usage_windows a WHERE a.key = sqlc.narg(after)::text))
ORDER BY u.window_start, u.key
LIMIT sqlc.arg(lim);
