-- 0005_binding: what the node must hold. A node's spec generation moves
-- whenever one of its GPUs is booked or freed, in the same statement, so
-- that the gateway sends the node its new allocations whichever statement
-- changed them (placement, release, expiry). reservation_devices also keeps
-- the node and model of each GPU as they were when booked: the gateway
-- tells those nodes, and usage is metered by model, long after the GPU's
-- own row has changed or gone.

ALTER TABLE reservation_devices ADD COLUMN node_id text NOT NULL DEFAULT '';
ALTER TABLE reservation_devices ADD COLUMN model_key text NOT NULL DEFAULT '';

UPDATE reservation_devices rd SET node_id = d.node_id, model_key = d.model_key
FROM devices d WHERE d.uuid = rd.device_uuid;

-- Statement-level, so that booking 8 GPUs of a node moves its generation
-- once rather than writing its row 8 times.
CREATE FUNCTION device_bookings_spec_on_book() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE nodes SET spec_generation = spec_generation + 1
    WHERE id IN (SELECT d.node_id FROM devices d JOIN booked b ON b.device_uuid = d.uuid);
    RETURN NULL;
END;
$$;

CREATE FUNCTION device_bookings_spec_on_free() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE nodes SET spec_generation = spec_generation + 1
    WHERE id IN (SELECT d.node_id FROM devices d JOIN freed f ON f.device_uuid = d.uuid);
    RETURN NULL;
END;
$$;

CREATE TRIGGER device_bookings_spec_on_book
AFTER INSERT ON device_bookings REFERENCING NEW TABLE AS booked
FOR EACH STATEMENT EXECUTE FUNCTION device_bookings_spec_on_book();

CREATE TRIGGER device_bookings_spec_on_free
AFTER DELETE ON device_bookings REFERENCING OLD TABLE AS freed
FOR EACH STATEMENT EXECUTE FUNCTION device_bookings_spec_on_free();
