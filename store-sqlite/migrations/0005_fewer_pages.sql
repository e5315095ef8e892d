-- baton SQLite schema, version 5.
-- Two pages fewer in a claim's commit (6 to 4), one in a completion's (6 to 5).
--
-- The fence counter: every grant wrote the one-row `fence` table, a page
-- of its own in each claim's commit. Each event row now carries the
-- highest fence minted when it was written (`fence_top`), and the next
-- fence is one past the larger of the last event's and the table's (kept
-- as version 4 left it; written again only by a decision that mints a
-- fence and appends no event). Events are never deleted and their `seq`
-- only grows, so the last event holds the counter, on the page the same
-- commit writes anyway.
--
-- The due index: every claim inserted an entry (the lease's expiry) and
-- every completion, renewal or release rewrote or removed it. Held tasks
-- (CLAIMED, RUNNING) are now found through `tasks_by_state` and their due
-- time checked row by row: there are as many as there are live or
-- unswept leases. The index keeps the tasks that wait on a start
-- deadline (DECLARED, REGISTERED), of which there may be a whole queue.
-- Every query of it repeats the index's condition word for word, which is
-- how SQLite knows it may use it.

ALTER TABLE events ADD COLUMN fence_top INTEGER;
DROP INDEX tasks_by_due;
CREATE INDEX tasks_by_due ON tasks (state, due_at)
    WHERE due_at IS NOT NULL AND state IN ('DECLARED', 'REGISTERED');
