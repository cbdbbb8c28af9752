-- 0010_webhooks: webhooks deliver a tenant's events (0009_events) to an
-- HTTPS endpoint, in seq order, one event at a time, and log every attempt.
-- The columns mean what they mean in postgres/migrations/0010_webhooks.sql;
-- times are INTEGER unix microseconds in UTC, as elsewhere.
--
-- secret is the signing secret (whsec_...), stored as it is: the receiver
-- needs the same bytes to verify, so a hash would not do (docs/webhooks.md).
CREATE TABLE webhooks (
    id              TEXT    PRIMARY KEY NOT NULL,
    tenant          TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    url             TEXT    NOT NULL,
    events          TEXT    NOT NULL,
    secret          TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'failing')),
    cursor_seq      INTEGER NOT NULL CHECK (cursor_seq >= 0),
    attempts        INTEGER NOT NULL DEFAULT 0,
    failing_since   INTEGER,
    next_attempt_at INTEGER,
    lease_owner     TEXT    NOT NULL DEFAULT '',
    lease_until     INTEGER,
    created_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX webhooks_tenant ON webhooks (tenant, created_at, id);
CREATE INDEX webhooks_due ON webhooks (next_attempt_at) WHERE state = 'active';

CREATE TABLE webhook_deliveries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id  TEXT    NOT NULL,
    event_seq   INTEGER NOT NULL,
    event_type  TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    http_status INTEGER NOT NULL,
    error       TEXT    NOT NULL,
    duration_us INTEGER NOT NULL,
    created_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER))
) STRICT;

CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, id);
