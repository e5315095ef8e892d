//! Write transactions: core's decisions on the rows they lock, with no
//! store-wide lock.
//!
//! A batch of jobs (one caller's, or several callers' sharing one commit)
//! is one `READ COMMITTED` transaction in as few round trips as its
//! decisions allow:
//!
//! 1. `BEGIN`; the rows of every task the batch names, locked in id order
//!    (`FOR UPDATE` reads the latest committed version and keeps every
//!    other writer of those tasks out until this one ends); then the
//!    server's clock and one fence per request that may grant, taken from
//!    a `SEQUENCE` once the locks are held. One round trip.
//! 2. Core's commit engine decides each job ([`baton_core::engine`]),
//!    asking for what it needs, and this module performs it, awaiting
//!    each round trip (the thread waits once, for the whole transaction).
//!    A task read again comes from what this transaction already holds;
//!    those not named (an upstream, a follow-up's target) are locked
//!    together when first asked for; `next` reads its candidates with
//!    `FOR UPDATE SKIP LOCKED`, after sending the writes so far in the
//!    same round trip.
//! 3. Every write, then `COMMIT`, in one round trip.
//!
//! Events and notifications are inserted without a sequence number; the
//! readers number them (`store`'s sequencer). Why this keeps every
//! promise the store-wide lock kept is in ARCHITECTURE.md.

use crate::conn::{At, Cause, Inner, at, classify, encode};
use baton_core::commit::{Answer, Job};
use baton_core::engine::{Engine, Need, Supply};
use baton_core::graph::{Lane, ReadyEntry, held_range, ready_range};
use baton_core::next::{NEXT_FIRST_PAGE, NEXT_PAGE};
use baton_core::{Decision, Error, Id, Result, Snapshot, TaskId, Timestamp};
use deadpool_postgres::Object;
use futures_util::future::{BoxFuture, FutureExt, join_all};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use tokio_postgres::Statement;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// How many times a batch is decided afresh after the server aborted it
/// for a conflict a new try resolves (a deadlock between two writers'
/// row locks, a task another transaction created meanwhile).
const TRIES: usize = 8;

/// The channel a write that puts a task in a ready index notifies, and
/// `watch_ready` listens on (one per store schema). Each notification's
/// payload is `COUNT KEY`: how many tasks entered the ready index of
/// [`wake_key`].
pub(crate) fn ready_channel(schema: &str) -> String {
    format!("baton_ready.{schema}")
}

/// A lane and queue, as a notification names them.
pub(crate) fn wake_key(lane: Lane, queue: &Id) -> String {
    format!("{}/{}", lane.letter(), queue.as_str())
}

/// The statements of a write transaction, prepared before anything is
/// sent, so that pipelined statements run in the order they are sent.
/// Plain statements, each sent only when there is something for it: the
/// server runs them for much less than one statement doing it all with
/// data-modifying CTEs (benches/README.md, "baton's own transactions").
struct Stmts {
    lock: Statement,
    clock: Statement,
    fence: Statement,
    insert: Statement,
    update: Statement,
    event: Statement,
    conflict: Statement,
    note: Statement,
    notify: Statement,
    ready: Statement,
    held: Statement,
    drop_events: Statement,
    drop_notes: Statement,
    update_many: Statement,
    event_many: Statement,
    note_many: Statement,
    held_now: Statement,
    peek: Statement,
    forget: Statement,
}

const SQL: [&str; 19] = [
    // lock: the named tasks' rows, in id order (no deadlock between
    // batches); and, later, tasks a decision reads that no job named.
    // Before them, the records of their concurrency keys, in key order:
    // every request on a keyed task takes its key's lock first (a grant
    // then locks the key's holders, and a holder's end its key), so two
    // writers of one key never hold each other's rows. The key rows are
    // locked by the one-time filter, before any task row is scanned.
    "WITH keys AS MATERIALIZED (
       SELECT k.task_id FROM tasks k
       WHERE k.task_id IN (
         SELECT 'key:' || (t.record::jsonb -> 'node' ->> 'key') FROM tasks t
         WHERE t.task_id = ANY($1) AND t.record LIKE '%\"key\":%')
       ORDER BY k.task_id FOR UPDATE)
     SELECT task_id, record FROM tasks
     WHERE task_id = ANY($1) AND (SELECT count(*) FROM keys) >= 0
     ORDER BY task_id FOR UPDATE",
    // clock: sent after `lock`, so it runs once the locks are held: the
    // server's now and the fences this batch may grant.
    "SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint,
            ARRAY(SELECT nextval('fence_seq') FROM generate_series(1, $1::int))",
    // fence
    "SELECT nextval('fence_seq')",
    // insert: a task this transaction found no row for. Another creating
    // it meanwhile fails the statement (unique violation), and the batch
    // is decided again with that row.
    "INSERT INTO tasks (task_id, state, due_at, revision, record, ready_key, held_key, counted_queue)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    // update: a row this transaction holds locked.
    "UPDATE tasks SET state = $2, due_at = $3, revision = $4, record = $5, ready_key = $6, held_key = $7,
     counted_queue = $8 WHERE task_id = $1",
    // event
    "INSERT INTO events (task_id, kind, body) VALUES ($1, $2, $3)",
    // conflict: a repeated one (same task and key) counts on the first.
    "INSERT INTO events (task_id, kind, conflict_key, count, body) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (task_id, conflict_key) WHERE conflict_key IS NOT NULL
     DO UPDATE SET count = events.count + excluded.count",
    // note
    "INSERT INTO outbox (intent_id, task_id, body) VALUES ($1, $2, $3)",
    // notify: tasks entered a ready index (a hint to waiters, delivered at commit).
    "SELECT pg_notify($1, $2)",
    // ready: `next`'s candidates, each locked or passed over.
    "SELECT task_id, record FROM tasks WHERE ready_key > $1 AND ready_key < $2
     ORDER BY ready_key LIMIT $3 FOR UPDATE SKIP LOCKED",
    // held: expired leases, likewise.
    "SELECT task_id, record FROM tasks WHERE held_key > $1 AND held_key < $2
     ORDER BY held_key LIMIT $3 FOR UPDATE SKIP LOCKED",
    // drop_events, drop_notes: a prune's (sequences never go back).
    "DELETE FROM events WHERE task_id = $1",
    "DELETE FROM outbox WHERE task_id = $1 AND acked_at IS NOT NULL",
    // update_many, event_many, note_many: a batch's rows of one kind in
    // one statement (a batch of grants or reports writes one of each, not
    // one per task: the server starts one executor, and the count
    // triggers run once, for the statement). Events and notifications
    // are numbered in the batch's order.
    "UPDATE tasks SET state = u.state, due_at = u.due_at, revision = u.revision, record = u.record,
       ready_key = u.ready_key, held_key = u.held_key, counted_queue = u.counted_queue
     FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[], $7::bytea[],
                 $8::text[])
          AS u(task_id, state, due_at, revision, record, ready_key, held_key, counted_queue)
     WHERE tasks.task_id = u.task_id COLLATE \"C\"",
    "INSERT INTO events (task_id, kind, body)
     SELECT t, k, b FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(t, k, b, i)
     ORDER BY i",
    "INSERT INTO outbox (intent_id, task_id, body)
     SELECT n, t, b FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(n, t, b, i)
     ORDER BY i",
    // held_now: `held` up to the server's clock, read when sent (after
    // `clock`, in the first round trip of a `next`): what expired by the
    // transaction's time, and perhaps a lease that ended since, which core
    // passes over as live.
    "SELECT task_id, record FROM tasks
     WHERE held_key > $1
       AND held_key < $1 || int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint + 1)
     ORDER BY held_key LIMIT $2 FOR UPDATE SKIP LOCKED",
    // peek: records read without a lock (a `next`'s queues' policies,
    // which core may read as of any moment of the transaction).
    "SELECT task_id, record FROM tasks WHERE task_id = ANY($1)",
    // forget: a tombstone whose time came (its count goes by the delete
    // trigger; its history went at its prune).
    "DELETE FROM tasks WHERE task_id = $1",
];

impl Stmts {
    /// The statements in [`SQL`]'s order.
    fn of(prepared: Vec<Statement>) -> Result<Stmts> {
        let mut prepared = prepared.into_iter();
        let mut next = || {
            prepared
                .next()
                .ok_or_else(|| Error::unavailable("a statement was not prepared".to_owned()))
        };
        Ok(Stmts {
            lock: next()?,
            clock: next()?,
            fence: next()?,
            insert: next()?,
            update: next()?,
            event: next()?,
            conflict: next()?,
            note: next()?,
            notify: next()?,
            ready: next()?,
            held: next()?,
            drop_events: next()?,
            drop_notes: next()?,
            update_many: next()?,
            event_many: next()?,
            note_many: next()?,
            held_now: next()?,
            peek: next()?,
            forget: next()?,
        })
    }

    /// On a pooled connection, through the pool's statement cache.
    async fn cached(client: &Object) -> std::result::Result<Vec<Statement>, tokio_postgres::Error> {
        futures_util::future::try_join_all(SQL.iter().map(|s| client.prepare_cached(s))).await
    }

    async fn prepare(
        client: &tokio_postgres::Client,
    ) -> std::result::Result<Vec<Statement>, tokio_postgres::Error> {
        futures_util::future::try_join_all(SQL.iter().map(|s| client.prepare(s))).await
    }
}

/// A connection of the committer's own and a current-thread runtime that
/// drives it on whichever thread commits (the committer thread, or a
/// caller committing inline), made on first use and again after a
/// failure. The store keeps a few, one per thread committing at once.
pub(crate) struct OwnConnection {
    rt: Option<tokio::runtime::Runtime>,
    open: Option<(tokio_postgres::Client, Stmts)>,
}

impl Drop for OwnConnection {
    fn drop(&mut self) {
        self.open = None;
        // Without blocking: the store may be dropped inside an async task.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl OwnConnection {
    pub(crate) fn new(name: &str) -> Result<OwnConnection> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::unavailable(format!("{name}: cannot start a runtime: {e}")))?;
        Ok(OwnConnection {
            rt: Some(rt),
            open: None,
        })
    }

    fn runtime(&self, inner: &Inner) -> Result<&tokio::runtime::Runtime> {
        self.rt
            .as_ref()
            .ok_or_else(|| Error::unavailable(format!("{}: the runtime is gone", inner.name)))
    }

    fn connect(&mut self, inner: &Inner) -> Result<()> {
        if self.open.as_ref().is_some_and(|(c, _)| !c.is_closed()) {
            return Ok(());
        }
        self.open = None;
        let config = inner.config.clone();
        let opened = self.runtime(inner)?.block_on(async {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
            // Runs whenever this thread waits on the runtime: every round trip.
            tokio::spawn(connection);
            let st = Stmts::prepare(&client).await?;
            Ok::<_, tokio_postgres::Error>((client, st))
        });
        let (client, st) = opened.map_err(|e| classify(&inner.name, Cause::Db(&e), At::Before))?;
        self.open = Some((client, Stmts::of(st)?));
        Ok(())
    }
}

/// A task row as written.
struct TaskRow {
    state: &'static str,
    due: Option<i64>,
    revision: i64,
    record: String,
    ready: Option<Vec<u8>>,
    held: Option<Vec<u8>>,
    counted: Option<String>,
}

/// What the decisions wrote since the last round trip, as the one write
/// statement's columns.
#[derive(Default)]
struct Pending {
    /// Each task's latest row, and whether it is inserted (no row yet).
    tasks: Vec<(String, TaskRow, bool)>,
    task_at: HashMap<String, usize>,
    /// Events in order; a conflict repeated in this batch counts on its
    /// first occurrence.
    events: Vec<(String, &'static str, Option<String>, i64, String)>,
    conflict_at: HashMap<(String, String), usize>,
    notes: Vec<(String, String, String)>,
    /// Each lane and queue a task entered the ready index of
    /// ([`wake_key`]), and how many did.
    queues: Vec<(String, i64)>,
    /// Tasks pruned: their events and acknowledged notifications go,
    /// after this round trip's other writes.
    drops: Vec<String>,
    /// Tombstones forgotten: their rows go, after this round trip's
    /// other writes.
    forgets: Vec<String>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.tasks.is_empty()
            && self.events.is_empty()
            && self.notes.is_empty()
            && self.queues.is_empty()
            && self.drops.is_empty()
            && self.forgets.is_empty()
    }

    /// Every pending statement, sent in order when first polled; the
    /// first error, if any.
    fn send<'a>(
        &'a self,
        client: &'a tokio_postgres::Client,
        st: &'a Stmts,
        channel: &'a str,
    ) -> impl std::future::Future<Output = std::result::Result<(), tokio_postgres::Error>> + 'a
    {
        type Sent<'a> = BoxFuture<'a, std::result::Result<u64, tokio_postgres::Error>>;
        let mut sent: Vec<Sent<'a>> = Vec::new();
        let updates = self.tasks.iter().filter(|(_, _, insert)| !insert).count();
        for (task, r, insert) in &self.tasks {
            if updates > 1 && !insert {
                continue; // with the others, below
            }
            let stmt = if *insert { &st.insert } else { &st.update };
            let p: Vec<&(dyn ToSql + Sync)> = vec![
                task,
                &r.state,
                &r.due,
                &r.revision,
                &r.record,
                &r.ready,
                &r.held,
                &r.counted,
            ];
            sent.push(client.execute_raw(stmt, p).boxed());
        }
        if updates > 1 {
            sent.push(self.update_many(client, st).boxed());
        }
        // A conflict event counts on an earlier one: the events go one by
        // one then, in order.
        let plain = self.events.iter().all(|e| e.2.is_none());
        if plain && self.events.len() > 1 {
            let cols = (
                self.events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
                self.events.iter().map(|e| e.1).collect::<Vec<_>>(),
                self.events.iter().map(|e| e.4.as_str()).collect::<Vec<_>>(),
            );
            sent.push(
                async move {
                    let p: [&(dyn ToSql + Sync); 3] = [&cols.0, &cols.1, &cols.2];
                    client.execute_raw(&st.event_many, p).await
                }
                .boxed(),
            );
        } else {
            for (task, kind, key, count, body) in &self.events {
                let p: Vec<&(dyn ToSql + Sync)> = match key {
                    None => vec![task, kind, body],
                    Some(key) => vec![task, kind, key, count, body],
                };
                let stmt = if key.is_some() {
                    &st.conflict
                } else {
                    &st.event
                };
                sent.push(client.execute_raw(stmt, p).boxed());
            }
        }
        if self.notes.len() > 1 {
            let cols = (
                self.notes.iter().map(|n| n.0.as_str()).collect::<Vec<_>>(),
                self.notes.iter().map(|n| n.1.as_str()).collect::<Vec<_>>(),
                self.notes.iter().map(|n| n.2.as_str()).collect::<Vec<_>>(),
            );
            sent.push(
                async move {
                    let p: [&(dyn ToSql + Sync); 3] = [&cols.0, &cols.1, &cols.2];
                    client.execute_raw(&st.note_many, p).await
                }
                .boxed(),
            );
        } else {
            for (intent, task, body) in &self.notes {
                let p: Vec<&(dyn ToSql + Sync)> = vec![intent, task, body];
                sent.push(client.execute_raw(&st.note, p).boxed());
            }
        }
        for task in &self.drops {
            sent.push(client.execute_raw(&st.drop_events, [task]).boxed());
            sent.push(client.execute_raw(&st.drop_notes, [task]).boxed());
        }
        for task in &self.forgets {
            sent.push(client.execute_raw(&st.forget, [task]).boxed());
        }
        for (key, n) in &self.queues {
            sent.push(
                client
                    .execute_raw(&st.notify, [channel.to_owned(), format!("{n} {key}")])
                    .boxed(),
            );
        }
        async move {
            for r in join_all(sent).await {
                r?;
            }
            Ok(())
        }
    }
}

impl Pending {
    /// Every updated row (none inserted) in one statement, as columns.
    fn update_many<'a>(
        &'a self,
        client: &'a tokio_postgres::Client,
        st: &'a Stmts,
    ) -> impl std::future::Future<Output = std::result::Result<u64, tokio_postgres::Error>> + 'a
    {
        let rows: Vec<(&String, &TaskRow)> = self
            .tasks
            .iter()
            .filter(|(_, _, insert)| !insert)
            .map(|(t, r, _)| (t, r))
            .collect();
        let task: Vec<&str> = rows.iter().map(|(t, _)| t.as_str()).collect();
        let state: Vec<&str> = rows.iter().map(|(_, r)| r.state).collect();
        let due: Vec<Option<i64>> = rows.iter().map(|(_, r)| r.due).collect();
        let revision: Vec<i64> = rows.iter().map(|(_, r)| r.revision).collect();
        let record: Vec<&str> = rows.iter().map(|(_, r)| r.record.as_str()).collect();
        let ready: Vec<Option<&[u8]>> = rows.iter().map(|(_, r)| r.ready.as_deref()).collect();
        let held: Vec<Option<&[u8]>> = rows.iter().map(|(_, r)| r.held.as_deref()).collect();
        let counted: Vec<Option<&str>> = rows.iter().map(|(_, r)| r.counted.as_deref()).collect();
        async move {
            let p: [&(dyn ToSql + Sync); 8] = [
                &task, &state, &due, &revision, &record, &ready, &held, &counted,
            ];
            client.execute_raw(&st.update_many, p).await
        }
    }
}

/// Whether the server aborted the transaction for a conflict that
/// deciding again resolves, and what it was.
fn conflict(e: &tokio_postgres::Error) -> Option<&'static str> {
    let db = e.as_db_error()?;
    let code = db.code();
    if *code == SqlState::T_R_DEADLOCK_DETECTED {
        Some("two writers' row locks deadlocked")
    } else if *code == SqlState::T_R_SERIALIZATION_FAILURE {
        Some("the server reported a serialization failure")
    } else if *code == SqlState::UNIQUE_VIOLATION && db.constraint() == Some("tasks_pkey") {
        Some("another transaction created the task meanwhile")
    } else {
        None
    }
}

/// One open write transaction, performing what core's commit engine
/// needs: every round trip awaited on the connection's own task, none
/// waited for by blocking.
struct PgTx<'a> {
    inner: &'a Inner,
    client: &'a tokio_postgres::Client,
    st: &'a Stmts,
    /// The latest version of each task this transaction has read or
    /// written (`None`: no row), every one of them locked.
    known: HashMap<String, Option<String>>,
    /// The tasks that have a row (read under a lock, or written by an
    /// earlier round trip of this transaction): written with `UPDATE`, the
    /// others with `INSERT`.
    in_table: HashSet<String>,
    /// Fences taken after the locks, handed out in increasing order.
    fences: VecDeque<i64>,
    pending: Pending,
    /// The first page of a queue's ready index, read in the round trip of
    /// its expired leases (core reads the two one after the other), kept
    /// until this transaction writes.
    ready_ahead: Option<(Lane, Id, usize, Vec<Snapshot>)>,
    /// A queue's expired leases, read in the first round trip of a
    /// transaction whose one job is a `next` of that queue.
    expired_ahead: Option<(Lane, Id, Vec<Snapshot>)>,
    /// The policy records of a `next`'s queues, read (without a lock) in
    /// the transaction's first round trip.
    policies_ahead: Option<(Vec<String>, Vec<tokio_postgres::Row>)>,
    channel: String,
    wrote: bool,
    /// Set when the server aborted the transaction for a conflict a new
    /// try resolves.
    retry: Option<&'static str>,
}

impl PgTx<'_> {
    /// Postgres's error as baton's, noting a conflict worth a new try.
    fn fail(&mut self, e: &tokio_postgres::Error) -> Error {
        if let Some(why) = conflict(e) {
            self.retry = Some(why);
        }
        self.inner.db(e)
    }

    /// Sends the pending writes, then `then`, in one round trip.
    async fn send_then<T>(
        &mut self,
        then: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        let pending = std::mem::take(&mut self.pending);
        for (task, _, _) in &pending.tasks {
            self.in_table.insert(task.clone());
        }
        let (client, st, channel) = (self.client, self.st, self.channel.as_str());
        // join! polls in order, and a request goes out when first
        // polled: the writes reach the server before `then`.
        let write = async {
            if pending.is_empty() {
                Ok(())
            } else {
                pending.send(client, st, channel).await
            }
        };
        let (sent, out) = futures_util::join!(write, then);
        if let Err(e) = sent {
            return Err(self.fail(&e));
        }
        out.map_err(|e| self.fail(&e))
    }

    /// Remembers rows this transaction read locked (`load` decodes one
    /// when a decision asks for it).
    fn remember(&mut self, rows: &[tokio_postgres::Row]) {
        for r in rows {
            let task: String = r.get(0);
            self.in_table.insert(task.clone());
            self.known.insert(task, Some(r.get(1)));
        }
    }

    /// Remembers rows a scan read locked, and answers them decoded.
    fn hold_rows(
        &mut self,
        rows: Vec<tokio_postgres::Row>,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        self.remember(&rows);
        rows.iter()
            .map(|r| Ok(Snapshot::at(self.inner.decode(r.get(1))?, now)))
            .collect()
    }

    /// Every pending write and `COMMIT`, in one round trip. A write the
    /// server refused rolled the transaction back (`COMMIT` then ends it
    /// as a rollback): nothing was applied.
    async fn commit(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let (client, st, channel) = (self.client, self.st, self.channel.as_str());
        let write = async {
            if pending.is_empty() {
                Ok(())
            } else {
                pending.send(client, st, channel).await
            }
        };
        let (sent, committed) = futures_util::join!(write, client.batch_execute("COMMIT"));
        if let Err(e) = sent {
            if e.as_db_error().is_some() {
                return Err(self.fail(&e));
            }
            // No answer: the connection broke with COMMIT on its way.
            return Err(classify(&self.inner.name, Cause::Db(&e), At::Commit));
        }
        committed.map_err(|e| classify(&self.inner.name, Cause::Db(&e), At::Commit))
    }

    /// The tasks' records as this transaction sees them: those it holds
    /// from what it knows, the rest read and locked in one round trip.
    async fn load(&mut self, tasks: &[TaskId], now: Timestamp) -> Result<Vec<Option<Snapshot>>> {
        let mut unknown: Vec<String> = tasks
            .iter()
            .map(|t| t.as_str().to_owned())
            .filter(|t| !self.known.contains_key(t))
            .collect();
        if !unknown.is_empty() {
            unknown.sort();
            unknown.dedup();
            let (client, st) = (self.client, self.st);
            let p: [&(dyn ToSql + Sync); 1] = [&unknown];
            let rows = match client.query(&st.lock, &p).await {
                Ok(rows) => rows,
                Err(e) => return Err(self.fail(&e)),
            };
            for t in unknown {
                self.known.insert(t, None);
            }
            self.remember(&rows);
        }
        tasks
            .iter()
            .map(|t| {
                self.known
                    .get(t.as_str())
                    .cloned()
                    .flatten()
                    .map(|j| Ok(Snapshot::at(self.inner.decode(&j)?, now)))
                    .transpose()
            })
            .collect()
    }

    /// The records of `tasks` as read without a lock: those read ahead in
    /// the first round trip, or read now.
    async fn peek(&mut self, tasks: &[TaskId], now: Timestamp) -> Result<Vec<Option<Snapshot>>> {
        let ids: Vec<String> = tasks.iter().map(|t| t.as_str().to_owned()).collect();
        let rows = match self.policies_ahead.take() {
            Some((read, rows)) if read == ids => rows,
            _ => {
                let p: [&(dyn ToSql + Sync); 1] = [&ids];
                match self.client.query(&self.st.peek, &p).await {
                    Ok(rows) => rows,
                    Err(e) => return Err(self.fail(&e)),
                }
            }
        };
        let found: HashMap<String, String> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        ids.iter()
            .map(|t| {
                found
                    .get(t)
                    .map(|j| Ok(Snapshot::at(self.inner.decode(j)?, now)))
                    .transpose()
            })
            .collect()
    }

    fn rules(&self) -> baton_core::LeaseRules {
        baton_core::LeaseRules {
            granularity_ms: 1,
            min_ms: self.inner.min_ttl_ms,
        }
    }

    /// Keeps what `d` writes for the next round trip; a fence comes from
    /// those taken after the locks (or, if none is left, from the
    /// sequence now: the locks are held either way).
    async fn write(&mut self, d: &mut Decision) -> Result<()> {
        self.wrote = true;
        self.ready_ahead = None;
        if d.mints_fence() {
            let fence = match self.fences.pop_front() {
                Some(f) => f,
                None => {
                    let (client, st) = (self.client, self.st);
                    let row = self.send_then(client.query_one(&st.fence, &[])).await?;
                    row.get(0)
                }
            };
            d.assign_fence(self.inner.stored_u64("a fence", fence)?);
        }
        let p = &mut self.pending;
        if d.drops_history()
            && let Some(r) = d.record_to_write()
        {
            p.drops.push(r.task.as_str().to_owned());
        }
        if d.forgets()
            && let Some(r) = d.record_to_write()
        {
            let task = r.task.as_str().to_owned();
            self.known.insert(task.clone(), None);
            self.in_table.remove(&task);
            p.forgets.push(task);
        } else if let Some(r) = d.record_to_write() {
            let task = r.task.as_str().to_owned();
            let row = TaskRow {
                state: r.state.as_str(),
                due: r.due_at().map(|t| t.as_millis()),
                revision: i64::try_from(r.revision).unwrap_or(i64::MAX),
                record: r
                    .to_stored_json()
                    .map_err(|e| Error::corrupt(format!("cannot encode a row: {e}")))?,
                ready: r.ready_entry().map(|e| e.key()),
                held: r.held_key(),
                counted: r.census_queue().map(str::to_owned),
            };
            if let Some(entry) = r.ready_entry() {
                let key = wake_key(entry.lane, &entry.queue);
                match p.queues.iter_mut().find(|q| q.0 == key) {
                    Some(q) => q.1 += 1,
                    None => p.queues.push((key, 1)),
                }
            }
            self.known.insert(task.clone(), Some(row.record.clone()));
            match p.task_at.get(&task) {
                Some(&i) => p.tasks[i].1 = row,
                None => {
                    let insert = !self.in_table.contains(&task);
                    p.task_at.insert(task.clone(), p.tasks.len());
                    p.tasks.push((task, row, insert));
                }
            }
        }
        for e in d.events() {
            let task = e.task.as_str().to_owned();
            if let Some(key) = &e.conflict_key {
                if let Some(&i) = p.conflict_at.get(&(task.clone(), key.clone())) {
                    p.events[i].3 += 1;
                    continue;
                }
                p.conflict_at
                    .insert((task.clone(), key.clone()), p.events.len());
            }
            p.events
                .push((task, e.kind.as_str(), e.conflict_key.clone(), 1, encode(e)?));
        }
        for n in d.notifications() {
            p.notes
                .push((n.intent_id.clone(), n.task.as_str().to_owned(), encode(n)?));
        }
        Ok(())
    }

    /// A page of a queue's ready index, after the pending writes, each
    /// row locked or passed over.
    async fn ready(
        &mut self,
        lane: Lane,
        queue: &Id,
        after: Option<&ReadyEntry>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        if after.is_none()
            && let Some((l, q, read, page)) = self.ready_ahead.take()
            && read == limit
            && l == lane
            && &q == queue
        {
            return Ok(page);
        }
        let (from, end) = ready_range(lane, queue, after);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (client, st) = (self.client, self.st);
        let rows = self
            .send_then(client.query(&st.ready, &[&from, &end, &limit]))
            .await?;
        self.hold_rows(rows, now)
    }

    /// A queue's expired leases, and the first page of its ready index in
    /// the same round trip, for the page the engine asks for next.
    async fn expired(
        &mut self,
        lane: Lane,
        queue: &Id,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        if limit == NEXT_PAGE
            && let Some((l, q, page)) = self.expired_ahead.take()
            && l == lane
            && &q == queue
        {
            return Ok(page);
        }
        let (start, end) = held_range(lane, queue, now);
        let (from, to) = ready_range(lane, queue, None);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let first = i64::try_from(NEXT_FIRST_PAGE).unwrap_or(i64::MAX);
        let (client, st) = (self.client, self.st);
        let held_p: [&(dyn ToSql + Sync); 3] = [&start, &end, &limit];
        let ready_p: [&(dyn ToSql + Sync); 3] = [&from, &to, &first];
        let (expired, ready) = self
            .send_then(async {
                futures_util::try_join!(
                    client.query(&st.held, &held_p),
                    client.query(&st.ready, &ready_p)
                )
            })
            .await?;
        let expired = self.hold_rows(expired, now)?;
        let ready = self.hold_rows(ready, now)?;
        self.ready_ahead = Some((lane, queue.clone(), NEXT_FIRST_PAGE, ready));
        Ok(expired)
    }

    /// Runs the engine to its end, performing each need.
    async fn drive(&mut self, engine: &mut Engine) -> Result<()> {
        while let Some(need) = engine.step()? {
            let supply = match need {
                Need::Load { tasks, now, .. } => Supply::Loaded(self.load(&tasks, now).await?),
                Need::Policies { tasks, now } => Supply::Loaded(self.peek(&tasks, now).await?),
                Need::Write(mut d) => {
                    self.write(&mut d).await?;
                    Supply::Written(d)
                }
                Need::Ready {
                    lane,
                    queue,
                    after,
                    limit,
                    now,
                } => Supply::Page(self.ready(lane, &queue, after.as_ref(), limit, now).await?),
                Need::Expired {
                    lane,
                    queue,
                    limit,
                    now,
                } => Supply::Page(self.expired(lane, &queue, limit, now).await?),
            };
            engine.supply(supply)?;
        }
        Ok(())
    }
}

/// The tasks the jobs name directly (`next` finds its own), sorted.
fn named_tasks(jobs: &[Job]) -> Vec<String> {
    let mut tasks: Vec<String> = Vec::new();
    for job in jobs {
        match job {
            Job::One(op) => tasks.push(op.task.as_str().to_owned()),
            Job::All(ops) => tasks.extend(ops.iter().map(|op| op.task.as_str().to_owned())),
            Job::Next(_) => {}
        }
    }
    tasks.sort();
    tasks.dedup();
    tasks
}

/// How many fences the jobs may need: one per request that may grant,
/// one per `next`.
fn grants(jobs: &[Job]) -> i32 {
    let n: usize = jobs
        .iter()
        .map(|job| match job {
            Job::One(op) => usize::from(op.request.may_grant()),
            Job::All(ops) => ops.iter().filter(|op| op.request.may_grant()).count(),
            Job::Next(q) => q.count.max(1) as usize,
        })
        .sum();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Decides `jobs` in order inside one transaction and commits once;
/// returns after the commit is durable. If anything fails, nothing is
/// applied. A batch the server aborted for a conflict is decided again.
/// `own`: the committer thread's own connection, driven by its own
/// runtime; without it, one from the pool, on the store's. Either way the
/// thread waits once per try, for the whole transaction.
pub(crate) fn commit_jobs(
    inner: &Inner,
    jobs: &[Job],
    mut own: Option<&mut OwnConnection>,
) -> Result<Vec<Answer>> {
    let mut why = "";
    for _ in 0..TRIES {
        let mut retry = None;
        let mut clean = true;
        let out = match own.as_deref_mut() {
            Some(conn) => {
                conn.connect(inner)?;
                let rt = conn.runtime(inner)?;
                let Some((client, st)) = conn.open.as_ref() else {
                    return Err(Error::unavailable(format!("{}: no connection", inner.name)));
                };
                let out = rt.block_on(attempt(inner, client, st, jobs, &mut retry, &mut clean));
                if !clean {
                    conn.open = None;
                }
                out
            }
            None => inner.wait(async {
                let client = inner.client().await?;
                let st = Stmts::of(Stmts::cached(&client).await.map_err(|e| inner.db(&e))?)?;
                let out = attempt(inner, &client, &st, jobs, &mut retry, &mut clean).await;
                if !clean {
                    // In a state we cannot vouch for: never back to the pool.
                    drop(Object::take(client));
                }
                out
            }),
        };
        match (out, retry) {
            (Ok(answers), _) => return Ok(answers),
            (Err(_), Some(w)) => why = w,
            (Err(e), None) => return Err(e),
        }
    }
    Err(Error::unavailable(format!(
        "{}: {why}, {TRIES} tries in a row; nothing was applied",
        inner.name
    )))
}

async fn attempt(
    inner: &Inner,
    client: &tokio_postgres::Client,
    st: &Stmts,
    jobs: &[Job],
    retry: &mut Option<&'static str>,
    clean: &mut bool,
) -> Result<Vec<Answer>> {
    inner.write_transactions.fetch_add(1, Ordering::Relaxed);
    let tasks = named_tasks(jobs);
    let wanted = grants(jobs);
    let (lock_p, clock_p): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) =
        ([&tasks], [&wanted]);
    let lock = async {
        if tasks.is_empty() {
            Ok(Vec::new())
        } else {
            client.query(&st.lock, &lock_p).await
        }
    };
    // A transaction whose one job is a `next` of one queue reads that
    // queue's expired leases and first ready page in its first round trip
    // too (core asks for them first, and they depend on nothing decided).
    let ahead = match jobs {
        [Job::Next(q)] if q.queues.len() == 1 => {
            let lane = q.lane();
            let queue = q.queues[0].clone();
            let start = baton_core::graph::ReadyEntry::prefix(lane, &queue);
            let (from, to) = ready_range(lane, &queue, None);
            Some((lane, queue, start, from, to))
        }
        _ => None,
    };
    // The first page core asks for: as many as the `next` may grant.
    let first_page = match jobs {
        [Job::Next(q)] => baton_core::next::first_page(q.count),
        _ => NEXT_FIRST_PAGE,
    };
    let (page, first) = (
        i64::try_from(NEXT_PAGE).unwrap_or(i64::MAX),
        i64::try_from(first_page).unwrap_or(i64::MAX),
    );
    let pages = async {
        match &ahead {
            Some((_, _, start, from, to)) => {
                let held_p: [&(dyn ToSql + Sync); 2] = [start, &page];
                let ready_p: [&(dyn ToSql + Sync); 3] = [from, to, &first];
                futures_util::try_join!(
                    client.query(&st.held_now, &held_p),
                    client.query(&st.ready, &ready_p)
                )
                .map(Some)
            }
            None => Ok(None),
        }
    };
    // A `next` reads its queues' policies first: read in this round trip.
    let policy_ids: Option<Vec<String>> = match jobs {
        [Job::Next(q)] => q
            .queues
            .iter()
            .map(|queue| baton_core::graph::queue_record_id(queue).map(|t| t.as_str().to_owned()))
            .collect::<Result<Vec<_>>>()
            .ok(),
        _ => None,
    };
    let policies = async {
        match &policy_ids {
            Some(ids) => {
                let p: [&(dyn ToSql + Sync); 1] = [ids];
                client.query(&st.peek, &p).await.map(Some)
            }
            None => Ok(None),
        }
    };
    // In this order on the wire: the clock and fences after the locks,
    // the pages after the clock.
    let (begun, locked, clock, pages, policies) = futures_util::join!(
        client.batch_execute("BEGIN"),
        lock,
        client.query_one(&st.clock, &clock_p),
        pages,
        policies
    );
    let mut t = PgTx {
        inner,
        client,
        st,
        known: tasks.iter().map(|t| (t.clone(), None)).collect(),
        in_table: HashSet::new(),
        fences: VecDeque::new(),
        pending: Pending::default(),
        ready_ahead: None,
        expired_ahead: None,
        policies_ahead: None,
        channel: ready_channel(&inner.schema),
        wrote: false,
        retry: None,
    };
    let decided = async {
        begun.map_err(|e| t.fail(&e))?;
        let locked = locked.map_err(|e| t.fail(&e))?;
        let clock = clock.map_err(|e| t.fail(&e))?;
        let now = Timestamp(clock.get(0));
        t.fences = clock.get::<_, Vec<i64>>(1).into();
        t.remember(&locked);
        if let (Some(ids), Some(rows)) = (policy_ids, policies.map_err(|e| t.fail(&e))?) {
            t.policies_ahead = Some((ids, rows));
        }
        if let (Some((lane, queue, ..)), Some((expired, ready))) =
            (&ahead, pages.map_err(|e| t.fail(&e))?)
        {
            let expired = t.hold_rows(expired, now)?;
            let ready = t.hold_rows(ready, now)?;
            t.expired_ahead = Some((*lane, queue.clone(), expired));
            t.ready_ahead = Some((*lane, queue.clone(), first_page, ready));
        }
        let mut engine = Engine::new(jobs.iter().map(|job| at(job, now)), t.rules());
        t.drive(&mut engine).await?;
        Ok::<_, Error>(engine.finish())
    }
    .await;
    let finished = match decided {
        Ok((answers, keep)) if t.wrote && keep => t.commit().await.map(|()| {
            inner.commits.fetch_add(1, Ordering::Relaxed);
            answers
        }),
        Ok((answers, _)) => rollback(inner, client, clean).await.map(|()| answers),
        Err(e) => {
            // Best effort: the error is the answer either way.
            let _ = rollback(inner, client, clean).await;
            Err(e)
        }
    };
    if let Err(e) = &finished
        && e.kind == baton_core::ErrorKind::Indeterminate
    {
        *clean = false;
    }
    *retry = t.retry;
    finished
}

/// Ends the transaction without keeping anything (which also frees its
/// locks); a connection that cannot is not reused.
async fn rollback(inner: &Inner, client: &tokio_postgres::Client, clean: &mut bool) -> Result<()> {
    client.batch_execute("ROLLBACK").await.map_err(|e| {
        *clean = false;
        inner.db(&e)
    })
}
