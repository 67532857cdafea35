-- Runs, their checkpoints and tool ledger, audit and outbox (SQLite dialect).
CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    case_id          TEXT NOT NULL,
    actor            TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    request_id       TEXT,
    goal             TEXT NOT NULL,
    planner_kind     TEXT NOT NULL,
    model            TEXT,
    status           TEXT NOT NULL,
    state            TEXT NOT NULL,
    step_count       BIGINT NOT NULL DEFAULT 0,
    spec             TEXT NOT NULL,
    final_result     TEXT,
    stop_reason      TEXT,
    bundle_digest    TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    UNIQUE (tenant_id, idempotency_key)
);

CREATE TABLE checkpoints (
    run_id     TEXT NOT NULL REFERENCES runs (run_id),
    sequence   BIGINT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    at_ms      BIGINT NOT NULL,
    reason     TEXT,
    snapshot   TEXT,
    PRIMARY KEY (run_id, sequence)
);

CREATE TABLE tool_executions (
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    tool_call_id   TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    tool_name      TEXT NOT NULL,
    tool_version   TEXT NOT NULL,
    arguments      TEXT NOT NULL,
    arguments_hash TEXT NOT NULL,
    fingerprint    TEXT NOT NULL,
    status         TEXT NOT NULL,
    attempt_count  BIGINT NOT NULL,
    result         TEXT,
    error_class    TEXT,
    error_code     TEXT,
    bundle_digest  TEXT NOT NULL,
    started_at     BIGINT NOT NULL,
    finished_at    BIGINT,
    PRIMARY KEY (run_id, tool_call_id)
);

CREATE TABLE audit_events (
    tenant_id TEXT NOT NULL,
    seq       BIGINT NOT NULL,
    event_id  TEXT NOT NULL UNIQUE,
    run_id    TEXT NOT NULL,
    kind      TEXT NOT NULL,
    payload   TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    at_ms     BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);

CREATE TABLE outbox_events (
    event_id     TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    topic        TEXT NOT NULL,
    payload      TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    published_at BIGINT
);

CREATE INDEX runs_by_lease ON runs (status, lease_expires_at);
