-- An outbox event's place in its tenant's commit order (its audit chain sequence
-- number), and what the relay looks up: the pending events of a tenant in that
-- order, and published ones past their retention.
ALTER TABLE outbox_events ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX outbox_events_pending ON outbox_events (tenant_id, seq) WHERE published_at IS NULL;
CREATE INDEX outbox_events_published ON outbox_events (published_at) WHERE published_at IS NOT NULL;
