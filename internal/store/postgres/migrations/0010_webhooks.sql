-- 0010_webhooks: webhooks deliver a tenant's events (0009_events) to an
-- HTTPS endpoint, in seq order, one event at a time, and log every attempt.
--
-- cursor_seq is the last event seq the webhook has handled (delivered, or
-- skipped as not matching its patterns); it starts at the newest seq when
-- the webhook is created, so a webhook delivers what happens after. It only
-- moves by compare-and-set on its old value, so two processes delivering
-- the same webhook never both advance it. lease_owner and lease_until are
-- the claim one process holds while it delivers, renewed before each
-- event; a process that dies mid-delivery loses it when it runs out.
--
-- attempts, failing_since and next_attempt_at are the retry bookkeeping of
-- the event after cursor: how many attempts failed, when the first of them
-- did, and when the next may run. A webhook whose event kept failing past
-- the retry bound is state 'failing' and is not retried until enabled.
--
-- secret is the signing secret (whsec_...), stored as it is: the receiver
-- needs the same bytes to verify, so a hash would not do (docs/webhooks.md).
CREATE TABLE webhooks (
    id              text        PRIMARY KEY,
    tenant          text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    url             text        NOT NULL,
    events          text        NOT NULL,
    secret          text        NOT NULL,
    state           text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'failing')),
    cursor_seq      bigint      NOT NULL CHECK (cursor_seq >= 0),
    attempts        integer     NOT NULL DEFAULT 0,
    failing_since   timestamptz,
    next_attempt_at timestamptz,
    lease_owner     text        NOT NULL DEFAULT '',
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL
);

CREATE INDEX webhooks_tenant ON webhooks (tenant, created_at, id);
-- DueWebhooks: the active ones, by when they may next be tried.
CREATE INDEX webhooks_due ON webhooks (next_attempt_at) WHERE state = 'active';

-- The delivery log: one row per attempt, test sends included (event_seq 0).
-- No foreign key: deleting a webhook deletes its log with it explicitly.
CREATE TABLE webhook_deliveries (
    id          bigserial   PRIMARY KEY,
    webhook_id  text        NOT NULL,
    event_seq   bigint      NOT NULL,
    event_type  text        NOT NULL,
    attempt     integer     NOT NULL,
    http_status integer     NOT NULL,
    error       text        NOT NULL,
    duration_us bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, id);
