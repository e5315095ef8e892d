//! The sled store: trees, one transaction per decision, and the one
//! function that maps sled's errors to baton's.

use crate::flush::{FlushError, GroupFlush, Poisoned};
use async_trait::async_trait;
use baton_core::commit::{Answer, GroupCommitter, Job, job_alone_or_grouped, on_blocking_pool};
use baton_core::engine::{Engine, drive_next};
use baton_core::graph::{Lane, NextQuery, ReadyEntry, held_range, prefix_end, ready_range};
use baton_core::model::{EventDraft, NotificationDraft};
use baton_core::next::NextSource;
use baton_core::store::Txn;
use baton_core::store::{Clause, Due};
use baton_core::{
    Capabilities, ClockKind, Decision, Error, Event, Id, ListQuery, Notification, Operation,
    Result, Snapshot, Store, TaskId, TaskRecord, Timestamp,
};
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::{Transactional, Tree};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The layout version this build writes.
/// 2: the work graph's `ready` and `held` trees (a version 1 store has no
/// graph tasks, so it is upgraded in place by writing the version).
/// 3: counts by (queue, stored state) in `meta` under [`COUNT_PREFIX`],
/// changed in the transaction of every record write (a version 2 store is
/// counted once when opened).
const SCHEMA_VERSION: u64 = 3;

/// Where `meta` keeps the counts: `count/QUEUE\0STATE` to an i64, big-endian.
const COUNT_PREFIX: &[u8] = b"count/";

fn count_key(queue: &str, state: baton_core::State) -> Vec<u8> {
    let mut k = COUNT_PREFIX.to_vec();
    k.extend_from_slice(&prefixed_key(queue, state.as_str().as_bytes()));
    k
}

/// A count's key back to its queue and state; `None` for a key no
/// build wrote.
fn count_of_key(key: &[u8]) -> Option<(String, baton_core::State)> {
    let rest = key.strip_prefix(COUNT_PREFIX)?;
    let cut = rest.iter().position(|b| *b == 0)?;
    let queue = std::str::from_utf8(&rest[..cut]).ok()?;
    let state = std::str::from_utf8(&rest[cut + 1..]).ok()?;
    Some((
        queue.to_owned(),
        baton_core::State::parse("state", state).ok()?,
    ))
}

fn read_i64(v: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(v.try_into().ok()?))
}
const MAGIC: &[u8] = b"baton";

/// How a store is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SledOptions {
    /// How long to wait for another process to let go of the directory.
    pub busy_timeout: Duration,
    /// Let one flush serve every change committed before it (on by default);
    /// off, every change waits for a flush of its own.
    pub group_commit: bool,
}

impl Default for SledOptions {
    fn default() -> Self {
        SledOptions {
            busy_timeout: Duration::from_secs(5),
            group_commit: true,
        }
    }
}

/// A baton store in one sled directory. Clones share the same database.
#[derive(Clone)]
pub struct SledStore {
    inner: Arc<Inner>,
    /// `None` when group commit is off.
    committer: Option<Arc<GroupCommitter>>,
    /// Dropped after the two above, when the last clone goes: waits until
    /// sled has let go of the directory.
    _released: Arc<ReleaseOnDrop>,
}

/// Makes dropping the last handle of a store return only once sled's
/// directory lock is free, so the next open (in this process or another)
/// finds it free. sled finishes background writes on threads of its own,
/// which hold the database open for a moment after it is dropped.
#[derive(Debug)]
struct ReleaseOnDrop {
    path: PathBuf,
    wait: Duration,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let started = Instant::now();
        while started.elapsed() < self.wait {
            match try_lock_dir(&self.path) {
                // The lock is ours for a moment, released as the file closes.
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// Takes sled's own directory lock (an exclusive `flock` on `PATH/db`) if
/// nobody holds it. `Ok(None)`: somebody does.
fn try_lock_dir(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("db"))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// What sled keeps in its directory: a store directory holding anything
/// else is somebody else's, and is refused rather than written into.
fn is_sled_entry(name: &str) -> bool {
    matches!(name, "conf" | "db" | "blobs") || name.starts_with("snap.")
}

/// Refuses a path whose parent does not exist (sled would create the whole
/// path) and a non-empty directory that is not a sled store.
fn check_directory(path: &Path) -> Result<()> {
    let p = path.display();
    match std::fs::metadata(path) {
        Err(_) => {
            let parent = match path.parent() {
                Some(d) if d.as_os_str().is_empty() => Path::new("."),
                Some(d) => d,
                None => Path::new("/"),
            };
            // A folder that is not there will not appear by itself: bad
            // input naming the store (as SQLite's), not a store to retry.
            if !parent.is_dir() {
                return Err(Error::invalid(
                    "store",
                    format!(
                        "{p}: cannot create the store: no such folder {} (the directory does not exist; create it first)",
                        parent.display()
                    ),
                ));
            }
            Ok(())
        }
        Ok(m) if !m.is_dir() => Err(Error::unavailable(format!(
            "{p}: is not a directory (a sled store is a directory)"
        ))),
        Ok(_) => {
            let entries = std::fs::read_dir(path)
                .map_err(|e| Error::unavailable(format!("{p}: cannot read the directory: {e}")))?;
            for entry in entries {
                let entry = entry.map_err(|e| {
                    Error::unavailable(format!("{p}: cannot read the directory: {e}"))
                })?;
                let name = entry.file_name();
                if !name.to_str().is_some_and(is_sled_entry) {
                    return Err(Error::corrupt(format!(
                        "{p}: a non-empty directory that is not a sled store (it holds {:?}); give baton an empty or new directory",
                        name
                    )));
                }
            }
            Ok(())
        }
    }
}

/// A snapshot sled was writing when its process died (`snap.LSN.generating`)
/// is not data: sled writes it whole, syncs it and only then renames it to
/// `snap.LSN`. sled 0.34 reads a leftover one as corruption and refuses to
/// open. Removed only while holding sled's directory lock, so no running
/// process can be writing it.
fn remove_interrupted_snapshots(path: &Path) -> Result<()> {
    let Ok(Some(_lock)) = try_lock_dir(path) else {
        return Ok(());
    };
    let Ok(entries) = std::fs::read_dir(path) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path()).map_err(|e| {
                Error::unavailable(format!(
                    "{}: cannot remove the interrupted snapshot {name}: {e}",
                    path.display()
                ))
            })?;
        }
    }
    Ok(())
}

struct Inner {
    path: PathBuf,
    /// The (device, inode) of the store's directory as opened.
    identity: (u64, u64),
    db: sled::Db,
    trees: Trees,
    flush: GroupFlush,
}

/// The (device, inode) a path names now.
fn identity_of(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| (m.dev(), m.ino()))
}

/// Every tree a decision may touch, in the order transactions take them.
#[derive(Clone)]
struct Trees {
    /// task id → record JSON
    tasks: Tree,
    /// state NUL task id → due_at (i64 BE, or empty)
    by_state: Tree,
    /// state NUL due_at (u64 BE) task id → (): what is due, in time order
    by_due: Tree,
    /// seq BE → event JSON (with its count)
    events: Tree,
    /// task id NUL seq BE → ()
    events_by_task: Tree,
    /// task id NUL conflict key → seq BE
    conflicts: Tree,
    /// seq BE → pending notification JSON
    outbox: Tree,
    /// intent id → outbox seq BE (pending only)
    intents: Tree,
    /// counters: fence, event_seq, outbox_seq; the magic and schema version
    meta: Tree,
    /// `ReadyEntry::key` → task id: ready graph tasks, in `next`'s order
    ready: Tree,
    /// `TaskRecord::held_key` → task id: held graph tasks by lease expiry
    held: Tree,
}

impl fmt::Debug for SledStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// An error raised inside a transaction closure.
#[derive(Debug)]
enum Abort {
    Corrupt(String),
    /// Core (or a decode) failed: nothing is applied.
    Failed(Error),
    /// A group refused: nothing is applied; these are the answers.
    Rollback(Vec<Answer>),
    /// A `next` read past the index entries prefetched for it: nothing is
    /// applied; after a narrow prefetch the batch runs again with a wide one.
    Narrow,
}

impl Abort {
    fn into_error(self, path: &Path) -> Error {
        match self {
            Abort::Corrupt(m) => Error::corrupt(format!("{}: {m}", path.display())),
            Abort::Failed(e) => e,
            Abort::Rollback(_) => Error::unavailable(format!(
                "{}: a transaction was rolled back where none may be",
                path.display()
            )),
            // `transact` runs the batch again with wider windows instead.
            Abort::Narrow => Error::unavailable(format!(
                "{}: a `next` read past its prefetched index entries",
                path.display()
            )),
        }
    }
}

type TxResult<T> = std::result::Result<T, ConflictableTransactionError<Abort>>;

fn be(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn read_u64(v: Option<sled::IVec>) -> std::result::Result<u64, Abort> {
    match v {
        None => Ok(0),
        Some(b) => {
            let arr: [u8; 8] = b
                .as_ref()
                .try_into()
                .map_err(|_| Abort::Corrupt("a counter is not 8 bytes".into()))?;
            Ok(u64::from_be_bytes(arr))
        }
    }
}

/// `a NUL b`: a key in a tree indexed by a name (a state, a task id), so
/// that one name's keys are one contiguous range.
fn prefixed_key(a: &str, b: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + 1 + b.len());
    k.extend_from_slice(a.as_bytes());
    k.push(0);
    k.extend_from_slice(b);
    k
}

/// Whether sled refused to open because another process holds the
/// directory. sled reports it as an `io::Error` of kind `Other` whose text
/// is its own (`could not acquire lock on ...`), so the text is all there
/// is to go on; it is read here and nowhere else.
fn is_lock_conflict(e: &sled::Error) -> bool {
    match e {
        sled::Error::Io(io) => {
            io.kind() == std::io::ErrorKind::WouldBlock
                || io.to_string().contains("could not acquire lock")
        }
        _ => false,
    }
}

/// The one place sled's errors become baton's; the native error is kept as
/// the source, the store as context.
fn map_err(path: &Path, e: sled::Error) -> Error {
    let p = path.display();
    let mapped = match &e {
        sled::Error::Io(io) if is_lock_conflict(&e) => Error::unavailable(format!(
            "{p}: another process holds the store (sled locks its directory): {io}"
        )),
        sled::Error::Io(io) => Error::unavailable(format!("{p}: I/O error: {io}")),
        sled::Error::Corruption { at, .. } => {
            Error::corrupt(format!("{p}: sled found corrupt data at {at:?}"))
        }
        sled::Error::CollectionNotFound(_) => Error::corrupt(format!("{p}: a tree is missing")),
        sled::Error::Unsupported(m) => Error::unsupported(format!("{p}: {m}")),
        sled::Error::ReportableBug(m) => Error::unavailable(format!("{p}: sled failed: {m}")),
    };
    mapped
        .with_context(format!("sled {}", path.display()))
        .with_source(e)
}

impl SledStore {
    /// Opens (creating if needed) the store in directory `path`, waiting up
    /// to the busy timeout for another process to let go of it.
    pub fn open(path: impl AsRef<Path>, options: SledOptions) -> Result<SledStore> {
        let context = format!("sled {}", path.as_ref().display());
        Self::open_here(path.as_ref(), options).map_err(|e| e.with_context(context))
    }

    fn open_here(path: &Path, options: SledOptions) -> Result<SledStore> {
        let path = path.to_path_buf();
        check_directory(&path)?;
        let started = Instant::now();
        let db = loop {
            remove_interrupted_snapshots(&path)?;
            let attempt = std::panic::catch_unwind(|| sled::Config::new().path(&path).open());
            match attempt {
                Ok(Ok(db)) => break db,
                Ok(Err(e)) => {
                    let locked = is_lock_conflict(&e);
                    let err = map_err(&path, e);
                    if locked && started.elapsed() < options.busy_timeout {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    if locked {
                        return Err(Error::unavailable(format!(
                            "{}: another process holds the store (waited {:?}, the busy timeout)",
                            path.display(),
                            options.busy_timeout
                        )));
                    }
                    return Err(err);
                }
                Err(_) => {
                    return Err(Error::corrupt(format!(
                        "{}: sled could not read the store (it panicked while opening)",
                        path.display()
                    )));
                }
            }
        };
        let err = |e| map_err(&path, e);
        let t = |name: &str| db.open_tree(name).map_err(err);
        let trees = Trees {
            tasks: t("tasks")?,
            by_state: t("by_state")?,
            by_due: t("by_due")?,
            events: t("events")?,
            events_by_task: t("events_by_task")?,
            conflicts: t("conflicts")?,
            outbox: t("outbox")?,
            intents: t("intents")?,
            meta: t("meta")?,
            ready: t("ready")?,
            held: t("held")?,
        };
        check_layout(&path, &db, &trees)?;
        let identity = identity_of(&path)
            .map_err(|e| Error::unavailable(format!("{}: {e}", path.display())))?;
        let inner = Arc::new(Inner {
            path,
            identity,
            db,
            trees,
            flush: GroupFlush::new(options.group_commit),
        });
        let committer = if options.group_commit {
            let batch = inner.clone();
            Some(Arc::new(GroupCommitter::start(
                inner.path.display().to_string(),
                "baton-sled-commit",
                move |jobs| batch.commit_jobs(jobs),
            )?))
        } else {
            None
        };
        let released = Arc::new(ReleaseOnDrop {
            path: inner.path.clone(),
            wait: options.busy_timeout.max(Duration::from_secs(5)),
        });
        Ok(SledStore {
            inner,
            committer,
            _released: released,
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// One job through the committer, or in a transaction of its own when
    /// group commit is off.
    async fn job(&self, job: Job) -> Result<Answer> {
        job_alone_or_grouped(
            self.committer.as_deref(),
            None,
            || format!("sled {}", self.inner.path.display()),
            self.inner.clone(),
            job,
            Inner::commit_jobs,
        )
        .await
    }

    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        let name = self.inner.path.display().to_string();
        on_blocking_pool(name, self.inner.clone(), f).await
    }
}

/// Marks a new store as baton's; refuses a foreign or newer one.
/// Layout 3: the counts of a store written before it, from its records
/// (any counts a crash left half written are replaced; the version is
/// written only after them).
fn count_existing(path: &Path, trees: &Trees) -> Result<()> {
    let err = |e| map_err(path, e);
    for item in trees.meta.scan_prefix(COUNT_PREFIX) {
        let (k, _) = item.map_err(err)?;
        trees.meta.remove(k).map_err(err)?;
    }
    let mut sums = BTreeMap::new();
    for item in trees.tasks.iter() {
        let (k, v) = item.map_err(err)?;
        let record: TaskRecord = baton_core::json::decode_stored(&v).map_err(|e| {
            Error::corrupt(format!(
                "{}: task {} does not decode: {e}",
                path.display(),
                String::from_utf8_lossy(&k)
            ))
        })?;
        baton_core::counts::tally(&mut sums, Some(&record), 1);
    }
    for ((queue, state), n) in sums {
        trees
            .meta
            .insert(count_key(&queue, state), &n.to_be_bytes())
            .map_err(err)?;
    }
    Ok(())
}

fn check_layout(path: &Path, db: &sled::Db, trees: &Trees) -> Result<()> {
    let err = |e| map_err(path, e);
    let magic = trees.meta.get("magic").map_err(err)?;
    match magic {
        Some(m) if m.as_ref() == MAGIC => {
            let version =
                read_u64(trees.meta.get("schema").map_err(err)?).map_err(|a| a.into_error(path))?;
            if version > SCHEMA_VERSION {
                return Err(Error::unsupported(format!(
                    "{}: layout version {version} was written by a newer baton; this build reads up to {SCHEMA_VERSION}",
                    path.display()
                )));
            }
            if version < 3 {
                count_existing(path, trees)?;
            }
            if version < SCHEMA_VERSION {
                trees
                    .meta
                    .insert("schema", &be(SCHEMA_VERSION))
                    .map_err(err)?;
                db.flush().map_err(err)?;
            }
            Ok(())
        }
        Some(_) => Err(Error::corrupt(format!(
            "{}: a sled database, but not a baton store",
            path.display()
        ))),
        None => {
            let foreign =
                db.tree_names().len() > 12 || !trees.tasks.is_empty() || !trees.events.is_empty();
            if foreign || !db.is_empty() {
                return Err(Error::corrupt(format!(
                    "{}: a sled database, but not a baton store",
                    path.display()
                )));
            }
            trees.meta.insert("magic", MAGIC).map_err(err)?;
            trees
                .meta
                .insert("schema", &be(SCHEMA_VERSION))
                .map_err(err)?;
            db.flush().map_err(err)?;
            Ok(())
        }
    }
}

impl Inner {
    fn err(&self, e: sled::Error) -> Error {
        map_err(&self.path, e)
    }

    fn poisoned(&self) -> Error {
        Error::unavailable(format!(
            "{}: the flush coordinator was poisoned by a panic",
            self.path.display()
        ))
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, bytes: &[u8]) -> Result<T> {
        baton_core::json::decode_stored(bytes).map_err(|e| {
            Error::corrupt(format!(
                "{}: a stored value does not decode: {e}",
                self.path.display()
            ))
        })
    }

    /// Waits until everything a read may have seen is durable.
    fn settle_reads(&self) -> Result<()> {
        let upto = self.flush.horizon().map_err(|Poisoned| self.poisoned())?;
        self.durable(upto, false)
    }

    fn durable(&self, upto: u64, own_write: bool) -> Result<()> {
        self.flush
            .wait_durable(upto, own_write, || self.db.flush().map(|_| ()))
            .map_err(|e| match e {
                FlushError::Poisoned => self.poisoned(),
                FlushError::Flush(e) => self.err(e),
            })
    }

    /// Decides `jobs` in one transaction, then waits for one flush that
    /// covers it (and whatever it read) before answering.
    fn commit_jobs(&self, jobs: &[Job]) -> Result<Vec<Answer>> {
        self.check_identity()?;
        let in_flight = self.flush.begin().map_err(|Poisoned| self.poisoned())?;
        let result = self.transact(jobs);
        let finished = in_flight.finish().map_err(|Poisoned| self.poisoned())?;
        let (answers, wrote) = result?;
        // Answer only once what the decisions wrote (or read) is durable.
        let upto = self
            .flush
            .horizon()
            .map_err(|Poisoned| self.poisoned())?
            .max(finished);
        self.durable(upto, wrote)?;
        // Moved away while this commit ran: what it wrote is not where the
        // next process will look, so it is not an answer.
        self.check_identity()?;
        Ok(answers)
    }

    /// The store's directory is still the one this process opened: sled
    /// keeps writing into a directory that was moved, replaced or deleted,
    /// and another process at the same path would open another store (a
    /// second holder of the same task). Then every write is refused.
    fn check_identity(&self) -> Result<()> {
        let p = self.path.display();
        match identity_of(&self.path) {
            Ok(id) if id == self.identity => Ok(()),
            Ok(_) => Err(Error::unavailable(format!(
                "{p}: the store's directory was replaced by another while open; reopen the store"
            ))),
            Err(e) => Err(Error::unavailable(format!(
                "{p}: the store's directory was removed or moved while open ({e}); reopen the store"
            ))),
        }
        .map_err(|e| e.with_context(format!("sled {p}")))
    }

    /// Decides `jobs` in order inside one sled transaction: each sees the
    /// writes of those before it. Also says whether anything was written.
    ///
    /// The ready entries a batch's `next`s read are prefetched (see
    /// [`Inner::prefetch`]): first the few they nearly always use, and only
    /// if one reads past those, the batch again with the full window.
    fn transact(&self, jobs: &[Job]) -> Result<(Vec<Answer>, bool)> {
        let mut widen = 0;
        loop {
            match self.transact_with(jobs, widen) {
                // Only a window cut short of its index's end aborts, and
                // they grow four times each run: this ends.
                Err(TransactionError::Abort(Abort::Narrow)) => widen += 1,
                done => {
                    return done.map_err(|e| match e {
                        TransactionError::Abort(a) => a.into_error(&self.path),
                        TransactionError::Storage(e) => self.err(e),
                    });
                }
            }
        }
    }

    fn transact_with(
        &self,
        jobs: &[Job],
        widen: u32,
    ) -> std::result::Result<(Vec<Answer>, bool), TransactionError<Abort>> {
        let index = self
            .prefetch(jobs, widen)
            .map_err(|e| TransactionError::Abort(Abort::Failed(e)))?;
        let t = &self.trees;
        let trees = (
            &t.tasks,
            &t.by_state,
            &t.by_due,
            &t.events,
            &t.events_by_task,
            &t.conflicts,
            &t.outbox,
            &t.intents,
            &t.meta,
            &t.ready,
            &t.held,
        );
        let outcome = trees.transaction(
            |(
                tasks,
                by_state,
                by_due,
                events,
                events_by_task,
                conflicts,
                outbox,
                intents,
                meta,
                ready,
                held,
            )| {
                let mut t = SledTx {
                    inner: self,
                    tasks,
                    by_state,
                    by_due,
                    events,
                    events_by_task,
                    conflicts,
                    outbox,
                    intents,
                    meta,
                    ready,
                    held,
                    index: &index,
                    ready_delta: BTreeMap::new(),
                    held_delta: BTreeMap::new(),
                    failed: None,
                    wrote: false,
                };
                let mut engine = Engine::new(jobs.iter().cloned(), Txn::rules(&t));
                if let Err(e) = drive_next(&mut engine, &mut t) {
                    // A sled error (a conflict retries the closure) or core's.
                    return Err(t
                        .failed
                        .take()
                        .unwrap_or(ConflictableTransactionError::Abort(Abort::Failed(e))));
                }
                let (answers, keep) = engine.finish();
                if !keep {
                    return Err(ConflictableTransactionError::Abort(Abort::Rollback(
                        answers,
                    )));
                }
                Ok((answers, t.wrote))
            },
        );
        match outcome {
            Err(TransactionError::Abort(Abort::Rollback(answers))) => Ok((answers, false)),
            other => other,
        }
    }

    /// The index entries the batch's `next`s may need, read before the
    /// transaction: sled cannot range inside one (and a plain read there
    /// waits for the transaction's own lock). Records are read inside.
    ///
    /// At first (`widen` 0) each queue's ready index is read only as far as
    /// the batch's `next`s nearly always go: each takes the first entry left
    /// by those before it, and core reads two at first. A read past a window
    /// that stopped short of the index's end aborts the transaction
    /// ([`Abort::Narrow`]), and the batch runs again with wider windows:
    /// what one `next` may read (up to NEXT_SCAN candidates, the rest of a
    /// page, and a page of expired held tasks for each `next` of the batch,
    /// each of which may move a page of them to the ready index) plus an
    /// entry for each change of the batch, then four times more each time.
    fn prefetch(&self, jobs: &[Job], widen: u32) -> Result<Prefetched> {
        let mut out = self.prefetch_next(jobs, widen)?;
        let pruned = jobs.iter().flat_map(|j| match j {
            Job::One(op) => std::slice::from_ref(op),
            Job::All(ops) => ops.as_slice(),
            Job::Next(_) => &[],
        });
        for op in pruned {
            if !matches!(op.request, baton_core::Request::Prune { .. }) {
                continue;
            }
            let prefix = prefixed_key(op.task.as_str(), &[]);
            let keys = |tree: &sled::Tree| -> Result<Vec<Vec<u8>>> {
                tree.scan_prefix(&prefix)
                    .map(|kv| kv.map(|(k, _)| k.to_vec()).map_err(|e| self.err(e)))
                    .collect()
            };
            let found = (
                keys(&self.trees.events_by_task)?,
                keys(&self.trees.conflicts)?,
            );
            out.history.insert(op.task.as_str().to_owned(), found);
        }
        Ok(out)
    }

    fn prefetch_next(&self, jobs: &[Job], widen: u32) -> Result<Prefetched> {
        let nexts: Vec<&NextQuery> = jobs
            .iter()
            .filter_map(|j| match j {
                Job::Next(q) => Some(q),
                _ => None,
            })
            .collect();
        let mut out = Prefetched::default();
        let Some(now) = nexts.iter().map(|q| q.now).max() else {
            return Ok(out);
        };
        use baton_core::next::{NEXT_FIRST_PAGE, NEXT_PAGE, NEXT_SCAN};
        let n = nexts.len();
        let changes: usize = jobs
            .iter()
            .map(|j| match j {
                Job::All(ops) => ops.len(),
                _ => 1,
            })
            .sum();
        let (want_ready, want_held) = match widen {
            0 => ((n + 1) * NEXT_FIRST_PAGE, NEXT_PAGE * 2 + 2 * n),
            w => {
                let times = 4usize.saturating_pow(w - 1);
                (
                    (NEXT_SCAN + NEXT_PAGE + changes).saturating_mul(times),
                    (NEXT_PAGE * (n + 1) + changes).saturating_mul(times),
                )
            }
        };
        let err = |e| self.err(e);
        for q in &nexts {
            for queue in &q.queues {
                let at = (q.lane(), queue.clone());
                if out.ready.contains_key(&at) {
                    continue;
                }
                let prefix = ReadyEntry::prefix(q.lane(), queue);
                let mut ready = Vec::new();
                for item in self
                    .trees
                    .ready
                    .range(prefix.clone()..prefix_end(&prefix))
                    .take(want_ready)
                {
                    let (k, v) = item.map_err(err)?;
                    ready.push((k.to_vec(), v.to_vec()));
                }
                let (start, end) = held_range(q.lane(), queue, now);
                let mut held = Vec::new();
                for item in self.trees.held.range(start..end).take(want_held) {
                    let (k, v) = item.map_err(err)?;
                    held.push((k.to_vec(), v.to_vec()));
                }
                let ready_cut = ready.len() == want_ready;
                let held_cut = held.len() == want_held;
                out.ready.insert(at.clone(), (ready, ready_cut));
                out.held.insert(at, (held, held_cut));
            }
        }
        Ok(out)
    }

    fn list(&self, q: &ListQuery) -> Result<Vec<Snapshot>> {
        let after = q.after.as_ref().map_or("", |a| a.as_str());
        let mut rows: Vec<(Vec<u8>, TaskRecord)> = Vec::new();
        let mut push = |key: &[u8]| -> Result<()> {
            if let Some(b) = self.trees.tasks.get(key).map_err(|e| self.err(e))? {
                rows.push((key.to_vec(), self.decode(&b)?));
            }
            Ok(())
        };
        match &q.clauses {
            None => {
                let start = std::ops::Bound::Excluded(after.as_bytes().to_vec());
                for item in self
                    .trees
                    .tasks
                    .range((start, std::ops::Bound::Unbounded))
                    .take(q.limit)
                {
                    let (k, _) = item.map_err(|e| self.err(e))?;
                    push(&k)?;
                }
            }
            Some(clauses) => {
                for Clause { state, due } in clauses {
                    if *due == Due::Passed {
                        // What is due is found by time, never by scanning the state.
                        let prefix = prefixed_key(state.as_str(), b"");
                        let end = due_key(state.as_str(), q.now.plus_ms(1), "");
                        let mut due_tasks: Vec<Vec<u8>> = Vec::new();
                        for item in self.trees.by_due.range(prefix.clone()..end) {
                            let (k, _) = item.map_err(|e| self.err(e))?;
                            let task = k[prefix.len() + 8..].to_vec();
                            if task.as_slice() > after.as_bytes() {
                                due_tasks.push(task);
                            }
                        }
                        due_tasks.sort();
                        for task in due_tasks.into_iter().take(q.limit) {
                            push(&task)?;
                        }
                        continue;
                    }
                    let prefix = prefixed_key(state.as_str(), b"");
                    let start = prefixed_key(state.as_str(), after.as_bytes());
                    let mut taken = 0;
                    for item in self
                        .trees
                        .by_state
                        .range((std::ops::Bound::Excluded(start), std::ops::Bound::Unbounded))
                    {
                        let (k, v) = item.map_err(|e| self.err(e))?;
                        if !k.starts_with(&prefix) || taken >= q.limit {
                            break;
                        }
                        let due_at = <[u8; 8]>::try_from(v.as_ref())
                            .ok()
                            .map(|b| Timestamp::from_millis(i64::from_be_bytes(b)));
                        if due.admits(due_at, q.now) {
                            push(&k[prefix.len()..])?;
                            taken += 1;
                        }
                    }
                }
            }
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.dedup_by(|a, b| a.0 == b.0);
        rows.truncate(q.limit);
        self.settle_reads()?;
        Ok(rows
            .into_iter()
            .map(|(_, r)| Snapshot::at(r, q.now))
            .collect())
    }

    fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let mut keys: Vec<sled::IVec> = Vec::new();
        match task {
            None => {
                for item in self
                    .trees
                    .events
                    .range(be(after.saturating_add(1))..)
                    .take(limit)
                {
                    keys.push(item.map_err(|e| self.err(e))?.0);
                }
            }
            Some(t) => {
                let prefix = prefixed_key(t.as_str(), b"");
                for item in self
                    .trees
                    .events_by_task
                    .range(prefixed_key(t.as_str(), &be(after.saturating_add(1)))..)
                {
                    let (k, _) = item.map_err(|e| self.err(e))?;
                    if !k.starts_with(&prefix) || keys.len() >= limit {
                        break;
                    }
                    keys.push(k.subslice(prefix.len(), k.len() - prefix.len()));
                }
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(b) = self.trees.events.get(&k).map_err(|e| self.err(e))? {
                out.push(self.decode::<Event>(&b)?);
            }
        }
        self.settle_reads()?;
        Ok(out)
    }

    fn counts(&self) -> Result<Vec<baton_core::counts::Count>> {
        let mut out = Vec::new();
        for item in self.trees.meta.scan_prefix(COUNT_PREFIX) {
            let (k, v) = item.map_err(|e| map_err(&self.path, e))?;
            let (Some((queue, state)), Some(n)) = (count_of_key(&k), read_i64(&v)) else {
                return Err(Error::corrupt(format!(
                    "{}: a count that does not decode",
                    self.path.display()
                )));
            };
            if n > 0 {
                out.push(baton_core::counts::Count {
                    queue,
                    state,
                    n: n.unsigned_abs(),
                });
            }
        }
        Ok(out)
    }

    fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let mut out = Vec::new();
        for item in self
            .trees
            .outbox
            .range(be(after.saturating_add(1))..)
            .take(limit)
        {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let seq = read_u64(Some(k)).map_err(|a| a.into_error(&self.path))?;
            let draft: NotificationDraft = self.decode(&v)?;
            out.push(Notification::from_draft(seq, draft));
        }
        self.settle_reads()?;
        Ok(out)
    }

    fn ack(&self, ids: &[String]) -> Result<u64> {
        let in_flight = self.flush.begin().map_err(|Poisoned| self.poisoned())?;
        let t = &self.trees;
        let result = (&t.outbox, &t.intents).transaction(|(outbox, intents)| {
            let mut acked = 0u64;
            for id in ids {
                if let Some(seq) = intents.remove(id.as_bytes())? {
                    outbox.remove(seq)?;
                    acked += 1;
                }
            }
            Ok::<_, ConflictableTransactionError<Abort>>(acked)
        });
        let finished = in_flight.finish().map_err(|Poisoned| self.poisoned())?;
        let acked = result.map_err(|e| match e {
            TransactionError::Abort(a) => a.into_error(&self.path),
            TransactionError::Storage(e) => self.err(e),
        })?;
        self.durable(finished, acked > 0)?;
        Ok(acked)
    }

    fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let got = self
            .trees
            .tasks
            .get(task.as_str().as_bytes())
            .map_err(|e| self.err(e))?;
        let snap = got
            .map(|b| self.decode(&b).map(|r| Snapshot::at(r, now)))
            .transpose()?;
        self.settle_reads()?;
        Ok(snap)
    }
}

/// Index entries (key, task id), in key order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Index entries read before a transaction, by lane and queue, each with
/// whether it was cut at its window (the index may go on past the last
/// entry read).
#[derive(Default)]
struct Prefetched {
    ready: std::collections::HashMap<(Lane, Id), (Entries, bool)>,
    held: std::collections::HashMap<(Lane, Id), (Entries, bool)>,
    /// For each task a prune of the batch names: the keys of its events
    /// (in `events_by_task`) and conflict counters, read before the
    /// transaction (a transaction cannot scan).
    history: std::collections::HashMap<String, History>,
}

/// A task's keys in `events_by_task` and in `conflicts`.
type History = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// One sled transaction, as core's commit helpers see it.
struct SledTx<'a> {
    inner: &'a Inner,
    tasks: &'a TransactionalTree,
    by_state: &'a TransactionalTree,
    by_due: &'a TransactionalTree,
    events: &'a TransactionalTree,
    events_by_task: &'a TransactionalTree,
    conflicts: &'a TransactionalTree,
    outbox: &'a TransactionalTree,
    intents: &'a TransactionalTree,
    meta: &'a TransactionalTree,
    ready: &'a TransactionalTree,
    held: &'a TransactionalTree,
    index: &'a Prefetched,
    /// This transaction's changes to the two indexes (`None`: removed).
    ready_delta: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    held_delta: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The sled error that stopped the transaction, returned from the
    /// closure as is (so a conflict runs it again).
    failed: Option<ConflictableTransactionError<Abort>>,
    wrote: bool,
}

impl SledTx<'_> {
    fn sled<T>(&mut self, r: TxResult<T>) -> Result<T> {
        r.map_err(|e| {
            let shown = match &e {
                ConflictableTransactionError::Abort(Abort::Corrupt(m)) => {
                    Error::corrupt(format!("{}: {m}", self.inner.path.display()))
                }
                _ => Error::unavailable(format!(
                    "{}: the transaction did not complete",
                    self.inner.path.display()
                )),
            };
            self.failed = Some(e);
            shown
        })
    }

    fn record(&mut self, task: &[u8]) -> Result<Option<TaskRecord>> {
        let got = self
            .tasks
            .get(task)
            .map_err(ConflictableTransactionError::from);
        match self.sled(got)? {
            Some(b) => {
                let decoded = baton_core::json::decode_stored(&b)
                    .map_err(|e| abort(format!("a record does not decode: {e}")));
                self.sled(decoded).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The records of the index entries in `[from, end)`: those read before
    /// the transaction with this transaction's own changes to the index
    /// applied (`delta`), each record read inside the transaction.
    fn indexed(
        &mut self,
        index: Option<&(Entries, bool)>,
        held: bool,
        from: std::ops::Bound<Vec<u8>>,
        end: &[u8],
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        let delta = if held {
            &self.held_delta
        } else {
            &self.ready_delta
        };
        let (read, cut) = index.map_or((&[][..], false), |(e, cut)| (e.as_slice(), *cut));
        let Some(ids) = merged_ids(read, delta, cut, from, end, limit) else {
            self.failed = Some(ConflictableTransactionError::Abort(Abort::Narrow));
            return Err(Error::unavailable(
                "a `next` read past its prefetched index entries",
            ));
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = self.record(&id)? {
                out.push(Snapshot::at(r, now));
            }
        }
        Ok(out)
    }

    fn put(&mut self, d: &mut Decision) -> TxResult<()> {
        let meta = self.meta;
        if d.mints_fence() {
            let fence =
                read_u64(meta.get("fence")?).map_err(ConflictableTransactionError::Abort)? + 1;
            meta.insert("fence", &be(fence))?;
            d.assign_fence(fence);
        }
        if let Some(r) = d.record_to_write() {
            let key = r.task.as_str().as_bytes();
            let current: Option<TaskRecord> = match self.tasks.get(key)? {
                Some(b) => Some(
                    baton_core::json::decode_stored(&b)
                        .map_err(|e| abort(format!("a record does not decode: {e}")))?,
                ),
                None => None,
            };
            let mut moved = BTreeMap::new();
            baton_core::counts::tally(&mut moved, current.as_ref(), -1);
            baton_core::counts::tally(&mut moved, Some(r), 1);
            for ((queue, state), by) in moved {
                if by != 0 {
                    let k = count_key(&queue, state);
                    let n = match meta.get(&k)? {
                        Some(v) => read_i64(&v)
                            .ok_or_else(|| abort("a count does not decode".to_owned()))?,
                        None => 0,
                    };
                    meta.insert(k, &(n + by).to_be_bytes())?;
                }
            }
            if let Some(old) = &current {
                self.by_state.remove(prefixed_key(
                    old.state.as_str(),
                    old.task.as_str().as_bytes(),
                ))?;
                if let Some(due) = old.due_at() {
                    self.by_due
                        .remove(due_key(old.state.as_str(), due, old.task.as_str()))?;
                }
                if let Some(e) = old.ready_entry() {
                    self.ready.remove(e.key())?;
                    self.ready_delta.insert(e.key(), None);
                }
                if let Some(k) = old.held_key() {
                    self.held.remove(k.clone())?;
                    self.held_delta.insert(k, None);
                }
            }
            if let Some(due) = r.due_at() {
                self.by_due
                    .insert(due_key(r.state.as_str(), due, r.task.as_str()), &[])?;
            }
            if let Some(e) = r.ready_entry() {
                self.ready.insert(e.key(), key)?;
                self.ready_delta.insert(e.key(), Some(key.to_vec()));
            }
            if let Some(k) = r.held_key() {
                self.held.insert(k.clone(), key)?;
                self.held_delta.insert(k, Some(key.to_vec()));
            }
            let due = r
                .due_at()
                .map(|t| t.as_millis().to_be_bytes().to_vec())
                .unwrap_or_default();
            self.by_state
                .insert(prefixed_key(r.state.as_str(), key), due)?;
            self.tasks.insert(key, encode(r)?)?;
        }
        if d.drops_history()
            && let Some(r) = d.record_to_write()
        {
            self.drop_history(r.task.as_str())?;
        }
        for e in d.events() {
            append_event(e, self.events, self.events_by_task, self.conflicts, meta)?;
        }
        for n in d.notifications() {
            let seq =
                read_u64(meta.get("outbox_seq")?).map_err(ConflictableTransactionError::Abort)? + 1;
            meta.insert("outbox_seq", &be(seq))?;
            self.outbox.insert(&be(seq), encode(n)?)?;
            self.intents.insert(n.intent_id.as_bytes(), &be(seq))?;
        }
        Ok(())
    }
}

impl SledTx<'_> {
    /// A prune: the task's events (found through its index before the
    /// transaction;
    /// an ended task's events no longer change but for a refusal counted
    /// meanwhile, which would merely stay) and its conflict counters. The
    /// event sequence lives in `meta` and never goes back; acknowledged
    /// notifications are removed when acknowledged.
    fn drop_history(&mut self, task: &str) -> TxResult<()> {
        let prefix = prefixed_key(task, &[]);
        let Some((events, conflicts)) = self.index.history.get(task) else {
            return Ok(());
        };
        for k in events {
            self.events.remove(&k[prefix.len()..])?;
            self.events_by_task.remove(k.as_slice())?;
        }
        for k in conflicts {
            self.conflicts.remove(k.as_slice())?;
        }
        Ok(())
    }
}

impl Txn for SledTx<'_> {
    fn load(&mut self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        Ok(self
            .record(task.as_str().as_bytes())?
            .map(|r| Snapshot::at(r, now)))
    }

    fn write(&mut self, d: &mut Decision) -> Result<()> {
        self.wrote = true;
        let done = self.put(d);
        self.sled(done)
    }
}

impl NextSource for SledTx<'_> {
    fn ready(
        &mut self,
        lane: Lane,
        queue: &Id,
        after: Option<&ReadyEntry>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        let (from, end) = ready_range(lane, queue, after);
        if from >= end {
            return Ok(Vec::new()); // an `after` past this queue: nothing (and no range panic)
        }
        let index = self.index.ready.get(&(lane, queue.clone()));
        self.indexed(
            index,
            false,
            std::ops::Bound::Excluded(from),
            &end,
            limit,
            now,
        )
    }

    fn expired(
        &mut self,
        lane: Lane,
        queue: &Id,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        let (start, end) = held_range(lane, queue, now);
        let index = self.index.held.get(&(lane, queue.clone()));
        self.indexed(
            index,
            true,
            std::ops::Bound::Included(start),
            &end,
            limit,
            now,
        )
    }
}

/// The task ids of the index entries in `(from, end)`, at most `limit`, in
/// key order: those read before the transaction (`read`, sorted) with the
/// transaction's own changes (`delta`; `None` removed) applied. Both sides are
/// sorted, so they are walked together and only the ids taken are copied (a
/// `next` wants one or two of the prefetched entries).
///
/// `cut`: the index may go on past the last entry of `read`. `None` when the
/// answer would need what lies there.
fn merged_ids(
    read: &[(Vec<u8>, Vec<u8>)],
    delta: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    cut: bool,
    from: std::ops::Bound<Vec<u8>>,
    end: &[u8],
    limit: usize,
) -> Option<Vec<Vec<u8>>> {
    use std::ops::Bound;
    let unknown_past_read = cut && read.last().is_some_and(|(k, _)| k.as_slice() < end);
    let first = read.partition_point(|(k, _)| match &from {
        Bound::Included(f) => k < f,
        Bound::Excluded(f) => k <= f,
        Bound::Unbounded => false,
    });
    let mut read = read[first..]
        .iter()
        .take_while(|(k, _)| k.as_slice() < end)
        .peekable();
    let mut changed = delta
        .range((from, Bound::Excluded(end.to_vec())))
        .peekable();
    let mut ids = Vec::new();
    while ids.len() < limit {
        if unknown_past_read && read.peek().is_none() {
            return None;
        }
        let read_first = match (read.peek(), changed.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((r, _)), Some((c, _))) => r < *c,
        };
        if read_first {
            if let Some((_, task)) = read.next() {
                ids.push(task.clone());
            }
            continue;
        }
        let Some((k, v)) = changed.next() else { break };
        // The transaction's change replaces (or removes) the entry read before it.
        if read.peek().is_some_and(|(r, _)| r == k) {
            read.next();
        }
        if let Some(task) = v {
            ids.push(task.clone());
        }
    }
    Some(ids)
}

/// A `by_due` key: state NUL due time (big-endian, so keys sort by time) task id.
fn due_key(state: &str, due: Timestamp, task: &str) -> Vec<u8> {
    let ms = u64::try_from(due.as_millis()).unwrap_or(0);
    let mut k = prefixed_key(state, &ms.to_be_bytes());
    k.extend_from_slice(task.as_bytes());
    k
}

fn abort(m: String) -> ConflictableTransactionError<Abort> {
    ConflictableTransactionError::Abort(Abort::Corrupt(m))
}

fn encode<T: serde::Serialize>(v: &T) -> TxResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| abort(format!("cannot encode a value: {e}")))
}

fn append_event(
    e: &EventDraft,
    events: &TransactionalTree,
    events_by_task: &TransactionalTree,
    conflicts: &TransactionalTree,
    meta: &TransactionalTree,
) -> TxResult<()> {
    if let Some(key) = &e.conflict_key {
        let ck = prefixed_key(e.task.as_str(), key.as_bytes());
        if let Some(seq) = conflicts.get(&ck)?
            && let Some(b) = events.get(&seq)?
        {
            let mut ev: Event = baton_core::json::decode_stored(&b)
                .map_err(|err| abort(format!("an event does not decode: {err}")))?;
            ev.count += 1;
            events.insert(seq, encode(&ev)?)?;
            return Ok(());
        }
    }
    let seq = read_u64(meta.get("event_seq")?).map_err(ConflictableTransactionError::Abort)? + 1;
    meta.insert("event_seq", &be(seq))?;
    events.insert(&be(seq), encode(&Event::from_draft(seq, e.clone()))?)?;
    events_by_task.insert(prefixed_key(e.task.as_str(), &be(seq)), &[])?;
    if let Some(key) = &e.conflict_key {
        conflicts.insert(prefixed_key(e.task.as_str(), key.as_bytes()), &be(seq))?;
    }
    Ok(())
}

#[async_trait]
impl Store for SledStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock: ClockKind::Injected,
            durable: true,
            multi_process: false,
            min_ttl_ms: 1,
            ttl_granularity_ms: 1,
        }
    }

    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let task = task.clone();
        self.run(move |inner| inner.read(&task, now)).await
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        self.job(Job::One(op)).await?.into_one()
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.job(Job::All(ops)).await?.into_all()
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        self.job(Job::Next(query.clone())).await?.into_next()
    }

    fn commits(&self) -> Option<u64> {
        Some(self.inner.flush.flushes())
    }

    fn observe_batches(&self, observer: baton_core::store::BatchObserver) -> bool {
        self.committer
            .as_ref()
            .map(|c| c.observe(observer))
            .is_some()
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

    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        self.run(|inner| inner.counts().map(Some)).await
    }

    async fn ack(&self, intent_ids: &[String], _now: Timestamp) -> Result<u64> {
        let ids = intent_ids.to_vec();
        self.run(move |inner| inner.ack(&ids)).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    fn entries(keys: &[&str]) -> Vec<(Vec<u8>, Vec<u8>)> {
        keys.iter()
            .map(|k| (k.as_bytes().to_vec(), format!("t{k}").into_bytes()))
            .collect()
    }

    fn ids(v: Vec<Vec<u8>>) -> Vec<String> {
        v.into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect()
    }

    /// A read cut short before the transaction answers only what it can be
    /// sure of: what lies within the entries read, never past them.
    #[test]
    fn a_cut_index_read_refuses_to_answer_past_what_was_read() {
        use std::ops::Bound::{Excluded, Unbounded};
        let read = entries(&["b", "d"]);
        let mut delta = BTreeMap::new();
        let within = merged_ids(&read, &delta, true, Unbounded, b"k", 2).unwrap();
        assert_eq!(ids(within), ["tb", "td"]);
        // A third would be past "d", where unread entries may sort first.
        assert_eq!(merged_ids(&read, &delta, true, Unbounded, b"k", 3), None);
        assert_eq!(
            merged_ids(&read, &delta, true, Excluded(b"d".to_vec()), b"k", 1),
            None
        );
        // The transaction granted "b": the next one is "d", then unknown.
        delta.insert(b"b".to_vec(), None);
        let left = merged_ids(&read, &delta, true, Unbounded, b"k", 1).unwrap();
        assert_eq!(ids(left), ["td"]);
        assert_eq!(merged_ids(&read, &delta, true, Unbounded, b"k", 2), None);
        // An entry this transaction added past the cut is not known to be next.
        delta.insert(b"e".to_vec(), Some(b"te".to_vec()));
        assert_eq!(merged_ids(&read, &delta, true, Unbounded, b"k", 2), None);
        // The cut lies past the range's end: the range was read whole.
        let whole = merged_ids(&read, &BTreeMap::new(), true, Unbounded, b"c", 5).unwrap();
        assert_eq!(ids(whole), ["tb"]);
        // Not cut, the entries read are all there are.
        let all = merged_ids(&read, &delta, false, Unbounded, b"k", 5).unwrap();
        assert_eq!(ids(all), ["td", "te"]);
    }

    /// The merge of what was read before a transaction with its own index
    /// changes: a removed entry is gone, a replaced one appears once with
    /// the new task, an added one takes its place in key order, both bounds
    /// hold and the walk stops at the limit.
    #[test]
    fn the_index_read_merges_the_transactions_own_changes_in_key_order() {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let read = entries(&["b", "d", "f", "h", "j"]);
        let mut delta = BTreeMap::new();
        delta.insert(b"d".to_vec(), None); // granted in this transaction
        delta.insert(b"f".to_vec(), Some(b"new-f".to_vec())); // rewritten
        delta.insert(b"a".to_vec(), Some(b"ta".to_vec())); // made ready, first
        delta.insert(b"g".to_vec(), Some(b"tg".to_vec()));
        delta.insert(b"z".to_vec(), Some(b"tz".to_vec())); // past the end
        let all = merged_ids(&read, &delta, false, Unbounded, b"k", 100).unwrap();
        assert_eq!(ids(all), ["ta", "tb", "new-f", "tg", "th", "tj"]);
        let some = merged_ids(&read, &delta, false, Unbounded, b"k", 3).unwrap();
        assert_eq!(ids(some), ["ta", "tb", "new-f"]);
        let after_b = merged_ids(&read, &delta, false, Excluded(b"b".to_vec()), b"h", 100).unwrap();
        assert_eq!(ids(after_b), ["new-f", "tg"]);
        let from_f = merged_ids(&read, &delta, false, Included(b"f".to_vec()), b"i", 100).unwrap();
        assert_eq!(ids(from_f), ["new-f", "tg", "th"]);
        // Removing every entry read leaves only what the transaction added.
        let gone: BTreeMap<_, _> = read.iter().map(|(k, _)| (k.clone(), None)).collect();
        assert!(
            merged_ids(&read, &gone, false, Unbounded, b"k", 100)
                .unwrap()
                .is_empty()
        );
        assert!(
            merged_ids(&[], &BTreeMap::new(), false, Unbounded, b"k", 100)
                .unwrap()
                .is_empty()
        );
        assert!(
            merged_ids(&read, &delta, false, Unbounded, b"k", 0)
                .unwrap()
                .is_empty()
        );
    }

    /// sled can keep its directory lock for a moment after its handle is
    /// dropped (its own background threads hold the file). Here another
    /// open file holds that same lock, released 300 ms later: dropping the
    /// store's guard returns only once it is free.
    #[test]
    fn dropping_waits_until_the_directory_lock_is_free() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("db"), b"").unwrap();
        let held = try_lock_dir(dir.path())
            .unwrap()
            .expect("the lock is free to take");
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let started = Instant::now();
        drop(ReleaseOnDrop {
            path: dir.path().to_path_buf(),
            wait: Duration::from_secs(5),
        });
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "returned after {:?}, while the lock was still held",
            started.elapsed()
        );
        assert!(
            try_lock_dir(dir.path()).unwrap().is_some(),
            "the lock is free when the drop returns"
        );
        releaser.join().unwrap();
    }
}
