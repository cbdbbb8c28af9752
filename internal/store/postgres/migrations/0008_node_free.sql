-- 0008_node_free: how many GPUs each node has free, per model, kept by
-- triggers in the same statement as whatever changes it, so that placement
-- picks a node with an index range scan instead of reading every free GPU of
-- the pool. model_key '' counts every model of the node (a placement of any
-- model). tenant and pool copy the node's, and eligible says whether it may
-- take new reservations (ready, uncordoned, in a pool), so that one index
-- serves the choice: fewest free first.

CREATE TABLE node_free (
    node_id   text    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    model_key text    NOT NULL,
    tenant    text    NOT NULL,
    pool      text    NOT NULL,
    eligible  boolean NOT NULL,
    free      integer NOT NULL CHECK (free >= 0),
    PRIMARY KEY (node_id, model_key)
);

CREATE INDEX node_free_pick ON node_free (tenant, pool, model_key, eligible, free, node_id);

INSERT INTO node_free (node_id, model_key, tenant, pool, eligible, free)
SELECT d.node_id, k.model_key, n.tenant, n.pool,
       n.state = 'ready' AND NOT n.cordoned AND n.pool <> '',
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = d.uuid))
FROM devices d
JOIN nodes n ON n.id = d.node_id
CROSS JOIN LATERAL (VALUES (d.model_key), ('')) k (model_key)
GROUP BY d.node_id, k.model_key, n.tenant, n.pool, n.state, n.cordoned;

-- node_free_add adds delta free GPUs of model (and of every model) to
-- node, creating the rows for a GPU that appears. A decrease updates: the
-- rows exist, and an insert of a negative count would fail its check
-- before it could become an update.
CREATE FUNCTION node_free_add(node text, model text, delta integer) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF delta < 0 THEN
        UPDATE node_free SET free = free + delta WHERE node_id = node AND model_key IN (model, '');
        RETURN;
    END IF;
    INSERT INTO node_free (node_id, model_key, tenant, pool, eligible, free)
    SELECT n.id, k.model_key, n.tenant, n.pool, n.state = 'ready' AND NOT n.cordoned AND n.pool <> '', delta
    FROM nodes n CROSS JOIN (VALUES (model), ('')) k (model_key)
    WHERE n.id = node
    ON CONFLICT (node_id, model_key) DO UPDATE SET free = node_free.free + excluded.free;
END;
$$;

-- devices_free counts a GPU that appears, leaves or moves. A booked one
-- counts nowhere until its booking ends, but its node and model get their
-- rows, which that end adds to.
CREATE FUNCTION devices_free() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE')
       AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = OLD.uuid) THEN
        PERFORM node_free_add(OLD.node_id, OLD.model_key, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM node_free_add(NEW.node_id, NEW.model_key,
            CASE WHEN EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = NEW.uuid) THEN 0 ELSE 1 END);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER devices_free_on_insert AFTER INSERT ON devices
FOR EACH ROW EXECUTE FUNCTION devices_free();
CREATE TRIGGER devices_free_on_delete AFTER DELETE ON devices
FOR EACH ROW EXECUTE FUNCTION devices_free();
-- An upsert of the inventory sets node and model every time; only a real
-- change counts.
CREATE TRIGGER devices_free_on_move AFTER UPDATE OF node_id, model_key ON devices
FOR EACH ROW WHEN (OLD.node_id <> NEW.node_id OR OLD.model_key <> NEW.model_key)
EXECUTE FUNCTION devices_free();

-- Statement-level: a placement of 8 GPUs on a node writes its rows once.
CREATE FUNCTION device_bookings_free() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE node_free f SET free = f.free - c.n
        FROM (SELECT d.node_id, k.model_key, count(*) AS n
              FROM booked b JOIN devices d ON d.uuid = b.device_uuid
              CROSS JOIN LATERAL (VALUES (d.model_key), ('')) k (model_key)
              GROUP BY d.node_id, k.model_key) c
        WHERE f.node_id = c.node_id AND f.model_key = c.model_key;
    ELSE
        UPDATE node_free f SET free = f.free + c.n
        FROM (SELECT d.node_id, k.model_key, count(*) AS n
              FROM freed b JOIN devices d ON d.uuid = b.device_uuid
              CROSS JOIN LATERAL (VALUES (d.model_key), ('')) k (model_key)
              GROUP BY d.node_id, k.model_key) c
        WHERE f.node_id = c.node_id AND f.model_key = c.model_key;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER device_bookings_free_on_book
AFTER INSERT ON device_bookings REFERENCING NEW TABLE AS booked
FOR EACH STATEMENT EXECUTE FUNCTION device_bookings_free();

CREATE TRIGGER device_bookings_free_on_free
AFTER DELETE ON device_bookings REFERENCING OLD TABLE AS freed
FOR EACH STATEMENT EXECUTE FUNCTION device_bookings_free();

-- A node that becomes ready, unreachable, cordoned or moves pool.
CREATE FUNCTION nodes_free_eligible() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE node_free SET pool = NEW.pool, eligible = (NEW.state = 'ready' AND NOT NEW.cordoned AND NEW.pool <> '')
    WHERE node_id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER nodes_free_eligible
AFTER UPDATE OF state, cordoned, pool ON nodes
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.cordoned IS DISTINCT FROM NEW.cordoned OR OLD.pool IS DISTINCT FROM NEW.pool)
EXECUTE FUNCTION nodes_free_eligible();
