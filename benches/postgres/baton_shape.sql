-- baton's Postgres transactions, replayed by pgbench (no Rust client): one job is a claim of a new
-- task and its completion, each a transaction of the statements store-postgres/src/txn.rs sends,
-- pipelined as it sends them (BEGIN, the row locks, the clock and fences; the writes and COMMIT),
-- with records and events of the size baton writes. It shows what the server alone allows for
-- baton's work on this machine. Run in a baton schema (search_path) with baton's session settings.
\set id random(1, 1000000000)
\startpipeline
BEGIN;
SELECT task_id, record FROM tasks WHERE task_id = ANY(ARRAY['shape-' || :client_id || '-' || :id])
 ORDER BY task_id FOR UPDATE;
SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint,
       ARRAY(SELECT nextval('fence_seq') FROM generate_series(1, 1));
\endpipeline
\startpipeline
INSERT INTO tasks (task_id, state, due_at, revision, record, ready_key, held_key)
VALUES ('shape-' || :client_id || '-' || :id, 'CLAIMED', 1796466505787, 1, repeat('r', 560), NULL, NULL);
INSERT INTO events (task_id, kind, body) VALUES ('shape-' || :client_id || '-' || :id, 'CLAIMED', repeat('e', 300));
COMMIT;
\endpipeline
\startpipeline
BEGIN;
SELECT task_id, record FROM tasks WHERE task_id = ANY(ARRAY['shape-' || :client_id || '-' || :id])
 ORDER BY task_id FOR UPDATE;
SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint,
       ARRAY(SELECT nextval('fence_seq') FROM generate_series(1, 0));
\endpipeline
\startpipeline
UPDATE tasks SET state = 'SUCCEEDED', due_at = NULL, revision = 2, record = repeat('s', 640), ready_key = NULL,
       held_key = NULL
 WHERE task_id = 'shape-' || :client_id || '-' || :id;
INSERT INTO events (task_id, kind, body) VALUES ('shape-' || :client_id || '-' || :id, 'SUCCEEDED', repeat('e', 300));
COMMIT;
\endpipeline
