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
-- Whole indexes, not partial ones: a partial index whose condition only a
-- bound parameter implies makes SQLite prepare the statement again at each
-- new binding. The NULLs of every other task sort first and are skipped by
-- the range.
CREATE INDEX tasks_ready ON tasks (ready_key);
CREATE INDEX tasks_held ON tasks (held_key);
