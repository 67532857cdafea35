-- Checkpoints as a WITHOUT ROWID table. A rowid table kept `(run_id, sequence)`
-- twice — in the rows and again in its primary key's own B-tree — so each run's
-- checkpoints took ≈ 1.3 KB more of the file and every commit wrote one more page
-- to the WAL. Keyed by its primary key, the table is that B-tree. Readers see the
-- same columns. The table is rebuilt inside this migration's transaction: a crash
-- leaves the old one. Rows are copied in key order: the old table holds them in
-- the order runs wrote them, interleaved, and inserting that order into a B-tree
-- keyed by run splits pages and leaves them a third empty (a file from before 1006,
-- with a snapshot in every checkpoint, grew by 16%; in key order it shrinks).
CREATE TABLE checkpoints_1010 (
    run_id     TEXT NOT NULL REFERENCES runs (run_id),
    sequence   BIGINT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    at_ms      BIGINT NOT NULL,
    reason     TEXT,
    snapshot   TEXT,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID;
INSERT INTO checkpoints_1010 (run_id, sequence, from_state, to_state, at_ms, reason, snapshot)
    SELECT run_id, sequence, from_state, to_state, at_ms, reason, snapshot FROM checkpoints
    ORDER BY run_id, sequence;
DROP TABLE checkpoints;
ALTER TABLE checkpoints_1010 RENAME TO checkpoints;
