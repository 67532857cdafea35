-- What CaseOps write tools did, once per idempotency key: a retried or resumed call
-- finds the first effect and returns it instead of acting again.
CREATE TABLE tool_effects (
    tenant_id       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    tool            TEXT NOT NULL,
    case_id         TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
