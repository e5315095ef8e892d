//! The public API: the authority (leases and fences) and the registry
//! (declared tasks), written once over any [`Store`].

use crate::decide::{Verdict, derive};
use crate::error::{Error, Result};
use crate::id::{Id, OwnerId, TaskId};
use crate::manifest::Manifest;
use crate::model::{Actor, Event, Grant, Notification, State, TaskRecord};
use crate::refusal::Refusal;
use crate::request::{Operation, Preconditions, Request};
use crate::store::{Clause, ListQuery, Store};
use crate::time::{Clock, Timestamp};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

#[path = "retention.rs"]
mod retention;
pub use retention::Pruned;

#[path = "bulk.rs"]
mod bulk;
pub use bulk::{Bulk, BulkOutcome};

/// The answer to a request that the store could answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The change was committed; this is the record as now stored.
    Committed(TaskRecord),
    /// An idempotent repeat: nothing changed; this is the stored record.
    Acknowledged(TaskRecord),
    /// A typed no.
    Refused(Refusal),
}

impl Reply {
    pub fn record(&self) -> Option<&TaskRecord> {
        match self {
            Reply::Committed(r) | Reply::Acknowledged(r) => Some(r),
            Reply::Refused(_) => None,
        }
    }

    /// The grant in the answer's record, if any.
    pub fn grant(&self) -> Option<Grant> {
        self.record().and_then(Grant::of)
    }

    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Reply::Refused(r) => Some(r),
            _ => None,
        }
    }

    pub fn is_idempotent(&self) -> bool {
        matches!(self, Reply::Acknowledged(_))
    }

    /// For a success repeated with evidence: the keys whose hash is not
    /// the one recorded (evidence is immutable once recorded, so the first
    /// success's stands and these were ignored). Empty for anything else.
    pub fn evidence_ignored(&self, evidence: &BTreeMap<String, String>) -> Vec<String> {
        match self {
            Reply::Acknowledged(r) => evidence
                .iter()
                .filter(|(k, v)| r.evidence.get(*k) != Some(*v))
                .map(|(k, _)| k.clone())
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn is_refused(&self) -> bool {
        matches!(self, Reply::Refused(_))
    }
}

/// `holder(task)`: the last grant, and whether it is live now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Holder {
    #[serde(flatten)]
    pub grant: Grant,
    pub live: bool,
}

/// `verify(task, fence)`: may a resource server accept work under `fence`?
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verification {
    /// True only when `fence` is the fence of a live lease of a task that is not terminal.
    pub current: bool,
    pub live: bool,
    pub state: State,
    pub current_fence: Option<u64>,
}

/// `gate(task)`: passes only for SUCCEEDED.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReleaseGate {
    pub task: TaskId,
    pub state: State,
    pub passed: bool,
    pub release_blocking: bool,
    pub run_id: Option<Id>,
    pub executor: Option<Id>,
    pub current_step: u32,
    pub total_steps: u32,
    pub evidence: BTreeMap<String, String>,
    pub error: Option<Value>,
}

/// One page of a list; `next` is the cursor for the following page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// A task whose derived state a sweep persisted (or would, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Swept {
    pub task: TaskId,
    pub from: State,
    pub to: State,
}

/// The largest page a list returns.
pub const MAX_PAGE: usize = 10_000;

/// The most dependents one cascading cancel cancels.
pub const MAX_CASCADE: usize = 10_000;

/// How many tasks one commit of a retention pass prunes.
pub const PRUNE_BATCH: usize = 64;

/// The authority and the registry over one store.
pub struct Authority<S> {
    pub(crate) store: S,
    pub(crate) clock: Arc<dyn Clock>,
    /// Asked before an operator's act that is not one request.
    pub(crate) permits: Option<Arc<dyn crate::access::Permits>>,
    /// What the store tells of its work (benchmarks, metrics).
    meter: Option<Arc<dyn crate::store::Meter>>,
    /// Signs the fences this authority grants (`BATON_FENCE_KEY`).
    fence_keys: Option<Arc<crate::fencing::FenceKeys>>,
}

impl<S: fmt::Debug> fmt::Debug for Authority<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authority")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<S: Store> Authority<S> {
    pub fn new(store: S, clock: Arc<dyn Clock>) -> Self {
        Authority {
            store,
            clock,
            permits: None,
            meter: None,
            fence_keys: None,
        }
    }

    /// This authority signs the fences it grants with `keys`' first key:
    /// guards holding the keys then admit only its tokens.
    pub fn with_fence_keys(mut self, keys: Arc<crate::fencing::FenceKeys>) -> Self {
        self.fence_keys = Some(keys);
        self
    }

    /// The signed token for `task`'s attempt under `fence`: this
    /// authority's own signature when it has keys, else the store's signer
    /// (a server's), else none.
    pub async fn fence_token(&self, task: &TaskId, fence: u64) -> Result<Option<String>> {
        match &self.fence_keys {
            Some(k) => Ok(Some(k.sign(task.as_str(), fence))),
            None if self.store.capabilities().signs_fences => {
                self.store.fence_token(task, fence).await
            }
            None => Ok(None),
        }
    }

    /// Whether this authority signs fences itself.
    pub fn signs_fences(&self) -> bool {
        self.fence_keys.is_some()
    }

    /// This authority asks `permits` before an operator's act that is not
    /// one request (a sweep): a store that authenticates its callers.
    pub fn with_permits(mut self, permits: Arc<dyn crate::access::Permits>) -> Self {
        self.permits = Some(permits);
        self
    }

    /// This authority's store tells its work through `meter`.
    pub fn with_meter(mut self, meter: Arc<dyn crate::store::Meter>) -> Self {
        self.meter = Some(meter);
        self
    }

    /// What the store tells of its work, if it was given.
    pub fn meter(&self) -> Option<&dyn crate::store::Meter> {
        self.meter.as_deref()
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// This authority's clock, for a request to carry to where its
    /// decision is serialized.
    pub fn commit_clock(&self) -> crate::time::CommitClock {
        crate::time::CommitClock::new(self.clock.clone())
    }

    /// Submits any request with preconditions: the one path every write takes.
    pub async fn submit(
        &self,
        task: &TaskId,
        request: Request,
        pre: Preconditions,
    ) -> Result<Reply> {
        let op = Operation {
            task: task.clone(),
            request,
            pre,
            now: self.clock.now(),
            clock: self.commit_clock(),
        };
        // A caller proved here is admitted first (a request it may not
        // make is not permitted, however malformed); then bad input is
        // refused before touching the store: it changes nothing.
        let op = match &self.permits {
            Some(p) => p.admit(op)?,
            None => op,
        };
        op.request.validate()?;
        let decision = self.store.apply(op).await?;
        reply(decision)
    }
}

/// The most reports one batch may carry.
pub const MAX_REPORTS: usize = 1000;

impl<S: Store> Authority<S> {
    /// A holder's reports of many grants (`complete`, `fail`, `release`
    /// of bare tasks), each decided on its own fence (a refusal of one
    /// refuses no other), committed together where the store can: one
    /// fsync for the batch. The replies in the order of `reports`.
    pub async fn report_many(&self, reports: Vec<(TaskId, Request)>) -> Result<Vec<Reply>> {
        if reports.is_empty() || reports.len() > MAX_REPORTS {
            return Err(Error::invalid(
                "reports",
                format!(
                    "must hold 1 to {MAX_REPORTS} reports (got {})",
                    reports.len()
                ),
            ));
        }
        let now = self.clock.now();
        let mut ops = Vec::with_capacity(reports.len());
        for (i, (task, request)) in reports.into_iter().enumerate() {
            if !matches!(
                request,
                Request::Complete { .. } | Request::Fail { .. } | Request::Release { .. }
            ) {
                return Err(Error::invalid(
                    "reports",
                    format!(
                        "report {i} is a {}: a batch reports a grant's complete, fail or release",
                        request.kind()
                    ),
                ));
            }
            let op = Operation {
                task,
                request,
                pre: Preconditions::none(),
                now,
                clock: self.commit_clock(),
            };
            let op = match &self.permits {
                Some(p) => p.admit(op)?,
                None => op,
            };
            op.request.validate()?;
            ops.push(op);
        }
        self.store
            .apply_each(ops)
            .await?
            .into_iter()
            .map(reply)
            .collect()
    }
}

/// The reply a decision comes to (bad input is the error).
pub fn reply(decision: crate::decide::Decision) -> Result<Reply> {
    {
        match decision.verdict {
            Verdict::Commit(c) => Ok(Reply::Committed(c.record)),
            Verdict::Ack => match decision.current {
                Some(r) => Ok(Reply::Acknowledged(r)),
                None => Ok(Reply::Refused(Refusal::NotFound)),
            },
            Verdict::Refuse { refusal, .. } => Ok(Reply::Refused(refusal)),
            Verdict::Invalid(e) => Err(e),
        }
    }
}

impl<S: Store> Authority<S> {
    pub(crate) async fn send(&self, task: &TaskId, request: Request) -> Result<Reply> {
        self.submit(task, request, Preconditions::none()).await
    }

    // ---- the authority (SPEC §4) ----

    /// Claims a bare task (created if absent). `ttl_ms`: default 30 s.
    pub async fn claim(
        &self,
        task: &TaskId,
        owner: &OwnerId,
        ttl_ms: Option<u64>,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::Claim {
                owner: owner.clone(),
                ttl_ms,
                lock_delay_ms: None,
            },
        )
        .await
    }

    /// Claims a bare task like [`Authority::claim`], with a lock delay: if
    /// this grant's lease expires without a release, no one is granted the
    /// task until `lock_delay_ms` after (judged by the store's clock).
    pub async fn claim_with_lock_delay(
        &self,
        task: &TaskId,
        owner: &OwnerId,
        ttl_ms: Option<u64>,
        lock_delay_ms: u64,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::Claim {
                owner: owner.clone(),
                ttl_ms,
                lock_delay_ms: Some(lock_delay_ms),
            },
        )
        .await
    }

    pub async fn renew(
        &self,
        task: &TaskId,
        owner: &OwnerId,
        fence: u64,
        ttl_ms: Option<u64>,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::Renew {
                owner: owner.clone(),
                fence,
                ttl_ms,
            },
        )
        .await
    }

    pub async fn release(&self, task: &TaskId, owner: &OwnerId, fence: u64) -> Result<Reply> {
        self.send(
            task,
            Request::Release {
                owner: owner.clone(),
                fence,
            },
        )
        .await
    }

    pub async fn recover(
        &self,
        task: &TaskId,
        owner: &OwnerId,
        ttl_ms: Option<u64>,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::Recover {
                owner: owner.clone(),
                ttl_ms,
            },
        )
        .await
    }

    pub async fn complete(&self, task: &TaskId, owner: &OwnerId, fence: u64) -> Result<Reply> {
        self.send(
            task,
            Request::Complete {
                owner: owner.clone(),
                fence,
            },
        )
        .await
    }

    pub async fn fail(
        &self,
        task: &TaskId,
        owner: &OwnerId,
        fence: u64,
        error: Option<Value>,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::Fail {
                owner: owner.clone(),
                fence,
                error,
            },
        )
        .await
    }

    /// The holder cancels its own grant.
    pub async fn cancel(&self, task: &TaskId, owner: &OwnerId, fence: u64) -> Result<Reply> {
        self.send(
            task,
            Request::Cancel {
                by: Actor::Worker(owner.clone()),
                fence: Some(fence),
                force: false,
            },
        )
        .await
    }

    /// An operator cancels a task. One whose lease is live is not ended
    /// under its holder: the holder is asked to stop (`cancel_requested`,
    /// seen in its next renewal's answer), and the task becomes CANCELLED
    /// when the holder gives it back or its lease ends. `force` ends it at
    /// once (the holder's later reports are refused).
    pub async fn cancel_with(&self, task: &TaskId, by: Actor, force: bool) -> Result<Reply> {
        self.send(
            task,
            Request::Cancel {
                by,
                fence: None,
                force,
            },
        )
        .await
    }

    /// [`Authority::cancel_with`], then every task that depends on `task`,
    /// at any depth, that has not ended: each cancelled the same way (a
    /// held one asked to stop), each in a commit of its own. The cascade
    /// also starts from a task that has already ended without success
    /// (FAILED, STALLED, NOT_STARTED, CANCELLED), so the tasks that now
    /// can never run are cancelled with it. Returns the task's own answer
    /// and each dependent's, in the order they were cancelled.
    pub async fn cancel_cascade(
        &self,
        task: &TaskId,
        by: Actor,
        force: bool,
    ) -> Result<(Reply, Vec<(TaskId, Reply)>)> {
        let first = self.cancel_with(task, by.clone(), force).await?;
        let ended_unsuccessfully = match &first {
            Reply::Committed(_) | Reply::Acknowledged(_) => true,
            Reply::Refused(Refusal::IllegalTransition { state, .. }) => matches!(
                state,
                State::Failed | State::Stalled | State::NotStarted | State::Cancelled
            ),
            Reply::Refused(_) => false,
        };
        let mut cascaded = Vec::new();
        if !ended_unsuccessfully {
            return Ok((first, cascaded));
        }
        let now = self.clock.now();
        let mut seen: std::collections::BTreeSet<TaskId> = std::collections::BTreeSet::new();
        let mut queue: std::collections::VecDeque<TaskId> = std::collections::VecDeque::new();
        if let Some(s) = self.store.read(task, now).await? {
            queue.extend(s.record.dependents);
        }
        while let Some(t) = queue.pop_front() {
            if !seen.insert(t.clone()) || seen.len() > MAX_CASCADE {
                continue;
            }
            let Some(s) = self.store.read(&t, self.clock.now()).await? else {
                continue;
            };
            queue.extend(s.record.dependents.iter().cloned());
            if derive(&s.record, s.judged, self.clock.now())
                .state
                .is_terminal()
            {
                continue;
            }
            let r = self.cancel_with(&t, by.clone(), force).await?;
            cascaded.push((t, r));
        }
        Ok((first, cascaded))
    }

    /// An operator cancels a task, cooperatively ([`Authority::cancel_with`]).
    pub async fn cancel_as(&self, task: &TaskId, by: Actor) -> Result<Reply> {
        self.send(
            task,
            Request::Cancel {
                by,
                fence: None,
                force: false,
            },
        )
        .await
    }

    /// The last grant with whether it is live; `Refused(NotFound)` for an unknown task.
    pub async fn holder(
        &self,
        task: &TaskId,
    ) -> Result<std::result::Result<Option<Holder>, Refusal>> {
        let now = self.clock.now();
        let Some(snap) = self.store.read(task, now).await? else {
            return Ok(Err(Refusal::NotFound));
        };
        let rec = derive(&snap.record, snap.judged, now);
        let live = snap.lease_live() && rec.state.is_held();
        Ok(Ok(Grant::of(&rec).map(|grant| Holder { grant, live })))
    }

    /// Whether `fence` is the fence of a live lease of a task that is not terminal.
    pub async fn verify(
        &self,
        task: &TaskId,
        fence: u64,
    ) -> Result<std::result::Result<Verification, Refusal>> {
        if fence == 0 {
            return Err(Error::invalid("fence", "must be a positive whole number"));
        }
        let now = self.clock.now();
        let Some(snap) = self.store.read(task, now).await? else {
            return Ok(Err(Refusal::NotFound));
        };
        let rec = derive(&snap.record, snap.judged, now);
        let live = snap.lease_live() && rec.state.is_held();
        let current_fence = rec.current_fence();
        Ok(Ok(Verification {
            current: live && current_fence == Some(fence) && !rec.state.is_terminal(),
            live,
            state: rec.state,
            current_fence,
        }))
    }

    // ---- the registry (SPEC §6) ----

    pub async fn declare(&self, manifest: Manifest) -> Result<Reply> {
        let task = manifest.task_id.clone();
        self.send(&task, Request::Declare { manifest }).await
    }

    pub async fn register(&self, task: &TaskId, run_id: &Id) -> Result<Reply> {
        self.send(
            task,
            Request::Register {
                run_id: run_id.clone(),
            },
        )
        .await
    }

    pub async fn task_claim(
        &self,
        task: &TaskId,
        run_id: &Id,
        executor: &Id,
        ttl_ms: Option<u64>,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::TaskClaim {
                run_id: run_id.clone(),
                executor: executor.clone(),
                ttl_ms,
            },
        )
        .await
    }

    pub async fn start(
        &self,
        task: &TaskId,
        run_id: &Id,
        executor: &Id,
        fence: u64,
    ) -> Result<Reply> {
        self.send(
            task,
            Request::Start {
                run_id: run_id.clone(),
                executor: executor.clone(),
                fence,
            },
        )
        .await
    }

    pub async fn heartbeat(
        &self,
        task: &TaskId,
        run_id: &Id,
        executor: &Id,
        fence: u64,
        step: u32,
        ttl_ms: Option<u64>,
    ) -> Result<Reply> {
        let request = Request::Heartbeat {
            run_id: run_id.clone(),
            executor: executor.clone(),
            fence,
            step,
            ttl_ms,
        };
        self.send(task, request).await
    }

    pub async fn succeed(
        &self,
        task: &TaskId,
        run_id: &Id,
        executor: &Id,
        fence: u64,
        evidence: BTreeMap<String, String>,
    ) -> Result<Reply> {
        let request = Request::Succeed {
            run_id: run_id.clone(),
            executor: executor.clone(),
            fence,
            evidence,
        };
        self.send(task, request).await
    }

    pub async fn task_fail(
        &self,
        task: &TaskId,
        run_id: &Id,
        executor: &Id,
        fence: u64,
        error: Value,
    ) -> Result<Reply> {
        let request = Request::TaskFail {
            run_id: run_id.clone(),
            executor: executor.clone(),
            fence,
            error,
        };
        self.send(task, request).await
    }

    pub async fn retry(&self, task: &TaskId, run_id: &Id) -> Result<Reply> {
        self.send(
            task,
            Request::Retry {
                run_id: run_id.clone(),
            },
        )
        .await
    }

    pub async fn redispatch(&self, task: &TaskId, by: Actor, iteration: u64) -> Result<Reply> {
        self.send(task, Request::Redispatch { by, iteration }).await
    }

    pub async fn finalize(&self, task: &TaskId, by: Actor, error: Option<Value>) -> Result<Reply> {
        self.send(task, Request::Finalize { by, error }).await
    }

    /// Merges metadata into the record (never a state), guarded by `pre`.
    pub async fn annotate(
        &self,
        task: &TaskId,
        actor: &Id,
        metadata: BTreeMap<String, Value>,
        pre: Preconditions,
    ) -> Result<Reply> {
        self.submit(
            task,
            Request::Annotate {
                actor: actor.clone(),
                metadata,
            },
            pre,
        )
        .await
    }

    // ---- reads: they never write ----

    /// The task as it is now (derived: an expired lease shows as such).
    pub async fn get(&self, task: &TaskId) -> Result<Option<TaskRecord>> {
        let now = self.clock.now();
        Ok(self
            .store
            .read(task, now)
            .await?
            .map(|s| derive(&s.record, s.judged, now)))
    }

    /// The release gate: passes only for SUCCEEDED.
    pub async fn gate(&self, task: &TaskId) -> Result<std::result::Result<ReleaseGate, Refusal>> {
        let Some(r) = self.get(task).await? else {
            return Ok(Err(Refusal::NotFound));
        };
        let passed = r.state == State::Succeeded;
        Ok(Ok(ReleaseGate {
            task: r.task.clone(),
            state: r.state,
            passed,
            release_blocking: !passed,
            run_id: r.run_id.clone(),
            executor: r.executor.clone(),
            current_step: r.current_step,
            total_steps: r.total_steps(),
            evidence: r.evidence.clone(),
            error: r.error.clone(),
        }))
    }

    /// Tasks by derived state, in task-id order, paged by task id.
    /// Records that hold a setting ([`TaskRecord::holds_setting`]: a key's
    /// limit, a queue's policy, a schedule, the refusal log) are not tasks
    /// and are left out; `get` still reads each by its id.
    pub async fn list(
        &self,
        state: Option<State>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>> {
        self.list_in(state, None, after, limit).await
    }

    /// [`Authority::list`] of the tasks placed in `queue` (a graph task's
    /// queue; bare tasks have none) when it is given.
    pub async fn list_in(
        &self,
        state: Option<State>,
        queue: Option<&Id>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<TaskRecord>> {
        let limit = limit.clamp(1, MAX_PAGE);
        let now = self.clock.now();
        let clauses = state.map(Clause::for_derived);
        let mut cursor = after.map(|a| Id::parse("after", a)).transpose()?;
        let mut items = Vec::new();
        // Each round advances the cursor past every record it returned, so the loop ends.
        loop {
            let want = limit - items.len();
            let query = ListQuery {
                after: cursor.clone(),
                limit: want,
                clauses: clauses.clone(),
                now,
            };
            let batch = self.store.list(&query).await?;
            let exhausted = batch.len() < want;
            for snap in batch {
                cursor = Some(snap.record.task.clone());
                if snap.record.holds_setting() {
                    continue;
                }
                let rec = derive(&snap.record, snap.judged, now);
                let placed = |q: &Id| rec.node.as_ref().is_some_and(|n| &n.spec.queue == q);
                if state.is_none_or(|s| rec.state == s) && queue.is_none_or(placed) {
                    items.push(rec);
                }
            }
            if exhausted {
                return Ok(Page { items, next: None });
            }
            if items.len() >= limit {
                return Ok(Page {
                    items,
                    next: cursor.map(|c| c.to_string()),
                });
            }
        }
    }

    /// Events (of one task, or of the whole store in one total order), paged by sequence number.
    pub async fn events(
        &self,
        task: Option<&TaskId>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Event>> {
        let limit = limit.clamp(1, MAX_PAGE);
        let after = parse_cursor(after)?;
        let items = self.store.events(task, after, limit).await?;
        let next = (items.len() == limit)
            .then(|| items.last().map(|e| e.seq.to_string()))
            .flatten();
        Ok(Page { items, next })
    }

    /// Notifications not yet acknowledged, paged by outbox sequence.
    pub async fn pending(&self, after: Option<&str>, limit: usize) -> Result<Page<Notification>> {
        let limit = limit.clamp(1, MAX_PAGE);
        let after = parse_cursor(after)?;
        let items = self.store.pending(after, limit).await?;
        let next = (items.len() == limit)
            .then(|| items.last().map(|n| n.seq.to_string()))
            .flatten();
        Ok(Page { items, next })
    }

    /// Acknowledges notifications by intent id; returns how many were newly
    /// acknowledged. Every id must be one baton issues (a UUID, written as
    /// baton writes it); nothing is acknowledged if any is not.
    pub async fn ack(&self, intent_ids: &[String]) -> Result<u64> {
        crate::model::validate_intent_ids(intent_ids)?;
        self.store.ack(intent_ids, self.clock.now()).await
    }
}

/// Parses a page cursor of events or notifications (a sequence number).
pub fn parse_cursor(after: Option<&str>) -> Result<u64> {
    match after {
        None => Ok(0),
        Some(s) => s.parse().map_err(|_| {
            Error::invalid(
                "after",
                "must be a cursor returned by the previous page (a whole number)",
            )
        }),
    }
}

/// A reply as JSON, the one shape the CLI prints and the server answers:
/// the grant (for a request that answers with one, when the record holds
/// one) or the record, with `idempotent`; a refusal as
/// [`refusal_json`].
pub fn reply_json(reply: &Reply, as_grant: bool) -> Value {
    match reply {
        Reply::Refused(r) => refusal_json(r),
        reply => {
            let mut v = match (as_grant, reply.grant()) {
                (true, Some(g)) => serde_json::to_value(&g).unwrap_or(Value::Null),
                _ => serde_json::to_value(reply.record()).unwrap_or(Value::Null),
            };
            v["idempotent"] = Value::Bool(reply.is_idempotent());
            v
        }
    }
}

/// Whether a cascading cancel ([`Authority::cancel_cascade`]) did what it
/// was asked: the task itself was cancelled, or it had already ended and
/// its dependents were (cancelling below a failed task is the point of a
/// cascade from it).
pub fn cascade_proceeded(first: &Reply, cascaded: &[(TaskId, Reply)]) -> bool {
    !first.is_refused() || !cascaded.is_empty()
}

/// A cascading cancel as JSON, the one shape the CLI prints and the server
/// answers: the task's own answer ([`reply_json`]) with `cascaded`, each
/// dependent's task and state (or its refusal, with its task).
pub fn cascade_json(first: &Reply, cascaded: &[(TaskId, Reply)]) -> Value {
    let mut v = reply_json(first, false);
    v["cascaded"] = Value::Array(
        cascaded
            .iter()
            .map(|(t, r)| match r.record() {
                Some(rec) => serde_json::json!({"task": t, "state": rec.state}),
                None => {
                    let mut v = reply_json(r, false);
                    v["task"] = serde_json::json!(t);
                    v
                }
            })
            .collect(),
    );
    v
}

/// A refusal as JSON: its reason and details, with a `message`.
pub fn refusal_json(r: &Refusal) -> Value {
    let mut v =
        serde_json::to_value(r).unwrap_or_else(|_| serde_json::json!({"refused": r.reason()}));
    v["message"] = Value::String(r.to_string());
    v
}
