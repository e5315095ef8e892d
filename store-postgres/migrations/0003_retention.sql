-- baton Postgres schema, version 3: retention.
-- An ended task is now indexed as due at its end (core's `due_at`), so a
-- prune finds what ended before its window through (state, due_at) and
-- never reads a tombstone (due at nothing) again. Rows written before get
-- their end from the record.
UPDATE tasks
   SET due_at = floor(extract(epoch from (record::jsonb ->> 'finished_at')::timestamptz) * 1000)::bigint
 WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NOT_STARTED', 'STALLED')
   AND due_at IS NULL
   AND record::jsonb ? 'finished_at'
   AND NOT record::jsonb ? 'pruned_at';
-- A prune drops the acknowledged notifications of the tasks it prunes.
CREATE INDEX IF NOT EXISTS outbox_acked_by_task ON outbox (task_id) WHERE acked_at IS NOT NULL;
