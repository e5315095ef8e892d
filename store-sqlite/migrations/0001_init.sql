-- baton SQLite schema, version 1.
-- Records are stored whole as JSON; the columns beside them exist for indexes.

CREATE TABLE fence (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO fence (id, value) VALUES (1, 0);

CREATE TABLE tasks (
    task_id  TEXT PRIMARY KEY,
    state    TEXT NOT NULL,
    -- When the record next changes by itself (lease expiry, start deadline), ms since the epoch.
    due_at   INTEGER,
    revision INTEGER NOT NULL,
    record   TEXT NOT NULL
) WITHOUT ROWID;
-- list by state in task-id order (claim, heartbeat and list stay flat as the table grows)
CREATE INDEX tasks_by_state ON tasks (state, task_id);
-- derived state: which held leases have expired, which deadlines have passed
CREATE INDEX tasks_by_due ON tasks (state, due_at);

CREATE TABLE events (
    seq          INTEGER PRIMARY KEY,
    task_id      TEXT NOT NULL,
    kind         TEXT NOT NULL,
    conflict_key TEXT,
    count        INTEGER NOT NULL DEFAULT 1,
    body         TEXT NOT NULL
);
CREATE INDEX events_by_task ON events (task_id, seq);
CREATE UNIQUE INDEX events_conflicts ON events (task_id, conflict_key) WHERE conflict_key IS NOT NULL;

CREATE TABLE outbox (
    seq       INTEGER PRIMARY KEY,
    intent_id TEXT NOT NULL UNIQUE,
    task_id   TEXT NOT NULL,
    body      TEXT NOT NULL,
    acked_at  INTEGER
);
CREATE INDEX outbox_pending ON outbox (seq) WHERE acked_at IS NULL;
