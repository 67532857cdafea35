-- An outbox row no longer holds a copy of its event: the relay renders the
-- CloudEvent when it publishes, from the row's columns, the audit event of the
-- same tenant and sequence (the event's data) and, for a finished run, the run's
-- result. `payload` is NULL for such rows; rows written before keep their
-- envelope and are published as written. SQLite cannot drop a NOT NULL
-- constraint in place, so the table is rebuilt (inside this migration's
-- transaction: a crash leaves the old table).
CREATE TABLE outbox_events_1008 (
    event_id     TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    topic        TEXT NOT NULL,
    payload      TEXT,
    created_at   BIGINT NOT NULL,
    published_at BIGINT,
    seq          BIGINT NOT NULL DEFAULT 0,
    subject      TEXT
);
INSERT INTO outbox_events_1008 (event_id, tenant_id, run_id, topic, payload, created_at, published_at, seq)
    SELECT event_id, tenant_id, run_id, topic, payload, created_at, published_at, seq FROM outbox_events;
DROP TABLE outbox_events;
ALTER TABLE outbox_events_1008 RENAME TO outbox_events;
CREATE INDEX outbox_events_pending ON outbox_events (tenant_id, seq) WHERE published_at IS NULL;
CREATE INDEX outbox_events_published ON outbox_events (published_at) WHERE published_at IS NOT NULL;
