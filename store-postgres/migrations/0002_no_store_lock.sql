-- baton Postgres schema, version 2: no store-wide lock.
--
-- Writers no longer take the `counters` row. Each locks the rows of the
-- tasks it decides on (`SELECT ... FOR UPDATE`), takes fences from a
-- SEQUENCE once it holds them, and inserts its events and notifications
-- with an insertion number (`id`) but no sequence number yet. A reader
-- numbers every committed row that has none, in `id` order, in a short
-- transaction of its own (the sequencer, which alone takes the `counters`
-- row), then pages by `seq`. See ARCHITECTURE.md for why that keeps
-- every promise the store-wide lock kept.

-- Fences: the next one is one past the highest ever handed out.
CREATE SEQUENCE fence_seq AS bigint MINVALUE 1;
SELECT CASE WHEN fence > 0 THEN setval('fence_seq', fence) ELSE setval('fence_seq', 1, false) END
  FROM counters WHERE id = 1;
ALTER TABLE counters DROP COLUMN fence;

-- Events: the insertion number orders what the sequencer numbers next.
ALTER TABLE events ADD COLUMN id bigint;
UPDATE events SET id = seq;
CREATE SEQUENCE events_id_seq AS bigint OWNED BY events.id;
SELECT setval('events_id_seq', greatest(coalesce(max(id), 0), 1), max(id) IS NOT NULL) FROM events;
ALTER TABLE events ALTER COLUMN id SET DEFAULT nextval('events_id_seq'), ALTER COLUMN id SET NOT NULL;
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ADD PRIMARY KEY (id);
ALTER TABLE events ALTER COLUMN seq DROP NOT NULL;
CREATE UNIQUE INDEX events_by_seq ON events (seq);
CREATE INDEX events_unnumbered ON events (id) WHERE seq IS NULL;

-- The outbox, likewise.
ALTER TABLE outbox ADD COLUMN id bigint;
UPDATE outbox SET id = seq;
CREATE SEQUENCE outbox_id_seq AS bigint OWNED BY outbox.id;
SELECT setval('outbox_id_seq', greatest(coalesce(max(id), 0), 1), max(id) IS NOT NULL) FROM outbox;
ALTER TABLE outbox ALTER COLUMN id SET DEFAULT nextval('outbox_id_seq'), ALTER COLUMN id SET NOT NULL;
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD PRIMARY KEY (id);
ALTER TABLE outbox ALTER COLUMN seq DROP NOT NULL;
CREATE UNIQUE INDEX outbox_by_seq ON outbox (seq);
CREATE INDEX outbox_unnumbered ON outbox (id) WHERE seq IS NULL;
