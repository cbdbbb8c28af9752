-- 0009_events: the event outbox. Every state change that matters (a node
-- joined, ready, unreachable, revoked; a reservation placed, bound,
-- released, expired; a policy changed; a usage window closed) is written
-- here by a trigger, in the same transaction as the change, whichever
-- statement made it. The console, `events watch` and webhooks read it by
-- seq.
--
-- seq must be in commit order, or a reader that has seen seq 11 could
-- later miss 10 committing. The triggers are deferred to commit time and
-- take one transaction-scoped advisory lock before they allocate seq: each
-- transaction's events get their numbers, and are committed, while no other
-- transaction's can be. Taking it at commit keeps it held for a moment, and
-- a transaction holding it waits for nothing else, so it cannot deadlock
-- with row locks. A transaction that rolls back leaves a hole in the
-- numbers, never an event out of order.

CREATE TABLE events (
    seq        bigserial   PRIMARY KEY,
    kind       text        NOT NULL,
    type       text        NOT NULL,
    tenant     text        NOT NULL,
    subject    text        NOT NULL,
    data       jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A tenant's events in order; the platform's reads use the primary key.
CREATE INDEX events_tenant_seq ON events (tenant, seq);
-- PruneEvents: the oldest events first.
CREATE INDEX events_created ON events (created_at);

-- record_event is the one writer of events: the lock, then the row.
CREATE FUNCTION record_event(ev_type text, ev_tenant text, ev_subject text, ev_data jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- 0x6576656e7473 is "events": distinct from the migrations' lock key.
    PERFORM pg_advisory_xact_lock(111559182283891);
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES (split_part(ev_type, '.', 1), ev_type, ev_tenant, ev_subject, ev_data);
END;
$$;

CREATE FUNCTION nodes_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM record_event('node.joined', NEW.tenant, NEW.id,
            jsonb_build_object('hostname', NEW.hostname, 'pool', NEW.pool));
    ELSE
        PERFORM record_event('node.' || NEW.state, NEW.tenant, NEW.id,
            jsonb_build_object('hostname', NEW.hostname, 'pool', NEW.pool, 'previous', OLD.state));
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER nodes_joined_event AFTER INSERT ON nodes
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION nodes_event();

CREATE CONSTRAINT TRIGGER nodes_state_event AFTER UPDATE OF state ON nodes
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION nodes_event();

CREATE FUNCTION reservations_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM record_event('reservation.' || NEW.state, NEW.tenant, NEW.id,
        jsonb_build_object('pool_tenant', NEW.pool_tenant, 'pool', NEW.pool, 'gpus', NEW.gpus::text,
            'model', NEW.model_key, 'node_id', NEW.node_id, 'principal', NEW.principal));
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER reservations_placed_event AFTER INSERT ON reservations
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION reservations_event();

CREATE CONSTRAINT TRIGGER reservations_state_event AFTER UPDATE OF state ON reservations
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION reservations_event();

CREATE FUNCTION policies_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM record_event('policy.changed', OLD.tenant, OLD.name, jsonb_build_object('change', 'deleted'));
    ELSE
        PERFORM record_event('policy.changed', NEW.tenant, NEW.name,
            jsonb_build_object('change', CASE TG_OP WHEN 'INSERT' THEN 'created' ELSE 'updated' END));
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER policies_changed_event AFTER INSERT OR UPDATE OR DELETE ON policies
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION policies_event();

CREATE FUNCTION usage_windows_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM record_event('usage.closed', NEW.tenant, NEW.reservation_id,
        jsonb_build_object('key', NEW.key, 'pool_tenant', NEW.pool_tenant, 'pool', NEW.pool,
            'model', NEW.model_key, 'meter', NEW.meter, 'gpus', NEW.gpus::text,
            'start', to_char(NEW.window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'end', to_char(NEW.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'quantity', NEW.quantity::text));
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER usage_windows_closed_event AFTER INSERT ON usage_windows
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION usage_windows_event();
