//! Group commit for stores that decide under a lock: one thread takes every
//! operation queued while the previous batch was being committed, hands the
//! whole batch to the store's "decide and commit these" function, and
//! answers each caller only when that function returns (after its commit is
//! durable). A job is one operation, a `next`, or a group of operations
//! that commit together or not at all; a group is committed in a batch of
//! its own, so that refusing it rolls back nothing else.
//!
//! A committer started with [`GroupCommitter::start_shared`] also lets a
//! caller who finds it idle (nothing queued, nothing being committed)
//! commit its one job on its own thread: a process that makes one request
//! at a time (the CLI, a worker process, a Python script) then pays no
//! hand-off to the committer thread and back, which on a busy machine
//! costs more than the decision. Callers who arrive while that commit is
//! under way queue for the committer thread as before and share its next
//! batch, so concurrent callers keep their group commit.
//!
//! A panic while deciding or writing one operation must not stop the store
//! for every later caller: the committer catches it, retries the batch's
//! operations one at a time so that only the one that panics is refused,
//! and goes on serving.

use crate::decide::Decision;
use crate::error::{Error, Result};
use crate::request::Operation;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The most operations one batch carries.
pub const MAX_BATCH: usize = 256;

pub use crate::engine::{Answer, Job};

/// A caller waiting for its answer: one job's, or the answers of several
/// jobs it asked to commit together (they are never split across batches).
// A single job is every request's path: boxing it would add an allocation
// per request to spare the rarer batch a few bytes of channel slot.
#[allow(clippy::large_enum_variant)]
enum Queued {
    One {
        job: Job,
        answer: tokio::sync::oneshot::Sender<Result<Answer>>,
    },
    Each {
        jobs: Vec<Job>,
        answer: tokio::sync::oneshot::Sender<Result<Vec<Answer>>>,
    },
}

impl Queued {
    /// How many jobs this entry adds to a batch.
    fn len(&self) -> usize {
        match self {
            Queued::One { .. } => 1,
            Queued::Each { jobs, .. } => jobs.len(),
        }
    }

    /// A group ([`Job::All`]) is committed in a batch of its own.
    fn alone(&self) -> bool {
        matches!(
            self,
            Queued::One {
                job: Job::All(_),
                ..
            }
        )
    }

    fn jobs(&self) -> &[Job] {
        match self {
            Queued::One { job, .. } => std::slice::from_ref(job),
            Queued::Each { jobs, .. } => jobs,
        }
    }

    /// Answers the caller with its share of a batch's answers, taken from
    /// the front of `answers`.
    fn answer(self, answers: &mut std::vec::IntoIter<Answer>) {
        match self {
            Queued::One { answer, .. } => {
                let _ =
                    answer.send(answers.next().ok_or_else(|| {
                        Error::unavailable("a batch came back with too few answers")
                    }));
            }
            Queued::Each { jobs, answer } => {
                let mine: Vec<Answer> = answers.take(jobs.len()).collect();
                let _ = answer.send(if mine.len() == jobs.len() {
                    Ok(mine)
                } else {
                    Err(Error::unavailable("a batch came back with too few answers"))
                });
            }
        }
    }

    /// Answers the caller with an error: nothing of its jobs was applied.
    fn fail(self, e: Error) {
        match self {
            Queued::One { answer, .. } => {
                let _ = answer.send(Err(e));
            }
            Queued::Each { answer, .. } => {
                let _ = answer.send(Err(e));
            }
        }
    }

    /// Commits this entry's jobs alone (after a batch panicked) and answers.
    fn commit_alone<F>(self, name: &str, commit: &mut F)
    where
        F: FnMut(&[Job]) -> Result<Vec<Answer>>,
    {
        let n = self.len();
        match isolate(name, || commit(self.jobs())) {
            Ok(answers) if answers.len() == n => self.answer(&mut answers.into_iter()),
            Ok(answers) => self.fail(Error::unavailable(format!(
                "{name}: a commit of {n} jobs answered {}",
                answers.len()
            ))),
            Err(e) => self.fail(e),
        }
    }
}

/// The committer thread and its inbox. Dropping it stops the thread and
/// waits for it, so whatever the commit function owns (a connection, a
/// directory lock) is released by the time the drop returns.
pub struct GroupCommitter {
    /// Names the store in errors ("PATH: the commit thread has stopped").
    name: String,
    inbox: Mutex<Option<Sender<Queued>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    observer: Observer,
    /// The commit function, when callers may run it on their own thread.
    inline: Option<SharedCommit>,
    /// The inline commit waits on a runtime of its own (`block_on`), which
    /// a caller on a current-thread runtime cannot do: such a caller queues.
    inline_blocks_on: bool,
    /// Jobs submitted and not yet answered (inline or queued).
    in_flight: AtomicUsize,
    /// The most jobs in flight at once; past it a job is refused
    /// (`Unavailable`, nothing applied) instead of queued without end.
    bound: usize,
}

/// The most jobs a committer holds in flight by default: far more than
/// callers that wait on it (a server's connections, a process's threads),
/// so only a runaway caller meets it.
pub const MAX_IN_FLIGHT: usize = 65_536;

/// A commit function that a caller's thread may run as well as the
/// committer's.
type SharedCommit = Arc<dyn Fn(&[Job]) -> Result<Vec<Answer>> + Send + Sync>;

/// Told the size of every batch committed (a server's histogram).
type Observer = std::sync::Arc<Mutex<Option<crate::store::BatchObserver>>>;

impl std::fmt::Debug for GroupCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommitter")
            .field("name", &self.name)
            .finish()
    }
}

impl GroupCommitter {
    /// Starts a thread called `thread_name` that commits batches with
    /// `commit`. `commit(jobs)` must decide `jobs` in order inside one
    /// atomic, durable commit and return one answer per job, or an error
    /// meaning none of them was applied. A [`Job::All`] always comes alone;
    /// when one of its decisions refuses, `commit` writes nothing and
    /// answers the decisions.
    pub fn start<F>(name: impl Into<String>, thread_name: &str, commit: F) -> Result<GroupCommitter>
    where
        F: FnMut(&[Job]) -> Result<Vec<Answer>> + Send + 'static,
    {
        Self::start_with(name.into(), thread_name, commit, None, false)
    }

    /// Like [`GroupCommitter::start`], and a caller who finds the committer
    /// idle commits its job on its own thread (see the module's text).
    /// `commit` must be safe to call from any thread, blocking it (in a
    /// tokio multi-thread runtime, inside `block_in_place`); it must not
    /// itself enter a tokio runtime.
    pub fn start_shared<F>(
        name: impl Into<String>,
        thread_name: &str,
        commit: F,
    ) -> Result<GroupCommitter>
    where
        F: Fn(&[Job]) -> Result<Vec<Answer>> + Send + Sync + 'static,
    {
        Self::start_inline(name.into(), thread_name, Arc::new(commit), false)
    }

    /// Like [`GroupCommitter::start_shared`], for a `commit` that waits on
    /// a runtime of its own (`Runtime::block_on`: an async driver). It is
    /// called inline only from outside tokio or from a multi-thread
    /// runtime's worker (inside `block_in_place`); a caller on a
    /// current-thread runtime queues for the committer thread.
    pub fn start_shared_blocking_on<F>(
        name: impl Into<String>,
        thread_name: &str,
        commit: F,
    ) -> Result<GroupCommitter>
    where
        F: Fn(&[Job]) -> Result<Vec<Answer>> + Send + Sync + 'static,
    {
        Self::start_inline(name.into(), thread_name, Arc::new(commit), true)
    }

    fn start_inline(
        name: String,
        thread_name: &str,
        shared: SharedCommit,
        blocks_on: bool,
    ) -> Result<GroupCommitter> {
        let on_thread = shared.clone();
        Self::start_with(
            name,
            thread_name,
            move |jobs: &[Job]| on_thread(jobs),
            Some(shared),
            blocks_on,
        )
    }

    fn start_with<F>(
        name: String,
        thread_name: &str,
        commit: F,
        inline: Option<SharedCommit>,
        inline_blocks_on: bool,
    ) -> Result<GroupCommitter>
    where
        F: FnMut(&[Job]) -> Result<Vec<Answer>> + Send + 'static,
    {
        let (inbox, queue) = channel::<Queued>();
        let label = name.clone();
        let observer: Observer = Default::default();
        let told = observer.clone();
        let thread = std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || run(&label, &queue, &told, commit))
            .map_err(|e| {
                Error::unavailable(format!("{name}: cannot start the commit thread: {e}"))
            })?;
        Ok(GroupCommitter {
            name,
            inbox: Mutex::new(Some(inbox)),
            thread: Mutex::new(Some(thread)),
            observer,
            inline,
            inline_blocks_on,
            in_flight: AtomicUsize::new(0),
            bound: MAX_IN_FLIGHT,
        })
    }

    /// At most `jobs` in flight at once (at least one).
    pub fn bounded(mut self, jobs: usize) -> GroupCommitter {
        self.bound = jobs.max(1);
        self
    }

    /// Tells `observer` the size of every batch committed from now on
    /// (replacing any observer before it).
    pub fn observe(&self, observer: crate::store::BatchObserver) {
        if let Ok(mut o) = self.observer.lock() {
            *o = Some(observer);
        }
    }

    /// Queues `op` and waits for its decision.
    pub async fn submit(&self, op: Operation) -> Result<Decision> {
        self.submit_job(Job::One(op)).await?.into_one()
    }

    /// Queues `job` and waits for its answer (or, when the committer is
    /// idle and allows it, commits it on this thread).
    pub async fn submit_job(&self, job: Job) -> Result<Answer> {
        if let Some(commit) = self.inline_commit() {
            let _done = InFlight(&self.in_flight);
            let answers = blocking(|| isolate(&self.name, || commit(std::slice::from_ref(&job))))?;
            return self.one_answer(answers);
        }
        let _done = self.admit()?;
        let (answer, reply) = tokio::sync::oneshot::channel();
        self.send(Queued::One { job, answer })?;
        reply.await.map_err(|_| self.stopped())?
    }

    /// Queues `ops` to be decided in order in one commit (shared with
    /// other callers' jobs, never split across commits), each on its own:
    /// a refusal of one refuses no other. One decision per operation, in
    /// order; an error means none of them was applied.
    pub async fn submit_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let n = ops.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let jobs: Vec<Job> = ops.into_iter().map(Job::One).collect();
        let answers = if let Some(commit) = self.inline_commit() {
            let _done = InFlight(&self.in_flight);
            let answers = blocking(|| isolate(&self.name, || commit(&jobs)))?;
            if answers.len() == n {
                tell(&self.observer, n);
            }
            answers
        } else {
            let _done = self.admit()?;
            let (answer, reply) = tokio::sync::oneshot::channel();
            self.send(Queued::Each { jobs, answer })?;
            reply.await.map_err(|_| self.stopped())??
        };
        if answers.len() != n {
            return Err(Error::unavailable(format!(
                "{}: a commit of {n} jobs answered {}",
                self.name,
                answers.len()
            )));
        }
        answers.into_iter().map(Answer::into_one).collect()
    }

    /// The commit function, when this caller finds the committer idle and
    /// may run it on its own thread (counted in flight until its
    /// [`InFlight`] drops).
    fn inline_commit(&self) -> Option<&SharedCommit> {
        let commit = self.inline.as_ref()?;
        (!(self.inline_blocks_on && on_current_thread_runtime())
            && self
                .in_flight
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok())
        .then_some(commit)
    }

    /// Counts a queued caller in, or refuses it past the bound.
    fn admit(&self) -> Result<InFlight<'_>> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.bound {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::unavailable(format!(
                "{}: {} commits are waiting already, the most this store queues: try again shortly",
                self.name, self.bound
            )));
        }
        Ok(InFlight(&self.in_flight))
    }

    fn send(&self, queued: Queued) -> Result<()> {
        let sent = match self.inbox.lock() {
            Ok(inbox) => inbox.as_ref().is_some_and(|i| i.send(queued).is_ok()),
            Err(_) => false,
        };
        if sent {
            Ok(())
        } else {
            Err(Error::unavailable(format!(
                "{}: the commit thread has stopped",
                self.name
            )))
        }
    }

    fn stopped(&self) -> Error {
        Error::unavailable(format!(
            "{}: the commit thread stopped before answering",
            self.name
        ))
    }
}

impl GroupCommitter {
    /// The one answer of a job committed alone, told to the observer.
    fn one_answer(&self, mut answers: Vec<Answer>) -> Result<Answer> {
        match (answers.pop(), answers.is_empty()) {
            (Some(a), true) => {
                tell(&self.observer, 1);
                Ok(a)
            }
            _ => Err(Error::unavailable(format!(
                "{}: a commit of one job came back with another number of answers",
                self.name
            ))),
        }
    }
}

/// Tells the observer, if any, the size of a batch just committed.
fn tell(observer: &Observer, size: usize) {
    if let Ok(o) = observer.lock()
        && let Some(o) = o.as_ref()
    {
        o(size);
    }
}

/// Counts a job out when its caller has its answer (or stops waiting).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether this thread runs a tokio current-thread runtime's tasks.
fn on_current_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Runs `f`, which blocks, on this thread: in a tokio multi-thread runtime
/// inside `block_in_place`, so the runtime's other tasks move to another
/// worker meanwhile; on a current-thread runtime (one caller at a time,
/// by its choice) or outside tokio, as it is.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl Drop for GroupCommitter {
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

fn run<F>(name: &str, queue: &Receiver<Queued>, observer: &Observer, mut commit: F)
where
    F: FnMut(&[Job]) -> Result<Vec<Answer>>,
{
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(q) => q,
            None => match queue.recv() {
                Ok(q) => q,
                Err(_) => return,
            },
        };
        let alone = first.alone();
        let mut size = first.len();
        let mut batch = vec![first];
        while !alone && size < MAX_BATCH {
            match queue.try_recv() {
                // A group waits for a batch of its own, and callers' jobs
                // past the batch's bound for the next.
                Ok(q) if q.alone() || size + q.len() > MAX_BATCH => {
                    carried = Some(q);
                    break;
                }
                Ok(q) => {
                    size += q.len();
                    batch.push(q);
                }
                Err(_) => break,
            }
        }
        let jobs: Vec<Job> = batch.iter().flat_map(|q| q.jobs()).cloned().collect();
        match catch(|| commit(&jobs)) {
            Ok(Ok(answers)) if answers.len() == jobs.len() => {
                tell(observer, jobs.len());
                let mut answers = answers.into_iter();
                for q in batch {
                    q.answer(&mut answers);
                }
            }
            Ok(Ok(answers)) => {
                let e = Error::unavailable(format!(
                    "{name}: a batch of {} operations came back with {} decisions",
                    jobs.len(),
                    answers.len()
                ));
                for q in batch {
                    q.fail(e.clone());
                }
            }
            Ok(Err(e)) => {
                for q in batch {
                    q.fail(e.clone());
                }
            }
            Err(panic) if batch.len() == 1 && jobs.len() == 1 => {
                for q in batch {
                    q.fail(panicked(name, &panic));
                }
            }
            Err(_) => {
                // Nothing of the batch was applied; find the one that panics
                // (a caller's jobs asked together stay together).
                for q in batch {
                    q.commit_alone(name, &mut commit);
                }
            }
        }
    }
}

/// Runs `f`; `Err` carries the message of a panic.
fn catch<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned())
    })
}

fn panicked(name: &str, what: &str) -> Error {
    Error::unavailable(format!(
        "{name}: the store panicked while deciding or writing this request ({what}); nothing was applied"
    ))
}

/// Runs `f`, turning a panic into an `Unavailable` error: the store's
/// transaction was rolled back as the panic unwound, so nothing was applied.
pub fn isolate<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch(f).unwrap_or_else(|what| Err(panicked(name, &what)))
}

/// Runs `f` on `inner` on tokio's blocking pool, [`isolate`]d: a panic in
/// it, or a pool that could not run it, is `Unavailable` naming `name`.
pub async fn on_blocking_pool<I, T, F>(name: String, inner: Arc<I>, f: F) -> Result<T>
where
    I: Send + Sync + 'static,
    T: Send + 'static,
    F: FnOnce(&I) -> Result<T> + Send + 'static,
{
    on_blocking_pool_in(None, name, inner, f).await
}

/// [`on_blocking_pool`] on the blocking pool of `pool`'s runtime (a store
/// that keeps a runtime of its own), or of the caller's when `None`.
pub async fn on_blocking_pool_in<I, T, F>(
    pool: Option<&tokio::runtime::Handle>,
    name: String,
    inner: Arc<I>,
    f: F,
) -> Result<T>
where
    I: Send + Sync + 'static,
    T: Send + 'static,
    F: FnOnce(&I) -> Result<T> + Send + 'static,
{
    let shown = name.clone();
    let run = move || isolate(&name, || f(&inner));
    let task = match pool {
        Some(h) => h.spawn_blocking(run),
        None => tokio::task::spawn_blocking(run),
    };
    task.await.map_err(|e| {
        Error::unavailable(format!("{shown}: the store's worker thread failed: {e}"))
    })?
}

/// One job: through `committer` when the store has one, or else committed
/// alone by `commit_jobs` on a blocking pool (`pool`'s runtime's, or the
/// caller's when `None`). `name` names the store (called only on that
/// path, so the committer's path allocates nothing).
pub async fn job_alone_or_grouped<I>(
    committer: Option<&GroupCommitter>,
    pool: Option<&tokio::runtime::Handle>,
    name: impl FnOnce() -> String + Send,
    inner: Arc<I>,
    job: Job,
    commit_jobs: fn(&I, &[Job]) -> Result<Vec<Answer>>,
) -> Result<Answer>
where
    I: Send + Sync + 'static,
{
    match committer {
        // The committer answers only after the commit holding this decision is durable.
        Some(committer) => committer.submit_job(job).await,
        None => {
            let name = name();
            let what = name.clone();
            on_blocking_pool_in(pool, name, inner, move |inner| {
                commit_jobs(inner, std::slice::from_ref(&job))?
                    .pop()
                    .ok_or_else(|| Error::unavailable(format!("{what}: a commit answered nothing")))
            })
            .await
        }
    }
}

/// `jobs` committed together, in one commit on the blocking pool (`pool`'s
/// when given), beside the group committer rather than through it: one
/// caller's batch is a batch already. An answer per job, in order.
pub async fn jobs_together<I>(
    pool: Option<&tokio::runtime::Handle>,
    name: String,
    inner: Arc<I>,
    jobs: Vec<Job>,
    commit_jobs: fn(&I, &[Job]) -> Result<Vec<Answer>>,
) -> Result<Vec<Answer>>
where
    I: Send + Sync + 'static,
{
    let n = jobs.len();
    let what = name.clone();
    let answers =
        on_blocking_pool_in(pool, name, inner, move |inner| commit_jobs(inner, &jobs)).await?;
    if answers.len() != n {
        return Err(Error::unavailable(format!(
            "{what}: a commit of {n} jobs answered {}",
            answers.len()
        )));
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::Id;
    use crate::request::{Preconditions, Request};
    use crate::time::Timestamp;
    use crate::{MemoryStore, Store};

    fn claim(task: &str) -> Operation {
        Operation {
            task: Id::parse("task", task).unwrap(),
            request: Request::Claim {
                owner: Id::parse("owner", "w").unwrap(),
                ttl_ms: Some(1000),
                lock_delay_ms: None,
            },
            pre: Preconditions::default(),
            now: Timestamp(1_767_225_600_000),
            clock: Default::default(),
        }
    }

    /// A commit function over the memory store that panics on task "boom".
    fn committer(store: MemoryStore) -> GroupCommitter {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        GroupCommitter::start("test", "test-commit", move |jobs| {
            let mut out = Vec::new();
            for job in jobs {
                let Job::One(op) = job else {
                    panic!("only single operations in this test")
                };
                assert!(op.task.as_str() != "boom", "a bug while deciding");
                out.push(Answer::One(rt.block_on(store.apply(op.clone()))?));
            }
            Ok(out)
        })
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_panic_refuses_one_request_and_the_committer_keeps_serving() {
        let store = MemoryStore::new();
        let c = std::sync::Arc::new(committer(store.clone()));
        let e = c.submit(claim("boom")).await.unwrap_err();
        assert!(e.message.contains("panicked"), "{e}");
        assert!(e.message.contains("a bug while deciding"), "{e}");
        // Many at once, so some share a batch with the bad one.
        let mut joins = Vec::new();
        for i in 0..64 {
            let c = c.clone();
            let task = if i % 8 == 0 {
                "boom".to_owned()
            } else {
                format!("t{i}")
            };
            joins.push(tokio::spawn(async move {
                (task.clone(), c.submit(claim(&task)).await)
            }));
        }
        for j in joins {
            let (task, got) = j.await.unwrap();
            if task == "boom" {
                assert!(got.is_err());
            } else {
                let d = got.unwrap();
                assert!(d.mints_fence(), "{task} was granted");
            }
        }
        let d = c.submit(claim("after")).await.unwrap();
        assert!(d.mints_fence());
        let now = Timestamp(1_767_225_600_000);
        assert!(
            store
                .read(&Id::parse("t", "boom").unwrap(), now)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .read(&Id::parse("t", "t1").unwrap(), now)
                .await
                .unwrap()
                .is_some()
        );
    }

    /// Each commit's thread and batch size.
    type Seen = std::sync::Arc<Mutex<Vec<(std::thread::ThreadId, usize)>>>;

    /// A committer that runs callers on their own thread when idle; its
    /// commit function records the thread and the batch size, and holds
    /// each batch `hold` long.
    fn shared(hold: std::time::Duration) -> (GroupCommitter, Seen) {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let store = MemoryStore::new();
        let c = GroupCommitter::start_shared("test", "test-commit", move |jobs| {
            log.lock()
                .unwrap()
                .push((std::thread::current().id(), jobs.len()));
            std::thread::sleep(hold);
            let mut out = Vec::new();
            for job in jobs {
                let Job::One(op) = job else {
                    panic!("only single operations in this test")
                };
                assert!(op.task.as_str() != "boom", "a bug while deciding");
                let d = poll_to_end(store.apply(op.clone()))?;
                out.push(Answer::One(d));
            }
            Ok(out)
        })
        .unwrap();
        (c, seen)
    }

    /// Polls a future that never waits (the memory store's) to its end.
    fn poll_to_end<F: std::future::Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn a_lone_caller_commits_on_its_own_thread() {
        let (c, seen) = shared(std::time::Duration::ZERO);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let d = rt.block_on(c.submit(claim("t1"))).unwrap();
        assert!(d.mints_fence());
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let on = multi
            .block_on(async {
                tokio::spawn(async move {
                    let d = c.submit(claim("t2")).await.unwrap();
                    assert!(d.mints_fence());
                    std::thread::current().id()
                })
                .await
            })
            .unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0], (std::thread::current().id(), 1));
        assert_eq!(seen[1], (on, 1), "a runtime worker, in block_in_place");
    }

    /// Past its bound a committer refuses a job at once (nothing applied)
    /// instead of queueing it without end, and takes jobs again once the
    /// ones in flight are answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn past_its_bound_a_job_is_refused_not_queued() {
        let (c, _) = shared(std::time::Duration::from_millis(300));
        let c = std::sync::Arc::new(c.bounded(4));
        let waiting: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.submit(claim(&format!("t{i}"))).await })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let e = c.submit(claim("one-too-many")).await.unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Unavailable, "{e}");
        assert!(e.message.contains("waiting already"), "{e}");
        for w in waiting {
            assert!(w.await.unwrap().unwrap().mints_fence());
        }
        assert!(c.submit(claim("after")).await.unwrap().mints_fence());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_who_come_during_a_commit_share_the_next_batch() {
        let (c, seen) = shared(std::time::Duration::from_millis(30));
        let c = std::sync::Arc::new(c);
        let mut joins = Vec::new();
        for i in 0..32 {
            let c = c.clone();
            joins.push(tokio::spawn(async move {
                c.submit(claim(&format!("t{i}"))).await
            }));
        }
        for j in joins {
            assert!(j.await.unwrap().unwrap().mints_fence());
        }
        let seen = seen.lock().unwrap();
        let committed: usize = seen.iter().map(|(_, n)| n).sum();
        assert_eq!(committed, 32);
        assert!(
            seen.iter().any(|(_, n)| *n > 1),
            "no batch shared: {seen:?}"
        );
        // At most one commit ran on a caller's thread at a time, so the
        // batches are few: not one per caller.
        assert!(seen.len() < 32, "{} commits for 32 callers", seen.len());
    }

    #[test]
    fn a_panic_on_the_callers_thread_refuses_that_request_alone() {
        let (c, _) = shared(std::time::Duration::ZERO);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let e = rt.block_on(c.submit(claim("boom"))).unwrap_err();
        assert!(e.message.contains("panicked"), "{e}");
        assert!(rt.block_on(c.submit(claim("after"))).unwrap().mints_fence());
    }

    /// A caller's batch of operations (`submit_each`) is committed in one
    /// commit, shared with other callers' jobs queued meanwhile, never
    /// split across commits even past [`MAX_BATCH`]; a panic in one
    /// caller's batch refuses that batch alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_callers_batch_shares_a_commit_and_is_never_split() {
        let batches = std::sync::Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
        let log = batches.clone();
        let store = MemoryStore::new();
        let c = GroupCommitter::start_shared("test", "test-commit", move |jobs| {
            log.lock().unwrap().push(
                jobs.iter()
                    .map(|j| match j {
                        Job::One(op) => op.task.as_str().to_owned(),
                        _ => panic!("only single operations in this test"),
                    })
                    .collect(),
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut out = Vec::new();
            for job in jobs {
                let Job::One(op) = job else { unreachable!() };
                assert!(op.task.as_str() != "boom", "a bug while deciding");
                out.push(Answer::One(poll_to_end(store.apply(op.clone()))?));
            }
            Ok(out)
        })
        .unwrap();
        let c = std::sync::Arc::new(c);
        // 16 callers of 30 operations each (480 jobs, past MAX_BATCH), one
        // batch holding the panicking task, and single callers between.
        let mut joins = Vec::new();
        for k in 0..16 {
            let c = c.clone();
            joins.push(tokio::spawn(async move {
                let names: Vec<String> = (0..30)
                    .map(|i| {
                        if k == 5 && i == 7 {
                            "boom".to_owned()
                        } else {
                            format!("b{k}-{i}")
                        }
                    })
                    .collect();
                let ops = names.iter().map(|n| claim(n)).collect();
                (k, names, c.submit_each(ops).await)
            }));
        }
        let singles: Vec<_> = (0..16)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.submit(claim(&format!("s{i}"))).await })
            })
            .collect();
        for j in joins {
            let (k, names, got) = j.await.unwrap();
            if k == 5 {
                let e = got.unwrap_err();
                assert!(e.message.contains("a bug while deciding"), "{e}");
                continue;
            }
            let ds = got.unwrap();
            assert_eq!(ds.len(), 30);
            for (d, n) in ds.iter().zip(&names) {
                assert!(d.mints_fence(), "{n} granted");
                let task = d.record_to_write().map(|r| r.task.as_str());
                assert_eq!(task, Some(n.as_str()), "answers in the caller's order");
            }
        }
        for s in singles {
            assert!(s.await.unwrap().unwrap().mints_fence());
        }
        let batches = batches.lock().unwrap();
        let committed: Vec<&Vec<String>> = batches
            .iter()
            .filter(|b| !b.iter().any(|t| t == "boom"))
            .collect();
        for k in (0..16).filter(|k| *k != 5) {
            let prefix = format!("b{k}-");
            let holding: Vec<_> = committed
                .iter()
                .filter(|b| b.iter().any(|t| t.starts_with(&prefix)))
                .collect();
            assert_eq!(holding.len(), 1, "caller {k}'s batch in one commit");
            assert_eq!(
                holding[0].iter().filter(|t| t.starts_with(&prefix)).count(),
                30
            );
        }
        assert!(
            committed.iter().all(|b| b.len() <= MAX_BATCH),
            "a batch's bound holds"
        );
        assert!(
            committed.iter().any(|b| b.len() > 30),
            "callers shared a commit: {:?}",
            committed.iter().map(|b| b.len()).collect::<Vec<_>>()
        );
    }
}
