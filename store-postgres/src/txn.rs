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
//! 2. Core decides each job. A task read again comes from what this
//!    transaction already holds; one not named (an upstream, a
//!    follow-up's target) is locked when first read; `next` reads its
//!    candidates with `FOR UPDATE SKIP LOCKED`, after sending the writes
//!    so far in the same round trip.
//! 3. Every write, then `COMMIT`, in one round trip.
//!
//! Events and notifications are inserted without a sequence number; the
//! readers number them (`store`'s sequencer). Why this keeps every
//! promise the store-wide lock kept is in ARCHITECTURE.md.

use crate::store::{At, Cause, Inner, at, classify, encode};
use baton_core::commit::{Answer, Job};
use baton_core::graph::{Lane, ReadyEntry, held_range, ready_range};
use baton_core::next::{NextSource, take_next};
use baton_core::store::{Txn, apply_group, apply_in};
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
/// `watch_ready` listens on (one per store schema).
pub(crate) fn ready_channel(schema: &str) -> String {
    format!("baton_ready.{schema}")
}

/// The statements of a write transaction, prepared once per connection
/// (the pool's statement cache) before anything is sent, so that
/// pipelined statements run in the order they are written here.
struct Stmts {
    lock: Statement,
    clock: Statement,
    load: Statement,
    fence: Statement,
    insert: Statement,
    update: Statement,
    event: Statement,
    note: Statement,
    notify: Statement,
    ready: Statement,
    held: Statement,
}

const SQL: [&str; 11] = [
    // lock: the named tasks' rows, in id order (no deadlock between batches).
    "SELECT task_id, record FROM tasks WHERE task_id = ANY($1) ORDER BY task_id FOR UPDATE",
    // clock: after the locks, the server's now and the fences this batch may grant.
    "SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint,
            ARRAY(SELECT nextval('fence_seq') FROM generate_series(1, $1::int))",
    // load
    "SELECT record FROM tasks WHERE task_id = $1 FOR UPDATE",
    // fence
    "SELECT nextval('fence_seq')",
    // insert: a task this transaction found no row for. Another creating
    // it meanwhile fails the commit (unique violation), and the batch is
    // decided again with that row.
    "INSERT INTO tasks (task_id, state, due_at, revision, record, ready_key, held_key)
     VALUES ($1, $2, $3, $4, $5, $6, $7)",
    // update: a row this transaction holds locked.
    "UPDATE tasks SET state = $2, due_at = $3, revision = $4, record = $5, ready_key = $6, held_key = $7
     WHERE task_id = $1",
    // event: a repeated conflict (same task and key) counts on the first one.
    "INSERT INTO events (task_id, kind, conflict_key, body) VALUES ($1, $2, $3, $4)
     ON CONFLICT (task_id, conflict_key) WHERE conflict_key IS NOT NULL
     DO UPDATE SET count = events.count + 1",
    // note
    "INSERT INTO outbox (intent_id, task_id, body) VALUES ($1, $2, $3)",
    // notify: a task entered a ready index (a hint to waiters, sent at commit).
    "SELECT pg_notify($1, $2)",
    // ready: `next`'s candidates, each locked or passed over.
    "SELECT task_id, record FROM tasks WHERE ready_key > $1 AND ready_key < $2
     ORDER BY ready_key LIMIT $3 FOR UPDATE SKIP LOCKED",
    // held: expired leases, likewise.
    "SELECT task_id, record FROM tasks WHERE held_key > $1 AND held_key < $2
     ORDER BY held_key LIMIT $3 FOR UPDATE SKIP LOCKED",
];

impl Stmts {
    async fn prepare(
        client: &Object,
    ) -> std::result::Result<Vec<Statement>, tokio_postgres::Error> {
        futures_util::future::try_join_all(SQL.iter().map(|s| client.prepare_cached(s))).await
    }

    fn of(prepared: Vec<Statement>) -> Result<Stmts> {
        let Ok(
            [
                lock,
                clock,
                load,
                fence,
                insert,
                update,
                event,
                note,
                notify,
                ready,
                held,
            ],
        ) = <[Statement; 11]>::try_from(prepared)
        else {
            return Err(Error::unavailable(
                "a statement was not prepared".to_owned(),
            ));
        };
        Ok(Stmts {
            lock,
            clock,
            load,
            fence,
            insert,
            update,
            event,
            note,
            notify,
            ready,
            held,
        })
    }
}

/// A task row as written.
struct TaskRow {
    task: String,
    state: &'static str,
    due: Option<i64>,
    revision: i64,
    record: String,
    ready: Option<Vec<u8>>,
    held: Option<Vec<u8>>,
}

/// One statement a decision writes, kept until the next round trip.
enum Write {
    Insert(TaskRow),
    Update(TaskRow),
    Event {
        task: String,
        kind: &'static str,
        key: Option<String>,
        body: String,
    },
    Note {
        intent: String,
        task: String,
        body: String,
    },
    Notify {
        channel: String,
        queue: String,
    },
}

impl Write {
    fn send<'a>(
        &'a self,
        client: &'a Object,
        st: &'a Stmts,
    ) -> BoxFuture<'a, std::result::Result<u64, tokio_postgres::Error>> {
        let (stmt, p): (&Statement, Vec<&(dyn ToSql + Sync)>) = match self {
            Write::Insert(r) | Write::Update(r) => (
                if matches!(self, Write::Insert(_)) {
                    &st.insert
                } else {
                    &st.update
                },
                vec![
                    &r.task,
                    &r.state,
                    &r.due,
                    &r.revision,
                    &r.record,
                    &r.ready,
                    &r.held,
                ],
            ),
            Write::Event {
                task,
                kind,
                key,
                body,
            } => (&st.event, vec![task, kind, key, body]),
            Write::Note { intent, task, body } => (&st.note, vec![intent, task, body]),
            Write::Notify { channel, queue } => (&st.notify, vec![channel, queue]),
        };
        client.execute_raw(stmt, p).boxed()
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

/// One open write transaction, as core's commit helpers see it.
struct PgTx<'a> {
    inner: &'a Inner,
    client: &'a Object,
    st: &'a Stmts,
    /// The latest version of each task this transaction has read or
    /// written (`None`: no row), every one of them locked.
    known: HashMap<String, Option<String>>,
    /// The tasks that have a row (read under a lock, or inserted here):
    /// written with `UPDATE`, the others with `INSERT`.
    in_table: HashSet<String>,
    /// Fences taken after the locks, handed out in increasing order.
    fences: VecDeque<i64>,
    /// Writes not sent yet.
    pending: Vec<Write>,
    /// Queues already notified in this transaction.
    notified: HashSet<String>,
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

    /// Sends every pending write, then `then`, in one round trip.
    fn send_then<T>(
        &mut self,
        then: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        let writes = std::mem::take(&mut self.pending);
        let (client, st) = (self.client, self.st);
        let (sent, out) = self.inner.wait(async {
            // join! polls in order, and each request goes out when first
            // polled: the writes reach the server before `then`.
            futures_util::join!(join_all(writes.iter().map(|w| w.send(client, st))), then)
        });
        if let Some(e) = sent.into_iter().find_map(|r| r.err()) {
            return Err(self.fail(&e));
        }
        out.map_err(|e| self.fail(&e))
    }

    /// Remembers rows this transaction read locked.
    fn hold(&mut self, rows: &[tokio_postgres::Row], now: Timestamp) -> Result<Vec<Snapshot>> {
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let task: String = r.get(0);
            let record: String = r.get(1);
            out.push(Snapshot::at(self.inner.decode(&record)?, now));
            self.in_table.insert(task.clone());
            self.known.insert(task, Some(record));
        }
        Ok(out)
    }

    fn scan(
        &mut self,
        held: bool,
        (from, end): (Vec<u8>, Vec<u8>),
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let st = if held { &self.st.held } else { &self.st.ready };
        let client = self.client;
        let rows = self.send_then(client.query(st, &[&from, &end, &limit]))?;
        self.hold(&rows, now)
    }

    /// Every pending write and `COMMIT`, in one round trip. A write the
    /// server refused rolled the transaction back (`COMMIT` then ends it
    /// as a rollback): nothing was applied.
    fn commit(&mut self) -> Result<()> {
        let writes = std::mem::take(&mut self.pending);
        let (client, st) = (self.client, self.st);
        let (sent, committed) = self.inner.wait(async {
            futures_util::join!(
                join_all(writes.iter().map(|w| w.send(client, st))),
                client.batch_execute("COMMIT")
            )
        });
        if let Some(e) = sent.into_iter().find_map(|r| r.err()) {
            if e.as_db_error().is_some() {
                return Err(self.fail(&e));
            }
            // No answer: the connection broke with COMMIT on its way.
            return Err(classify(&self.inner.name, Cause::Db(&e), At::Commit));
        }
        committed.map_err(|e| classify(&self.inner.name, Cause::Db(&e), At::Commit))
    }
}

impl Txn for PgTx<'_> {
    fn load(&mut self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let key = task.as_str();
        let json = match self.known.get(key) {
            Some(known) => known.clone(),
            None => {
                let (client, st) = (self.client, self.st);
                let found = self.inner.wait(client.query(&st.load, &[&key]));
                let rows = found.map_err(|e| self.fail(&e))?;
                let json: Option<String> = rows.first().map(|r| r.get(0));
                if json.is_some() {
                    self.in_table.insert(key.to_owned());
                }
                self.known.insert(key.to_owned(), json.clone());
                json
            }
        };
        json.map(|j| Ok(Snapshot::at(self.inner.decode(&j)?, now)))
            .transpose()
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
    fn write(&mut self, d: &mut Decision) -> Result<()> {
        self.wrote = true;
        if d.mints_fence() {
            let fence = match self.fences.pop_front() {
                Some(f) => f,
                None => {
                    let (client, st) = (self.client, self.st);
                    let row = self.send_then(client.query_one(&st.fence, &[]))?;
                    row.get(0)
                }
            };
            d.assign_fence(self.inner.stored_u64("a fence", fence)?);
        }
        if let Some(r) = d.record_to_write() {
            let task = r.task.as_str().to_owned();
            let row = TaskRow {
                task: task.clone(),
                state: r.state.as_str(),
                due: r.due_at().map(|t| t.as_millis()),
                revision: i64::try_from(r.revision).unwrap_or(i64::MAX),
                record: encode(r)?,
                ready: r.ready_entry().map(|e| e.key()),
                held: r.held_key(),
            };
            if let Some(entry) = r.ready_entry()
                && self.notified.insert(entry.queue.as_str().to_owned())
            {
                self.pending.push(Write::Notify {
                    channel: self.channel.clone(),
                    queue: entry.queue.as_str().to_owned(),
                });
            }
            self.known.insert(task.clone(), Some(row.record.clone()));
            if self.in_table.insert(task) {
                self.pending.push(Write::Insert(row));
            } else {
                self.pending.push(Write::Update(row));
            }
        }
        for e in d.events() {
            self.pending.push(Write::Event {
                task: e.task.as_str().to_owned(),
                kind: e.kind.as_str(),
                key: e.conflict_key.clone(),
                body: encode(e)?,
            });
        }
        for n in d.notifications() {
            self.pending.push(Write::Note {
                intent: n.intent_id.clone(),
                task: n.task.as_str().to_owned(),
                body: encode(n)?,
            });
        }
        Ok(())
    }
}

impl NextSource for PgTx<'_> {
    fn ready(
        &mut self,
        lane: Lane,
        queue: &Id,
        after: Option<&ReadyEntry>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        self.scan(false, ready_range(lane, queue, after), limit, now)
    }

    fn expired(
        &mut self,
        lane: Lane,
        queue: &Id,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        self.scan(true, held_range(lane, queue, now), limit, now)
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
            Job::Next(_) => 1,
        })
        .sum();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Decides `jobs` in order inside one transaction and commits once;
/// returns after the commit is durable. If anything fails, nothing is
/// applied. A batch the server aborted for a conflict is decided again.
pub(crate) fn commit_jobs(inner: &Inner, jobs: &[Job]) -> Result<Vec<Answer>> {
    let mut why = "";
    for _ in 0..TRIES {
        let client = inner.wait(inner.client())?;
        let mut retry = None;
        let mut clean = true;
        let out = attempt(inner, &client, jobs, &mut retry, &mut clean);
        if !clean {
            // In a state we cannot vouch for: never back to the pool.
            drop(Object::take(client));
        }
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

fn attempt(
    inner: &Inner,
    client: &Object,
    jobs: &[Job],
    retry: &mut Option<&'static str>,
    clean: &mut bool,
) -> Result<Vec<Answer>> {
    let st = Stmts::of(
        inner
            .wait(Stmts::prepare(client))
            .map_err(|e| inner.db(&e))?,
    )?;
    inner.write_transactions.fetch_add(1, Ordering::Relaxed);
    let tasks = named_tasks(jobs);
    let wanted = grants(jobs);
    let wanted: [&(dyn ToSql + Sync); 1] = [&wanted];
    let (begun, locked, clock) = inner.wait(async {
        let lock = async {
            if tasks.is_empty() {
                Ok(Vec::new())
            } else {
                client.query(&st.lock, &[&tasks]).await
            }
        };
        futures_util::join!(
            client.batch_execute("BEGIN"),
            lock,
            client.query_one(&st.clock, &wanted)
        )
    });
    let mut t = PgTx {
        inner,
        client,
        st: &st,
        known: tasks.iter().map(|t| (t.clone(), None)).collect(),
        in_table: HashSet::new(),
        fences: VecDeque::new(),
        pending: Vec::new(),
        notified: HashSet::new(),
        channel: ready_channel(&inner.schema),
        wrote: false,
        retry: None,
    };
    let decided = (|| {
        begun.map_err(|e| t.fail(&e))?;
        let locked = locked.map_err(|e| t.fail(&e))?;
        let clock = clock.map_err(|e| t.fail(&e))?;
        let now = Timestamp(clock.get(0));
        t.fences = clock.get::<_, Vec<i64>>(1).into();
        t.hold(&locked, now)?;
        let mut answers = Vec::with_capacity(jobs.len());
        let mut keep = true;
        for job in jobs {
            answers.push(match at(job, now) {
                Job::One(op) => Answer::One(apply_in(&mut t, &op)?.0),
                Job::Next(q) => Answer::Next(take_next(&q, &mut t)?),
                Job::All(ops) => {
                    let (ds, ok) = apply_group(&mut t, &ops)?;
                    keep &= ok;
                    Answer::All(ds)
                }
            });
        }
        Ok((answers, keep))
    })();
    let finished = match decided {
        Ok((answers, keep)) if t.wrote && keep => t.commit().map(|()| {
            inner.commits.fetch_add(1, Ordering::Relaxed);
            answers
        }),
        Ok((answers, _)) => rollback(inner, client, clean).map(|()| answers),
        Err(e) => {
            // Best effort: the error is the answer either way.
            let _ = rollback(inner, client, clean);
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
fn rollback(inner: &Inner, client: &Object, clean: &mut bool) -> Result<()> {
    inner.wait(client.batch_execute("ROLLBACK")).map_err(|e| {
        *clean = false;
        inner.db(&e)
    })
}
