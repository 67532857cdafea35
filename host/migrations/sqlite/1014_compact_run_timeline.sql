-- `compact-timeline`: as `compact-history`, and a run's transitions are lines of
-- text in its own row (`history`) instead of rows of `run_transitions`.
--
-- A run created in this format starts with `history = ''`; each commit appends
-- one line per transition, in the statement that already updates the row, so a
-- commit writes one row fewer and a run stores no per-transition row at all
-- (a row costs PostgreSQL 24 bytes of header before its first value). The
-- format of a line is in `host/src/store/timeline.rs` and docs/operations.md. A
-- run without a history (`NULL`) keeps its transitions where it did; readers
-- take all three places.
--
-- Versions before this one cannot read these runs: only a database without runs
-- moves on by itself, as for 1011 to 1013; any other waits for `caseops migrate
-- --compact-rows`.
ALTER TABLE runs ADD COLUMN history TEXT;
UPDATE host_settings SET value = 'compact-timeline'
    WHERE name = 'row_format' AND NOT EXISTS (SELECT 1 FROM runs);
