-- Approvals of calls that need one (irreversible writes): each binds one exact action
-- of one run — tool, model-visible arguments and action fingerprint — to the
-- principal that started the run and an expiry. Decided once, by someone else.
CREATE TABLE approvals (
    approval_id   TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    tool_call_id  TEXT NOT NULL,
    tool_name     TEXT NOT NULL,
    arguments     TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    approver_role TEXT NOT NULL,
    requested_by  TEXT NOT NULL,
    status        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    decided_by    TEXT,
    decided_at    BIGINT,
    comment       TEXT,
    UNIQUE (run_id, tool_call_id)
);
CREATE INDEX approvals_by_tenant ON approvals (tenant_id, status, created_at);
CREATE INDEX approvals_pending_expiry ON approvals (status, expires_at);
