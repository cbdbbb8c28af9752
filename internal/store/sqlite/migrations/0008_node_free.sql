-- 0008_node_free: how many GPUs each node has free, per model, kept by
-- triggers in the same statement as whatever changes it, so that placement
-- picks a node with an index range scan instead of reading every free GPU of
-- the pool. model_key '' counts every model of the node (a placement of any
-- model). tenant and pool copy the node's, and eligible says whether it may
-- take new reservations (ready, uncordoned, in a pool), so that one index
-- serves the choice: fewest free first.

CREATE TABLE node_free (
    node_id   TEXT    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    model_key TEXT    NOT NULL,
    tenant    TEXT    NOT NULL,
    pool      TEXT    NOT NULL,
    eligible  INTEGER NOT NULL CHECK (eligible IN (0, 1)),
    free      INTEGER NOT NULL CHECK (free >= 0),
    PRIMARY KEY (node_id, model_key)
) STRICT;

CREATE INDEX node_free_pick ON node_free (tenant, pool, model_key, eligible, free, node_id);

INSERT INTO node_free (node_id, model_key, tenant, pool, eligible, free)
SELECT d.node_id, k.model_key, n.tenant, n.pool,
       n.state = 'ready' AND n.cordoned = 0 AND n.pool <> '',
       SUM(NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = d.uuid))
FROM devices d
JOIN nodes n ON n.id = d.node_id
JOIN (SELECT DISTINCT model_key FROM devices UNION SELECT '') k ON k.model_key IN (d.model_key, '')
GROUP BY d.node_id, k.model_key;

-- A GPU appears: one more free, unless it is booked (it left and came back).
CREATE TRIGGER devices_free_on_insert
AFTER INSERT ON devices
BEGIN
    INSERT INTO node_free (node_id, model_key, tenant, pool, eligible, free)
    SELECT n.id, k.model_key, n.tenant, n.pool, n.state = 'ready' AND n.cordoned = 0 AND n.pool <> '',
           NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = NEW.uuid)
    FROM nodes n, (SELECT NEW.model_key AS model_key UNION SELECT '') k
    WHERE n.id = NEW.node_id
    ON CONFLICT (node_id, model_key) DO UPDATE SET free = free + excluded.free;
END;

CREATE TRIGGER devices_free_on_delete
AFTER DELETE ON devices
WHEN NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = OLD.uuid)
BEGIN
    UPDATE node_free SET free = free - 1
    WHERE node_id = OLD.node_id AND model_key IN (OLD.model_key, '');
END;

-- A GPU that moves to another node or model (an upsert of the inventory
-- sets both every time; only a real change counts). A booked one counts on
-- neither side until its booking ends, but its new node and model get
-- their rows, which that end adds to.
CREATE TRIGGER devices_free_on_move
AFTER UPDATE OF node_id, model_key ON devices
WHEN OLD.node_id <> NEW.node_id OR OLD.model_key <> NEW.model_key
BEGIN
    UPDATE node_free SET free = free - 1
    WHERE node_id = OLD.node_id AND model_key IN (OLD.model_key, '')
      AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = NEW.uuid);
    INSERT INTO node_free (node_id, model_key, tenant, pool, eligible, free)
    SELECT n.id, k.model_key, n.tenant, n.pool, n.state = 'ready' AND n.cordoned = 0 AND n.pool <> '',
           NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_uuid = NEW.uuid)
    FROM nodes n, (SELECT NEW.model_key AS model_key UNION SELECT '') k
    WHERE n.id = NEW.node_id
    ON CONFLICT (node_id, model_key) DO UPDATE SET free = free + excluded.free;
END;

-- Equalities on the primary key (a row-value IN over a subquery would scan
-- the table once per GPU booked).
CREATE TRIGGER device_bookings_free_on_book
AFTER INSERT ON device_bookings
BEGIN
    UPDATE node_free SET free = free - 1
    WHERE node_id = (SELECT node_id FROM devices WHERE uuid = NEW.device_uuid)
      AND model_key IN ((SELECT model_key FROM devices WHERE uuid = NEW.device_uuid), '');
END;

CREATE TRIGGER device_bookings_free_on_free
AFTER DELETE ON device_bookings
BEGIN
    UPDATE node_free SET free = free + 1
    WHERE node_id = (SELECT node_id FROM devices WHERE uuid = OLD.device_uuid)
      AND model_key IN ((SELECT model_key FROM devices WHERE uuid = OLD.device_uuid), '');
END;

-- A node that becomes ready, unreachable, cordoned or moves pool.
CREATE TRIGGER nodes_free_eligible
AFTER UPDATE OF state, cordoned, pool ON nodes
WHEN OLD.state IS NOT NEW.state OR OLD.cordoned IS NOT NEW.cordoned OR OLD.pool IS NOT NEW.pool
BEGIN
    UPDATE node_free SET pool = NEW.pool, eligible = (NEW.state = 'ready' AND NEW.cordoned = 0 AND NEW.pool <> '')
    WHERE node_id = NEW.id;
END;
