-- A run's recovery snapshot lives on its row, overwritten at each commit and
-- cleared at the terminal one (a finished run is answered from its outcome).
-- Checkpoints keep the transitions only; a row migrated from before keeps its
-- snapshot in its last checkpoint, which recovery still reads when this is NULL.
ALTER TABLE runs ADD COLUMN snapshot TEXT;
