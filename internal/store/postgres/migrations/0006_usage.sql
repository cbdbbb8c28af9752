-- 0006_usage: GPU-hours metered from reservations. The meter worker cuts
-- the time each reservation held its GPUs into UTC clock hours and writes
-- one row per reservation, hour and GPU model once that hour has closed
-- (its hour ended by the store's clock, or the reservation ended in it).

-- Where the meter stopped: everything before it is in usage_windows. NULL
-- until the first window is written, so the meter starts at created_at. It
-- only moves forward, which is what keeps a restarted or second worker from
-- metering the same time twice.
ALTER TABLE reservations ADD COLUMN metered_until timestamptz;

-- ReservationsToMeter: reservations that may still have time to meter,
-- that is every active one and each ended one not yet metered to its end.
-- Ended and fully metered reservations, the bulk of history, drop out of
-- the index, so each sweep reads only the few that matter.
CREATE INDEX reservations_to_meter ON reservations (created_at, id)
    WHERE released_at IS NULL OR COALESCE(metered_until, created_at) < released_at;

-- One row per reservation per UTC clock hour per model key. key is the
-- idempotency key "<reservation id>/<model key>/<hour start, unix seconds>":
-- a window written again (a worker restarted between its insert and its
-- commit, two workers racing) hits the primary key and is skipped, never
-- counted twice. window_start and window_end bound the part of the hour the
-- reservation held its GPUs. quantity is exact, in GPU-microseconds (gpus
-- times the microseconds covered; timestamptz keeps microseconds), so sums
-- never drift; hours are quantity / 3.6e9, for display only.
--
-- No foreign keys: usage is what a bill is made from and outlives the
-- reservation, the pool and the tenant it names.
CREATE TABLE usage_windows (
    key            text        PRIMARY KEY,
    tenant         text        NOT NULL,
    principal      text        NOT NULL,
    pool_tenant    text        NOT NULL,
    pool           text        NOT NULL,
    reservation_id text        NOT NULL,
    model_key      text        NOT NULL,
    meter          text        NOT NULL,
    gpus           bigint      NOT NULL CHECK (gpus > 0),
    window_start   timestamptz NOT NULL,
    window_end     timestamptz NOT NULL CHECK (window_end > window_start),
    quantity       bigint      NOT NULL CHECK (quantity >= 0),
    created_at     timestamptz NOT NULL
);

-- ListUsage pages by (window_start, key), within a tenant or across all.
CREATE INDEX usage_windows_tenant_start ON usage_windows (tenant, window_start, key);
CREATE INDEX usage_windows_start ON usage_windows (window_start, key);
-- A pool owner's view of what was used from its pool.
CREATE INDEX usage_windows_pool_start ON usage_windows (pool_tenant, pool, window_start);
