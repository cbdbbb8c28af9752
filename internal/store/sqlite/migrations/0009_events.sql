-- 0009_events: the event outbox. Every state change that matters (a node
-- joined, ready, unreachable, revoked; a reservation placed, bound,
-- released, expired; a policy changed; a usage window closed) is written
-- here by a trigger, in the same transaction as the change, whichever
-- statement made it. The console, `events watch` and webhooks read it by
-- seq. SQLite has one writer at a time, so seq is in commit order already;
-- AUTOINCREMENT keeps a pruned seq from being used again.

CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    tenant     TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    data       TEXT    NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER))
);

-- A tenant's events in order; the platform's reads use the primary key.
CREATE INDEX events_tenant_seq ON events (tenant, seq);
-- PruneEvents: the oldest events first.
CREATE INDEX events_created ON events (created_at);

CREATE TRIGGER nodes_joined_event AFTER INSERT ON nodes
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('node', 'node.joined', NEW.tenant, NEW.id,
        json_object('hostname', NEW.hostname, 'pool', NEW.pool));
END;

CREATE TRIGGER nodes_state_event AFTER UPDATE OF state ON nodes
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('node', 'node.' || NEW.state, NEW.tenant, NEW.id,
        json_object('hostname', NEW.hostname, 'pool', NEW.pool, 'previous', OLD.state));
END;

CREATE TRIGGER reservations_placed_event AFTER INSERT ON reservations
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('reservation', 'reservation.' || NEW.state, NEW.tenant, NEW.id,
        json_object('pool_tenant', NEW.pool_tenant, 'pool', NEW.pool, 'gpus', CAST(NEW.gpus AS TEXT),
            'model', NEW.model_key, 'node_id', NEW.node_id, 'principal', NEW.principal));
END;

CREATE TRIGGER reservations_state_event AFTER UPDATE OF state ON reservations
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('reservation', 'reservation.' || NEW.state, NEW.tenant, NEW.id,
        json_object('pool_tenant', NEW.pool_tenant, 'pool', NEW.pool, 'gpus', CAST(NEW.gpus AS TEXT),
            'model', NEW.model_key, 'node_id', NEW.node_id, 'principal', NEW.principal));
END;

CREATE TRIGGER policies_created_event AFTER INSERT ON policies
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('policy', 'policy.changed', NEW.tenant, NEW.name, json_object('change', 'created'));
END;

CREATE TRIGGER policies_updated_event AFTER UPDATE ON policies
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('policy', 'policy.changed', NEW.tenant, NEW.name, json_object('change', 'updated'));
END;

CREATE TRIGGER policies_deleted_event AFTER DELETE ON policies
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('policy', 'policy.changed', OLD.tenant, OLD.name, json_object('change', 'deleted'));
END;

CREATE TRIGGER usage_windows_closed_event AFTER INSERT ON usage_windows
BEGIN
    INSERT INTO events (kind, type, tenant, subject, data)
    VALUES ('usage', 'usage.closed', NEW.tenant, NEW.reservation_id,
        json_object('key', NEW.key, 'pool_tenant', NEW.pool_tenant, 'pool', NEW.pool,
            'model', NEW.model_key, 'meter', NEW.meter, 'gpus', CAST(NEW.gpus AS TEXT),
            'start', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.window_start / 1000000.0, 'unixepoch'),
            'end', strftime('%Y-%m-%dT%H:%M:%fZ', NEW.window_end / 1000000.0, 'unixepoch'),
            'quantity', CAST(NEW.quantity AS TEXT)));
END;
