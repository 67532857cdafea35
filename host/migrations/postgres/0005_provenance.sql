-- Where each evidence reference a completed run's conclusion cites came from.
ALTER TABLE runs ADD COLUMN provenance TEXT;
