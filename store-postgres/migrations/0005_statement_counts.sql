-- baton Postgres schema, version 5: the counts' deltas once a statement.
-- A batch of grants or reports updates its rows in one statement; the
-- triggers of version 4 ran once per row (a PL/pgSQL call and two inserts
-- each). These run once per statement, over its transition tables, and
-- append one delta per (queue, state) the statement changed, summed: the
-- same totals, folded the same way (`counts` + `count_deltas`).
DROP TRIGGER tasks_counted_insert ON tasks;
DROP TRIGGER tasks_counted_update ON tasks;
DROP TRIGGER tasks_counted_delete ON tasks;

CREATE FUNCTION count_tasks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO count_deltas (queue, state, n)
    SELECT counted_queue, state, count(*) FROM new_rows
     WHERE counted_queue IS NOT NULL GROUP BY counted_queue, state;
    RETURN NULL;
END $$;

CREATE FUNCTION count_tasks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO count_deltas (queue, state, n)
    SELECT counted_queue, state, -count(*) FROM old_rows
     WHERE counted_queue IS NOT NULL GROUP BY counted_queue, state;
    RETURN NULL;
END $$;

-- A row's id never changes, so its old and new versions pair by id.
CREATE FUNCTION count_tasks_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO count_deltas (queue, state, n)
    SELECT queue, state, sum(n) FROM (
        SELECT o.counted_queue AS queue, o.state AS state, -1 AS n
          FROM old_rows o JOIN new_rows w ON w.task_id = o.task_id
         WHERE o.counted_queue IS NOT NULL
           AND (o.state IS DISTINCT FROM w.state OR o.counted_queue IS DISTINCT FROM w.counted_queue)
        UNION ALL
        SELECT w.counted_queue, w.state, 1
          FROM old_rows o JOIN new_rows w ON w.task_id = o.task_id
         WHERE w.counted_queue IS NOT NULL
           AND (o.state IS DISTINCT FROM w.state OR o.counted_queue IS DISTINCT FROM w.counted_queue)
    ) d GROUP BY queue, state HAVING sum(n) <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_tasks_inserted();
CREATE TRIGGER tasks_counted_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_tasks_updated();
CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_tasks_deleted();
