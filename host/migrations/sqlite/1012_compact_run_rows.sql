-- `compact-runs`: as `compact`, and a run's row leaves out what its other
-- columns hold (the spec's run id, tenant, resource, subject, correlation id and
-- goal; each provenance entry's run id prefix and bundle digest) and stores its
-- catalog once per distinct list of tool names, in `run_catalogs`, naming it by
-- digest in `runs.catalog_digest`. Versions before this one cannot read such
-- rows: only a database without runs moves on by itself, as for 1011; any other
-- waits for `caseops migrate --compact-rows`.
CREATE TABLE run_catalogs (
    digest TEXT PRIMARY KEY,
    names  TEXT NOT NULL
);
ALTER TABLE runs ADD COLUMN catalog_digest TEXT;
UPDATE host_settings SET value = 'compact-runs'
    WHERE name = 'row_format' AND NOT EXISTS (SELECT 1 FROM runs);
