-- baton SQLite schema, version 3.
-- The work graph's two indexes, kept with every record write from the
-- record itself (core's `ready_entry` and `held_key`):
--   ready_key: claimable graph tasks whose dependencies all succeeded, in
--     the order `next` takes them (queue, priority, ready time, id);
--   held_key:  held graph tasks by queue and lease expiry, so `next` finds
--     grants that ran out without a scan.
-- Both are order-preserving byte strings; SQLite compares BLOBs with memcmp.

ALTER TABLE tasks ADD COLUMN ready_key BLOB;
ALTER TABLE tasks ADD COLUMN held_key BLOB;
CREATE INDEX tasks_ready ON tasks (ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX tasks_held ON tasks (held_key) WHERE held_key IS NOT NULL;
