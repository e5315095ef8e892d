//! The sled store: trees, one transaction per decision, and the one
//! function that maps sled's errors to baton's.

use crate::flush::{FlushError, GroupFlush, Poisoned};
use baton_core::blocking::{Blocking, BlockingStore};
use baton_core::commit::{Answer, GroupCommitter, Job};
use baton_core::engine::{Engine, drive_next};
use baton_core::graph::{Lane, NextQuery, ReadyEntry, held_range, prefix_end};
use baton_core::model::{EventDraft, NotificationDraft};
use baton_core::next::{IndexPage, NextSource};
use baton_core::store::Txn;
use baton_core::store::{Clause, Due};
use baton_core::{
    Capabilities, Decision, Error, Event, Id, ListQuery, Notification, Result, Snapshot, TaskId,
    TaskRecord, Timestamp,
};
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::{Transactional, Tree};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "layout.rs"]
mod layout;
#[path = "txn.rs"]
mod txn;
use layout::*;
use txn::*;

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
#[derive(Clone, Debug)]
pub struct SledStore {
    shell: BlockingStore<Inner>,
    /// Dropped after the one above, when the last clone goes: waits until
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

/// The store's database.
pub(crate) struct Inner {
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

baton_core::forward_store!(SledStore.shell: BlockingStore<Inner>);

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
            Some(GroupCommitter::start(
                inner.path.display().to_string(),
                "baton-sled-commit",
                move |jobs| batch.commit_jobs(jobs),
            )?)
        } else {
            None
        };
        let released = Arc::new(ReleaseOnDrop {
            path: inner.path.clone(),
            wait: options.busy_timeout.max(Duration::from_secs(5)),
        });
        let name = format!("sled {}", inner.path.display());
        Ok(SledStore {
            shell: BlockingStore::new(
                inner,
                committer,
                name,
                Capabilities::injected_clock(true, false),
            ),
            _released: released,
        })
    }

    pub fn path(&self) -> &Path {
        &self.shell.inner().path
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
    fn wait_reads_durable(&self) -> Result<()> {
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
            // The first page of each `next` (as many as it may grant).
            0 => (
                nexts
                    .iter()
                    .map(|q| baton_core::next::first_page(q.count))
                    .sum::<usize>()
                    + NEXT_FIRST_PAGE,
                NEXT_PAGE * 2 + 2 * n,
            ),
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
}

impl Blocking for Inner {
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

    fn commits(&self) -> u64 {
        self.flush.flushes()
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
        self.wait_reads_durable()?;
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
        self.wait_reads_durable()?;
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

    fn first_index_key(
        &self,
        index: baton_core::graph::IndexName,
        from: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        use std::ops::Bound::Excluded;
        let tree = match index {
            baton_core::graph::IndexName::Ready => &self.trees.ready,
            baton_core::graph::IndexName::Held => &self.trees.held,
        };
        tree.range::<&[u8], _>((Excluded(from), Excluded(end)))
            .next()
            .transpose()
            .map(|kv| kv.map(|(k, _)| k.to_vec()))
            .map_err(|e| self.err(e))
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
        self.wait_reads_durable()?;
        Ok(out)
    }

    fn ack(&self, ids: &[String], _now: Timestamp) -> Result<u64> {
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

    fn snapshot(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let got = self
            .trees
            .tasks
            .get(task.as_str().as_bytes())
            .map_err(|e| self.err(e))?;
        let snap = got
            .map(|b| self.decode(&b).map(|r| Snapshot::at(r, now)))
            .transpose()?;
        self.wait_reads_durable()?;
        Ok(snap)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
