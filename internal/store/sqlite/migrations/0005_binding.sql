-- 0005_binding: what the node must hold. A node's spec generation moves
-- whenever one of its GPUs is booked or freed, in the same statement, so
-- that the gateway sends the node its new allocations whichever statement
-- changed them (placement, release, expiry). reservation_devices also keeps
-- the node and model of each GPU as they were when booked: the gateway
-- tells those nodes, and usage is metered by model, long after the GPU's
-- own row has changed or gone.

ALTER TABLE reservation_devices ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
ALTER TABLE reservation_devices ADD COLUMN model_key TEXT NOT NULL DEFAULT '';

UPDATE reservation_devices SET
    node_id = COALESCE((SELECT d.node_id FROM devices d WHERE d.uuid = reservation_devices.device_uuid), ''),
    model_key = COALESCE((SELECT d.model_key FROM devices d WHERE d.uuid = reservation_devices.device_uuid), '');

CREATE TRIGGER device_bookings_spec_on_book
AFTER INSERT ON device_bookings
BEGIN
    UPDATE nodes SET spec_generation = spec_generation + 1
    WHERE id = (SELECT node_id FROM devices WHERE uuid = NEW.device_uuid);
END;

CREATE TRIGGER device_bookings_spec_on_free
AFTER DELETE ON device_bookings
BEGIN
    UPDATE nodes SET spec_generation = spec_generation + 1
    WHERE id = (SELECT node_id FROM devices WHERE uuid = OLD.device_uuid);
END;
