-- 0011_webhook_secret_rotation: a rotated signing secret stays valid for a
-- while beside the new one, so that a receiver can switch to the new secret
-- without refusing deliveries in between (docs/webhooks.md).
--
-- previous_secret is the secret the last rotation replaced, sealed under the
-- key file like secret, but bound to a name of its own rather than the
-- webhook's id, so that neither column's value opens in the other's place:
-- copying it back into secret cannot revive it past previous_until. Empty
-- when there is none. previous_until is when it stops signing deliveries,
-- by the store's clock; NULL when there is none. Rows from before this
-- migration have neither.
ALTER TABLE webhooks
    ADD COLUMN previous_secret text NOT NULL DEFAULT '',
    ADD COLUMN previous_until  timestamptz;
