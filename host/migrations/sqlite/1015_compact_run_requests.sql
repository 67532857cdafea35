-- `compact-requests`: as `compact-timeline`, and a new run's row leaves out the
-- two request columns it can rebuild exactly.
--
-- `request_hash` is '' when it is the hash of the run's own resource id, goal
-- and planner (what the API hashes to tell a replay from a conflicting request);
-- `request_id` is '' when it is the run's id (what the API takes when a request
-- has no `X-Request-Id`). Readers of this version fill both in; a run written
-- before keeps its values, which read the same.
--
-- Versions before this one cannot read these runs: only a database without runs
-- moves on by itself, as for 1011 to 1014; any other waits for `caseops migrate
-- --compact-rows`.
UPDATE host_settings SET value = 'compact-requests'
    WHERE name = 'row_format' AND NOT EXISTS (SELECT 1 FROM runs);
