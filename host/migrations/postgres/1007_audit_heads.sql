-- The head of each tenant's audit chain, one row per tenant, so that an append can
-- read and advance it in the statement that writes the event: `INSERT … ON CONFLICT
-- DO UPDATE` locks the row and works on its newest committed version whatever the
-- statement's snapshot, which a plain read of `audit_events` cannot do inside the
-- statement that took the chain's lock. One round trip per append instead of three.
CREATE TABLE audit_heads (
    tenant_id TEXT PRIMARY KEY,
    seq       BIGINT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
);

-- Every event moves its tenant's head forward, whoever appended it: an append that
-- reads the head from `audit_events` (a transaction with several events, or a
-- replica of an earlier version during a rolling deploy) keeps the row current too.
-- An append that advanced the head itself finds it at its own sequence already.
CREATE FUNCTION caseops_audit_head() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_heads (tenant_id, seq, prev_hash, hash)
    VALUES (NEW.tenant_id, NEW.seq, NEW.prev_hash, NEW.hash)
    ON CONFLICT (tenant_id) DO UPDATE
        SET seq = excluded.seq, prev_hash = excluded.prev_hash, hash = excluded.hash
        WHERE audit_heads.seq < excluded.seq;
    RETURN NULL;
END;
$$;

-- Created before the heads are seeded: it locks out appends until this migration
-- commits, so none falls between the seed's read and the trigger.
CREATE TRIGGER audit_events_head AFTER INSERT ON audit_events
    FOR EACH ROW EXECUTE FUNCTION caseops_audit_head();

INSERT INTO audit_heads (tenant_id, seq, prev_hash, hash)
SELECT DISTINCT ON (tenant_id) tenant_id, seq, prev_hash, hash
FROM audit_events
ORDER BY tenant_id, seq DESC;
