-- `compact-history`: as `compact-runs`, and a run's history is stored without
-- what its row already holds.
--
-- Its own two audit events (`agent.run.started`, `agent.run`) store as payload
-- only the JSON string of the bundle's resource key: every other field is a
-- column of the run's row, which a finished run never changes. Readers rebuild
-- the payload from the row; the hash covers the payload as before, so `audit
-- verify` proves the chain and the row it was rebuilt from.
--
-- Its transitions go to `run_transitions`, keyed by the run's number instead of
-- its 40-character id (a run writes about twenty). A run gets its number when
-- it is created in this format; runs without one keep theirs in `checkpoints`,
-- whichever replica drives them, and readers take both tables. Its tool calls
-- likewise go to `run_calls`, keyed by its number and the call id without the
-- run id that starts it (`:2`; an id of another shape is stored whole after
-- `=`), and without the tenant, which is its run's.
--
-- Versions before this one cannot read either: only a database without runs
-- moves on by itself, as for 1011 and 1012; any other waits for `caseops migrate
-- --compact-rows`. Numbers come from the sequence `run_numbers`.
CREATE SEQUENCE run_numbers;
ALTER TABLE runs ADD COLUMN run_no BIGINT;
CREATE UNIQUE INDEX runs_by_no ON runs (run_no);
CREATE TABLE run_transitions (
    run_no     BIGINT NOT NULL,
    sequence   BIGINT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    at_ms      BIGINT NOT NULL,
    reason     TEXT,
    PRIMARY KEY (run_no, sequence)
);
CREATE TABLE run_calls (
    run_no          BIGINT NOT NULL,
    call            TEXT NOT NULL,
    tool_name       TEXT NOT NULL,
    tool_version    TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    arguments_hash  TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    idempotency_key TEXT,
    status          TEXT NOT NULL,
    attempt_count   BIGINT NOT NULL,
    result          TEXT,
    error_class     TEXT,
    error_code      TEXT,
    bundle_digest   TEXT NOT NULL,
    started_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    PRIMARY KEY (run_no, call)
);
-- As `tool_executions_idempotency_key`: a write's effect found by its key.
CREATE INDEX run_calls_idempotency_key ON run_calls (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
UPDATE host_settings SET value = 'compact-history'
    WHERE name = 'row_format' AND NOT EXISTS (SELECT 1 FROM runs);
