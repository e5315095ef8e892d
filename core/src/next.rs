//! `next`: taking the ready task a query asks for, inside one commit. The
//! store offers candidates from its indexes ([`NextSource`], or
//! [`crate::engine::Need::Ready`] and [`crate::engine::Need::Expired`]);
//! core orders them and decides each as a grant until one commits
//! ([`crate::engine::Engine`]).

use crate::graph::{
    Census, Lane, NextQuery, Readiness, ReadyEntry, Taker, Upstream, priority_rank,
};
use crate::id::{Id, TaskId};
use crate::kinds::State;
use crate::model::TaskRecord;
use crate::store::Snapshot;
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

impl NextQuery {
    /// The grant request `next` makes for `candidate`, or `None` when the
    /// candidate cannot be taken this way (wrong lane, no queue named, no
    /// run registered).
    pub fn claim_for(&self, candidate: &TaskRecord) -> Option<crate::request::Operation> {
        use crate::request::{Operation, Preconditions, Request};
        let node = candidate.node.as_ref()?;
        if candidate.lane() != self.lane() || !self.queues.contains(&node.spec.queue) {
            return None;
        }
        // A scoped taker passes over what its scope does not admit.
        if let Some(scope) = &self.within
            && !scope.admits(candidate.task.as_str(), Some(node.spec.queue.as_str()))
        {
            return None;
        }
        let request = match &self.taker {
            Taker::Owner {
                owner,
                ttl_ms,
                lock_delay_ms,
            } => Request::Claim {
                owner: owner.clone(),
                ttl_ms: *ttl_ms,
                lock_delay_ms: *lock_delay_ms,
            },
            Taker::Executor { executor, ttl_ms } => Request::TaskClaim {
                run_id: candidate.run_id.clone()?,
                executor: executor.clone(),
                ttl_ms: *ttl_ms,
            },
        };
        Some(Operation {
            task: candidate.task.clone(),
            request,
            pre: Preconditions {
                within: self.within.clone(),
                ..Preconditions::default()
            },
            now: self.now,
            clock: Default::default(),
        })
    }

    /// Whether `next` would try `candidate` at all: it is in the query's
    /// lane and queues (with a run bound, if declared) and not held under
    /// a live lease. The decision still has the last word.
    pub fn takeable(&self, candidate: &Snapshot) -> bool {
        !candidate.lease_live() && self.claim_for(&candidate.record).is_some()
    }

    /// Puts candidates in the order `next` tries them: highest priority,
    /// then earliest ready time, then smallest id. A candidate not in the
    /// index (a held task whose lease expired) keeps its ready time.
    pub fn order(&self, candidates: &mut Vec<Snapshot>) {
        candidates.sort_by_key(|s| sort_key(&s.record));
        candidates.dedup_by(|a, b| a.record.task == b.record.task);
    }
}

pub(crate) fn sort_key(r: &TaskRecord) -> (u64, Timestamp, TaskId) {
    let (rank, at) = r
        .node
        .as_ref()
        .map_or((u64::MAX, Timestamp(i64::MAX)), |n| {
            (
                priority_rank(n.spec.priority),
                n.due_at().unwrap_or(Timestamp(i64::MAX)),
            )
        });
    (rank, at, r.task.clone())
}

/// The most candidates `next` reads from each queue's index at a time (the
/// first read takes [`NEXT_FIRST_PAGE`], each after it four times more).
pub const NEXT_PAGE: usize = 64;
/// What the first read of a queue's index takes: most `next`s grant the
/// first candidate, and every candidate read is a record decoded. A batch
/// of N grants reads N at first ([`first_page`]).
pub const NEXT_FIRST_PAGE: usize = 2;

/// The first read of each queue's index for a `next` of up to `count`
/// grants: as many as it may grant (within [`NEXT_FIRST_PAGE`] and
/// [`NEXT_PAGE`]), so a batch whose first candidates are takeable reads one
/// page, not pages of 2, 8 and 32 (each record read is decoded).
pub fn first_page(count: u32) -> usize {
    usize::try_from(count)
        .unwrap_or(NEXT_PAGE)
        .clamp(NEXT_FIRST_PAGE, NEXT_PAGE)
}
/// The most candidates one `next` looks at before it answers that it took none.
pub const NEXT_SCAN: usize = 1024;

/// What a store that decides under a lock (or in one transaction) offers
/// [`crate::engine::drive_next`], all inside the one commit the grant is
/// made in.
pub trait NextSource: crate::store::Txn {
    /// Up to `page.limit` records of the ready index of the page's lane
    /// and queue, in index order ([`ReadyEntry::key`]), strictly after
    /// `page.after` ([`IndexPage::ready_keys`]).
    fn ready(&mut self, page: IndexPage<'_>) -> crate::error::Result<Vec<Snapshot>>;

    /// Up to `page.limit` held tasks of the page's lane and queue whose
    /// lease has run out at `page.now` (claimable again, and not in the
    /// ready index): for a store whose stored expiry is its judge, the
    /// keys of [`IndexPage::held_keys`] in its held index
    /// ([`TaskRecord::held_key`]).
    fn expired(&mut self, page: IndexPage<'_>) -> crate::error::Result<Vec<Snapshot>>;
}

/// One page of a queue's index that `next` reads.
#[derive(Debug, Clone, Copy)]
pub struct IndexPage<'a> {
    pub lane: Lane,
    pub queue: &'a Id,
    /// The ready index only: the page starts after this entry.
    pub after: Option<&'a ReadyEntry>,
    pub limit: usize,
    /// The decision's time, that snapshots are judged at.
    pub now: Timestamp,
}

impl IndexPage<'_> {
    /// The page's ready-index keys, `(from, end)` both exclusive; `None`
    /// when `after` lies past the queue (nothing there).
    pub fn ready_keys(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let (from, end) = crate::graph::ready_range(self.lane, self.queue, self.after);
        (from < end).then_some((from, end))
    }

    /// The held-index keys of leases run out at `now`: `[start, end)`.
    pub fn held_keys(&self) -> (Vec<u8>, Vec<u8>) {
        crate::graph::held_range(self.lane, self.queue, self.now)
    }
}

/// Whether `next` has any candidate at all: an entry in one of its queues'
/// ready index, or a held task there whose lease ran out. Read on a
/// snapshot that holds only durable commits, `false` is the answer `next`
/// would give, so a store may give it without taking its write lock (the
/// cheap poll of waiting workers).
pub fn has_candidates(query: &NextQuery, src: &mut dyn NextSource) -> crate::error::Result<bool> {
    for q in &query.queues {
        let page = |limit| IndexPage {
            lane: query.lane(),
            queue: q,
            after: None,
            limit,
            now: query.now,
        };
        if !src.ready(page(1))?.is_empty() {
            return Ok(true);
        }
        let expired = src.expired(page(NEXT_PAGE))?;
        if expired.iter().any(|s| query.takeable(s)) {
            return Ok(true);
        }
    }
    Ok(false)
}

impl Census {
    /// The census of `records` for `query`: every live task (as derived at
    /// query time) with its dependencies' states. A task waiting on a
    /// dependency that can itself never become ready without an operator
    /// counts as blocked, however far down the chain the failure is, so
    /// `drained` means that nothing can move.
    pub fn of(query: &NextQuery, records: &[(TaskRecord, Upstream)]) -> Census {
        let stuck = stuck(records);
        let mut census = Census::default();
        for (record, upstream) in records {
            census.count(query, record, upstream, stuck.contains(&record.task));
        }
        census
    }

    /// Counts `record` if `next` with `query` could ever take it;
    /// `upstream` holds its dependencies' states, and `stuck` says it waits
    /// (transitively) on a dependency that is blocked.
    fn count(&mut self, query: &NextQuery, record: &TaskRecord, upstream: &Upstream, stuck: bool) {
        let Some(node) = record.node.as_ref() else {
            return;
        };
        if record.lane() != query.lane() || !query.queues.contains(&node.spec.queue) {
            return;
        }
        if record.state.is_held() {
            self.held += 1;
            return;
        }
        match standing(record, upstream, stuck, query.now) {
            Some(Standing::Ready | Standing::Paused) => self.ready += 1,
            Some(Standing::Waiting | Standing::Retrying) => self.queued += 1,
            Some(Standing::Blocked) => self.blocked += 1,
            None => {}
        }
    }
}

/// Where a waiting task (REGISTERED or DECLARED, as derived now) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Standing {
    /// `next` may take it now.
    Ready,
    /// On a dependency that has not ended, a start that has not come, a
    /// slot of its key, or (declared) a run to be registered.
    Waiting,
    /// Put off after a failed attempt until its retry policy's wait has
    /// passed ([`TaskRecord::retry_wait`]).
    Retrying,
    /// Behind a dependency that ended without success or does not exist,
    /// at any depth: it cannot become ready without an operator.
    Blocked,
    /// Ready, in a queue an operator paused: `next` passes over it until
    /// the queue is resumed ([`Standing::in_queue`]).
    Paused,
}

impl Standing {
    pub const ALL: [Standing; 5] = [
        Standing::Ready,
        Standing::Waiting,
        Standing::Retrying,
        Standing::Blocked,
        Standing::Paused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Ready => "READY",
            Standing::Waiting => "WAITING",
            Standing::Retrying => "RETRYING",
            Standing::Blocked => "BLOCKED",
            Standing::Paused => "PAUSED",
        }
    }

    /// Where a task that stands so stands in its queue: a ready one in a
    /// paused queue is paused ([`crate::graph::QueuePolicy::paused_at`]).
    pub fn in_queue(self, queue_paused: bool) -> Standing {
        match self {
            Standing::Ready if queue_paused => Standing::Paused,
            s => s,
        }
    }
}

/// Where `record` stands if it waits (`None` when it does not: held or
/// ended); `upstream` holds its dependencies' states, and `stuck` says it
/// waits (transitively) on a dependency that is blocked ([`stuck`]).
pub fn standing(
    record: &TaskRecord,
    upstream: &Upstream,
    stuck: bool,
    now: Timestamp,
) -> Option<Standing> {
    if !matches!(record.state, State::Registered | State::Declared) {
        return None;
    }
    if stuck {
        return Some(Standing::Blocked);
    }
    let Some(node) = record.node.as_ref() else {
        // A bare task: a registered one is claimable now.
        return Some(if record.state == State::Registered {
            Standing::Ready
        } else {
            Standing::Waiting
        });
    };
    if record.state == State::Declared {
        return Some(Standing::Waiting);
    }
    Some(match upstream.readiness(&node.spec.depends_on) {
        Readiness::Blocked { .. } | Readiness::Unknown { .. } => Standing::Blocked,
        Readiness::Waiting { .. } => Standing::Waiting,
        // Put off to a start that has not come (after a failure: a retry),
        // or waiting for a slot of its key: it waits.
        Readiness::Ready if node.not_before.is_some_and(|t| t > now) => {
            if record.retry_wait().is_some() {
                Standing::Retrying
            } else {
                Standing::Waiting
            }
        }
        Readiness::Ready if node.parked => Standing::Waiting,
        Readiness::Ready => Standing::Ready,
    })
}

/// The waiting tasks among `records` (REGISTERED or DECLARED, each with
/// its dependencies' states) that cannot become ready without an
/// operator: those a dependency blocks (it ended without success, or does
/// not exist), and every waiting task that depends on one of them, to any
/// depth. One pass over the edges, whatever the depth of the chain.
pub fn stuck(records: &[(TaskRecord, Upstream)]) -> BTreeSet<TaskId> {
    let mut dependents: BTreeMap<&TaskId, Vec<&TaskId>> = BTreeMap::new();
    let mut todo: Vec<&TaskId> = Vec::new();
    for (record, upstream) in records {
        if !matches!(record.state, State::Registered | State::Declared) {
            continue;
        }
        let deps = record.depends_on();
        for d in deps {
            dependents.entry(d).or_default().push(&record.task);
        }
        if matches!(
            upstream.readiness(deps),
            Readiness::Blocked { .. } | Readiness::Unknown { .. }
        ) {
            todo.push(&record.task);
        }
    }
    let mut out = BTreeSet::new();
    while let Some(t) = todo.pop() {
        if out.insert(t.clone()) {
            todo.extend(dependents.get(t).into_iter().flatten().copied());
        }
    }
    out
}
