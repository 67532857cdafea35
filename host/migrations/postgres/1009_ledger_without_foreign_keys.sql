-- Checkpoints and ledger rows no longer carry a foreign key to their run. Every
-- statement that writes them is gated by the run's lease fence in the same
-- statement (`WHERE EXISTS (SELECT 1 FROM fence)`): a row is written only if that
-- statement has just updated its run's row, and runs are never deleted. The key
-- checked nothing more, and it cost a lookup and a row lock on `runs` for every
-- row written (a C-102 run inserts 22 checkpoints and upserts 8 ledger rows):
-- about 8% of PostgreSQL's CPU per run. A replica of an earlier version writes
-- under the same fence, so a rolling deploy keeps the guarantee.
ALTER TABLE checkpoints DROP CONSTRAINT IF EXISTS checkpoints_run_id_fkey;
ALTER TABLE tool_executions DROP CONSTRAINT IF EXISTS tool_executions_run_id_fkey;
