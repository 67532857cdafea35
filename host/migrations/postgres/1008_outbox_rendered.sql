-- An outbox row no longer holds a copy of its event: the relay renders the
-- CloudEvent when it publishes, from the row's columns, the audit event of the
-- same tenant and sequence (the event's data) and, for a finished run, the run's
-- result. `payload` is NULL for such rows; rows written before (or by a replica
-- of an earlier version during a rolling deploy) keep their envelope and are
-- published as written.
ALTER TABLE outbox_events ADD COLUMN subject TEXT;
ALTER TABLE outbox_events ALTER COLUMN payload DROP NOT NULL;
