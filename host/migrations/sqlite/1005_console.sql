-- Console sessions: an API key exchanged for a cookie. The cookie carries a random
-- session id; only its SHA-256 is stored (a read of this table yields no live
-- cookie), with the SHA-256 of the API key it was signed in with (a key removed
-- from the configuration ends its sessions), the session's CSRF token and its
-- expiry. Sign-out deletes the row, on every replica at once.
CREATE TABLE console_sessions (
    session_hash TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    key_hash     TEXT NOT NULL,
    csrf_token   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
-- The console (and `GET` of a tenant's runs) lists a tenant's runs newest first.
CREATE INDEX runs_by_tenant_created ON runs (tenant_id, created_at);
