//! The commit engine, without I/O: one commit's jobs decided step by step,
//! each step either a [`Need`] (what the engine must be given before it can
//! go on: records to load, a decision to write, a page of an index) or the
//! end. The store performs each need in whatever way suits it (a statement
//! awaited on its connection, a read at one etcd revision, a lookup under a
//! lock) and hands the result back with [`Engine::supply`]. The engine
//! never waits, blocks or touches a store, so a store with an async driver
//! needs no runtime of its own per statement, and no store has to signal
//! "read this first" through an error.
//!
//! The rules of a commit are all here: a task is decided on its record and
//! the records [`crate::decide::upstream_ids`] names; a decision that writes
//! is written, then its follow-ups are decided the same way (two levels
//! deep); a group is kept only when every decision commits or
//! acknowledges; `next` orders the candidates the store offers from its
//! indexes and decides each as a grant until one is granted.
//!
//! One operation (with its follow-ups) is decided by straight-line code
//! that is run again from its start each time it is given something, with
//! what it was given so far (a journal): deciding is pure, so every run
//! asks for the same things in the same order, and the write a need names
//! is performed once. A `next` keeps its scan's place between candidates,
//! so no candidate is decided twice over.

use crate::decide::{Decision, Judged, LeaseRules, Verdict};
use crate::error::{Error, Result};
use crate::graph::{Lane, NextQuery, ReadyEntry};
use crate::id::{Id, TaskId};
use crate::next::{NEXT_PAGE, NEXT_SCAN};
use crate::request::{Operation, Preconditions};
use crate::store::{Snapshot, upstream_of};
use crate::time::Timestamp;
use std::collections::VecDeque;

/// One job of a commit (what a caller asks a store's committer for).
// One Job is made per request and moved once into the queue; boxing the
// operation would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Job {
    /// One operation (`Store::apply`).
    One(Operation),
    /// Operations that commit together or not at all (`Store::apply_all`).
    All(Vec<Operation>),
    /// The next ready task (`Store::next`).
    Next(crate::graph::NextQuery),
}

impl Job {
    /// Re-reads the time of every request of the job from the clock it
    /// carries ([`crate::time::Timed`]); a group's all at one reading.
    pub fn timed_at_commit(&mut self) {
        use crate::time::Timed;
        match self {
            Job::One(op) => op.timed_at_commit(),
            Job::All(ops) => {
                let Some(first) = ops.first_mut() else {
                    return;
                };
                first.timed_at_commit();
                let now = first.now;
                for op in ops.iter_mut() {
                    op.now = op.now.max(now);
                }
            }
            Job::Next(q) => q.timed_at_commit(),
        }
    }

    /// Times every request of the job at `now` by the store's own clock.
    pub fn timed_by_store(&mut self, now: Timestamp) {
        use crate::time::Timed;
        match self {
            Job::One(op) => op.timed_by_store(now),
            Job::All(ops) => ops.iter_mut().for_each(|op| op.timed_by_store(now)),
            Job::Next(q) => q.timed_by_store(now),
        }
    }
}

/// The answer to a [`Job`], of the same kind.
#[derive(Debug, Clone)]
// An answer is made once per job and moved once to its caller: boxing the
// one decision would only add an allocation to every single operation.
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    One(Decision),
    All(Vec<Decision>),
    /// A `next`'s grants, in the order it made them (none: it took none).
    Next(Vec<Decision>),
}

impl Answer {
    fn mismatched() -> Error {
        Error::unavailable("the commit thread answered a job with another kind of answer")
    }

    /// The decision of a [`Job::One`].
    pub fn into_one(self) -> Result<Decision> {
        match self {
            Answer::One(d) => Ok(d),
            _ => Err(Self::mismatched()),
        }
    }

    /// The decisions of a [`Job::All`].
    pub fn into_all(self) -> Result<Vec<Decision>> {
        match self {
            Answer::All(d) => Ok(d),
            _ => Err(Self::mismatched()),
        }
    }

    /// The first grant of a [`Job::Next`] (a query for one makes one).
    pub fn into_next(self) -> Result<Option<Decision>> {
        self.into_next_all().map(|d| d.into_iter().next())
    }

    /// Every grant of a [`Job::Next`], in the order they were made.
    pub fn into_next_all(self) -> Result<Vec<Decision>> {
        match self {
            Answer::Next(d) => Ok(d),
            _ => Err(Self::mismatched()),
        }
    }
}

/// What the engine needs before it can go on.
#[derive(Debug, Clone)]
pub enum Need {
    /// These tasks' records as this commit sees them (its own writes
    /// included; a store that locks rows locks them), each judged at
    /// `now`. Supply [`Supply::Loaded`], one entry per task, in order.
    /// `upstream`: these are the records a decision reads beside its own
    /// task's (its dependencies); `false`, a decision begins with its own
    /// task's record. A decision that ends without asking for a write
    /// changed nothing, so an optimistic store need not guard its reads.
    Load {
        tasks: Vec<TaskId>,
        now: Timestamp,
        upstream: bool,
    },
    /// Write what this decision writes, in this commit, assigning its fence
    /// if it mints one. Supply [`Supply::Written`] with the decision as
    /// written.
    Write(Box<Decision>),
    /// Up to `limit` records of the ready index of `lane` and `queue`, in
    /// index order, strictly after `after`, as this commit sees it (the
    /// writes supplied so far included). Supply [`Supply::Page`].
    Ready {
        lane: Lane,
        queue: Id,
        after: Option<ReadyEntry>,
        limit: usize,
        now: Timestamp,
    },
    /// Up to `limit` held tasks of `lane` and `queue` whose lease has run
    /// out at `now`. Supply [`Supply::Page`].
    Expired {
        lane: Lane,
        queue: Id,
        limit: usize,
        now: Timestamp,
    },
    /// The records of a `next`'s queues' policies (`queue:QUEUE`), each
    /// judged at `now`, as of any moment of this commit: a store need not
    /// lock or guard them. (A `next` that read a queue running and
    /// commits after a pause of it is ordered before the pause; one that
    /// begins after the pause is answered reads it paused.) Supply
    /// [`Supply::Loaded`], one entry per task, in order.
    Policies { tasks: Vec<TaskId>, now: Timestamp },
}

/// What a store hands back for a [`Need`].
#[derive(Debug, Clone)]
pub enum Supply {
    /// For [`Need::Load`]: each task's snapshot, `None` when it has no record.
    Loaded(Vec<Option<Snapshot>>),
    /// For [`Need::Write`]: the decision as written (its fence assigned).
    Written(Box<Decision>),
    /// For [`Need::Ready`] and [`Need::Expired`].
    Page(Vec<Snapshot>),
}

/// Why a run of one operation stopped short.
enum Halt {
    Need(Need),
    Err(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Halt {
        Halt::Err(e)
    }
}

fn out_of_order(what: &str) -> Error {
    Error::unavailable(format!(
        "the commit engine was supplied {what} for another need"
    ))
}

/// What one operation's runs have been given so far, read back in order.
struct Replay<'a> {
    journal: &'a [Supply],
    at: usize,
}

impl Replay<'_> {
    fn next(&mut self) -> Option<&Supply> {
        let s = self.journal.get(self.at);
        self.at += 1;
        s
    }

    fn load(
        &mut self,
        tasks: Vec<TaskId>,
        now: Timestamp,
        upstream: bool,
    ) -> std::result::Result<Vec<Option<Snapshot>>, Halt> {
        let n = tasks.len();
        match self.next() {
            None => Err(Halt::Need(Need::Load {
                tasks,
                now,
                upstream,
            })),
            Some(Supply::Loaded(found)) if found.len() == n => Ok(found.clone()),
            Some(_) => Err(Halt::Err(out_of_order("a record"))),
        }
    }

    fn write(&mut self, d: Decision) -> std::result::Result<Decision, Halt> {
        match self.next() {
            None => Err(Halt::Need(Need::Write(Box::new(d)))),
            Some(Supply::Written(w)) => Ok((**w).clone()),
            Some(_) => Err(Halt::Err(out_of_order("a write"))),
        }
    }
}

/// Decides `op` on its record and its upstream, writing nothing; with
/// the record as it was read.
fn decide_on(
    r: &mut Replay<'_>,
    op: &Operation,
    rules: LeaseRules,
) -> std::result::Result<(Decision, Option<crate::model::TaskRecord>), Halt> {
    let current = r
        .load(vec![op.task.clone()], op.now, false)?
        .pop()
        .flatten();
    let ids = crate::decide::upstream_ids(&op.request, current.as_ref().map(|s| &s.record));
    let found = if ids.is_empty() {
        None
    } else {
        Some(r.load(ids.clone(), op.now, true)?)
    };
    let key = key_view(r, op, current.as_ref(), &ids, found.as_deref())?;
    // Run again after its write: the decision is the one written (left in
    // the journal for `write` to read back), not decided a second time.
    let stored = current.as_ref().map(|s| s.record.clone());
    if let Some(Supply::Written(w)) = r.journal.get(r.at) {
        return Ok(((**w).clone(), stored));
    }
    let mut upstream = match found {
        None => crate::graph::Upstream::default(),
        Some(found) => upstream_of(
            ids.into_iter().zip(found),
            op.now,
            crate::decide::reads_dependencies(&op.request),
        ),
    };
    if let Some(key) = key {
        upstream = upstream.with_key(key);
    }
    let (record, judged) = match &current {
        Some(s) => (Some(&s.record), s.judged),
        None => (None, Judged::default()),
    };
    let d = crate::decide::decide_in(op, record, judged, rules, &upstream);
    Ok((d, stored))
}

/// For a grant of a task with a concurrency key: the key's record (read
/// with the upstream) and, read now, its holders other than the task,
/// each live or not by its own record as the store's judge of time says.
fn key_view(
    r: &mut Replay<'_>,
    op: &Operation,
    current: Option<&Snapshot>,
    ids: &[TaskId],
    found: Option<&[Option<Snapshot>]>,
) -> std::result::Result<Option<crate::graph::KeyView>, Halt> {
    if !op.request.may_grant() {
        return Ok(None);
    }
    let Some(key) = current.and_then(|s| s.record.key()) else {
        return Ok(None);
    };
    let Ok(kid) = crate::graph::key_record_id(key) else {
        return Ok(None);
    };
    let record = ids
        .iter()
        .position(|id| *id == kid)
        .and_then(|i| found.and_then(|f| f.get(i)))
        .and_then(|s| s.as_ref())
        .and_then(|s| s.record.key_limit.clone())
        .unwrap_or_default();
    let holders: Vec<TaskId> = record
        .holders
        .iter()
        .filter(|t| **t != op.task)
        .cloned()
        .collect();
    let read = if holders.is_empty() {
        Vec::new()
    } else {
        r.load(holders, op.now, true)?
    };
    let live = read
        .into_iter()
        .flatten()
        .filter(|s| {
            crate::decide::derive(&s.record, s.judged, op.now)
                .state
                .is_held()
        })
        .map(|s| crate::graph::KeyHolder {
            task: s.record.task.clone(),
            fence: s.record.current_fence(),
        })
        .collect();
    Ok(Some(crate::graph::KeyView {
        key: key.clone(),
        limit: record.limit,
        live,
    }))
}

/// One operation and its follow-ups, run on what `r` holds: the decision
/// and whether it wrote.
fn apply_run(
    r: &mut Replay<'_>,
    op: &Operation,
    rules: LeaseRules,
    depth: u8,
) -> std::result::Result<(Decision, bool), Halt> {
    let (d, stored) = decide_on(r, op, rules)?;
    // Stores that hand fences out ahead (Postgres) count on it.
    debug_assert!(
        !d.mints_fence() || op.request.may_grant(),
        "a {:?} decision minted a fence; Request::may_grant must name it",
        op.request.kind()
    );
    if !d.writes() {
        return Ok((d, false));
    }
    let d = r.write(d)?;
    // Debug and test builds check what was written (its fence assigned)
    // before the commit: a broken invariant fails it closed.
    if cfg!(debug_assertions) {
        crate::invariants::check_decision(stored.as_ref(), &d)?;
    }
    // A link may wake its dependent; nothing goes deeper, and a decision
    // there that asks for more is a bug, refused rather than dropped.
    if depth >= 2 && !d.follow_ups.is_empty() {
        return Err(Halt::Err(Error::corrupt(format!(
            "{}: a follow-up at depth {depth} asks for {} more; follow-ups go two deep",
            op.task,
            d.follow_ups.len()
        ))));
    }
    for (task, request) in d.follow_ups.clone() {
        let f = Operation {
            task,
            request,
            pre: Preconditions::default(),
            now: op.now,
            clock: Default::default(),
        };
        apply_run(r, &f, rules, depth + 1)?;
    }
    Ok((d, true))
}

/// One operation in progress: the journal its runs read back.
#[derive(Default)]
struct Unit {
    journal: Vec<Supply>,
}

impl Unit {
    /// Runs `op` again with the journal: `Ok` once decided (and written),
    /// or what it needs next.
    fn run(
        &self,
        op: &Operation,
        rules: LeaseRules,
    ) -> std::result::Result<(Decision, bool), Halt> {
        apply_run(
            &mut Replay {
                journal: &self.journal,
                at: 0,
            },
            op,
            rules,
            0,
        )
    }
}

/// Where a `next` is in its scan (the steps of [`crate::Store::next`]'s
/// contract): the queues' policies (a paused queue is passed over), then
/// expired leases of each queue, then pages of each queue's ready index
/// merged in order, each candidate decided as a grant.
struct Scan {
    query: NextQuery,
    /// Whether the queues' policies are read (and paused queues dropped
    /// from the query), and whether they are asked for.
    policies_read: bool,
    reading_policies: bool,
    /// Each queue's read position and whether its index may hold more.
    cursors: Vec<(Id, Option<ReadyEntry>, bool)>,
    /// The queue whose expired leases are read next, while below the
    /// number of queues; then the cursor whose page is read next.
    expired_at: usize,
    page_at: usize,
    page_size: usize,
    /// Read and not yet tried.
    candidates: Vec<Snapshot>,
    /// This round's candidates, in the order they are tried.
    trying: VecDeque<Snapshot>,
    /// The candidate being decided.
    current: Option<(Operation, Unit)>,
    seen: usize,
    /// Whether a page is asked for (the next supply is it).
    paging: bool,
    /// After lost races, which of the first few candidates is tried first.
    spread: usize,
    /// Decisions written so far, and the most this scan may write.
    writes: usize,
    max_writes: usize,
    capped: bool,
    /// The grants made so far (up to the query's count), and their tasks,
    /// which the rest of the scan passes over.
    granted: Vec<Decision>,
    taken: std::collections::BTreeSet<crate::id::TaskId>,
}

impl Scan {
    fn new(query: NextQuery, spread: usize, max_writes: usize) -> Scan {
        let page_size = crate::next::first_page(query.count);
        let cursors = query
            .queues
            .iter()
            .map(|q| (q.clone(), None, true))
            .collect();
        Scan {
            query,
            policies_read: false,
            reading_policies: false,
            cursors,
            expired_at: 0,
            page_at: 0,
            page_size,
            candidates: Vec::new(),
            trying: VecDeque::new(),
            current: None,
            seen: 0,
            paging: false,
            spread,
            writes: 0,
            max_writes,
            capped: false,
            granted: Vec::new(),
            taken: std::collections::BTreeSet::new(),
        }
    }

    /// Takes the queues' policy records the store supplied: a paused
    /// queue's tasks are not this `next`'s to grant.
    fn policies(&mut self, found: Vec<Option<Snapshot>>) -> Result<()> {
        self.reading_policies = false;
        self.policies_read = true;
        if found.len() != self.query.queues.len() {
            return Err(out_of_order("another number of records"));
        }
        let paused: Vec<bool> = found
            .iter()
            .map(|s| {
                s.as_ref()
                    .and_then(|s| s.record.queue_policy)
                    .is_some_and(|p| p.paused_at.is_some())
            })
            .collect();
        let mut at = paused.iter();
        self.query
            .queues
            .retain(|_| !at.next().copied().unwrap_or(false));
        let mut at = paused.iter();
        self.cursors
            .retain(|_| !at.next().copied().unwrap_or(false));
        Ok(())
    }

    /// Takes a page the store supplied.
    fn paged(&mut self, page: Vec<Snapshot>) {
        self.paging = false;
        if self.expired_at < self.query.queues.len() {
            let q = &self.query;
            self.candidates
                .extend(page.into_iter().filter(|s| q.takeable(s)));
            self.expired_at += 1;
            return;
        }
        let page_size = self.page_size;
        if let Some((_, after, more)) = self.cursors.get_mut(self.page_at) {
            *more = page.len() == page_size;
            match page.last().and_then(|s| s.record.ready_entry()) {
                Some(last) => *after = Some(last),
                None => *more = false,
            }
        }
        self.candidates.extend(page);
        self.page_at += 1;
    }

    /// The next need, or the grants once the scan is over.
    fn step(&mut self, rules: LeaseRules) -> std::result::Result<Vec<Decision>, Halt> {
        let lane = self.query.lane();
        let now = self.query.now;
        if !self.policies_read {
            let tasks = self
                .query
                .queues
                .iter()
                .map(crate::graph::queue_record_id)
                .collect::<Result<Vec<_>>>()?;
            self.reading_policies = true;
            return Err(Halt::Need(Need::Policies { tasks, now }));
        }
        loop {
            if let Some(queue) = self.query.queues.get(self.expired_at) {
                self.paging = true;
                return Err(Halt::Need(Need::Expired {
                    lane,
                    queue: queue.clone(),
                    limit: NEXT_PAGE,
                    now,
                }));
            }
            if let Some((op, unit)) = &self.current {
                let (d, wrote) = unit.run(op, rules)?;
                let task = op.task.clone();
                self.current = None;
                if d.mints_fence() {
                    self.taken.insert(task);
                    self.granted.push(d);
                    if self.granted.len() >= self.query.count.max(1) as usize {
                        return Ok(std::mem::take(&mut self.granted));
                    }
                    // A grant of a batch counts toward the commit's size.
                    self.writes += 1;
                    continue;
                }
                if wrote {
                    self.writes += 1;
                }
                continue;
            }
            if self.writes >= self.max_writes {
                self.capped = true;
                return Ok(std::mem::take(&mut self.granted));
            }
            if let Some(c) = self.trying.pop_front() {
                if self.taken.contains(&c.record.task) {
                    continue;
                }
                self.seen += 1;
                if let Some(op) = self.query.claim_for(&c.record) {
                    self.current = Some((op, Unit::default()));
                }
                continue;
            }
            // This round is tried: read the next page of each queue
            // that may hold more, then order and take what sorts first.
            let size = self.page_size;
            if let Some((i, (queue, after, _))) = self
                .cursors
                .iter()
                .enumerate()
                .skip(self.page_at)
                .find(|(_, c)| c.2)
            {
                self.page_at = i;
                self.paging = true;
                return Err(Halt::Need(Need::Ready {
                    lane,
                    queue: queue.clone(),
                    after: after.clone(),
                    limit: size,
                    now,
                }));
            }
            if self.page_at == usize::MAX {
                // Every page of this round was read and its candidates tried.
                if self.seen >= NEXT_SCAN || !self.cursors.iter().any(|c| c.2) {
                    return Ok(std::mem::take(&mut self.granted));
                }
                self.page_size = (self.page_size * 4).min(NEXT_PAGE);
                self.page_at = 0;
                continue;
            }
            self.query.order(&mut self.candidates);
            // Only what sorts before every queue's unread rest is tried now.
            let bound = self
                .cursors
                .iter()
                .filter(|c| c.2)
                .filter_map(|c| c.1.as_ref())
                .map(|e| (e.rank, e.ready_at, e.task.clone()))
                .min();
            let split = bound.map_or(self.candidates.len(), |b| {
                self.candidates
                    .partition_point(|c| crate::next::sort_key(&c.record) <= b)
            });
            let rest = self.candidates.split_off(split);
            let mut now_tried: VecDeque<Snapshot> =
                std::mem::replace(&mut self.candidates, rest).into();
            if self.spread > 0 && self.seen == 0 {
                let few = now_tried.len().min(3);
                if few > 1 {
                    let pick = self.spread % few;
                    now_tried.make_contiguous()[..=pick].rotate_right(1);
                }
            }
            self.trying = now_tried;
            // Marks the round's pages as read.
            self.page_at = usize::MAX;
        }
    }
}

/// The job in progress.
enum Doing {
    /// One operation; a group, with the decisions made so far.
    Ops {
        ops: Vec<Operation>,
        done: Vec<Decision>,
        unit: Unit,
        group: bool,
    },
    Next(Box<Scan>),
}

/// One commit's jobs, decided step by step. See the module's text.
pub struct Engine {
    jobs: VecDeque<Job>,
    rules: LeaseRules,
    doing: Option<Doing>,
    answers: Vec<Answer>,
    keep: bool,
    wrote: bool,
    spread: usize,
    max_writes: usize,
    capped: bool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("jobs left", &self.jobs.len())
            .field("answers", &self.answers.len())
            .finish()
    }
}

impl Engine {
    /// An engine for `jobs` (each timed), deciding with the store's `rules`.
    pub fn new(jobs: impl IntoIterator<Item = Job>, rules: LeaseRules) -> Engine {
        Engine {
            jobs: jobs.into_iter().collect(),
            rules,
            doing: None,
            answers: Vec::new(),
            keep: true,
            wrote: false,
            spread: 0,
            max_writes: usize::MAX,
            capped: false,
        }
    }

    /// An engine for one operation.
    pub fn one(op: Operation, rules: LeaseRules) -> Engine {
        Engine::new([Job::One(op)], rules)
    }

    /// For a store that commits optimistically and lost a race for the
    /// head of a queue: a `next` tries one of the first few candidates
    /// first (which one, by `seed`), so contenders do not all chase the
    /// same task again.
    pub fn spread(mut self, seed: usize) -> Engine {
        self.spread = seed;
        self
    }

    /// For a store that bounds one commit's size: a `next` stops once its
    /// passed-over candidates wrote `n` decisions, answering that it took
    /// none ([`Engine::capped`] then says so; asking again goes on).
    pub fn max_writes(mut self, n: usize) -> Engine {
        self.max_writes = n.max(1);
        self
    }

    /// What the engine needs next, or `None` once every job is decided
    /// ([`Engine::finish`] then gives the answers). An error is the
    /// store's to return: nothing of this commit may be kept.
    pub fn step(&mut self) -> Result<Option<Need>> {
        loop {
            let Some(doing) = self.doing.as_mut() else {
                // A job is timed when its decision begins: the store
                // holds the lock that serializes it by now (a store that
                // times by its own clock after its locks set the time
                // and dropped the caller's clock already).
                let job = self.jobs.pop_front().map(|mut job| {
                    job.timed_at_commit();
                    job
                });
                match job {
                    None => return Ok(None),
                    Some(Job::One(op)) => {
                        self.doing = Some(Doing::Ops {
                            ops: vec![op],
                            done: Vec::new(),
                            unit: Unit::default(),
                            group: false,
                        })
                    }
                    Some(Job::All(ops)) => {
                        self.doing = Some(Doing::Ops {
                            ops,
                            done: Vec::new(),
                            unit: Unit::default(),
                            group: true,
                        })
                    }
                    Some(Job::Next(q)) => {
                        self.doing = Some(Doing::Next(Box::new(Scan::new(
                            q,
                            self.spread,
                            self.max_writes,
                        ))))
                    }
                }
                continue;
            };
            match doing {
                Doing::Ops {
                    ops,
                    done,
                    unit,
                    group,
                } => {
                    let Some(op) = ops.get(done.len()) else {
                        let answer = if *group {
                            Answer::All(std::mem::take(done))
                        } else {
                            match done.pop() {
                                Some(d) => Answer::One(d),
                                None => {
                                    return Err(Error::invalid("ops", "a job with no operation"));
                                }
                            }
                        };
                        self.answers.push(answer);
                        self.doing = None;
                        continue;
                    };
                    match unit.run(op, self.rules) {
                        Ok((d, wrote)) => {
                            self.wrote |= wrote;
                            let fine = matches!(d.verdict, Verdict::Commit(_) | Verdict::Ack);
                            done.push(d);
                            *unit = Unit::default();
                            if *group && !fine {
                                // Nothing of the group may be kept: it ends here.
                                self.keep = false;
                                ops.truncate(done.len());
                            }
                        }
                        Err(Halt::Need(n)) => return Ok(Some(n)),
                        Err(Halt::Err(e)) => return Err(e),
                    }
                }
                Doing::Next(scan) => match scan.step(self.rules) {
                    Ok(answer) => {
                        self.wrote |= scan.writes > 0 || !answer.is_empty();
                        self.capped |= scan.capped;
                        self.answers.push(Answer::Next(answer));
                        self.doing = None;
                    }
                    Err(Halt::Need(n)) => return Ok(Some(n)),
                    Err(Halt::Err(e)) => return Err(e),
                },
            }
        }
    }

    /// Hands back what the last [`Need`] asked for.
    pub fn supply(&mut self, s: Supply) -> Result<()> {
        match self.doing.as_mut() {
            Some(Doing::Ops { unit, .. }) => match s {
                Supply::Page(_) => Err(out_of_order("a page")),
                s => {
                    unit.journal.push(s);
                    Ok(())
                }
            },
            Some(Doing::Next(scan)) => match (scan.paging, s) {
                (false, Supply::Loaded(found)) if scan.reading_policies => scan.policies(found),
                (true, Supply::Page(page)) => {
                    scan.paged(page);
                    Ok(())
                }
                (false, s @ (Supply::Loaded(_) | Supply::Written(_))) => match &mut scan.current {
                    Some((_, unit)) => {
                        unit.journal.push(s);
                        Ok(())
                    }
                    None => Err(out_of_order("a record")),
                },
                _ => Err(out_of_order("an answer")),
            },
            None => Err(out_of_order("an answer")),
        }
    }

    /// Whether a `next` stopped at [`Engine::max_writes`].
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// The answers, one per job, and whether the commit may keep what was
    /// written: no group refused (when one did, the store keeps nothing of
    /// this commit). Whether anything was written is [`Engine::wrote`].
    pub fn finish(self) -> (Vec<Answer>, bool) {
        (self.answers, self.keep)
    }

    /// Whether any decision wrote.
    pub fn wrote(&self) -> bool {
        self.wrote
    }
}

/// Decides `op` inside `tx` and writes it, then its follow-ups, through
/// [`Engine`]. Returns the decision and whether anything
/// was written.
pub fn apply_in<T: crate::store::Txn + ?Sized>(
    tx: &mut T,
    op: &Operation,
) -> Result<(Decision, bool)> {
    let mut engine = Engine::one(op.clone(), tx.rules());
    drive(&mut engine, tx, |_, _| {
        Err(crate::error::Error::unavailable(
            "one operation asked for a page of an index",
        ))
    })?;
    let wrote = engine.wrote();
    match engine.finish().0.pop() {
        Some(Answer::One(d)) => Ok((d, wrote)),
        _ => Err(crate::error::Error::unavailable(
            "the commit engine gave no decision for one operation",
        )),
    }
}

/// Decides `op` on what `tx` holds, writing nothing: reads the task and
/// the records [`crate::decide::upstream_ids`] names and decides. On a
/// snapshot of durable commits only, a decision that writes nothing is
/// the answer (a store may give it without its write lock); one that
/// writes must be decided again inside the commit.
pub fn decide_read<T: crate::store::Txn + ?Sized>(tx: &mut T, op: &Operation) -> Result<Decision> {
    use {Engine, Need, Supply};
    let mut engine = Engine::one(op.clone(), tx.rules());
    loop {
        match engine.step()? {
            Some(Need::Load { tasks, now, .. }) => engine.supply(Supply::Loaded(
                tasks
                    .iter()
                    .map(|t| tx.load(t, now))
                    .collect::<Result<Vec<_>>>()?,
            ))?,
            // The decision, before anything of it is written.
            Some(Need::Write(d)) => return Ok(*d),
            Some(_) | None => break,
        }
    }
    match engine.finish().0.pop() {
        Some(Answer::One(d)) => Ok(d),
        _ => Err(crate::error::Error::unavailable(
            "the commit engine gave no decision for one operation",
        )),
    }
}

/// Runs `engine` against a store that answers at once (a lock held, or one
/// local transaction open): records from [`crate::store::Txn::load`],
/// writes through [`crate::store::Txn::write`]; pages from `pages`, which
/// gets the same transaction.
pub fn drive<T: crate::store::Txn + ?Sized>(
    engine: &mut Engine,
    tx: &mut T,
    mut pages: impl FnMut(&mut T, &Need) -> Result<Vec<Snapshot>>,
) -> Result<()> {
    while let Some(need) = engine.step()? {
        let supply = match need {
            Need::Load { tasks, now, .. } | Need::Policies { tasks, now } => Supply::Loaded(
                tasks
                    .iter()
                    .map(|t| tx.load(t, now))
                    .collect::<Result<Vec<_>>>()?,
            ),
            Need::Write(mut d) => {
                tx.write(&mut d)?;
                Supply::Written(d)
            }
            page @ (Need::Ready { .. } | Need::Expired { .. }) => Supply::Page(pages(tx, &page)?),
        };
        engine.supply(supply)?;
    }
    Ok(())
}

/// [`drive`] for a store whose transaction is a [`crate::next::NextSource`].
pub fn drive_next<T: crate::next::NextSource + ?Sized>(
    engine: &mut Engine,
    tx: &mut T,
) -> Result<()> {
    drive(engine, tx, |tx, need| match need {
        Need::Ready {
            lane,
            queue,
            after,
            limit,
            now,
        } => tx.ready(crate::next::IndexPage {
            lane: *lane,
            queue,
            after: after.as_ref(),
            limit: *limit,
            now: *now,
        }),
        Need::Expired {
            lane,
            queue,
            limit,
            now,
        } => tx.expired(crate::next::IndexPage {
            lane: *lane,
            queue,
            after: None,
            limit: *limit,
            now: *now,
        }),
        _ => Ok(Vec::new()),
    })
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
