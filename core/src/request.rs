//! Requests: every write of task state is one of these, decided by
//! [`crate::decide::decide`] and applied by a store in one atomic commit.

use crate::error::Error;
use crate::id::{Id, OwnerId, TaskId};
use crate::kinds::{Actor, State};
use crate::manifest::{MAX_EVIDENCE_KEYS, Manifest, validate_evidence_hash};
use crate::time::Timestamp;
use serde_json::Value;
use std::collections::BTreeMap;

pub use crate::time::{MAX_TTL_MS, MIN_TTL_MS};
/// The default TTL of a bare task's lease.
pub const DEFAULT_BARE_TTL_MS: u64 = 30_000;
/// The largest error object, in bytes of JSON.
pub const MAX_ERROR_BYTES: usize = 16 * 1024;
/// The largest metadata merge, in bytes of JSON.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// A request to change a task. Reads (holder, verify, get, list, gate,
/// events) are not requests: they never write.
// A request is made once and moved into its operation; boxing the
// manifest of the one large variant (declare) would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    // The authority (SPEC §4).
    /// `ttl_ms`: `None` for the default (30 s for a bare task, the
    /// heartbeat timeout for a declared one).
    Claim {
        owner: OwnerId,
        ttl_ms: Option<u64>,
        /// If this grant's lease expires without a release, no one may be
        /// granted the task for this long after (`None`: no delay).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock_delay_ms: Option<u64>,
    },
    Renew {
        owner: OwnerId,
        fence: u64,
        ttl_ms: Option<u64>,
    },
    Release {
        owner: OwnerId,
        fence: u64,
    },
    Recover {
        owner: OwnerId,
        ttl_ms: Option<u64>,
    },
    Complete {
        owner: OwnerId,
        fence: u64,
    },
    Fail {
        owner: OwnerId,
        fence: u64,
        error: Option<Value>,
    },
    /// The holder records a step's output under its fence; the task's later
    /// grants carry it. With `spawned`, the tasks of the same commit's
    /// adds are recorded with the step (and with `wait`, the task depends
    /// on them: it is granted again once they succeed).
    Checkpoint {
        owner: OwnerId,
        fence: u64,
        step: Id,
        output: Value,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))]
        spawned: Vec<TaskId>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        wait: bool,
    },
    /// With a fence: the holder cancels its own grant. Without: an operator cancels.
    Cancel {
        by: Actor,
        fence: Option<u64>,
        /// An operator's cancel of a task whose lease is live ends it at
        /// once, rather than asking its holder to stop (`cancel_requested`).
        /// Always written, so the task API's check for fields a request
        /// does not know (which reads a request back) knows it.
        #[serde(default)]
        force: bool,
    },
    // The registry (SPEC §6).
    #[cfg_attr(feature = "schema", schemars(skip))]
    Declare {
        manifest: Manifest,
    },
    Register {
        run_id: Id,
    },
    TaskClaim {
        run_id: Id,
        executor: Id,
        ttl_ms: Option<u64>,
    },
    Start {
        run_id: Id,
        executor: Id,
        fence: u64,
    },
    Heartbeat {
        run_id: Id,
        executor: Id,
        fence: u64,
        step: u32,
        ttl_ms: Option<u64>,
    },
    Succeed {
        run_id: Id,
        executor: Id,
        fence: u64,
        /// None when the manifest requires none.
        #[serde(default)]
        evidence: BTreeMap<String, String>,
    },
    TaskFail {
        run_id: Id,
        executor: Id,
        fence: u64,
        error: Value,
    },
    Retry {
        run_id: Id,
    },
    // Operator requests.
    Redispatch {
        by: Actor,
        iteration: u64,
    },
    Finalize {
        by: Actor,
        error: Option<Value>,
    },
    /// A metadata merge. It can never carry a state.
    Annotate {
        actor: Id,
        metadata: BTreeMap<String, Value>,
    },
    /// Persist what time has already decided (expiry, deadlines) and nothing else.
    #[cfg_attr(feature = "schema", schemars(skip))]
    Settle,
    // The work graph.
    /// Creates a bare task in REGISTERED, in a queue, after its dependencies.
    Add {
        node: crate::graph::NodeSpec,
    },
    /// Sets a recurring schedule on a `schedule:NAME` record.
    #[cfg_attr(feature = "schema", schemars(skip))]
    Schedule {
        schedule: crate::graph::Schedule,
    },
    /// What a scheduler's tick of the schedule came to (by the scheduler,
    /// never a worker): the failure that kept its period's task from
    /// being made, or `None` once one is made again.
    #[cfg_attr(feature = "schema", schemars(skip))]
    ScheduleTicked {
        failure: Option<crate::graph::ScheduleFailure>,
    },
    /// Written by a store in the commit of a dependent's add (a follow-up,
    /// never sent by a caller): records `dependent` on this task.
    #[cfg_attr(feature = "schema", schemars(skip))]
    Link {
        dependent: TaskId,
    },
    /// Written by a store in the commit of a dependency's success (a
    /// follow-up, never sent by a caller): the task becomes ready if every
    /// dependency has now succeeded.
    #[cfg_attr(feature = "schema", schemars(skip))]
    Wake,
    /// Sets the limit of the concurrency key whose record (`key:KEY`) this
    /// is: at most `limit` live grants of tasks with that key (`None`: no
    /// limit). An operator's.
    #[cfg_attr(feature = "schema", schemars(skip))]
    Limit {
        by: Actor,
        limit: Option<u32>,
    },
    /// Adds refusals a server answered to the record that keeps the newest
    /// of them (`refusals:recent`); the system's (a server's own beat).
    #[cfg_attr(feature = "schema", schemars(skip))]
    NoteRefusals {
        notes: Vec<crate::refusal::RefusalNote>,
    },
    /// Sets the policy of the queue whose record (`queue:QUEUE`) this is:
    /// the retry policy a task added to the queue without its own takes
    /// (`None`: none). An operator's.
    #[cfg_attr(feature = "schema", schemars(skip))]
    QueuePolicy {
        by: Actor,
        retry: Option<crate::graph::RetryPolicy>,
    },
    /// Pauses (or resumes) the queue whose record (`queue:QUEUE`) this
    /// is: while it is paused `next` passes over its tasks. An operator's.
    #[cfg_attr(feature = "schema", schemars(skip))]
    QueuePause {
        by: Actor,
        paused: bool,
    },
    /// Written by a store in the commit of a grant of a task with a key (a
    /// follow-up on the key's record, never sent): `task` holds a grant.
    #[cfg_attr(feature = "schema", schemars(skip))]
    KeyHold {
        task: TaskId,
    },
    /// Written by a store in the commit that ends a keyed task's grant (a
    /// follow-up on the key's record): a slot may be free.
    #[cfg_attr(feature = "schema", schemars(skip))]
    KeyDrop {
        task: TaskId,
    },
    /// Written by a store in the commit that found a keyed task's key full
    /// (a follow-up on the key's record): `task` waits for a slot.
    #[cfg_attr(feature = "schema", schemars(skip))]
    KeyPark {
        task: TaskId,
    },
    /// Written by a store in the commit of a change of a key with a free
    /// slot (a follow-up on a parked task): back in the ready index.
    #[cfg_attr(feature = "schema", schemars(skip))]
    Unpark,
    /// Retention: if the task ended at or before `before`, its body and
    /// events are removed and its record becomes a tombstone (the id is
    /// never granted again; its fences stay). With `forget_after_ms`, the
    /// tombstone is marked to be forgotten (removed, its id free again) by
    /// a prune whose `before` is that much later. On a tombstone so marked
    /// whose time has come, the prune forgets it. An operator's, or the
    /// system's (a server's retention beat).
    #[cfg_attr(feature = "schema", schemars(skip))]
    Prune {
        by: Actor,
        before: Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        forget_after_ms: Option<u64>,
    },
}

pub use crate::kinds::RequestKind;

impl Request {
    /// Whether a decision on this request can be a grant (mint a fence):
    /// claims, recoveries and declared claims; nothing else ever does. A
    /// store that hands fences out ahead of the decision (Postgres, one
    /// round trip for the lock and the fence) asks for one per such
    /// request.
    pub fn may_grant(&self) -> bool {
        matches!(
            self,
            Request::Claim { .. } | Request::Recover { .. } | Request::TaskClaim { .. }
        )
    }

    pub fn kind(&self) -> RequestKind {
        match self {
            Request::Claim { .. } => RequestKind::Claim,
            Request::Renew { .. } => RequestKind::Renew,
            Request::Release { .. } => RequestKind::Release,
            Request::Recover { .. } => RequestKind::Recover,
            Request::Complete { .. } => RequestKind::Complete,
            Request::Fail { .. } => RequestKind::Fail,
            Request::Checkpoint { .. } => RequestKind::Checkpoint,
            Request::Cancel { .. } => RequestKind::Cancel,
            Request::Declare { .. } => RequestKind::Declare,
            Request::Register { .. } => RequestKind::Register,
            Request::TaskClaim { .. } => RequestKind::TaskClaim,
            Request::Start { .. } => RequestKind::Start,
            Request::Heartbeat { .. } => RequestKind::Heartbeat,
            Request::Succeed { .. } => RequestKind::Succeed,
            Request::TaskFail { .. } => RequestKind::TaskFail,
            Request::Retry { .. } => RequestKind::Retry,
            Request::Redispatch { .. } => RequestKind::Redispatch,
            Request::Finalize { .. } => RequestKind::Finalize,
            Request::Annotate { .. } => RequestKind::Annotate,
            Request::Settle => RequestKind::Settle,
            Request::Add { .. } => RequestKind::Add,
            Request::Schedule { .. } => RequestKind::Schedule,
            Request::ScheduleTicked { .. } => RequestKind::ScheduleTicked,
            Request::Link { .. } => RequestKind::Link,
            Request::Wake => RequestKind::Wake,
            Request::Limit { .. } => RequestKind::Limit,
            Request::QueuePolicy { .. } => RequestKind::QueuePolicy,
            Request::QueuePause { .. } => RequestKind::QueuePause,
            Request::NoteRefusals { .. } => RequestKind::NoteRefusals,
            Request::KeyHold { .. } => RequestKind::KeyHold,
            Request::KeyDrop { .. } => RequestKind::KeyDrop,
            Request::KeyPark { .. } => RequestKind::KeyPark,
            Request::Unpark => RequestKind::Unpark,
            Request::Prune { .. } => RequestKind::Prune,
        }
    }

    /// Who is asking.
    pub fn actor(&self) -> Actor {
        match self {
            Request::Claim { owner, .. }
            | Request::Renew { owner, .. }
            | Request::Release { owner, .. }
            | Request::Recover { owner, .. }
            | Request::Complete { owner, .. }
            | Request::Fail { owner, .. }
            | Request::Checkpoint { owner, .. } => Actor::Worker(owner.clone()),
            Request::Cancel { by, .. }
            | Request::Redispatch { by, .. }
            | Request::Finalize { by, .. }
            | Request::Limit { by, .. }
            | Request::QueuePolicy { by, .. }
            | Request::QueuePause { by, .. }
            | Request::Prune { by, .. } => by.clone(),
            Request::Declare { manifest } => Actor::Worker(manifest.executor.clone()),
            Request::Register { run_id } | Request::Retry { run_id } => {
                Actor::Worker(run_id.clone())
            }
            Request::TaskClaim { executor, .. }
            | Request::Start { executor, .. }
            | Request::Heartbeat { executor, .. }
            | Request::Succeed { executor, .. }
            | Request::TaskFail { executor, .. } => Actor::Worker(executor.clone()),
            Request::Annotate { actor, .. } => Actor::Worker(actor.clone()),
            Request::Settle
            | Request::Link { .. }
            | Request::Wake
            | Request::KeyHold { .. }
            | Request::KeyDrop { .. }
            | Request::KeyPark { .. }
            | Request::NoteRefusals { .. }
            | Request::ScheduleTicked { .. }
            | Request::Unpark => Actor::System,
            Request::Add { .. } | Request::Schedule { .. } => Actor::System,
        }
    }

    /// Whether only the current holder (by fence) may make this request:
    /// refusing one for a stale or foreign fence leaves a CONFLICT_REFUSED event.
    pub fn is_holder_only(&self) -> bool {
        matches!(
            self,
            Request::Renew { .. }
                | Request::Release { .. }
                | Request::Complete { .. }
                | Request::Fail { .. }
                | Request::Checkpoint { .. }
                | Request::Cancel { fence: Some(_), .. }
                | Request::Start { .. }
                | Request::Heartbeat { .. }
                | Request::Succeed { .. }
                | Request::TaskFail { .. }
        )
    }

    /// The fence a holder-only request carries.
    pub fn fence(&self) -> Option<u64> {
        match self {
            Request::Renew { fence, .. }
            | Request::Release { fence, .. }
            | Request::Complete { fence, .. }
            | Request::Fail { fence, .. }
            | Request::Checkpoint { fence, .. }
            | Request::Start { fence, .. }
            | Request::Heartbeat { fence, .. }
            | Request::Succeed { fence, .. }
            | Request::TaskFail { fence, .. } => Some(*fence),
            Request::Cancel { fence, .. } => *fence,
            _ => None,
        }
    }

    /// Checks every input rule that does not depend on the stored record:
    /// TTL range, fences, error object size, evidence hashes, metadata.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(0) = self.fence() {
            return Err(Error::invalid("fence", "must be a positive whole number"));
        }
        if let Request::Heartbeat { step: 0, .. } = self {
            return Err(Error::invalid(
                "step",
                "must be a positive whole number (steps count from 1)",
            ));
        }
        match self {
            Request::Renew { ttl_ms, .. }
            | Request::Recover { ttl_ms, .. }
            | Request::TaskClaim { ttl_ms, .. }
            | Request::Heartbeat { ttl_ms, .. } => ttl_ms.map_or(Ok(()), validate_ttl),
            Request::Fail { error, .. } | Request::Finalize { error, .. } => {
                error.as_ref().map_or(Ok(()), validate_error)
            }
            Request::TaskFail { error, .. } => validate_error(error),
            Request::Claim {
                ttl_ms,
                lock_delay_ms,
                ..
            } => {
                ttl_ms.map_or(Ok(()), validate_ttl)?;
                match lock_delay_ms {
                    Some(d) if *d > MAX_TTL_MS => Err(Error::invalid(
                        "lock_delay",
                        format!("must be at most 7 days (got {d}ms)"),
                    )),
                    _ => Ok(()),
                }
            }
            Request::Succeed { evidence, .. } => validate_evidence(evidence),
            Request::Checkpoint {
                output, spawned, ..
            } => validate_checkpoint(output, spawned),
            Request::Redispatch { iteration: 0, .. } => Err(Error::invalid(
                "iteration",
                "must be a positive whole number",
            )),
            Request::Annotate { metadata, .. } => validate_metadata(metadata),
            Request::Schedule { schedule } => {
                schedule.clone().checked()?;
                Request::Add {
                    node: schedule.template.clone(),
                }
                .validate()
            }
            Request::Add { node } => {
                if node.depends_on.len() > crate::graph::MAX_DEPENDENCIES
                    || !node.depends_on.windows(2).all(|w| w[0] < w[1])
                {
                    return Err(Error::invalid(
                        "depends_on",
                        format!(
                            "must list at most {} distinct tasks, sorted",
                            crate::graph::MAX_DEPENDENCIES
                        ),
                    ));
                }
                if let Some(p) = node.retry {
                    p.checked()?;
                }
                if let Some(s) = node.start {
                    s.checked("not_before")?;
                }
                if let Some(k) = &node.key {
                    crate::graph::key_record_id(k)?;
                }
                if let Some(t) = &node.traceparent {
                    crate::graph::check_traceparent(t)?;
                }
                match node.timeout_ms {
                    Some(ms) => {
                        crate::time::check_span("timeout", ms, MIN_TTL_MS, MAX_TTL_MS).map(|_| ())
                    }
                    None => Ok(()),
                }
            }
            Request::QueuePolicy { retry: Some(p), .. } => p.checked().map(|_| ()),
            Request::NoteRefusals { notes } => {
                use crate::refusal::RefusalNote;
                if notes.len() > RefusalNote::KEPT {
                    return Err(Error::invalid(
                        "notes",
                        format!(
                            "must be at most {} (got {})",
                            RefusalNote::KEPT,
                            notes.len()
                        ),
                    ));
                }
                match notes.iter().find(|n| {
                    serde_json::to_string(&n.refusal).map_or(usize::MAX, |s| s.len())
                        > RefusalNote::MAX_BYTES
                }) {
                    Some(_) => Err(Error::invalid(
                        "refusal",
                        format!("must be at most {} bytes of JSON", RefusalNote::MAX_BYTES),
                    )),
                    None => Ok(()),
                }
            }
            Request::Limit { limit: Some(n), .. } if *n > crate::graph::KeyLimit::MAX => {
                Err(Error::invalid(
                    "limit",
                    format!(
                        "must be from 0 to {} (got {n})",
                        crate::graph::KeyLimit::MAX
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}

pub fn validate_ttl(ttl_ms: u64) -> Result<(), Error> {
    if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms) {
        return Err(Error::invalid(
            "ttl",
            format!("must be from 1ms to 7 days (got {ttl_ms}ms)"),
        ));
    }
    Ok(())
}

pub fn validate_error(error: &Value) -> Result<(), Error> {
    if !error.is_object() {
        return Err(Error::invalid("error", "must be a JSON object"));
    }
    crate::json::check_depth("error", error)?;
    let size = serde_json::to_string(error)
        .map(|s| s.len())
        .unwrap_or(usize::MAX);
    if size > MAX_ERROR_BYTES {
        return Err(Error::invalid(
            "error",
            format!("must be at most {MAX_ERROR_BYTES} bytes of JSON (got {size})"),
        ));
    }
    Ok(())
}

/// The most bytes of JSON one checkpoint's output may take.
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;
/// The most bytes of JSON a task's checkpoints may take together: every
/// grant carries them.
pub const MAX_CHECKPOINTS_BYTES: usize = 256 * 1024;
/// The most checkpoints one task may record.
pub const MAX_CHECKPOINTS: usize = 1000;
/// The most tasks one checkpoint may add.
pub const MAX_SPAWNED: usize = 1000;

/// A checkpoint's output (any JSON value, at most [`MAX_CHECKPOINT_BYTES`])
/// and the tasks it names as added with it (distinct, at most [`MAX_SPAWNED`]).
pub fn validate_checkpoint(output: &Value, spawned: &[TaskId]) -> Result<(), Error> {
    crate::json::check_depth("output", output)?;
    let size = serde_json::to_string(output)
        .map(|s| s.len())
        .unwrap_or(usize::MAX);
    if size > MAX_CHECKPOINT_BYTES {
        return Err(Error::invalid(
            "output",
            format!("must be at most {MAX_CHECKPOINT_BYTES} bytes of JSON (got {size})"),
        ));
    }
    if spawned.len() > MAX_SPAWNED {
        return Err(Error::invalid(
            "spawn",
            format!(
                "may add at most {MAX_SPAWNED} tasks (got {})",
                spawned.len()
            ),
        ));
    }
    let distinct: std::collections::BTreeSet<&TaskId> = spawned.iter().collect();
    if distinct.len() != spawned.len() {
        return Err(Error::invalid("spawn", "names a task twice"));
    }
    Ok(())
}

pub fn validate_evidence(evidence: &BTreeMap<String, String>) -> Result<(), Error> {
    if evidence.len() > MAX_EVIDENCE_KEYS {
        return Err(Error::invalid(
            "evidence",
            format!(
                "must carry at most {MAX_EVIDENCE_KEYS} keys (got {})",
                evidence.len()
            ),
        ));
    }
    for (key, hash) in evidence {
        Id::parse("evidence", key)?;
        validate_evidence_hash(&format!("evidence.{key}"), hash)?;
    }
    Ok(())
}

fn validate_metadata(metadata: &BTreeMap<String, Value>) -> Result<(), Error> {
    if metadata.contains_key("state") {
        return Err(Error::invalid(
            "metadata.state",
            "a state changes only through the request that owns it, never by a merge",
        ));
    }
    for (key, value) in metadata {
        Id::parse("metadata", key)?;
        crate::json::check_depth(&format!("metadata.{key}"), value)?;
    }
    let size = serde_json::to_string(metadata)
        .map(|s| s.len())
        .unwrap_or(usize::MAX);
    if size > MAX_METADATA_BYTES {
        return Err(Error::invalid(
            "metadata",
            format!("must be at most {MAX_METADATA_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// Conditions a request carries; each must be proved by the record, not
/// merely not contradicted. A named condition the record cannot show refuses
/// the request with `precondition_failed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Preconditions {
    pub expected_state: Option<State>,
    pub expected_revision: Option<u64>,
    pub expected_attempt: Option<u64>,
    pub expected_fence: Option<u64>,
    /// The tasks the caller may act on (a scoped token's,
    /// [`crate::scope::Scope`]): a task outside it is not permitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<crate::scope::Scope>,
}

impl Preconditions {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// One request on one task at one time: what a store hands to the decision
/// inside its commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Operation {
    pub task: TaskId,
    pub request: Request,
    pub pre: Preconditions,
    /// The time the decision is made at. Stores that keep their own clock
    /// still use it for timestamps; liveness they judge themselves.
    pub now: Timestamp,
    /// The caller's clock, read again where the decision is serialized.
    #[serde(skip)]
    pub clock: crate::time::CommitClock,
}

impl crate::time::Timed for Operation {
    fn timed_at_commit(&mut self) {
        self.now = self.clock.read(self.now);
    }

    fn timed_by_store(&mut self, now: Timestamp) {
        self.now = now;
        self.clock = crate::time::CommitClock::none();
    }
}
