-- SQLite rebuilds its checkpoints table without a rowid (see its migration 1010);
-- PostgreSQL's tables have no such choice, and nothing changes here.
SELECT 1;
