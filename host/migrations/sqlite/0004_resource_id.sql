-- The run-bound resource is any bundle's resource, not only a case.
ALTER TABLE runs RENAME COLUMN case_id TO resource_id;
