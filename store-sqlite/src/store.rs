//! The SQLite store: connections, transactions, and the one function that
//! maps SQLite's errors to baton's.

use crate::schema::{APPLICATION_ID, CURRENT_VERSION, MIGRATIONS};
use async_trait::async_trait;
use baton_core::model::{EventDraft, NotificationDraft};
use baton_core::store::{Clause, Due};
use baton_core::{
    Capabilities, ClockKind, Decision, Error, Event, ListQuery, Notification, Operation, Result,
    Snapshot, Store, TaskId, TaskRecord, Timestamp, decide,
};
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a store is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long to wait for another process's write lock before answering
    /// `Unavailable`.
    pub busy_timeout: Duration,
    /// Run the decisions of callers who write at the same time inside one
    /// transaction, so one fsync serves them all (on by default).
    pub group_commit: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            group_commit: true,
        }
    }
}

/// The most decisions one group commit carries.
const MAX_BATCH: usize = 256;

/// A caller waiting for the committer to decide and commit its operation.
struct Queued {
    op: Operation,
    answer: tokio::sync::oneshot::Sender<Result<Decision>>,
}

/// The group-commit thread's inbox; dropping the last store handle stops
/// the thread, and the drop waits for it so the file is closed on return.
struct Committer {
    inbox: Mutex<Option<std::sync::mpsc::Sender<Queued>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Committer {
    fn drop(&mut self) {
        if let Ok(mut inbox) = self.inbox.lock() {
            inbox.take();
        }
        if let Ok(mut t) = self.thread.lock()
            && let Some(t) = t.take()
        {
            let _ = t.join();
        }
    }
}

/// A baton store in one SQLite file. Clones share the same connections.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
    /// `None` when group commit is off.
    committer: Option<Arc<Committer>>,
}

struct Inner {
    path: PathBuf,
    /// (device, inode) of the file this process opened: if the path stops
    /// naming it, nothing more is committed.
    file_id: (u64, u64),
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    commits: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` and migrates its
    /// schema forward. The parent directory must exist.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let mut writer = open_connection(&path, &options)?;
        // Look before writing anything: a foreign or newer file is left as it was.
        let (version, app_id, tables) = schema_facts(&writer).map_err(|e| map_err(&path, e))?;
        check_schema(&path, version, app_id, tables)?;
        use_wal(&writer, &path)?;
        migrate(&mut writer, &path)?;
        let file_id = file_id(&path)?;
        let reader = open_connection(&path, &options)?;
        use_wal(&reader, &path)?;
        let inner = Arc::new(Inner {
            path,
            file_id,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            commits: std::sync::atomic::AtomicU64::new(0),
        });
        let committer = if options.group_commit {
            Some(start_committer(inner.clone())?)
        } else {
            None
        };
        Ok(SqliteStore { inner, committer })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| Error::unavailable(format!("sqlite worker thread failed: {e}")))?
    }
}

fn open_connection(path: &Path, options: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(|e| map_err(path, e))?;
    install_busy_handler(&mut conn, options.busy_timeout).map_err(|e| map_err(path, e))?;
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| map_err(path, e))?
    {
        return Err(Error::unavailable(format!(
            "{}: the database is read-only (file or directory not writable)",
            path.display()
        )));
    }
    Ok(conn)
}

/// WAL lets readers run beside the writer; `synchronous=FULL` makes a
/// commit durable before it returns.
fn use_wal(conn: &Connection, path: &Path) -> Result<()> {
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| map_err(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::unavailable(format!(
            "{}: cannot switch to WAL mode (journal mode is {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| map_err(path, e))
}

/// SQLite's own busy handler sleeps in growing steps (up to 100 ms), which
/// lets newcomers overtake processes that have waited longest. Polling in
/// short, even steps keeps the worst wait close to the typical one.
fn install_busy_handler(conn: &mut Connection, timeout: Duration) -> rusqlite::Result<()> {
    let mut started = Instant::now();
    conn.busy_handler(Some(move |count: i32| {
        if count == 0 {
            started = Instant::now();
        }
        if started.elapsed() >= timeout {
            return false;
        }
        let jitter = u64::from(count.unsigned_abs() % 5);
        std::thread::sleep(Duration::from_micros(100 + jitter * 60));
        true
    }))
}

fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let err = |e| map_err(path, e);
    let (version, _, _) = schema_facts(conn).map_err(err)?;
    if version == CURRENT_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    // Another process may have migrated while we waited for the lock.
    let (version, app_id, tables) = schema_facts(&tx).map_err(err)?;
    check_schema(path, version, app_id, tables)?;
    let start = usize::try_from(version).unwrap_or(0);
    for sql in &MIGRATIONS[start..] {
        tx.execute_batch(sql).map_err(err)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(err)?;
    tx.pragma_update(None, "user_version", CURRENT_VERSION)
        .map_err(err)?;
    tx.commit().map_err(err)
}

fn schema_facts(conn: &Connection) -> rusqlite::Result<(i64, i64, i64)> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let app_id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
    Ok((version, app_id, tables))
}

fn check_schema(path: &Path, version: i64, app_id: i64, tables: i64) -> Result<()> {
    let foreign = if app_id == 0 {
        tables > 0
    } else {
        app_id != APPLICATION_ID
    };
    if foreign {
        return Err(Error::corrupt(format!(
            "{}: an SQLite database, but not a baton store (application_id {app_id:#x})",
            path.display()
        )));
    }
    if version > CURRENT_VERSION {
        return Err(Error::unsupported(format!(
            "{}: schema version {version} was written by a newer baton; this build reads up to version {CURRENT_VERSION}",
            path.display()
        )));
    }
    Ok(())
}

/// Starts the thread that commits queued operations in batches: whatever
/// queued while one batch was being written and fsynced goes in the next.
fn start_committer(inner: Arc<Inner>) -> Result<Arc<Committer>> {
    let (inbox, queue) = std::sync::mpsc::channel::<Queued>();
    let thread = std::thread::Builder::new()
        .name("baton-sqlite-commit".into())
        .spawn(move || {
            while let Ok(first) = queue.recv() {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match queue.try_recv() {
                        Ok(q) => batch.push(q),
                        Err(_) => break,
                    }
                }
                match inner.lock(&inner.writer) {
                    Ok(mut conn) => inner.commit_batch(&mut conn, batch),
                    Err(e) => {
                        for q in batch {
                            let _ = q.answer.send(Err(e.clone()));
                        }
                    }
                }
            }
        })
        .map_err(|e| Error::unavailable(format!("cannot start the commit thread: {e}")))?;
    Ok(Arc::new(Committer {
        inbox: Mutex::new(Some(inbox)),
        thread: Mutex::new(Some(thread)),
    }))
}

fn file_id(path: &Path) -> Result<(u64, u64)> {
    let m = std::fs::metadata(path).map_err(|e| {
        Error::unavailable(format!(
            "{}: cannot stat the database file: {e}",
            path.display()
        ))
    })?;
    Ok((m.dev(), m.ino()))
}

impl Inner {
    /// Refuses to go on if the path no longer names the file this process
    /// opened: grants committed to an orphaned file would be invisible to
    /// every other process.
    fn check_identity(&self) -> Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.file_id => Ok(()),
            Ok(_) => Err(Error::unavailable(format!(
                "{}: the database file was replaced by another file while open; reopen the store",
                self.path.display()
            ))),
            Err(e) => Err(Error::unavailable(format!(
                "{}: the database file was deleted while open ({e}); reopen the store",
                self.path.display()
            ))),
        }
    }

    fn lock<'a>(&self, m: &'a Mutex<Connection>) -> Result<MutexGuard<'a, Connection>> {
        // Poisoned only if a thread panicked mid-transaction; SQLite rolled it back.
        m.lock().map_err(|_| {
            Error::unavailable(format!(
                "{}: a connection was poisoned by a panic",
                self.path.display()
            ))
        })
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        map_err(&self.path, e)
    }

    /// Runs `f` in one immediate (write-locked) transaction and commits.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(T, bool)>,
    ) -> Result<T> {
        let mut conn = self.lock(&self.writer)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        self.check_identity()?;
        let (out, changed) = f(&tx)?;
        if changed {
            self.check_identity()?;
            tx.commit().map_err(|e| self.err(e))?;
            self.commits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // Dropping an uncommitted transaction rolls it back: nothing was written.
        Ok(out)
    }

    /// Runs `f` in one read transaction (a consistent snapshot; no write lock).
    fn read<T>(&self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock(&self.reader)?;
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        self.check_identity()?;
        f(&tx)
    }

    /// Decides every queued operation in order inside one transaction and
    /// commits once; answers every caller only after the commit is durable.
    /// If anything fails, nothing is applied and every caller gets the error.
    fn commit_batch(&self, conn: &mut Connection, batch: Vec<Queued>) {
        let outcome = (|| -> Result<Vec<Decision>> {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            self.check_identity()?;
            let mut decisions = Vec::with_capacity(batch.len());
            let mut changed = false;
            for q in &batch {
                let (d, wrote) = self.decide_in(&tx, &q.op)?;
                changed |= wrote;
                decisions.push(d);
            }
            if changed {
                self.check_identity()?;
                tx.commit().map_err(|e| self.err(e))?;
                self.commits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(decisions)
        })();
        match outcome {
            Ok(decisions) => {
                for (q, d) in batch.into_iter().zip(decisions) {
                    let _ = q.answer.send(Ok(d));
                }
            }
            Err(e) => {
                for q in batch {
                    let _ = q.answer.send(Err(e.clone()));
                }
            }
        }
    }

    fn apply_one(&self, op: &Operation) -> Result<Decision> {
        self.write(|tx| self.decide_in(tx, op))
    }

    /// Reads the task, decides, and writes the decision inside `tx`.
    fn decide_in(
        &self,
        tx: &rusqlite::Transaction<'_>,
        op: &Operation,
    ) -> Result<(Decision, bool)> {
        let current = load(tx, &op.task).map_err(|e| self.err(e))?;
        let current = current
            .map(|json| self.decode::<TaskRecord>(&json))
            .transpose()?;
        let live = current.as_ref().is_some_and(|r| r.lease_live_at(op.now));
        let mut d = decide(op, current.as_ref(), live);
        if !d.writes() {
            return Ok((d, false));
        }
        self.write_decision(tx, &mut d)?;
        Ok((d, true))
    }

    fn write_decision(&self, tx: &rusqlite::Transaction<'_>, d: &mut Decision) -> Result<()> {
        let err = |e| self.err(e);
        if d.mints_fence() {
            let fence: i64 = tx
                .query_row(
                    "UPDATE fence SET value = value + 1 WHERE id = 1 RETURNING value",
                    [],
                    |r| r.get(0),
                )
                .map_err(err)?;
            let fence =
                u64::try_from(fence).map_err(|_| self.corrupt("the fence counter is negative"))?;
            d.assign_fence(fence);
        }
        if let Some(r) = d.record_to_write() {
            let json = encode(r)?;
            tx.prepare_cached(
                "INSERT INTO tasks (task_id, state, due_at, revision, record) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, due_at = excluded.due_at,
                 revision = excluded.revision, record = excluded.record",
            )
            .and_then(|mut s| {
                s.execute(params![
                    r.task.as_str(),
                    r.state.as_str(),
                    r.due_at().map(|t| t.as_millis()),
                    i64::try_from(r.revision).unwrap_or(i64::MAX),
                    json
                ])
            })
            .map_err(err)?;
        }
        for e in d.events() {
            if let Some(key) = &e.conflict_key {
                let counted = tx
                    .prepare_cached("UPDATE events SET count = count + 1 WHERE task_id = ?1 AND conflict_key = ?2")
                    .and_then(|mut s| s.execute(params![e.task.as_str(), key]))
                    .map_err(err)?;
                if counted > 0 {
                    continue;
                }
            }
            let body = encode(e)?;
            tx.prepare_cached(
                "INSERT INTO events (task_id, kind, conflict_key, body) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    e.task.as_str(),
                    e.kind.as_str(),
                    e.conflict_key,
                    body
                ])
            })
            .map_err(err)?;
        }
        for n in d.notifications() {
            let body = encode(n)?;
            tx.prepare_cached("INSERT INTO outbox (intent_id, task_id, body) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![n.intent_id, n.task.as_str(), body]))
                .map_err(err)?;
        }
        Ok(())
    }

    fn list(&self, q: &ListQuery) -> Result<Vec<Snapshot>> {
        let after = q.after.as_ref().map_or("", |a| a.as_str()).to_owned();
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        let now = q.now.as_millis();
        self.read(|tx| {
            let mut rows: Vec<(String, String)> = Vec::new();
            let mut collect = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> Result<()> {
                let mut s = tx.prepare_cached(sql).map_err(|e| self.err(e))?;
                let it = s
                    .query_map(p, |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                    .map_err(|e| self.err(e))?;
                for row in it {
                    rows.push(row.map_err(|e| self.err(e))?);
                }
                Ok(())
            };
            match &q.clauses {
                None => collect(
                    "SELECT task_id, record FROM tasks WHERE task_id > ?1 ORDER BY task_id LIMIT ?2",
                    &[&after, &limit],
                )?,
                Some(clauses) => {
                    for Clause { state, due } in clauses {
                        let s = state.as_str();
                        match due {
                            Due::Any => collect(
                                "SELECT task_id, record FROM tasks WHERE state = ?1 AND task_id > ?2
                                 ORDER BY task_id LIMIT ?3",
                                &[&s, &after, &limit],
                            )?,
                            Due::NotYet => collect(
                                "SELECT task_id, record FROM tasks WHERE state = ?1 AND task_id > ?2
                                 AND (due_at IS NULL OR due_at > ?3) ORDER BY task_id LIMIT ?4",
                                &[&s, &after, &now, &limit],
                            )?,
                            Due::Passed => collect(
                                "SELECT task_id, record FROM tasks INDEXED BY tasks_by_due
                                 WHERE state = ?1 AND due_at <= ?3 AND task_id > ?2
                                 ORDER BY task_id LIMIT ?4",
                                &[&s, &after, &now, &limit],
                            )?,
                        }
                    }
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            rows.dedup_by(|a, b| a.0 == b.0);
            rows.truncate(q.limit);
            rows.into_iter()
                .map(|(_, json)| Ok(Snapshot::at(self.decode(&json)?, q.now)))
                .collect()
        })
    }

    fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|tx| {
            let mut out = Vec::new();
            let mut push = |seq: i64, count: i64, body: String| -> Result<()> {
                let draft: EventDraft = self.decode(&body)?;
                let mut e = Event::from_draft(u64::try_from(seq).unwrap_or(0), draft);
                e.count = u64::try_from(count).unwrap_or(1);
                out.push(e);
                Ok(())
            };
            let rows: Vec<(i64, i64, String)> = match task {
                Some(t) => query3(
                    tx,
                    "SELECT seq, count, body FROM events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    &[&t.as_str(), &after, &limit],
                ),
                None => query3(
                    tx,
                    "SELECT seq, count, body FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                    &[&after, &limit],
                ),
            }
            .map_err(|e| self.err(e))?;
            for (seq, count, body) in rows {
                push(seq, count, body)?;
            }
            Ok(out)
        })
    }

    fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|tx| {
            let mut s = tx
                .prepare_cached(
                    "SELECT seq, body FROM outbox WHERE acked_at IS NULL AND seq > ?1 ORDER BY seq LIMIT ?2",
                )
                .map_err(|e| self.err(e))?;
            let rows = s
                .query_map(params![after, limit], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
                .map_err(|e| self.err(e))?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, body) = row.map_err(|e| self.err(e))?;
                let draft: NotificationDraft = self.decode(&body)?;
                out.push(Notification::from_draft(u64::try_from(seq).unwrap_or(0), draft));
            }
            Ok(out)
        })
    }

    fn ack(&self, ids: &[String]) -> Result<u64> {
        let now = baton_core::Clock::now(&baton_core::SystemClock).as_millis();
        self.write(|tx| {
            let mut acked = 0u64;
            for id in ids {
                acked += tx
                    .prepare_cached(
                        "UPDATE outbox SET acked_at = ?2 WHERE intent_id = ?1 AND acked_at IS NULL",
                    )
                    .and_then(|mut s| s.execute(params![id, now]))
                    .map_err(|e| self.err(e))? as u64;
            }
            Ok((acked, acked > 0))
        })
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, json: &str) -> Result<T> {
        serde_json::from_str(json)
            .map_err(|e| self.corrupt(&format!("a stored row does not decode: {e}")))
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::corrupt(format!("{}: {what}", self.path.display()))
    }
}

fn load(tx: &rusqlite::Transaction<'_>, task: &TaskId) -> rusqlite::Result<Option<String>> {
    tx.prepare_cached("SELECT record FROM tasks WHERE task_id = ?1")?
        .query_row([task.as_str()], |r| r.get(0))
        .optional()
}

fn query3(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    p: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<Vec<(i64, i64, String)>> {
    let mut s = tx.prepare_cached(sql)?;
    let rows = s.query_map(p, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

fn encode<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::corrupt(format!("cannot encode a row: {e}")))
}

/// The one place SQLite's errors become baton's: every cause named, with the path.
fn map_err(path: &Path, e: rusqlite::Error) -> Error {
    let p = path.display();
    match &e {
        rusqlite::Error::SqliteFailure(f, msg) => {
            let detail = msg.clone().unwrap_or_else(|| f.to_string());
            match f.code {
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Error::unavailable(format!(
                    "{p}: the database is locked by another process past the busy timeout ({detail})"
                )),
                ErrorCode::NotADatabase => Error::corrupt(format!(
                    "{p}: the file is not an SQLite database ({detail})"
                )),
                ErrorCode::DatabaseCorrupt => Error::corrupt(format!(
                    "{p}: the database is damaged or truncated ({detail})"
                )),
                ErrorCode::ReadOnly => {
                    Error::unavailable(format!("{p}: the database is read-only ({detail})"))
                }
                ErrorCode::CannotOpen => Error::unavailable(format!(
                    "{p}: cannot open or create the database; does the directory exist and is it writable? ({detail})"
                )),
                ErrorCode::DiskFull => {
                    Error::unavailable(format!("{p}: the disk is full ({detail})"))
                }
                ErrorCode::SystemIoFailure => {
                    Error::unavailable(format!("{p}: I/O error ({detail})"))
                }
                ErrorCode::PermissionDenied => {
                    Error::unavailable(format!("{p}: permission denied ({detail})"))
                }
                _ => Error::unavailable(format!("{p}: SQLite error: {detail}")),
            }
        }
        _ => Error::unavailable(format!("{p}: SQLite error: {e}")),
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock: ClockKind::Injected,
            durable: true,
            multi_process: true,
            min_ttl_ms: 1,
        }
    }

    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let task = task.clone();
        self.run(move |inner| {
            let json = inner.read(|tx| load(tx, &task).map_err(|e| inner.err(e)))?;
            json.map(|j| Ok(Snapshot::at(inner.decode(&j)?, now)))
                .transpose()
        })
        .await
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        let Some(committer) = &self.committer else {
            return self.run(move |inner| inner.apply_one(&op)).await;
        };
        let (answer, reply) = tokio::sync::oneshot::channel();
        let sent = match committer.inbox.lock() {
            Ok(inbox) => inbox
                .as_ref()
                .is_some_and(|i| i.send(Queued { op, answer }).is_ok()),
            Err(_) => false,
        };
        if !sent {
            return Err(Error::unavailable(format!(
                "{}: the commit thread has stopped",
                self.inner.path.display()
            )));
        }
        // The committer answers only after the commit holding this decision is durable.
        reply.await.map_err(|_| {
            Error::unavailable(format!(
                "{}: the commit thread stopped before answering",
                self.inner.path.display()
            ))
        })?
    }

    fn commits(&self) -> Option<u64> {
        Some(
            self.inner
                .commits
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let query = query.clone();
        self.run(move |inner| inner.list(&query)).await
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let task = task.cloned();
        self.run(move |inner| inner.events(task.as_ref(), after, limit))
            .await
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        self.run(move |inner| inner.pending(after, limit)).await
    }

    async fn ack(&self, intent_ids: &[String]) -> Result<u64> {
        let ids = intent_ids.to_vec();
        self.run(move |inner| inner.ack(&ids)).await
    }
}
