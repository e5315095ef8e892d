-- baton SQLite schema, version 4.
-- The work graph's two indexes and the due index hold only the tasks they
-- can find: a bare task has no ready or held key, and a task with nothing
-- due has no due time. Their entries for every other task were rewritten
-- with each write of its record, two or three more pages in every commit.
-- Every query of these indexes bounds the indexed column, which implies
-- the condition. (The bundled SQLite is built without STAT4, which would
-- prepare such a statement again for each new binding.)

DROP INDEX tasks_ready;
DROP INDEX tasks_held;
DROP INDEX tasks_by_due;
CREATE INDEX tasks_ready ON tasks (ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX tasks_held ON tasks (held_key) WHERE held_key IS NOT NULL;
CREATE INDEX tasks_by_due ON tasks (state, due_at) WHERE due_at IS NOT NULL;
