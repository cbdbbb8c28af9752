-- name: ReservationsToMeter :many
-- Reservations with closed time not yet metered: from metered_until (or
-- created_at) to their release when they ended by now, else to the start of
-- the current hour. The first condition repeats reservations_to_meter's
-- predicate so that the partial index answers.
SELECT * FROM reservations
WHERE (released_at IS NULL OR COALESCE(metered_until, created_at) < released_at)
  AND COALESCE(metered_until, created_at) <
      CASE WHEN released_at IS NOT NULL AND released_at <= CAST(sqlc.arg(now) AS INTEGER) THEN released_at
           ELSE CAST(sqlc.arg(hour_start) AS INTEGER) END
ORDER BY created_at, id
LIMIT sqlc.arg(lim);

-- name: InsertUsageWindow :execrows
-- A window written before (same key) is skipped: 0 rows.
INSERT INTO usage_windows (key, tenant, principal, pool_tenant, pool, reservation_id, model_key, meter,
                           gpus, window_start, window_end, quantity, created_at)
VALUES (sqlc.arg(key), sqlc.arg(tenant), sqlc.arg(principal), sqlc.arg(pool_tenant), sqlc.arg(pool),
        sqlc.arg(reservation_id), sqlc.arg(model_key), sqlc.arg(meter), sqlc.arg(gpus),
        sqlc.arg(window_start), sqlc.arg(window_end), sqlc.arg(quantity),
        CAST(unixepoch('subsec') * 1000000 AS INTEGER))
ON CONFLICT (key) DO NOTHING;

-- name: AdvanceMeteredUntil :execrows
-- Never backwards: a slower worker finishing late changes nothing.
UPDATE reservations SET metered_until = CAST(sqlc.arg(metered_until) AS INTEGER)
WHERE id = sqlc.arg(id) AND (metered_until IS NULL OR metered_until < CAST(sqlc.arg(metered_until) AS INTEGER));

-- name: ListUsage :many
-- Unset filters are NULL. after is the key of the last row of the previous
-- page: rows follow it in (window_start, key) order.
SELECT u.* FROM usage_windows u
WHERE (u.tenant = sqlc.narg(tenant) OR sqlc.narg(tenant) IS NULL)
  AND (u.principal = sqlc.narg(principal) OR sqlc.narg(principal) IS NULL)
  AND (u.pool_tenant = sqlc.narg(pool_tenant) OR sqlc.narg(pool_tenant) IS NULL)
  AND (u.pool = sqlc.narg(pool) OR sqlc.narg(pool) IS NULL)
  AND (u.meter = sqlc.narg(meter) OR sqlc.narg(meter) IS NULL)
  AND (u.window_start >= sqlc.narg(since) OR sqlc.narg(since) IS NULL)
  AND (u.window_start < sqlc.narg(until) OR sqlc.narg(until) IS NULL)
  AND (CAST(sqlc.narg(after) AS TEXT) IS NULL
       OR u.window_start > (SELECT a.window_start FROM usage_windows a WHERE a.key = CAST(sqlc.narg(after) AS TEXT))
       OR (u.window_start = (SELECT a.window_start FROM usage_windows a WHERE a.key = CAST(sqlc.narg(after) AS TEXT))
           AND u.key > CAST(sqlc.narg(after) AS TEXT)))
ORDER BY u.window_start, u.key
LIMIT sqlc.arg(lim);
