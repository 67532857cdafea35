-- What CaseOps' write tools change. Each row is made once per idempotency key (the
-- platform derives it from the tenant, the tool and the business intent), so a
-- retried, resumed or reconciled call finds the first effect instead of acting again.
-- `tool_effects` held the same for a tutorial tool and is replaced by these tables.
DROP TABLE tool_effects;

-- Requests to the claimant for documents a case lacks (reversible: a request can be
-- cancelled).
CREATE TABLE document_requests (
    tenant_id       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    case_id         TEXT NOT NULL,
    request_id      TEXT NOT NULL,
    document_codes  TEXT NOT NULL,
    status          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
CREATE INDEX document_requests_by_case ON document_requests (tenant_id, case_id);

-- Status transitions of cases made by tools (irreversible: assessors act on them).
CREATE TABLE case_transitions (
    tenant_id       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    case_id         TEXT NOT NULL,
    from_status     TEXT NOT NULL,
    to_status       TEXT NOT NULL,
    from_version    BIGINT NOT NULL,
    to_version      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
CREATE INDEX case_transitions_by_case ON case_transitions (tenant_id, case_id);
