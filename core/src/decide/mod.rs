//! The transition engine's decision: a pure function of (record, what the
//! store's judge of time says about it, request, preconditions, actor,
//! now). No IO, no clock.
//!
//! A store calls [`decide`] *inside* its atomic commit and applies what it
//! returns: first the settlement (what time already decided: an expired
//! lease, a passed start deadline), then the request's change, or the
//! refusal's CONFLICT_REFUSED event. Reads call [`derive()`] and write nothing.

use crate::error::Error;
use crate::graph::Upstream;
use crate::id::{Id, TaskId};
use crate::model::{
    Actor, Closure, EventDraft, EventKind, Lease, NotificationDraft, PENDING_FENCE, State,
    TaskRecord,
};
use crate::refusal::Refusal;
use crate::request::{DEFAULT_BARE_TTL_MS, Operation, Preconditions, Request, RequestKind};
use crate::time::Timestamp;
use serde_json::{Value, json};

mod build;
mod checks;
mod graph;
mod key;
mod lease;
mod notify;
mod operator;
mod queue;
mod registry;
mod settle;
mod steps;

use build::*;
use checks::*;
pub use graph::{reads_dependencies, upstream_ids};
use lease::{claim_like, create_bare, lease_end};
use notify::finish;
use registry::create_declared;
pub use settle::{derive, settle};

/// A change to commit: the new record with its events and notifications.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    pub record: TaskRecord,
    pub events: Vec<EventDraft>,
    pub notifications: Vec<NotificationDraft>,
    /// The change holds a new grant whose fence the store assigns at commit
    /// ([`PENDING_FENCE`] stands in for it until [`Decision::assign_fence`]).
    pub mints_fence: bool,
    /// Retention: the store removes the task's events and its acknowledged
    /// notifications in the same commit (the record is its tombstone). A
    /// store never lets a sequence or the fence counter go back for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drops_history: bool,
    /// Retention's forgetting: the store removes the record itself (a
    /// tombstone whose time came), so its id is free again. Its history
    /// went when it was pruned; the fence counter and the sequences never
    /// go back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgets: bool,
}

/// What the request itself comes to.
// One Verdict is made per request and moved once; boxing the change would
// only add an allocation to the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Commit this change.
    Commit(Change),
    /// Nothing to change: an idempotent repeat (or a settle with nothing
    /// more to do). The answer is the current record.
    Ack,
    /// A typed no. `conflict` is the CONFLICT_REFUSED event to record, if any.
    Refuse {
        refusal: Refusal,
        conflict: Option<EventDraft>,
    },
    /// The input broke a rule that depends on the record (a TTL above the
    /// heartbeat timeout, a step that goes back). Nothing is written.
    Invalid(Error),
}

/// What a decision does to the task's lease, so a store whose leases live
/// in the engine (etcd) applies it and never infers it from two records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseEffect {
    /// A new grant (a new fence): a lease of `ttl_ms` from now.
    Granted { ttl_ms: u64 },
    /// The same grant, renewed (renew, heartbeat): a lease of `ttl_ms` from now.
    Extended { ttl_ms: u64 },
    /// The stored grant ends (release, a terminal, an expiry written down).
    Ended,
    /// Nothing happens to the lease.
    Unchanged,
}

/// What the store's judge of time says about a stored record, read in the
/// same commit (or at the same revision) as the record. Every time-based
/// rule reads these facts and never compares the caller's clock with a
/// stored time, so a store whose engine keeps time (etcd) decides every
/// deadline itself and a client with a skewed clock can neither advance
/// nor delay one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Judged {
    /// The last grant's lease still holds.
    pub lease_holds: bool,
    /// The start deadline of [`TaskRecord::start_deadline_at`] has passed:
    /// the one a waiting task waits on, or, for a held task, the one it
    /// waits on once its lease ends.
    pub deadline_passed: bool,
    /// The last grant's lock delay has not run out: its lease ended less
    /// than its `lock_delay_ms` ago (or has not ended). Only consulted once
    /// the lease expired unreleased.
    pub lock_delay_holds: bool,
}

impl Judged {
    /// The facts judged from the record's own stored times at `now`: the
    /// judge of stores that keep no clock of their own (SQLite, sled,
    /// memory), where the caller's clock is the store's.
    pub fn at(record: &TaskRecord, now: Timestamp) -> Judged {
        let lease = record.lease.as_ref();
        Judged {
            lease_holds: lease.is_some_and(|l| now < l.expires_at),
            deadline_passed: record.start_deadline_at().is_some_and(|d| d <= now),
            lock_delay_holds: lease.is_some_and(|l| {
                l.lock_delay_ms > 0 && now < l.expires_at.plus_ms(l.lock_delay_ms)
            }),
        }
    }

    /// [`Judged::at`] for a record that may not exist.
    pub fn of(record: Option<&TaskRecord>, now: Timestamp) -> Judged {
        record.map_or_else(Judged::default, |r| Judged::at(r, now))
    }
}

/// What a decision does to a timer the store keeps for a task (the start
/// deadline, the lock delay), so a store whose engine keeps time (etcd: a
/// key on a lease) restarts or drops it and never infers it from two records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerEffect {
    /// The timer runs out `in_ms` from now.
    Set { in_ms: u64 },
    /// The timer is dropped.
    Cleared,
    /// Nothing happens to the timer.
    Unchanged,
}

/// How a store can hold leases, applied by the decision to every TTL once
/// (defaults resolved, then rounded up to the granularity, then raised to
/// the minimum), so the expiry a grant reports is the one the store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRules {
    /// TTLs are whole multiples of this (etcd leases: whole seconds).
    pub granularity_ms: u64,
    /// The shortest lease the store can honour.
    pub min_ms: u64,
}

impl Default for LeaseRules {
    /// Millisecond leases from 1 ms: the embedded stores.
    fn default() -> Self {
        LeaseRules {
            granularity_ms: 1,
            min_ms: 1,
        }
    }
}

impl LeaseRules {
    /// The TTL a store with these rules gives a request for `ttl_ms`.
    pub fn effective(self, ttl_ms: u64) -> u64 {
        let g = self.granularity_ms.max(1);
        ttl_ms.div_ceil(g).saturating_mul(g).max(self.min_ms)
    }
}

/// Everything a store must apply for one request, in one atomic commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    /// The record as the request saw it (after settlement), if the task exists.
    pub current: Option<TaskRecord>,
    /// Derived changes (lease expiry, start deadline) persisted before the request.
    pub settle: Option<Change>,
    pub verdict: Verdict,
    /// What the commit does to the lease.
    pub lease: LeaseEffect,
    /// What the commit does to the start deadline: `Set` when a wait
    /// begins (declare, register, release, retry, redispatch: the start
    /// deadline) or a grant is made or renewed (its lease's length plus the
    /// start deadline, which the wait after an expiry counts from),
    /// `Cleared` when the task ends.
    pub deadline: TimerEffect,
    /// What the commit does to the lock delay: `Set` to the lease's length
    /// plus the lock delay with each grant or renewal that has one,
    /// `Cleared` when the grant ends cleanly (release, an end) or a new one
    /// has none; an expiry leaves it running.
    pub lock_delay: TimerEffect,
    /// Requests the store must decide and apply after this one, in the
    /// same commit (each on the state this one left): a `Link` on each
    /// dependency of a graph task this creates, a `Wake` of each dependent
    /// of a task this makes SUCCEEDED. Their own follow-ups are none.
    pub follow_ups: Vec<(TaskId, Request)>,
}

impl Decision {
    /// The record to store, if anything changes.
    pub fn record_to_write(&self) -> Option<&TaskRecord> {
        match &self.verdict {
            Verdict::Commit(c) => Some(&c.record),
            _ => self.settle.as_ref().map(|c| &c.record),
        }
    }

    /// The events to append, in order.
    pub fn events(&self) -> impl Iterator<Item = &EventDraft> {
        let settle = self.settle.iter().flat_map(|c| c.events.iter());
        let main: Box<dyn Iterator<Item = &EventDraft>> = match &self.verdict {
            Verdict::Commit(c) => Box::new(c.events.iter()),
            Verdict::Refuse {
                conflict: Some(e), ..
            } => Box::new(std::iter::once(e)),
            _ => Box::new(std::iter::empty()),
        };
        settle.chain(main)
    }

    /// The notifications to put in the outbox, in order.
    pub fn notifications(&self) -> impl Iterator<Item = &NotificationDraft> {
        let settle = self.settle.iter().flat_map(|c| c.notifications.iter());
        let main = match &self.verdict {
            Verdict::Commit(c) => c.notifications.as_slice(),
            _ => &[],
        };
        settle.chain(main.iter())
    }

    /// The decision as its caller needs it once it is committed: the
    /// verdict with its record (the current one only for an
    /// acknowledgement) and the settled record, without the events,
    /// notifications and follow-ups the store wrote beside them (they are
    /// read with `events` and `pending`). What a server sends back.
    pub fn answer_only(mut self) -> Decision {
        self.follow_ups.clear();
        if let Some(s) = &mut self.settle {
            s.events.clear();
            s.notifications.clear();
        }
        match &mut self.verdict {
            Verdict::Commit(c) => {
                c.events.clear();
                c.notifications.clear();
                self.current = None;
            }
            Verdict::Refuse { conflict, .. } => {
                *conflict = None;
                self.current = None;
            }
            Verdict::Invalid(_) => self.current = None,
            Verdict::Ack => {}
        }
        self
    }

    /// Whether the commit needs anything written at all.
    pub fn writes(&self) -> bool {
        self.record_to_write().is_some() || self.events().next().is_some()
    }

    /// Whether the store removes the task's events and acknowledged
    /// notifications in this commit (a prune).
    pub fn drops_history(&self) -> bool {
        matches!(&self.verdict, Verdict::Commit(c) if c.drops_history)
    }

    /// Whether the store removes the record in this commit instead of
    /// writing it (a tombstone forgotten).
    pub fn forgets(&self) -> bool {
        matches!(&self.verdict, Verdict::Commit(c) if c.forgets)
    }

    /// Whether the store must assign a new fence at commit.
    pub fn mints_fence(&self) -> bool {
        matches!(&self.verdict, Verdict::Commit(c) if c.mints_fence)
    }

    /// Fills in the fence the store assigned, in the record, its events and
    /// its notifications alike.
    pub fn assign_fence(&mut self, fence: u64) {
        if let Verdict::Commit(c) = &mut self.verdict {
            if !c.mints_fence {
                return;
            }
            if let Some(lease) = c.record.lease.as_mut()
                && lease.fence == PENDING_FENCE
            {
                lease.fence = fence;
            }
            for e in &mut c.events {
                if e.fence == Some(PENDING_FENCE) {
                    e.fence = Some(fence);
                }
            }
            for n in &mut c.notifications {
                if n.payload.get("fence") == Some(&json!(PENDING_FENCE)) {
                    n.payload["fence"] = json!(fence);
                }
            }
        }
    }
}

/// Decides one request. Pure: the same inputs give the same decision.
///
/// `current` is the stored record (`None` if the task does not exist) and
/// `judged` what the store's judge of time says about it ([`Judged::at`]
/// from the stored times and `op.now`, or the engine's own leases).
///
/// No dependency is known to this form: a grant of a graph task with
/// dependencies is refused `not_ready` (see [`decide_in`]).
pub fn decide(op: &Operation, current: Option<&TaskRecord>, judged: Judged) -> Decision {
    decide_in(
        op,
        current,
        judged,
        LeaseRules::default(),
        &Upstream::none(),
    )
}

/// [`decide`] for a store whose leases follow `rules` (its capabilities).
pub fn decide_with(
    op: &Operation,
    current: Option<&TaskRecord>,
    judged: Judged,
    rules: LeaseRules,
) -> Decision {
    decide_in(op, current, judged, rules, &Upstream::none())
}

/// The whole decision: `upstream` holds the states of the tasks
/// [`crate::decide::upstream_ids`] names for this request, read by the store
/// in the same commit. A dependency not in it counts as not done, so a
/// store that reads too little refuses a grant and never makes one early.
pub fn decide_in(
    op: &Operation,
    current: Option<&TaskRecord>,
    judged: Judged,
    rules: LeaseRules,
    upstream: &Upstream,
) -> Decision {
    // A task's time never runs backwards: a caller whose clock is behind
    // the record's last write (processes' clocks differ, within the skew
    // a store allows) decides at that write's time, so what it stamps
    // follows what is stamped already.
    if let Some(r) = current
        && r.updated_at > op.now
    {
        let later = Operation {
            now: r.updated_at,
            ..op.clone()
        };
        return decide_in(&later, current, judged, rules, upstream);
    }
    let settle = current.and_then(|r| settle(r, judged, op.now));
    let rec = settle.as_ref().map(|c| &c.record).or(current);
    let live = rec.is_some_and(|r| live_lease(r, judged.lease_holds));
    debug_assert!(
        !live || rec.is_some_and(|r| r.lease.is_some()),
        "a live lease is a stored lease"
    );
    let verdict = match op.request.validate() {
        Err(e) => Verdict::Invalid(e),
        Ok(()) => match rec.and_then(|r| lock_delay(op, r, live, judged)) {
            Some(refusal) => refuse(refusal),
            None => decide_request(op, rec, live, rules, upstream),
        },
    };
    let mut d = Decision {
        current: rec.cloned(),
        settle,
        verdict,
        lease: LeaseEffect::Unchanged,
        deadline: TimerEffect::Unchanged,
        lock_delay: TimerEffect::Unchanged,
        follow_ups: Vec::new(),
    };
    key::park(&mut d, op.now);
    d.lease = lease_effect(&d, current, op.now);
    d.deadline = deadline_effect(&d, op.now);
    d.lock_delay = lock_delay_effect(&d);
    graph::stamp_ready(&mut d.verdict, op.now);
    d.follow_ups = graph::follow_ups(op, &d);
    d.follow_ups.extend(key::follow_ups(op, current, &d));
    d.follow_ups.extend(key::unparked(op, &d, upstream));
    d
}

/// Whether `record`'s lease is live, given whether the store's judge of
/// time (the stored expiry at `now`, or an engine's lease) says its lease
/// holds: only a held state has a live lease. The one definition every
/// store and read uses.
pub fn live_lease(record: &TaskRecord, lease_holds: bool) -> bool {
    lease_holds && record.state.is_held()
}

/// What the decision does to the lease: a minted fence is a new grant; the
/// same grant with a new expiry is extended; a stored grant whose task
/// leaves the held states ends.
fn lease_effect(d: &Decision, stored: Option<&TaskRecord>, now: Timestamp) -> LeaseEffect {
    let Some(after) = d.record_to_write() else {
        return LeaseEffect::Unchanged;
    };
    let ttl_ms = |r: &TaskRecord| {
        r.lease.as_ref().map_or(0, |l| {
            u64::try_from(l.expires_at.as_millis() - now.as_millis()).unwrap_or(0)
        })
    };
    let was_held = stored.is_some_and(|r| r.state.is_held());
    if d.mints_fence() {
        debug_assert!(after.state.is_held(), "a new fence is a held grant");
        return LeaseEffect::Granted {
            ttl_ms: ttl_ms(after),
        };
    }
    if after.state.is_held() {
        let before = d
            .current
            .as_ref()
            .and_then(|r| r.lease.as_ref())
            .map(|l| l.expires_at);
        let now_expires = after.lease.as_ref().map(|l| l.expires_at);
        if before != now_expires {
            return LeaseEffect::Extended {
                ttl_ms: ttl_ms(after),
            };
        }
        return LeaseEffect::Unchanged;
    }
    if was_held {
        LeaseEffect::Ended
    } else {
        LeaseEffect::Unchanged
    }
}

/// What the decision does to the start deadline of a declared task: a
/// grant made or renewed restarts it at the lease's end plus the start
/// deadline; a wait the request begins (a new `deadline_from`) restarts it
/// in full; a task that leaves the waiting and held states drops it. A wait
/// that begins because a lease expired keeps the deadline its last grant
/// set, which counts from the expiry.
fn deadline_effect(d: &Decision, now: Timestamp) -> TimerEffect {
    let Some(after) = d.record_to_write() else {
        return TimerEffect::Unchanged;
    };
    let Some(m) = &after.manifest else {
        return TimerEffect::Unchanged;
    };
    match after.state {
        State::Claimed | State::Running => match d.lease {
            LeaseEffect::Granted { ttl_ms } | LeaseEffect::Extended { ttl_ms } => {
                TimerEffect::Set {
                    in_ms: ttl_ms.saturating_add(m.start_deadline_ms()),
                }
            }
            LeaseEffect::Ended | LeaseEffect::Unchanged => TimerEffect::Unchanged,
        },
        State::Declared | State::Registered => {
            // Compared with the record after settlement, so the wait an
            // expiry began (which the last grant's deadline already counts)
            // is the same wait.
            let same_wait = d.current.as_ref().is_some_and(|before| {
                matches!(before.state, State::Declared | State::Registered)
                    && before.deadline_from == after.deadline_from
            });
            match after.due_at() {
                _ if same_wait => TimerEffect::Unchanged,
                Some(due) => TimerEffect::Set {
                    in_ms: u64::try_from(due.as_millis() - now.as_millis()).unwrap_or(0),
                },
                None => TimerEffect::Cleared,
            }
        }
        _ => TimerEffect::Cleared,
    }
}

/// A grant request on a task whose last lease expired without a release,
/// while that lease's lock delay holds (as the store judges it): refused,
/// so a holder that vanished has time to die before anyone else runs.
fn lock_delay(op: &Operation, rec: &TaskRecord, live: bool, judged: Judged) -> Option<Refusal> {
    let grant = matches!(
        op.request,
        Request::Claim { .. } | Request::Recover { .. } | Request::TaskClaim { .. }
    );
    let lease = rec.lease.as_ref()?;
    (grant && !live && rec.state == State::Registered && lease.expired && judged.lock_delay_holds)
        .then(|| Refusal::LockDelay {
            fence: lease.fence,
            until: lease.expires_at.plus_ms(lease.lock_delay_ms),
        })
}

/// What the decision does to the lock delay (see [`Decision::lock_delay`]).
fn lock_delay_effect(d: &Decision) -> TimerEffect {
    let Some(after) = d.record_to_write() else {
        return TimerEffect::Unchanged;
    };
    match (after.lease.as_ref(), d.lease) {
        (Some(l), LeaseEffect::Granted { ttl_ms } | LeaseEffect::Extended { ttl_ms })
            if l.lock_delay_ms > 0 =>
        {
            TimerEffect::Set {
                in_ms: ttl_ms.saturating_add(l.lock_delay_ms),
            }
        }
        (_, LeaseEffect::Granted { .. } | LeaseEffect::Extended { .. }) => TimerEffect::Cleared,
        // An expiry keeps it running: it counts from the lease's end.
        (Some(l), LeaseEffect::Ended) if l.expired => TimerEffect::Unchanged,
        (_, LeaseEffect::Ended) => TimerEffect::Cleared,
        (_, LeaseEffect::Unchanged) => TimerEffect::Unchanged,
    }
}

/// The queue a scope judges `op` by: the task's, as the commit read it
/// (the queue a graph's add puts it in, before it exists); a queue's
/// policy record by the queue it sets.
fn scoped_queue<'a>(op: &'a Operation, rec: Option<&'a TaskRecord>) -> Option<&'a str> {
    if let Some(n) = rec.and_then(|r| r.node.as_ref()) {
        return Some(n.spec.queue.as_str());
    }
    match &op.request {
        Request::Add { node } => Some(node.queue.as_str()),
        Request::QueuePolicy { .. } | Request::QueuePause { .. } => {
            op.task.as_str().strip_prefix(crate::graph::QUEUE_PREFIX)
        }
        _ => None,
    }
}

fn decide_request(
    op: &Operation,
    rec: Option<&TaskRecord>,
    live: bool,
    rules: LeaseRules,
    upstream: &Upstream,
) -> Verdict {
    let req = &op.request;
    let actor = req.actor();
    // Authority first, so a refusal says why rather than blaming the state.
    if matches!(
        req,
        Request::Redispatch { .. }
            | Request::Finalize { .. }
            | Request::Cancel { fence: None, .. }
            | Request::Limit { .. }
            | Request::QueuePolicy { .. }
            | Request::QueuePause { .. }
    ) && !actor.is_operator()
    {
        return refuse(Refusal::OperatorRequired {
            request: req.kind(),
        });
    }
    if let Request::Declare { manifest } = req
        && manifest.task_id != op.task
    {
        return Verdict::Invalid(Error::invalid(
            "task_id",
            format!(
                "the manifest declares {:?}, not {:?}",
                manifest.task_id.as_str(),
                op.task.as_str()
            ),
        ));
    }
    if let Some(scope) = &op.pre.within
        && !scope.admits(op.task.as_str(), scoped_queue(op, rec))
    {
        return Verdict::Invalid(scope.refusal(op.task.as_str()));
    }
    if let Some(refusal) = check_preconditions(&op.pre, rec) {
        return refuse(refusal);
    }
    if matches!(
        req,
        Request::Limit { .. }
            | Request::KeyHold { .. }
            | Request::KeyDrop { .. }
            | Request::KeyPark { .. }
    ) {
        return key::decide(op, rec, upstream);
    }
    if let Request::QueuePolicy { by, retry } = req {
        return queue::decide(op, rec, by, queue::Change::Retry(*retry));
    }
    if let Request::QueuePause { by, paused } = req {
        return queue::decide(op, rec, by, queue::Change::Paused(*paused));
    }
    if let Request::NoteRefusals { notes } = req {
        return queue::note_refusals(op, rec, notes);
    }
    if let Request::ScheduleTicked { failure } = req {
        return graph::schedule_ticked(op, rec, failure.as_ref());
    }
    if rec.is_none()
        && let Some(v) = key::reserved(op).or_else(|| queue::reserved(op))
    {
        return v;
    }
    if matches!(req, Request::Prune { .. }) {
        if !actor.is_operator() && actor != Actor::System {
            return refuse(Refusal::OperatorRequired {
                request: req.kind(),
            });
        }
        return match rec {
            Some(r) => operator::prune(r, req, op.now),
            None => refuse(Refusal::NotFound),
        };
    }
    if let Some(r) = rec
        && let Some(at) = r.pruned_at
    {
        // A tombstone: a new dependent's link asks nothing of it.
        return match req {
            Request::Link { .. } => Verdict::Ack,
            _ => refuse(Refusal::Pruned { at }),
        };
    }
    let Some(rec) = rec else {
        return match req {
            Request::Claim { owner, ttl_ms, .. } | Request::Recover { owner, ttl_ms } => {
                let kind = if matches!(req, Request::Claim { .. }) {
                    EventKind::Claimed
                } else {
                    EventKind::Recovered
                };
                create_bare(
                    op,
                    rules,
                    owner,
                    ttl_ms.unwrap_or(DEFAULT_BARE_TTL_MS),
                    kind,
                )
            }
            Request::Declare { manifest } => match graph::declared_node(op, manifest, upstream) {
                Ok(node) => Verdict::Commit(create_declared(op, manifest, node)),
                Err(e) => Verdict::Invalid(e),
            },
            Request::Add { node } => graph::create_added(op, node, upstream),
            Request::Schedule { schedule } => graph::create_schedule(op, schedule, upstream),
            _ => refuse(Refusal::NotFound),
        };
    };
    // A record that holds a setting (a schedule's, which makes the tasks
    // that are granted; a key's, a queue's) is never granted.
    if req.may_grant() && rec.holds_setting() {
        return illegal(rec, req);
    }
    // Nor does any other task request reach it: only its own requests
    // (decided above, or `Schedule` below), the sweep's settle, and an
    // operator's cancel of a schedule's record, which stops it.
    if rec.holds_setting() && !setting_request(req, rec) {
        return illegal(rec, req);
    }
    if matches!(
        req,
        Request::Claim { .. } | Request::Recover { .. } | Request::TaskClaim { .. }
    ) && let Some(refusal) = graph::not_ready(rec, upstream, op.now)
    {
        return refuse(refusal);
    }
    if req.may_grant()
        && rec.state == State::Registered
        && let Some(refusal) = key::key_full(rec, upstream)
    {
        return refuse(refusal);
    }
    if req.is_holder_only()
        && let Some(v) = check_holder(op, rec, live)
    {
        return v;
    }
    match req {
        Request::Cancel { fence: None, .. }
        | Request::Redispatch { .. }
        | Request::Finalize { .. }
        | Request::Annotate { .. }
        | Request::Settle => operator::decide(op, rec, live),
        Request::Add { .. } | Request::Schedule { .. } | Request::Link { .. } | Request::Wake => {
            graph::decide(op, rec, upstream)
        }
        Request::Unpark => key::unpark(rec, op.now),
        Request::Checkpoint { .. } => steps::decide(op, rec, upstream),
        // Decided above.
        Request::Prune { .. } => operator::prune(rec, req, op.now),
        // Decided above, record or not.
        Request::QueuePolicy { .. }
        | Request::QueuePause { .. }
        | Request::NoteRefusals { .. }
        | Request::ScheduleTicked { .. } => illegal(rec, req),
        Request::Limit { .. }
        | Request::KeyHold { .. }
        | Request::KeyDrop { .. }
        | Request::KeyPark { .. } => key::decide(op, Some(rec), upstream),
        Request::Claim { .. }
        | Request::Recover { .. }
        | Request::Renew { .. }
        | Request::Release { .. }
        | Request::Complete { .. }
        | Request::Fail { .. }
        | Request::Cancel { .. } => lease::decide(op, rec, live, rules),
        Request::Declare { .. }
        | Request::Register { .. }
        | Request::TaskClaim { .. }
        | Request::Start { .. }
        | Request::Heartbeat { .. }
        | Request::Succeed { .. }
        | Request::TaskFail { .. }
        | Request::Retry { .. } => registry::decide(op, rec, live, rules),
    }
}

/// Whether `req` may be decided on `rec`, a record that holds a setting.
fn setting_request(req: &Request, rec: &TaskRecord) -> bool {
    match req {
        Request::Settle | Request::Schedule { .. } | Request::ScheduleTicked { .. } => true,
        Request::Cancel { fence: None, .. } => rec.schedule.is_some(),
        _ => false,
    }
}
