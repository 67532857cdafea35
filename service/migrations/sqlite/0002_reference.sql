-- The claims domain the tools read (SQLite dialect). Every key starts with the tenant.
CREATE TABLE claim_policies (
    tenant_id TEXT NOT NULL,
    policy_id TEXT NOT NULL,
    version   TEXT NOT NULL,
    required  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, policy_id, version)
);

CREATE TABLE cases (
    tenant_id      TEXT NOT NULL,
    case_id        TEXT NOT NULL,
    version        BIGINT NOT NULL,
    status         TEXT NOT NULL,
    policy_id      TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    received_codes TEXT NOT NULL,
    PRIMARY KEY (tenant_id, case_id)
);

CREATE TABLE source_documents (
    tenant_id    TEXT NOT NULL,
    case_id      TEXT NOT NULL,
    document_id  TEXT NOT NULL,
    label        TEXT NOT NULL,
    code         TEXT,
    evidence_ref TEXT NOT NULL,
    PRIMARY KEY (tenant_id, case_id, document_id)
);

CREATE TABLE alias_rules (
    tenant_id    TEXT NOT NULL,
    label        TEXT NOT NULL,
    code         TEXT NOT NULL,
    rule_version TEXT NOT NULL,
    confidence   DOUBLE PRECISION NOT NULL,
    active       BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, label, rule_version)
);
