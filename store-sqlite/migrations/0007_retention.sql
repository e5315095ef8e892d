-- baton SQLite schema, version 7: retention.
-- An ended task is now indexed as due at its end (core's `due_at`), so a
-- prune finds the tasks that ended before its window through
-- (state, due_at) and never reads a tombstone (due at nothing) again. Rows
-- written before this version get their end from the record.
UPDATE tasks
   SET due_at = CAST(round((julianday(json_extract(record, '$.finished_at')) - 2440587.5) * 86400000) AS INTEGER)
 WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NOT_STARTED', 'STALLED')
   AND due_at IS NULL
   AND json_extract(record, '$.finished_at') IS NOT NULL
   AND json_extract(record, '$.pruned_at') IS NULL;
-- A prune drops the acknowledged notifications of the tasks it prunes.
CREATE INDEX IF NOT EXISTS outbox_acked_by_task ON outbox (task_id) WHERE acked_at IS NOT NULL;
-- The ended tasks not yet pruned, by when they ended.
CREATE INDEX IF NOT EXISTS tasks_ended ON tasks (state, due_at)
    WHERE due_at IS NOT NULL AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NOT_STARTED', 'STALLED');
