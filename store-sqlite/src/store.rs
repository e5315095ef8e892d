//! The SQLite store: connections, transactions, and the one function that
//! maps SQLite's errors to baton's.

use crate::gate::{Elapsed, Gate, Held};
use crate::schema::{APPLICATION_ID, CURRENT_VERSION, MIGRATIONS};
use baton_core::blocking::{Blocking, BlockingStore};
use baton_core::commit::{Answer, GroupCommitter, Job};
use baton_core::engine::{Engine, drive_next};
use baton_core::graph::NextQuery;
use baton_core::model::{EventDraft, NotificationDraft, TaskRecord};
use baton_core::next::{IndexPage, NextSource};
use baton_core::store::Txn;
use baton_core::store::{Clause, Due};
use baton_core::{
    Capabilities, Decision, Error, ErrorKind, Event, ListQuery, Notification, Operation, Result,
    Snapshot, State, TaskId, Timestamp,
};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[path = "connection.rs"]
mod connection;
#[path = "identity.rs"]
mod identity;
#[path = "migrate.rs"]
mod migrate;
#[path = "txn.rs"]
mod txn;
use connection::*;
use identity::*;
use migrate::*;
use txn::*;

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

/// A baton store in one SQLite file. Clones share the same connections.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    shell: BlockingStore<Inner>,
}

/// A file's identity on its filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

/// The files SQLite holds open for a store, each with the identity it had
/// when the store was opened: if a path stops naming its file, nothing
/// more is read or committed.
struct Files {
    main: FileId,
    wal: (PathBuf, FileId),
    shm: (PathBuf, FileId),
}

/// The store's connections.
pub(crate) struct Inner {
    path: PathBuf,
    files: Files,
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    commits: std::sync::atomic::AtomicU64,
    /// Write transactions begun (committed or not).
    write_transactions: std::sync::atomic::AtomicU64,
    /// Taken before SQLite's write lock, so waiting writers sleep (`gate.rs`).
    gate: Gate,
    busy_timeout: Duration,
}

baton_core::forward_store!(SqliteStore.shell: BlockingStore<Inner>);

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` and migrates its
    /// schema forward. The parent directory must exist.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let context = format!("sqlite {}", path.display());
        // A folder that is not there will not appear by itself: bad input,
        // not a store that may answer later.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(Error::invalid(
                "store",
                format!(
                    "{}: no such folder {}; create it first (mkdir -p {}) or name a file in a folder that exists",
                    path.display(),
                    dir.display(),
                    dir.display()
                ),
            ));
        }
        refuse_mount_point(&path)
            .and_then(|()| check_log_matches_index(&path))
            .and_then(|()| Self::open_checked(path, options))
            .map_err(|mut e| {
                if e.kind == ErrorKind::Corrupt && !e.message.contains("write-ahead log") {
                    e.message.push_str(
                        "; if this file was put in place of another while that one's write-ahead log (-wal) remained, see README.md, \"Backup and restore\"",
                    );
                }
                e.with_context(context)
            })
    }

    fn open_checked(path: PathBuf, options: SqliteOptions) -> Result<SqliteStore> {
        let mut writer = open_connection(&path, &options)?;
        // Look before writing anything: a foreign or newer file, or one with
        // a second name, is left as it was.
        let (version, app_id, tables) = schema_facts(&writer).map_err(|e| map_err(&path, e))?;
        check_schema(&path, version, app_id, tables)?;
        if std::fs::metadata(&path).is_ok() {
            check_links(&path)?;
        }
        use_wal(&writer, &path)?;
        let main = file_id(&path)?;
        check_links(&path)?;
        refuse_log_left_behind(&writer, &path)?;
        check_wal_belongs(&mut writer, &path, main)?;
        migrate(&mut writer, &path, main)?;
        check_log_not_left_behind(&mut writer, &path, main)?;
        let reader = open_connection(&path, &options)?;
        use_wal(&reader, &path)?;
        // Both connections have read the database, so SQLite holds its log
        // and index open from here on.
        let (wal, shm) = sidecars(&writer, &path);
        let files = Files {
            main,
            wal: (wal.clone(), file_id(&wal)?),
            shm: (shm.clone(), file_id(&shm)?),
        };
        for conn in [&writer, &reader] {
            // The files are known to belong together: a clean close may
            // checkpoint the log into the database again.
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)
                .map_err(|e| map_err(&path, e))?;
        }
        let gate = Gate::open(&path).map_err(|e| {
            Error::unavailable(format!(
                "{}: cannot open the write gate {}-gate: {e}",
                path.display(),
                path.display()
            ))
        })?;
        let inner = Arc::new(Inner {
            path,
            files,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            commits: std::sync::atomic::AtomicU64::new(0),
            write_transactions: std::sync::atomic::AtomicU64::new(0),
            gate,
            busy_timeout: options.busy_timeout,
        });
        let committer = if options.group_commit {
            let batch = inner.clone();
            Some(GroupCommitter::start_shared(
                inner.path.display().to_string(),
                "baton-sqlite-commit",
                move |jobs| batch.commit_jobs(jobs),
            )?)
        } else {
            None
        };
        let name = format!("sqlite {}", inner.path.display());
        Ok(SqliteStore {
            shell: BlockingStore::new(
                inner,
                committer,
                name,
                Capabilities::injected_clock(true, true),
            ),
        })
    }

    pub fn path(&self) -> &Path {
        &self.shell.inner().path
    }

    /// How many write transactions this handle has begun (committed or
    /// rolled back): what waiting workers cost the store's write lock.
    pub fn write_transactions(&self) -> u64 {
        self.shell
            .inner()
            .write_transactions
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// How many times a request that needs to write waits for another
/// process's writer to leave the gate, deciding again on a fresh snapshot
/// after each, before it queues for the gate. A process that lost a race
/// usually sees the winner's grant after the first; the bound keeps a
/// request that must write from waiting out burst after burst.
const SHARED_WAITS: usize = 3;

impl Inner {
    /// Refuses to go on if a path no longer names the file this process
    /// opened: grants committed to an orphaned file (or log) would be
    /// invisible to every other process, and a second name for the file
    /// would let another process lock it apart from this one.
    fn check_identity(&self) -> Result<()> {
        self.check_files()
            .map_err(|e| e.with_context(format!("sqlite {}", self.path.display())))
    }

    fn check_files(&self) -> Result<()> {
        let p = self.path.display();
        match std::fs::metadata(&self.path) {
            Ok(m)
                if (FileId {
                    dev: m.dev(),
                    ino: m.ino(),
                }) != self.files.main =>
            {
                return Err(Error::unavailable(format!(
                    "{p}: the database file was replaced by another file while open; reopen the store"
                )));
            }
            Ok(m) if m.nlink() > 1 => {
                return Err(Error::unavailable(format!(
                    "{p}: the database file was given a second name (a hard link) while open; SQLite would lock and log it apart under each name. Remove the link"
                )));
            }
            Ok(_) => {}
            Err(e) => {
                return Err(Error::unavailable(format!(
                    "{p}: the database file was deleted while open ({e}); reopen the store"
                )));
            }
        }
        for (what, (path, id)) in [
            ("write-ahead log", &self.files.wal),
            ("shared-memory index", &self.files.shm),
        ] {
            match std::fs::metadata(path) {
                Ok(m)
                    if (FileId {
                        dev: m.dev(),
                        ino: m.ino(),
                    }) == *id => {}
                Ok(_) => {
                    return Err(Error::unavailable(format!(
                        "{p}: its {what} {} was replaced while the store was open; what was committed through the old one is not in the new one. Stop every process using the store",
                        path.display()
                    )));
                }
                Err(e) => {
                    return Err(Error::unavailable(format!(
                        "{p}: its {what} {} was deleted while the store was open ({e}); what was committed through it is only in processes still holding it. Stop every process using the store",
                        path.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// The write gate, within the busy timeout (then `Unavailable`, as a
    /// write lock held past it is).
    fn enter_gate(&self) -> Result<Held<'_>> {
        self.gate
            .enter(self.busy_timeout)
            .map_err(|Elapsed| self.gate_elapsed())
    }

    fn gate_elapsed(&self) -> Error {
        Error::unavailable(format!(
            "{}: another process held the write gate past the busy timeout ({:?})",
            self.path.display(),
            self.busy_timeout
        ))
        .with_context(format!("sqlite {}", self.path.display()))
    }

    fn lock<'a>(&self, m: &'a Mutex<Connection>) -> MutexGuard<'a, Connection> {
        // Poisoned only if a thread panicked mid-transaction: the transaction
        // was dropped as the panic unwound, which rolled it back, so the
        // connection is as good as before.
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        map_err(&self.path, e)
    }

    /// Runs `f` in one immediate (write-locked) transaction and commits.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(T, bool)>,
    ) -> Result<T> {
        let mut conn = self.lock(&self.writer);
        let _gate = self.enter_gate()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let decided = f(&tx);
        // Once, before anything is answered or committed (an error
        // included): what was read from a file that a path no longer names
        // is never the answer.
        self.check_identity()?;
        let (out, changed) = decided?;
        if changed {
            tx.commit().map_err(|e| self.err(e))?;
            self.commits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // Dropping an uncommitted transaction rolls it back: nothing was written.
        Ok(out)
    }

    /// Runs `f` in one read transaction (a consistent snapshot; no write lock).
    fn read<T>(&self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock(&self.reader);
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let read = f(&tx);
        // After reading, before answering (as for writes).
        self.check_identity()?;
        read
    }

    /// The decision made on a read snapshot, if it writes nothing (a
    /// refusal with nothing to record, an acknowledgement, bad input): it
    /// is the answer, given without the gate or the write lock. Sound
    /// because a read transaction begun after the request arrived sees
    /// every commit answered before it, and only commits that are on disk:
    /// in WAL mode at `synchronous=FULL`, SQLite syncs the log before it
    /// writes the index header that shows a commit to readers (`walFrames`).
    fn decide_on_snapshot(&self, op: &Operation) -> Result<Option<Decision>> {
        self.read(|tx| {
            let mut t = SqlTx::new(self, tx);
            let d = baton_core::engine::decide_read(&mut t, op)?;
            Ok((!d.writes()).then_some(d))
        })
    }

    fn write_decision(&self, tx: &rusqlite::Transaction<'_>, d: &mut Decision) -> Result<()> {
        let err = |e| self.err(e);
        // The fence counter lives in the last event row (schema 5): read
        // once, when this decision mints a fence or appends an event, and
        // carried by every event it appends (or, minted with no event to
        // carry it, written to the `fence` row).
        let top: i64 = if d.mints_fence() || d.events().next().is_some() {
            tx.prepare_cached(FENCE_TOP_SQL)
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(err)?
        } else {
            0
        };
        let minted = if d.mints_fence() {
            let out_of_range = || self.corrupt("the fence counter is out of range");
            let next = top.checked_add(1).ok_or_else(out_of_range)?;
            d.assign_fence(u64::try_from(next).map_err(|_| out_of_range())?);
            Some(next)
        } else {
            None
        };
        let fence_top = minted.unwrap_or(top);
        let mut carried = false;
        if d.drops_history()
            && let Some(r) = d.record_to_write()
        {
            // The newest event row carries the fence counter and the
            // newest outbox row the outbox's sequence: both stay, so no
            // number is ever given out twice (SQLite numbers a row after
            // the highest one left).
            tx.prepare_cached(
                "DELETE FROM events WHERE task_id = ?1
                   AND seq < (SELECT max(seq) FROM events)",
            )
            .and_then(|mut s| s.execute(params![r.task.as_str()]))
            .map_err(err)?;
            tx.prepare_cached(
                "DELETE FROM outbox WHERE task_id = ?1 AND acked_at IS NOT NULL
                   AND seq < (SELECT max(seq) FROM outbox)",
            )
            .and_then(|mut s| s.execute(params![r.task.as_str()]))
            .map_err(err)?;
        }
        if d.forgets()
            && let Some(r) = d.record_to_write()
        {
            // A tombstone forgotten: its row goes (the count with it, by
            // the `counts_delete` trigger); its history went at its prune.
            tx.prepare_cached("DELETE FROM tasks WHERE task_id = ?1")
                .and_then(|mut s| s.execute(params![r.task.as_str()]))
                .map_err(err)?;
        } else if let Some(r) = d.record_to_write() {
            let json = r
                .to_stored_json()
                .map_err(|e| Error::corrupt(format!("cannot encode a row: {e}")))?;
            tx.prepare_cached(
                "INSERT INTO tasks (task_id, state, due_at, revision, record, ready_key, held_key,
                                    counted_queue)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, due_at = excluded.due_at,
                 revision = excluded.revision, record = excluded.record,
                 ready_key = excluded.ready_key, held_key = excluded.held_key,
                 counted_queue = excluded.counted_queue",
            )
            .and_then(|mut s| {
                s.execute(params![
                    r.task.as_str(),
                    r.state.as_str(),
                    r.due_at().map(|t| t.as_millis()),
                    i64::try_from(r.revision).unwrap_or(i64::MAX),
                    json,
                    r.ready_entry().map(|e| e.key()),
                    r.held_key(),
                    r.census_queue(),
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
            tx.prepare_cached(INSERT_EVENT_SQL)
                .and_then(|mut s| {
                    s.execute(params![
                        e.task.as_str(),
                        e.kind.as_str(),
                        e.conflict_key,
                        body,
                        fence_top,
                    ])
                })
                .map_err(err)?;
            carried = true;
        }
        if let (Some(fence), false) = (minted, carried) {
            tx.prepare_cached("UPDATE fence SET value = ?1 WHERE id = 1")
                .and_then(|mut s| s.execute(params![fence]))
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
}

impl Blocking for Inner {
    /// Decides `jobs` in order inside one transaction and commits once;
    /// returns only after the commit is durable. If anything fails, nothing
    /// is applied. A group (`Job::All`) comes alone; when one of its
    /// decisions refuses, the transaction is rolled back.
    fn commit_jobs(&self, jobs: &[Job]) -> Result<Vec<Answer>> {
        // A batch the snapshot answers whole writes nothing: no gate, no lock.
        // (One that needs any write is decided under the lock in order, as
        // each op must see the writes of those before it.) While another
        // process is writing, its commit may be what answers this batch:
        // wait for it to leave the gate and decide again on a fresh
        // snapshot, a few times, before queueing for the gate.
        //
        // The writer connection is taken first: it keeps this process to
        // one user of the gate (a lock of the open file, not of a thread).
        let mut conn = self.lock(&self.writer);
        let deadline = Instant::now() + self.busy_timeout;
        let mut waits = 0;
        let mut gate = loop {
            // Mid-burst this process holds the gate already: what the
            // snapshot would answer costs no more under it.
            if let Some(kept) = self.gate.take_kept() {
                break kept;
            }
            let mut answered = Vec::with_capacity(jobs.len());
            for job in jobs {
                let Job::One(op) = job else { break };
                match self.decide_on_snapshot(op)? {
                    Some(d) => answered.push(Answer::One(d)),
                    None => break,
                }
            }
            if answered.len() == jobs.len() {
                return Ok(answered);
            }
            if let Some(held) = self.gate.try_enter() {
                break held;
            }
            if waits == SHARED_WAITS || self.gate.yielding() {
                break self.enter_gate()?;
            }
            waits += 1;
            self.gate
                .wait_for_writer(deadline.saturating_duration_since(Instant::now()))
                .map_err(|Elapsed| self.gate_elapsed())?;
        };
        self.write_transactions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let mut t = SqlTx::new(self, &tx);
        let mut engine = Engine::new(jobs.iter().cloned(), Txn::rules(&t));
        let decided = drive_next(&mut engine, &mut t);
        let (answers, keep) = engine.finish();
        let changed = t.wrote;
        // Once, before anything is answered or committed (an error
        // included): what was read from a file that a path no longer names
        // is never the answer.
        self.check_identity()?;
        decided?;
        if changed && keep {
            tx.commit().map_err(|e| self.err(e))?;
            gate.committed();
            self.commits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // Dropping an uncommitted transaction rolls it back: nothing was written.
        Ok(answers)
    }

    fn snapshot(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let json = self.read(|tx| load(tx, task).map_err(|e| self.err(e)))?;
        json.map(|j| Ok(Snapshot::at(self.decode(&j)?, now)))
            .transpose()
    }

    /// Nothing to offer on a snapshot (durable commits only) is the
    /// answer, without the gate or the write lock.
    fn may_offer(&self, query: &NextQuery) -> Result<bool> {
        self.read(|tx| {
            let mut t = SqlTx::new(self, tx);
            baton_core::next::has_candidates(query, &mut t)
        })
    }

    fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
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
                            // Schema 5 indexes due times only for the
                            // states that wait on a start deadline; held
                            // tasks are as many as the leases.
                            Due::Passed if matches!(state, State::Declared | State::Registered) => {
                                collect(
                                    "SELECT task_id, record FROM tasks INDEXED BY tasks_by_due
                                     WHERE state IN ('DECLARED', 'REGISTERED')
                                     AND state = ?1 AND due_at <= ?3 AND task_id > ?2
                                     ORDER BY task_id LIMIT ?4",
                                    &[&s, &after, &now, &limit],
                                )?
                            }
                            // Schema 7: ended tasks by when they ended
                                // (retention's index; tombstones are not in it).
                                Due::Passed if state.is_terminal() => collect(
                                "SELECT task_id, record FROM tasks INDEXED BY tasks_ended
                                 WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'NOT_STARTED', 'STALLED')
                                 AND state = ?1 AND due_at <= ?3 AND task_id > ?2
                                 ORDER BY task_id LIMIT ?4",
                                &[&s, &after, &now, &limit],
                            )?,
                            Due::Passed => collect(
                                "SELECT task_id, record FROM tasks INDEXED BY tasks_by_state
                                 WHERE state = ?1 AND task_id > ?2 AND due_at <= ?3
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
                let mut e = Event::from_draft(self.stored_u64("an event sequence", seq)?, draft);
                e.count = self.stored_u64("an event count", count)?;
                out.push(e);
                Ok(())
            };
            let rows: Vec<(i64, i64, String)> = match task {
                Some(t) => event_rows(
                    tx,
                    "SELECT seq, count, body FROM events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    &[&t.as_str(), &after, &limit],
                ),
                None => event_rows(
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
                out.push(Notification::from_draft(
                    self.stored_u64("an outbox sequence", seq)?,
                    draft,
                ));
            }
            Ok(out)
        })
    }

    /// Through the ready or held index (`tasks_ready`, `tasks_held`), one row.
    fn first_index_key(
        &self,
        index: baton_core::graph::IndexName,
        from: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let sql = format!(
            "SELECT {c} FROM tasks WHERE {c} > ?1 AND {c} < ?2 ORDER BY {c} LIMIT 1",
            c = index.column()
        );
        self.read(|tx| {
            tx.prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_row(params![from, end], |r| r.get::<_, Vec<u8>>(0))
                        .optional()
                })
                .map_err(|e| self.err(e))
        })
    }

    /// The counts the triggers keep (schema 8), one read of a table with a
    /// row per queue and state.
    fn counts(&self) -> Result<Vec<baton_core::counts::Count>> {
        self.read(|tx| {
            let err = |e| self.err(e);
            let mut s = tx
                .prepare_cached("SELECT queue, state, n FROM counts WHERE n <> 0")
                .map_err(err)?;
            let rows = s
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(err)?;
            let mut out = Vec::new();
            for row in rows {
                let (queue, state, n) = row.map_err(err)?;
                let state = baton_core::State::parse("state", &state)
                    .map_err(|_| self.corrupt(&format!("a count of an unknown state {state:?}")))?;
                out.push(baton_core::counts::Count {
                    queue,
                    state,
                    n: self.stored_u64("a count", n)?,
                });
            }
            Ok(out)
        })
    }

    fn ack(&self, ids: &[String], now: Timestamp) -> Result<u64> {
        let now = now.as_millis();
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
}

impl Inner {
    fn decode<T: serde::de::DeserializeOwned>(&self, json: &str) -> Result<T> {
        baton_core::json::decode_stored(json.as_bytes())
            .map_err(|e| self.corrupt(&format!("a stored row does not decode: {e}")))
    }

    /// A number SQLite stored as a signed integer that baton only ever
    /// writes non-negative: anything else is damage, never a default.
    fn stored_u64(&self, what: &str, n: i64) -> Result<u64> {
        u64::try_from(n).map_err(|_| self.corrupt(&format!("{what} is negative ({n})")))
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::corrupt(format!("{}: {what}", self.path.display()))
    }
}

fn encode<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::corrupt(format!("cannot encode a row: {e}")))
}

/// The one place SQLite's errors become baton's: every cause named, with
/// the path; the native error is kept as the source, the store as context.
fn map_err(path: &Path, e: rusqlite::Error) -> Error {
    classify(path, &e)
        .with_context(format!("sqlite {}", path.display()))
        .with_source(e)
}

fn classify(path: &Path, e: &rusqlite::Error) -> Error {
    let p = path.display();
    match e {
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

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
