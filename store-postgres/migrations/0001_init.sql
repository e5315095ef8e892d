-- baton Postgres schema, version 1. Applied inside the store's schema (the
-- URL's `schema=`, `baton` by default) with `search_path` set to it.
-- Records are stored whole as JSON text (core's encoding, exactly as the
-- other stores keep it); the columns beside them exist for indexes.

-- The store-wide counters. Every writing transaction locks this one row
-- first and keeps it to its commit, so fences and event and outbox
-- sequence numbers are handed out in commit order (see ARCHITECTURE.md).
CREATE TABLE counters (
    id         integer PRIMARY KEY CHECK (id = 1),
    fence      bigint NOT NULL,
    event_seq  bigint NOT NULL,
    outbox_seq bigint NOT NULL
);
INSERT INTO counters (id, fence, event_seq, outbox_seq) VALUES (1, 0, 0, 0);

CREATE TABLE tasks (
    -- "C": byte order, the order of task ids everywhere else in baton.
    task_id   text COLLATE "C" PRIMARY KEY,
    state     text NOT NULL,
    -- When the record next changes by itself (lease expiry, start deadline),
    -- ms since the epoch on the database server's clock.
    due_at    bigint,
    revision  bigint NOT NULL,
    record    text NOT NULL,
    -- The work graph's two indexes (core's `ready_entry` and `held_key`),
    -- order-preserving byte strings; bytea compares bytewise.
    ready_key bytea,
    held_key  bytea
);
CREATE INDEX tasks_by_state ON tasks (state, task_id);
CREATE INDEX tasks_by_due ON tasks (state, due_at);
CREATE INDEX tasks_ready ON tasks (ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX tasks_held ON tasks (held_key) WHERE held_key IS NOT NULL;

CREATE TABLE events (
    seq          bigint PRIMARY KEY,
    task_id      text COLLATE "C" NOT NULL,
    kind         text NOT NULL,
    conflict_key text,
    count        bigint NOT NULL DEFAULT 1,
    body         text NOT NULL
);
CREATE INDEX events_by_task ON events (task_id, seq);
CREATE UNIQUE INDEX events_conflicts ON events (task_id, conflict_key) WHERE conflict_key IS NOT NULL;

CREATE TABLE outbox (
    seq       bigint PRIMARY KEY,
    intent_id text NOT NULL UNIQUE,
    task_id   text COLLATE "C" NOT NULL,
    body      text NOT NULL,
    acked_at  bigint
);
CREATE INDEX outbox_pending ON outbox (seq) WHERE acked_at IS NULL;
