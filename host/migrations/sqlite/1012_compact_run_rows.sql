-- `compact-runs`: as `compact`, and a run's row leaves out what its other
-- columns hold (the spec's run id, tenant, resource, subject, correlation id and
-- goal; each provenance entry's run id prefix and bundle digest). Versions before
-- this one cannot read such rows: only a database without runs moves on by
-- itself, as for 1011; any other waits for `caseops migrate --compact-rows`.
UPDATE host_settings SET value = 'compact-runs'
    WHERE name = 'row_format' AND NOT EXISTS (SELECT 1 FROM runs);
