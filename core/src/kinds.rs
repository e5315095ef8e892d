//! The words of the lifecycle: states, event types, who acts, and the
//! names of requests. They depend on nothing but ids, so the model, the
//! manifest, the requests and the refusals can all use them without
//! depending on each other in a circle.

use crate::id::Id;
use std::fmt;

/// The lifecycle state of a task (SPEC §3).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    Declared,
    Registered,
    Claimed,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    NotStarted,
    Stalled,
}

impl State {
    pub const ALL: [State; 9] = [
        State::Declared,
        State::Registered,
        State::Claimed,
        State::Running,
        State::Succeeded,
        State::Failed,
        State::Cancelled,
        State::NotStarted,
        State::Stalled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            State::Succeeded
                | State::Failed
                | State::Cancelled
                | State::NotStarted
                | State::Stalled
        )
    }

    /// Ended for good without success and not by anyone's choice (FAILED,
    /// STALLED, NOT_STARTED; CANCELLED is an operator's): what a
    /// dead-letter queue holds until someone retries or prunes it.
    pub fn is_dead_letter(self) -> bool {
        matches!(self, State::Failed | State::Stalled | State::NotStarted)
    }

    /// States of a task that may be waiting for a grant (ready, put off or
    /// blocked): DECLARED and REGISTERED.
    pub fn may_wait(self) -> bool {
        matches!(self, State::Declared | State::Registered)
    }

    /// States in which a grant is being worked: a lease can be live only here.
    pub fn is_held(self) -> bool {
        matches!(self, State::Claimed | State::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Declared => "DECLARED",
            State::Registered => "REGISTERED",
            State::Claimed => "CLAIMED",
            State::Running => "RUNNING",
            State::Succeeded => "SUCCEEDED",
            State::Failed => "FAILED",
            State::Cancelled => "CANCELLED",
            State::NotStarted => "NOT_STARTED",
            State::Stalled => "STALLED",
        }
    }

    pub fn from_name(name: &str) -> Option<State> {
        State::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(name))
    }

    /// A state named by a caller (`field` names the argument), or bad
    /// input listing the names there are.
    pub fn parse(field: &str, name: &str) -> Result<State, crate::error::Error> {
        State::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
            crate::error::Error::invalid(
                field,
                format!("must be one of {} (got {name:?})", names.join(", ")),
            )
        })
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of an audit event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventKind {
    Declared,
    ManifestSuperseded,
    Registered,
    Claimed,
    Renewed,
    Released,
    Recovered,
    Started,
    Heartbeat,
    Succeeded,
    Failed,
    Cancelled,
    /// An attempt's lease expired (the task is claimable again, or STALLED).
    Stalled,
    NotStarted,
    Retried,
    Redispatched,
    Finalized,
    Annotated,
    /// A holder-only request refused for a stale or foreign fence, or a late
    /// terminal after a terminal. Recorded without changing the record.
    ConflictRefused,
    /// A bare task was added to the work graph.
    Added,
    /// Every dependency of a graph task SUCCEEDED: `next` may take it.
    Ready,
    /// An operator asked the holder of a live lease to stop: the task
    /// becomes CANCELLED when the holder gives it back or its lease ends.
    CancelRequested,
    /// An attempt reached its run-time limit (the task's `timeout`) and
    /// its lease ended there, renewed or not: counted like a stall.
    TimedOut,
    /// A failed attempt will be tried again: the task is put off until its
    /// retry policy's wait has passed (`not_before`).
    RetryScheduled,
    /// A recurring schedule was set (`schedule:NAME`).
    Scheduled,
    /// A ready task found its concurrency key full: it waits out of the
    /// ready index until a slot frees.
    Parked,
    /// A concurrency key's limit was set (`key:KEY`).
    LimitSet,
    /// A queue's policy was set (`queue:QUEUE`).
    PolicySet,
    /// The holder recorded a step's output (and added the tasks it names).
    Checkpointed,
}

impl EventKind {
    pub const ALL: [EventKind; 29] = [
        EventKind::Declared,
        EventKind::ManifestSuperseded,
        EventKind::Registered,
        EventKind::Claimed,
        EventKind::Renewed,
        EventKind::Released,
        EventKind::Recovered,
        EventKind::Started,
        EventKind::Heartbeat,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::Cancelled,
        EventKind::Stalled,
        EventKind::NotStarted,
        EventKind::Retried,
        EventKind::Redispatched,
        EventKind::Finalized,
        EventKind::Annotated,
        EventKind::ConflictRefused,
        EventKind::Added,
        EventKind::Ready,
        EventKind::CancelRequested,
        EventKind::TimedOut,
        EventKind::RetryScheduled,
        EventKind::Scheduled,
        EventKind::Parked,
        EventKind::LimitSet,
        EventKind::PolicySet,
        EventKind::Checkpointed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Declared => "DECLARED",
            EventKind::ManifestSuperseded => "MANIFEST_SUPERSEDED",
            EventKind::Registered => "REGISTERED",
            EventKind::Claimed => "CLAIMED",
            EventKind::Renewed => "RENEWED",
            EventKind::Released => "RELEASED",
            EventKind::Recovered => "RECOVERED",
            EventKind::Started => "STARTED",
            EventKind::Heartbeat => "HEARTBEAT",
            EventKind::Succeeded => "SUCCEEDED",
            EventKind::Failed => "FAILED",
            EventKind::Cancelled => "CANCELLED",
            EventKind::Stalled => "STALLED",
            EventKind::NotStarted => "NOT_STARTED",
            EventKind::Retried => "RETRIED",
            EventKind::Redispatched => "REDISPATCHED",
            EventKind::Finalized => "FINALIZED",
            EventKind::Annotated => "ANNOTATED",
            EventKind::ConflictRefused => "CONFLICT_REFUSED",
            EventKind::Added => "ADDED",
            EventKind::Ready => "READY",
            EventKind::CancelRequested => "CANCEL_REQUESTED",
            EventKind::TimedOut => "TIMED_OUT",
            EventKind::RetryScheduled => "RETRY_SCHEDULED",
            EventKind::Scheduled => "SCHEDULED",
            EventKind::Parked => "PARKED",
            EventKind::LimitSet => "LIMIT_SET",
            EventKind::PolicySet => "POLICY_SET",
            EventKind::Checkpointed => "CHECKPOINTED",
        }
    }

    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether an event of this kind, made by `actor`, is a failure: an
    /// attempt that ended without success (its holder reported a failure,
    /// its lease expired or reached its time limit) or a wait that ended
    /// the task (its start deadline passed). Each is one failure whether or
    /// not a retry follows: a holder's failure that is tried again is its
    /// RETRY_SCHEDULED, while a stall's retry follows the STALLED that
    /// counted it.
    pub fn is_failure(self, actor: &Actor) -> bool {
        match self {
            EventKind::Failed
            | EventKind::Stalled
            | EventKind::TimedOut
            | EventKind::NotStarted => true,
            EventKind::RetryScheduled => *actor != Actor::System,
            _ => false,
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who makes a request. "Operator" is a declared role (attributed and
/// audited), not an authenticated identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "role", content = "id", rename_all = "snake_case")]
pub enum Actor {
    /// A worker, session or executor acting for itself.
    Worker(Id),
    /// A person or tool acting with operator authority.
    Operator(Id),
    /// baton itself: derived changes (expiry, deadlines) written by the next write or a sweep.
    System,
}

impl Actor {
    pub fn is_operator(&self) -> bool {
        matches!(self, Actor::Operator(_))
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Worker(id) => write!(f, "worker:{id}"),
            Actor::Operator(id) => write!(f, "operator:{id}"),
            Actor::System => f.write_str("system"),
        }
    }
}

/// The name of a request, for events, refusals and conflict counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    Claim,
    Renew,
    Release,
    Recover,
    Complete,
    Fail,
    Cancel,
    /// A step's output recorded by the holder.
    Checkpoint,
    Declare,
    Register,
    TaskClaim,
    Start,
    Heartbeat,
    Succeed,
    TaskFail,
    Retry,
    Redispatch,
    Finalize,
    Annotate,
    Settle,
    Add,
    /// A recurring schedule set.
    Schedule,
    /// A new dependent written on a dependency's record (by the add of the dependent).
    Link,
    /// A dependent looked at again when a dependency succeeded.
    Wake,
    /// A concurrency key's limit set (by an operator).
    Limit,
    /// A queue's policy set (by an operator).
    QueuePolicy,
    /// A queue paused or resumed (by an operator).
    QueuePause,
    /// Refusals a server answered, kept (by the server's own beat).
    NoteRefusals,
    /// What a scheduler's tick of a schedule came to, kept on its record
    /// when it changed (by the scheduler).
    ScheduleTicked,
    /// A grant recorded on its key's record (by the grant's commit).
    KeyHold,
    /// A holder's end recorded on its key's record (by the commit of the end).
    KeyDrop,
    /// A task that found its key full recorded on the key's record.
    KeyPark,
    /// A parked task put back in the ready index (by a change of its key).
    Unpark,
    /// An ended task's body and events removed, its tombstone kept.
    Prune,
    /// A lease that expired (written by the system).
    Expire,
    /// A start deadline that passed (written by the system).
    Deadline,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Claim => "claim",
            RequestKind::Renew => "renew",
            RequestKind::Release => "release",
            RequestKind::Recover => "recover",
            RequestKind::Complete => "complete",
            RequestKind::Fail => "fail",
            RequestKind::Cancel => "cancel",
            RequestKind::Checkpoint => "checkpoint",
            RequestKind::Declare => "declare",
            RequestKind::Register => "register",
            RequestKind::TaskClaim => "task_claim",
            RequestKind::Start => "start",
            RequestKind::Heartbeat => "heartbeat",
            RequestKind::Succeed => "succeed",
            RequestKind::TaskFail => "task_fail",
            RequestKind::Retry => "retry",
            RequestKind::Redispatch => "redispatch",
            RequestKind::Finalize => "finalize",
            RequestKind::Annotate => "annotate",
            RequestKind::Settle => "settle",
            RequestKind::Add => "add",
            RequestKind::Schedule => "schedule",
            RequestKind::Link => "link",
            RequestKind::Wake => "wake",
            RequestKind::Limit => "limit",
            RequestKind::QueuePolicy => "queue_policy",
            RequestKind::QueuePause => "queue_pause",
            RequestKind::NoteRefusals => "note_refusals",
            RequestKind::ScheduleTicked => "schedule_ticked",
            RequestKind::KeyHold => "key_hold",
            RequestKind::KeyDrop => "key_drop",
            RequestKind::KeyPark => "key_park",
            RequestKind::Unpark => "unpark",
            RequestKind::Prune => "prune",
            RequestKind::Expire => "expire",
            RequestKind::Deadline => "deadline",
        }
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
