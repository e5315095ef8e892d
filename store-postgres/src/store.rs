//! The Postgres store: opening and migrating, the group committer in
//! front of `txn`'s write transactions, reads, the sequencer that numbers
//! events and notifications, and `LISTEN` for waiting workers.

use crate::conn::{At, Cause, Inner, OwnRuntime, Watch, classify};
use crate::options::PostgresOptions;
use crate::schema::{CURRENT_VERSION, MIGRATIONS, lock_key};
use async_trait::async_trait;
use baton_core::commit::{Answer, GroupCommitter, Job, job_alone_or_grouped};
use baton_core::graph::NextQuery;
use baton_core::model::{EventDraft, NotificationDraft};
use baton_core::store::{Clause, Due};
use baton_core::{
    Capabilities, ClockKind, Decision, Error, Event, ListQuery, Notification, Result, Snapshot,
    Store, TaskId, Timestamp,
};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// How many rows of a table one numbering transaction numbers at most.
const NUMBER_BATCH: i64 = 10_000;

/// The statement that numbers `table`'s rows without a sequence number,
/// from `counter` on (`$1`: how many at most); answers how many.
fn number_sql(table: &str, counter: &str) -> String {
    format!(
        "WITH todo AS (
             SELECT id, row_number() OVER (ORDER BY id) AS n FROM {table}
              WHERE seq IS NULL ORDER BY id LIMIT $1
         ), base AS (
             SELECT {counter} AS last FROM counters WHERE id = 1
         ), done AS (
             UPDATE {table} t SET seq = base.last + todo.n FROM todo, base
              WHERE t.id = todo.id RETURNING t.seq
         ), moved AS (
             UPDATE counters SET {counter} = (SELECT max(seq) FROM done)
              WHERE id = 1 AND EXISTS (SELECT 1 FROM done) RETURNING 1
         )
         SELECT count(*) FROM done"
    )
}

/// The database server's clock, in milliseconds since the epoch.
const SERVER_NOW: &str = "floor(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// A baton store in one Postgres schema. Clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
    /// `None` when group commit is off.
    committer: Option<Arc<GroupCommitter>>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("store", &self.inner.name)
            .field("group_commit", &self.committer.is_some())
            .finish()
    }
}

impl PostgresStore {
    /// Connects, creates the schema or migrates it forward (under an
    /// advisory lock), and checks that it is one this build can use.
    pub async fn open(options: PostgresOptions) -> Result<PostgresStore> {
        let name = options.name();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("baton-postgres")
            .enable_all()
            .build()
            .map_err(|e| Error::unavailable(format!("{name}: cannot start a runtime: {e}")))?;
        let handle = rt.handle().clone();
        let rt = OwnRuntime(Some(rt));
        let mut config = options.config.clone();
        // `enable_seqscan=off` prices a scan of a small table (the count
        // deltas) at 10^10, past `jit_above_cost`, and the server then
        // compiled a 2 ms read for 100 ms; baton's statements are short
        // and never gain from JIT, so it is off.
        let timeout_ms = options.statement_timeout.as_millis();
        config.options(format!(
            "-c search_path={schema} -c synchronous_commit=on -c statement_timeout={timeout_ms} \
             -c idle_in_transaction_session_timeout={timeout_ms} -c default_transaction_isolation=read\\ committed \
             -c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c jit=off",
            schema = options.schema
        ));
        config.connect_timeout(options.connect_timeout);
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| Error::unavailable(format!("{name}: cannot build the pool: {e}")))?;
        let inner = Arc::new(Inner {
            name: name.clone(),
            schema: options.schema.clone(),
            sequencer_key: lock_key(&format!("{}.sequencer", options.schema)),
            config,
            watch: Watch::default(),
            pool,
            handle,
            min_ttl_ms: u64::try_from(options.min_ttl.as_millis()).unwrap_or(u64::MAX),
            commits: AtomicU64::new(0),
            write_transactions: AtomicU64::new(0),
            since_fold: AtomicU64::new(0),
            _rt: rt,
        });
        let schema = options.schema.clone();
        let i = inner.clone();
        inner.spawn(async move { i.migrate(&schema).await }).await?;
        let committer = if options.group_commit {
            let i = inner.clone();
            // The committers' own connections not in use (one per thread
            // committing at once).
            let own: std::sync::Mutex<Vec<crate::txn::OwnConnection>> = Default::default();
            // A caller finding the committer idle commits on its own
            // thread: a process making one request at a time pays no
            // hand-off to the committer thread and back.
            Some(Arc::new(GroupCommitter::start_shared_blocking_on(
                name,
                "baton-postgres-commit",
                move |jobs: &[Job]| {
                    let taken = own
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .pop();
                    let mut conn = match taken {
                        Some(c) => c,
                        None => crate::txn::OwnConnection::new(&i.name)?,
                    };
                    let out = crate::txn::commit_jobs(&i, jobs, Some(&mut conn));
                    own.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(conn);
                    out
                },
            )?))
        } else {
            None
        };
        Ok(PostgresStore { inner, committer })
    }

    /// Parses a store URL ([`PostgresOptions::from_url`]) and opens it.
    pub async fn open_url(url: &str) -> Result<PostgresStore> {
        PostgresStore::open(PostgresOptions::from_url(url)?).await
    }

    /// How many write transactions this handle has begun (committed or not).
    pub fn write_transactions(&self) -> u64 {
        self.inner.write_transactions.load(Ordering::Relaxed)
    }

    async fn job(&self, job: Job) -> Result<Answer> {
        // Committed alone on the store's own runtime, whose handle its
        // synchronous code blocks on.
        let answer = job_alone_or_grouped(
            self.committer.as_deref(),
            Some(&self.inner.handle),
            || self.inner.name.clone(),
            self.inner.clone(),
            job,
            |i: &Inner, jobs: &[Job]| crate::txn::commit_jobs(i, jobs, None),
        )
        .await;
        self.fold_now_and_then();
        answer
    }

    /// Every [`FOLD_EVERY`] requests this handle commits, folds the count
    /// deltas in the background, so they stay few whether or not anyone
    /// reads the counts (a reader adds the unfolded ones). A fold that fails is left to
    /// the next one: the deltas stay until then, and are counted.
    fn fold_now_and_then(&self) {
        let since = self.inner.since_fold.fetch_add(1, Ordering::AcqRel) + 1;
        if since < FOLD_EVERY
            || self
                .inner
                .since_fold
                .compare_exchange(since, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let i = self.inner.clone();
        self.inner.handle.spawn(async move {
            // Failed (the database gone a moment): the next fold folds
            // these deltas with its own, and readers count them meanwhile.
            let _ = i.fold().await;
        });
    }
}

/// How many requests a handle commits between its folds of the count
/// deltas.
pub const FOLD_EVERY: u64 = 1024;

impl Inner {
    /// Whether this store is listening for ready tasks (connecting and
    /// `LISTEN`ing first if it is not).
    async fn listen(self: &Arc<Self>) -> bool {
        let mut listener = self.watch.listener.lock().await;
        if listener.as_ref().is_some_and(|c| !c.is_closed()) {
            return true;
        }
        *listener = None;
        let Ok((client, mut connection)) = self.config.connect(NoTls).await else {
            return false;
        };
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                match futures_util::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                        let Some(inner) = inner.upgrade() else { break };
                        inner.wake(n.payload());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                }
            }
        });
        let channel = crate::txn::ready_channel(&self.schema);
        if client
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .await
            .is_err()
        {
            return false;
        }
        *listener = Some(client);
        true
    }

    /// The waiting point of one lane and queue.
    fn waiting_for(&self, key: &str) -> Arc<tokio::sync::Notify> {
        let mut waiting = self
            .watch
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        waiting.entry(key.to_owned()).or_default().clone()
    }

    /// A notification `COUNT KEY`: wakes up to COUNT waiters of KEY.
    fn wake(&self, payload: &str) {
        let Some((n, key)) = payload.split_once(' ') else {
            return;
        };
        let n = n.parse::<u64>().unwrap_or(1).min(1024);
        let found = self
            .watch
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned();
        if let Some(notify) = found {
            for _ in 0..n {
                notify.notify_one();
            }
        }
    }

    async fn migrate(&self, schema: &str) -> Result<()> {
        let mut client = self.client().await?;
        let err = |e: tokio_postgres::Error| self.db(&e);
        let tx = client.transaction().await.map_err(err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key(schema)])
            .await
            .map_err(err)?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.schema_version (
                 id integer PRIMARY KEY CHECK (id = 1),
                 version integer NOT NULL,
                 written_by text NOT NULL
             );"
        ))
        .await
        .map_err(err)?;
        let version: i32 = tx
            .query_opt(
                &format!("SELECT version FROM {schema}.schema_version WHERE id = 1"),
                &[],
            )
            .await
            .map_err(err)?
            .map_or(0, |r| r.get(0));
        if version > CURRENT_VERSION {
            return Err(Error::unsupported(format!(
                "{}: the schema was written by a newer baton (version {version}; this build knows {CURRENT_VERSION}); upgrade baton",
                self.name
            )));
        }
        let from = usize::try_from(version).unwrap_or(0);
        for sql in &MIGRATIONS[from..] {
            tx.batch_execute(&format!("SET LOCAL search_path TO {schema};\n{sql}"))
                .await
                .map_err(err)?;
        }
        if from < 4 {
            // Schema 4: the rows written before it get the queue they are
            // counted under (core's rule, so from the record); the
            // triggers count them.
            let rows = tx
                .query(&format!("SELECT task_id, record FROM {schema}.tasks"), &[])
                .await
                .map_err(err)?;
            let set = tx
                .prepare(&format!(
                    "UPDATE {schema}.tasks SET counted_queue = $2 WHERE task_id = $1"
                ))
                .await
                .map_err(err)?;
            for r in rows {
                let task: String = r.get(0);
                let record: baton_core::TaskRecord = self.decode(r.get(1))?;
                tx.execute(&set, &[&task, &record.census_queue()])
                    .await
                    .map_err(err)?;
            }
        }
        if from < MIGRATIONS.len() {
            tx.execute(
                &format!(
                    "INSERT INTO {schema}.schema_version (id, version, written_by) VALUES (1, $1, $2)
                     ON CONFLICT (id) DO UPDATE SET version = excluded.version, written_by = excluded.written_by"
                ),
                &[&CURRENT_VERSION, &concat!("baton ", env!("CARGO_PKG_VERSION"))],
            )
            .await
            .map_err(err)?;
        }
        tx.commit().await.map_err(err)
    }

    async fn server_now(&self, client: &Object) -> Result<Timestamp> {
        let row = client
            .query_one(&format!("SELECT {SERVER_NOW}"), &[])
            .await
            .map_err(|e| self.db(&e))?;
        Ok(Timestamp(row.get(0)))
    }

    async fn read(&self, task: &TaskId) -> Result<Option<Snapshot>> {
        let client = self.client().await?;
        let st = client
            .prepare_cached(&format!(
                "SELECT (SELECT record FROM tasks WHERE task_id = $1), {SERVER_NOW}"
            ))
            .await
            .map_err(|e| self.db(&e))?;
        let row = client
            .query_one(&st, &[&task.as_str()])
            .await
            .map_err(|e| self.db(&e))?;
        let json: Option<String> = row.get(0);
        let now = Timestamp(row.get(1));
        json.map(|j| Ok(Snapshot::at(self.decode(&j)?, now)))
            .transpose()
    }

    async fn list(&self, q: &ListQuery) -> Result<Vec<Snapshot>> {
        let client = self.client().await?;
        let now = self.server_now(&client).await?;
        let after = q.after.as_ref().map_or("", |a| a.as_str()).to_owned();
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        let n = now.as_millis();
        let err = |e: tokio_postgres::Error| self.db(&e);
        let mut found = Vec::new();
        match &q.clauses {
            None => {
                let st = client
                    .prepare_cached(
                        "SELECT task_id, record FROM tasks WHERE task_id > $1 ORDER BY task_id LIMIT $2",
                    )
                    .await
                    .map_err(err)?;
                found.extend(client.query(&st, &[&after, &limit]).await.map_err(err)?);
            }
            Some(clauses) => {
                for Clause { state, due } in clauses {
                    let s = state.as_str();
                    let cond = match due {
                        Due::Any => "",
                        Due::NotYet => "AND (due_at IS NULL OR due_at > $4)",
                        Due::Passed => "AND due_at <= $4",
                    };
                    let st = client
                        .prepare_cached(&format!(
                            "SELECT task_id, record FROM tasks WHERE state = $1 AND task_id > $2 {cond}
                             ORDER BY task_id LIMIT $3"
                        ))
                        .await
                        .map_err(err)?;
                    let rows = if *due == Due::Any {
                        client.query(&st, &[&s, &after, &limit]).await
                    } else {
                        client.query(&st, &[&s, &after, &limit, &n]).await
                    };
                    found.extend(rows.map_err(err)?);
                }
            }
        }
        let mut rows: Vec<(String, String)> =
            found.into_iter().map(|r| (r.get(0), r.get(1))).collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.dedup_by(|a, b| a.0 == b.0);
        rows.truncate(q.limit);
        rows.into_iter()
            .map(|(_, json)| Ok(Snapshot::at(self.decode(&json)?, now)))
            .collect()
    }

    /// The sequencer: gives every committed event and notification that
    /// has none its sequence number, in insertion order, one numbering at
    /// a time store-wide (an advisory lock, taken before the statement
    /// that reads what to number). Writes, and so waits for a flush, only
    /// when there is something to number. A row a reader sees numbered
    /// was committed before the numbering, and every row committed later
    /// is numbered later, higher: paging by sequence never skips one nor
    /// sees one twice, and two events of one task are numbered in the
    /// order their transactions held the task.
    async fn number(&self, client: &Object) -> Result<()> {
        let err = |e: tokio_postgres::Error| self.db(&e);
        let (lock, events, outbox) = futures_util::future::try_join3(
            client.prepare_cached("SELECT pg_advisory_xact_lock($1)"),
            client.prepare_cached(&number_sql("events", "event_seq")),
            client.prepare_cached(&number_sql("outbox", "outbox_seq")),
        )
        .await
        .map_err(err)?;
        let key = self.sequencer_key;
        let mut conflicts = 0;
        loop {
            let (key_p, batch_p): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) =
                ([&key], [&NUMBER_BATCH]);
            // Prepared above, so the five go out in this order at once.
            let (begun, locked, e, o, committed) = futures_util::join!(
                client.batch_execute("BEGIN"),
                client.execute(&lock, &key_p),
                client.query_one(&events, &batch_p),
                client.query_one(&outbox, &batch_p),
                client.batch_execute("COMMIT"),
            );
            let numbered = begun
                .and(locked)
                .and_then(|_| Ok((e?.get::<_, i64>(0), o?.get::<_, i64>(0))))
                .and_then(|n| committed.map(|()| n));
            match numbered {
                Ok((e, o)) if e < NUMBER_BATCH && o < NUMBER_BATCH => return Ok(()),
                Ok(_) => {}
                Err(e) if conflicts < 3 && e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
                    conflicts += 1;
                }
                Err(e) => {
                    // Leave no transaction open on a pooled connection.
                    let _ = client.batch_execute("ROLLBACK").await;
                    // The caller asked for a read: whatever became of the
                    // numbering, nothing it asked for was applied, and asking
                    // again is safe (never `Indeterminate`).
                    return Err(classify(&self.name, Cause::Db(&e), At::Before));
                }
            }
        }
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let client = self.client().await?;
        self.number(&client).await?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let err = |e: tokio_postgres::Error| self.db(&e);
        let rows = match task {
            Some(t) => {
                let st = client
                    .prepare_cached(
                        "SELECT seq, count, body FROM events WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                    )
                    .await
                    .map_err(err)?;
                client.query(&st, &[&t.as_str(), &after, &limit]).await
            }
            None => {
                let st = client
                    .prepare_cached("SELECT seq, count, body FROM events WHERE seq > $1 ORDER BY seq LIMIT $2")
                    .await
                    .map_err(err)?;
                client.query(&st, &[&after, &limit]).await
            }
        }
        .map_err(err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let draft: EventDraft = self.decode(r.get(2))?;
            let mut e = Event::from_draft(self.stored_u64("an event sequence", r.get(0))?, draft);
            e.count = self.stored_u64("an event count", r.get(1))?;
            out.push(e);
        }
        Ok(out)
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let client = self.client().await?;
        self.number(&client).await?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let err = |e: tokio_postgres::Error| self.db(&e);
        let st = client
            .prepare_cached(
                "SELECT seq, body FROM outbox WHERE acked_at IS NULL AND seq > $1 ORDER BY seq LIMIT $2",
            )
            .await
            .map_err(err)?;
        let rows = client.query(&st, &[&after, &limit]).await.map_err(err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let draft: NotificationDraft = self.decode(r.get(1))?;
            out.push(Notification::from_draft(
                self.stored_u64("an outbox sequence", r.get(0))?,
                draft,
            ));
        }
        Ok(out)
    }

    /// Folds the deltas the triggers appended (schema 4) into `counts`:
    /// one folder at a time, each delta folded once. A fold already under
    /// way is left to finish (`NOWAIT`), as it folds what this one would.
    async fn fold(&self) -> Result<()> {
        let mut client = self.client().await?;
        let err = |e: tokio_postgres::Error| self.db(&e);
        let tx = client.transaction().await.map_err(err)?;
        let folded = tx
            .batch_execute(
                "LOCK TABLE counts IN EXCLUSIVE MODE NOWAIT;
                 WITH moved AS (DELETE FROM count_deltas RETURNING queue, state, n)
                 INSERT INTO counts AS c (queue, state, n)
                 SELECT queue, state, sum(n)::bigint FROM moved GROUP BY queue, state
                 ON CONFLICT (queue, state) DO UPDATE SET n = c.n + excluded.n",
            )
            .await;
        match folded {
            Ok(()) => tx.commit().await.map_err(err),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
                Ok(())
            }
            Err(e) => Err(err(e)),
        }
    }

    /// [`Store::oldest_ready`]: one indexed row a seek, on one connection,
    /// without a lock.
    async fn oldest_ready(
        &self,
        lane: baton_core::graph::Lane,
        queue: &baton_core::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let client = self.client().await?;
        let err = |e: tokio_postgres::Error| self.db(&e);
        let mut read = baton_core::graph::OldestReady::new(lane, queue, now);
        while let Some((index, from, end)) = read.range() {
            let st = client
                .prepare_cached(&format!(
                    "SELECT {c} FROM tasks WHERE {c} > $1 AND {c} < $2 ORDER BY {c} LIMIT 1",
                    c = index.column()
                ))
                .await
                .map_err(err)?;
            let row = client.query_opt(&st, &[&from, &end]).await.map_err(err)?;
            let key: Option<Vec<u8>> = row.map(|r| r.get(0));
            read.found(key.as_deref());
        }
        Ok(read.oldest())
    }

    /// Reads the counts: the folded ones plus the deltas not folded yet,
    /// in one statement and so one snapshot (a fold commits its delete and
    /// its sums together, so a reader sees a delta in exactly one of the
    /// two tables). Takes no lock and writes nothing, so readers (an idle
    /// worker's `next`, `/metrics`) never wait on one another or on a fold.
    async fn counts(&self) -> Result<Vec<baton_core::counts::Count>> {
        let client = self.client().await?;
        let err = |e: tokio_postgres::Error| self.db(&e);
        let st = client
            .prepare_cached(
                "SELECT queue, state, sum(n)::bigint AS n FROM (
                     SELECT queue, state, n FROM counts
                     UNION ALL SELECT queue, state, n FROM count_deltas
                 ) AS both_tables GROUP BY queue, state HAVING sum(n) <> 0",
            )
            .await
            .map_err(err)?;
        let rows = client.query(&st, &[]).await.map_err(err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let state: String = r.get(1);
            let state = baton_core::State::parse("state", &state).map_err(|_| {
                Error::corrupt(format!(
                    "{}: a count of an unknown state {state:?}",
                    self.name
                ))
            })?;
            out.push(baton_core::counts::Count {
                queue: r.get(0),
                state,
                n: self.stored_u64("a count", r.get(2))?,
            });
        }
        Ok(out)
    }

    async fn ack(&self, ids: &[String], now: Timestamp) -> Result<u64> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE outbox SET acked_at = $2 WHERE intent_id = ANY($1) AND acked_at IS NULL",
                &[&ids, &now.as_millis()],
            )
            .await
            .map_err(|e| classify(&self.name, Cause::Db(&e), At::Commit))?;
        Ok(n)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Every deadline is judged by the database server's clock.
            clock: ClockKind::Engine,
            durable: true,
            multi_process: true,
            min_ttl_ms: self.inner.min_ttl_ms,
            ttl_granularity_ms: 1,
            signs_fences: false,
            reads_ready_index: true,
        }
    }

    async fn read(&self, task: &TaskId, _now: Timestamp) -> Result<Option<Snapshot>> {
        let (i, task) = (self.inner.clone(), task.clone());
        self.inner.spawn(async move { i.read(&task).await }).await
    }

    async fn apply(&self, op: baton_core::Operation) -> Result<Decision> {
        self.job(Job::One(op)).await?.into_one()
    }

    async fn apply_all(&self, ops: Vec<baton_core::Operation>) -> Result<Vec<Decision>> {
        self.job(Job::All(ops)).await?.into_all()
    }

    async fn apply_each(&self, ops: Vec<baton_core::Operation>) -> Result<Vec<Decision>> {
        let answers = baton_core::commit::jobs_together(
            Some(&self.inner.handle),
            self.inner.name.clone(),
            self.inner.clone(),
            ops.into_iter().map(Job::One).collect(),
            |i: &Inner, jobs: &[Job]| crate::txn::commit_jobs(i, jobs, None),
        )
        .await;
        self.fold_now_and_then();
        answers?.into_iter().map(|a| a.into_one()).collect()
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        Ok(self.next_many(&query.one()).await?.into_iter().next())
    }

    async fn next_many(&self, query: &NextQuery) -> Result<Vec<Decision>> {
        // Nothing to offer costs a scan that locks nothing and a rollback.
        self.job(Job::Next(query.clone())).await?.into_next_all()
    }

    /// Waits on `LISTEN`: a write that puts a task in one of the query's
    /// ready indexes wakes one waiter per task. `false` (poll instead)
    /// while the listening connection cannot be made.
    async fn watch_ready(&self, query: &NextQuery, max_ms: u64) -> Result<bool> {
        let i = self.inner.clone();
        let lane = query.lane();
        let keys: Vec<String> = query
            .queues
            .iter()
            .map(|q| crate::txn::wake_key(lane, q))
            .collect();
        self.inner
            .spawn(async move {
                if keys.is_empty() || !i.listen().await {
                    return Ok(false);
                }
                let points: Vec<_> = keys.iter().map(|k| i.waiting_for(k)).collect();
                let waits = points.iter().map(|p| Box::pin(p.notified()));
                let woken = futures_util::future::select_all(waits);
                // Woken, or out of time: either way, ask `next` again.
                let _ = tokio::time::timeout(std::time::Duration::from_millis(max_ms), woken).await;
                Ok(true)
            })
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let (i, q) = (self.inner.clone(), query.clone());
        self.inner.spawn(async move { i.list(&q).await }).await
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let (i, task) = (self.inner.clone(), task.cloned());
        self.inner
            .spawn(async move { i.events(task.as_ref(), after, limit).await })
            .await
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let i = self.inner.clone();
        self.inner
            .spawn(async move { i.pending(after, limit).await })
            .await
    }

    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        let i = self.inner.clone();
        self.inner
            .spawn(async move { i.counts().await.map(Some) })
            .await
    }

    async fn oldest_ready(
        &self,
        lane: baton_core::graph::Lane,
        queue: &baton_core::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let (i, queue) = (self.inner.clone(), queue.clone());
        self.inner
            .spawn(async move { i.oldest_ready(lane, &queue, now).await })
            .await
    }

    async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64> {
        let (i, ids) = (self.inner.clone(), intent_ids.to_vec());
        self.inner
            .spawn(async move { i.ack(&ids, now).await })
            .await
    }
}

impl baton_core::store::Meter for PostgresStore {
    fn commits(&self) -> Option<u64> {
        Some(self.inner.commits.load(Ordering::Relaxed))
    }
}
