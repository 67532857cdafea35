-- PostgreSQL drops the foreign keys from checkpoints and ledger rows to their run
-- (see its migration 1009). SQLite keeps them: its check is an index lookup in
-- the writer's own process, and dropping one would rebuild the run's largest
-- tables.
SELECT 1;
