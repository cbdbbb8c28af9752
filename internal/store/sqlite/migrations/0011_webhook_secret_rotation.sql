-- 0011_webhook_secret_rotation: a rotated signing secret stays valid for a
-- while beside the new one, so that a receiver can switch to the new secret
-- without refusing deliveries in between (docs/webhooks.md). The columns
-- mean what they mean in postgres/migrations/0011_webhook_secret_rotation.sql;
-- previous_until is INTEGER unix microseconds in UTC, as elsewhere.
ALTER TABLE webhooks ADD COLUMN previous_secret TEXT NOT NULL DEFAULT '';
ALTER TABLE webhooks ADD COLUMN previous_until INTEGER;
