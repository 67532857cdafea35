-- A write's business idempotency key, recorded with its intent before it runs: the
-- effect it names can be found (reconciliation, an operator) without recomputing it.
ALTER TABLE tool_executions ADD COLUMN idempotency_key TEXT;
CREATE INDEX tool_executions_idempotency_key
    ON tool_executions (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
