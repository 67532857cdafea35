-- How this database's runs write their ledger rows and checkpoints. `compact`
-- leaves out what a reader derives: a ledger row's arguments hash and action
-- fingerprint (both follow from its tool and arguments), its bundle digest when
-- it is the run's, and a checkpoint's `from_state` when it is the `to_state` of
-- the checkpoint before it in the same commit; each is stored as ''. Versions
-- before this one cannot read such rows, so a database that already holds runs
-- (and may have replicas of an earlier version serving it) stays `full` until
-- `caseops migrate --compact-rows`; a new database starts `compact`.
CREATE TABLE host_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO host_settings (name, value)
    SELECT 'row_format', CASE WHEN EXISTS (SELECT 1 FROM runs) THEN 'full' ELSE 'compact' END;
