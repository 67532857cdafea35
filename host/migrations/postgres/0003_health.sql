-- One row that readiness probes upsert: proof that the database commits writes.
CREATE TABLE health_probe (
    id    BIGINT PRIMARY KEY,
    at_ms BIGINT NOT NULL
);
