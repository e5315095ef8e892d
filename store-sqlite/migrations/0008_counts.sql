-- baton SQLite schema, version 8: counts kept with every commit.
-- `counted_queue` is the queue a record is counted under (core's
-- `census_queue`: "" outside the work graph; NULL for a record that holds a
-- setting, or a row written before this version until the upgrade fills it
-- in). `counts` holds how many rows stand in each (queue, state), changed
-- by these triggers inside the statement that writes the row, so in the
-- same commit: a status read costs the same at any number of tasks.
ALTER TABLE tasks ADD COLUMN counted_queue TEXT;

CREATE TABLE counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

CREATE TRIGGER counts_insert AFTER INSERT ON tasks
WHEN NEW.counted_queue IS NOT NULL
BEGIN
    INSERT INTO counts (queue, state, n) VALUES (NEW.counted_queue, NEW.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER counts_update_from AFTER UPDATE OF state, counted_queue ON tasks
WHEN OLD.counted_queue IS NOT NULL
 AND (OLD.state IS NOT NEW.state OR OLD.counted_queue IS NOT NEW.counted_queue)
BEGIN
    UPDATE counts SET n = n - 1 WHERE queue = OLD.counted_queue AND state = OLD.state;
END;

CREATE TRIGGER counts_update_to AFTER UPDATE OF state, counted_queue ON tasks
WHEN NEW.counted_queue IS NOT NULL
 AND (OLD.state IS NOT NEW.state OR OLD.counted_queue IS NOT NEW.counted_queue)
BEGIN
    INSERT INTO counts (queue, state, n) VALUES (NEW.counted_queue, NEW.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER counts_delete AFTER DELETE ON tasks
WHEN OLD.counted_queue IS NOT NULL
BEGIN
    UPDATE counts SET n = n - 1 WHERE queue = OLD.counted_queue AND state = OLD.state;
END;
