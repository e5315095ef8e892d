-- baton Postgres schema, version 4: counts kept with every commit.
-- `counted_queue` is the queue a record is counted under (core's
-- `census_queue`: '' outside the work graph; NULL for a record that holds a
-- setting, or a row written before this version until the upgrade fills
-- it in). Every change of a counted row's (queue, state) appends a -1 and
-- a +1 to `count_deltas` from a trigger, inside the writing statement and
-- so in its transaction: inserts never wait on one another, so writers of
-- different tasks still never share a row. A reader of the counts folds
-- the deltas committed so far into `counts` (one folder at a time: the
-- table lock below) and reads that table, a row per queue and state.
ALTER TABLE tasks ADD COLUMN counted_queue text COLLATE "C";

CREATE TABLE counts (
    queue text COLLATE "C" NOT NULL,
    state text NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (queue, state)
);

CREATE TABLE count_deltas (
    id    bigserial PRIMARY KEY,
    queue text COLLATE "C" NOT NULL,
    state text NOT NULL,
    n     bigint NOT NULL
);

CREATE FUNCTION count_task_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (queue, state, n) VALUES (NEW.counted_queue, NEW.state, 1);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO count_deltas (queue, state, n) VALUES (OLD.counted_queue, OLD.state, -1);
    ELSE
        IF OLD.counted_queue IS NOT NULL THEN
            INSERT INTO count_deltas (queue, state, n) VALUES (OLD.counted_queue, OLD.state, -1);
        END IF;
        IF NEW.counted_queue IS NOT NULL THEN
            INSERT INTO count_deltas (queue, state, n) VALUES (NEW.counted_queue, NEW.state, 1);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.counted_queue IS NOT NULL) EXECUTE FUNCTION count_task_change();
CREATE TRIGGER tasks_counted_update AFTER UPDATE OF state, counted_queue ON tasks
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       OR OLD.counted_queue IS DISTINCT FROM NEW.counted_queue)
    EXECUTE FUNCTION count_task_change();
CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks
    FOR EACH ROW WHEN (OLD.counted_queue IS NOT NULL) EXECUTE FUNCTION count_task_change();
