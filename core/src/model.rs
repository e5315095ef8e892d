//! The data baton keeps: task records, leases (grants), events and
//! notifications. Everything here is plain data with serde; the rules that
//! change it live in [`crate::decide`].

use crate::id::{Id, OwnerId, TaskId};
use crate::manifest::Manifest;
use crate::time::Timestamp;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// The lifecycle state of a task (SPEC §3).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
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
}

impl EventKind {
    pub const ALL: [EventKind; 19] = [
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
        }
    }

    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
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

/// The fence placeholder in a decision that asks for a new fence: the store
/// fills in the real number at commit time. Real fences start at 1.
pub const PENDING_FENCE: u64 = 0;

/// A grant: who may run the task, until when, under which fence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub owner: OwnerId,
    pub attempt: u64,
    pub fence: u64,
    pub expires_at: Timestamp,
    pub claimed_at: Timestamp,
}

/// How a task reached its terminal state: lets a repeat of the same request
/// by the same grant be recognised as an acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Closure {
    pub request: crate::request::RequestKind,
    pub actor: Actor,
    /// The fence of the grant that closed the task, if a holder closed it.
    pub fence: Option<u64>,
}

/// Everything baton knows about one task. Stores keep it whole; the fields
/// are public for reading, but only [`crate::decide`] produces new versions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskRecord {
    pub task: TaskId,
    /// `None` for a bare task (created by a claim, no manifest).
    pub manifest: Option<Manifest>,
    pub state: State,
    /// +1 on every committed change of this record.
    pub revision: u64,
    /// Count of logical tries.
    pub attempt: u64,
    /// Count of attempts that ended because their lease expired.
    pub stalls: u32,
    /// Loop round; only an operator redispatch advances it.
    pub iteration: u64,
    /// The last grant, live or not.
    pub lease: Option<Lease>,
    pub run_id: Option<Id>,
    pub executor: Option<Id>,
    /// 1-based step being worked on (0 before start).
    pub current_step: u32,
    pub evidence: BTreeMap<String, String>,
    pub error: Option<Value>,
    pub metadata: BTreeMap<String, Value>,
    pub closure: Option<Closure>,
    pub created_at: Timestamp,
    /// The start deadline counts from here (declare, register, retry, release, stall-return).
    pub deadline_from: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub updated_at: Timestamp,
}

impl TaskRecord {
    pub fn is_bare(&self) -> bool {
        self.manifest.is_none()
    }

    /// How many stalls end the task: unlimited for bare tasks.
    pub fn max_attempts(&self) -> Option<u32> {
        self.manifest.as_ref().map(|m| m.max_attempts)
    }

    /// Whether the last grant is live at `now`, judged by the stored expiry.
    /// Stores that keep their own clock (etcd) judge liveness themselves.
    pub fn lease_live_at(&self, now: Timestamp) -> bool {
        self.state.is_held() && self.lease.as_ref().is_some_and(|l| now < l.expires_at)
    }

    /// The fence of the last grant, if any.
    pub fn current_fence(&self) -> Option<u64> {
        self.lease.as_ref().map(|l| l.fence)
    }

    /// When this record next changes by itself (a lease expiring, a start
    /// deadline passing), if ever. Stores index it so `list` by derived state
    /// and `sweep` never scan every task.
    pub fn due_at(&self) -> Option<Timestamp> {
        match self.state {
            State::Claimed | State::Running => self.lease.as_ref().map(|l| l.expires_at),
            State::Declared | State::Registered => {
                let m = self.manifest.as_ref()?;
                self.deadline_from.map(|t| t.plus_ms(m.start_deadline_ms()))
            }
            _ => None,
        }
    }

    pub fn total_steps(&self) -> u32 {
        self.manifest
            .as_ref()
            .map(|m| u32::try_from(m.steps.len()).unwrap_or(u32::MAX))
            .unwrap_or(0)
    }
}

/// The answer to a claim: who may run the task, under which fence, until when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    pub task: TaskId,
    pub owner: OwnerId,
    pub attempt: u64,
    pub fence: u64,
    pub expiry: Timestamp,
    pub state: State,
    pub revision: u64,
    pub claimed_at: Timestamp,
}

impl Grant {
    /// The grant held in `record`, if it has one.
    pub fn of(record: &TaskRecord) -> Option<Grant> {
        let l = record.lease.as_ref()?;
        Some(Grant {
            task: record.task.clone(),
            owner: l.owner.clone(),
            attempt: l.attempt,
            fence: l.fence,
            expiry: l.expires_at,
            state: record.state,
            revision: record.revision,
            claimed_at: l.claimed_at,
        })
    }
}

/// An event a decision asks to append. The store gives it a sequence number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventDraft {
    pub task: TaskId,
    pub kind: EventKind,
    pub from: Option<State>,
    pub to: Option<State>,
    pub actor: Actor,
    pub attempt: u64,
    pub fence: Option<u64>,
    pub details: Value,
    pub at: Timestamp,
    /// For CONFLICT_REFUSED: repeats with the same key on the same task are
    /// counted on the first event instead of appended.
    pub conflict_key: Option<String>,
}

/// An appended audit event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Store-wide, strictly increasing: all events of a store in one total order.
    pub seq: u64,
    pub task: TaskId,
    pub kind: EventKind,
    pub from: Option<State>,
    pub to: Option<State>,
    pub actor: Actor,
    pub attempt: u64,
    pub fence: Option<u64>,
    pub details: Value,
    pub at: Timestamp,
    /// How many times this event happened (more than 1 only for counted conflicts).
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_key: Option<String>,
}

impl Event {
    pub fn from_draft(seq: u64, d: EventDraft) -> Event {
        Event {
            seq,
            task: d.task,
            kind: d.kind,
            from: d.from,
            to: d.to,
            actor: d.actor,
            attempt: d.attempt,
            fence: d.fence,
            details: d.details,
            at: d.at,
            count: 1,
            conflict_key: d.conflict_key,
        }
    }
}

/// An outbox row a decision asks to write in the same commit as its change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotificationDraft {
    /// Stable across redelivery: a subscriber de-duplicates on it.
    pub intent_id: String,
    pub task: TaskId,
    pub kind: EventKind,
    pub payload: Value,
    pub at: Timestamp,
}

/// Checks an intent id as baton issues them: a UUID in its hyphenated,
/// lowercase form (36 characters), so that nothing else (a key, a path, a
/// control character) is taken for one.
pub fn validate_intent_id(value: &str) -> Result<(), crate::error::Error> {
    let ok = uuid::Uuid::try_parse(value).is_ok_and(|u| u.hyphenated().to_string() == value);
    if ok {
        Ok(())
    } else {
        Err(crate::error::Error::invalid(
            "intent_id",
            format!(
                "must be an intent id as `outbox pending` prints it (a lowercase UUID such as 3f2b8c1e-...; got {:?})",
                value.chars().take(80).collect::<String>()
            ),
        ))
    }
}

/// A notification in the outbox, delivered until acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Notification {
    /// Store-wide outbox order; the cursor for paging.
    pub seq: u64,
    pub intent_id: String,
    pub task: TaskId,
    pub kind: EventKind,
    pub payload: Value,
    pub at: Timestamp,
}

impl Notification {
    pub fn from_draft(seq: u64, d: NotificationDraft) -> Notification {
        Notification {
            seq,
            intent_id: d.intent_id,
            task: d.task,
            kind: d.kind,
            payload: d.payload,
            at: d.at,
        }
    }
}
