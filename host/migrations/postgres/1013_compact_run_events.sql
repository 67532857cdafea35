-- `compact-events`: as `compact-runs`, and a run's own two audit events
-- (`agent.run.started`, `agent.run`) store as payload only the JSON string of
-- the bundle's resource key: every other field is a column of the run's row,
-- which a finished run never changes. Readers rebuild the payload from the row;
-- the hash covers the payload as before, so `audit verify` proves the chain and
-- the row it was rebuilt from. Versions before this one cannot read such events:
-- only a database without runs moves on by itself, as for 1011 and 1012; any
-- other waits for `caseops migrate --compact-rows`.
UPDATE host_settings SET value = 'compact-events'
    WHERE name = 'row_format' AND NOT EXISTS (SELECT 1 FROM runs);
