//! The data baton keeps: task records, leases (grants), events and
//! notifications. Everything here is plain data with serde; the rules that
//! change it live in [`mod@crate::decide`].

use crate::graph::{Lane, ReadyEntry, millis_key, priority_rank};
use crate::id::{Id, OwnerId, TaskId};
use crate::manifest::Manifest;
use crate::time::Timestamp;
use serde_json::Value;
use std::collections::BTreeMap;

pub use crate::kinds::{Actor, EventKind, State};

/// The fence placeholder in a decision that asks for a new fence: the store
/// fills in the real number at commit time. Real fences start at 1.
pub const PENDING_FENCE: u64 = 0;

/// A grant: who may run the task, until when, under which fence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub owner: OwnerId,
    pub attempt: u64,
    pub fence: u64,
    #[serde(deserialize_with = "crate::time::stored::either")]
    pub expires_at: Timestamp,
    #[serde(deserialize_with = "crate::time::stored::either")]
    pub claimed_at: Timestamp,
    /// The store's judge of time found this grant's lease run out (set by
    /// the settlement that wrote the expiry down), as opposed to a grant
    /// given back or closed. A late request under it is `lease_expired`
    /// whatever the caller's clock says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
    /// How long after this lease expires unreleased no one may be granted
    /// the task (the claim's `lock_delay`, or the manifest's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_ms: u64,
    /// When the attempt this grant belongs to reaches its run-time limit
    /// (the task's `timeout_ms` from the grant that started it): the lease
    /// never runs past it, however often it is renewed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::time::stored::opt_either"
    )]
    pub ends_by: Option<Timestamp>,
}

impl Lease {
    /// Whether this lease ended because its attempt reached its run-time
    /// limit (rather than for want of a renewal).
    pub fn timed_out(&self) -> bool {
        self.ends_by.is_some_and(|end| self.expires_at >= end)
    }

    /// `end`, or the attempt's limit if that comes first.
    pub fn capped(&self, end: Timestamp) -> Timestamp {
        self.ends_by.map_or(end, |limit| end.min(limit))
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a task reached its terminal state: lets a repeat of the same request
/// by the same grant be recognised as an acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Closure {
    pub request: crate::kinds::RequestKind,
    pub actor: Actor,
    /// The fence of the grant that closed the task, if a holder closed it.
    pub fence: Option<u64>,
}

/// An operator's request that the holder of a live lease stop (cooperative
/// cancellation): the holder sees it in the answer to its next renewal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CancelRequest {
    pub by: Actor,
    pub at: Timestamp,
}

/// Everything baton knows about one task. Stores keep it whole; the fields
/// are public for reading, but only [`mod@crate::decide`] produces new versions.
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
    #[serde(default)]
    pub stalls: u32,
    /// Loop round; only an operator redispatch advances it.
    pub iteration: u64,
    /// The last grant, live or not.
    pub lease: Option<Lease>,
    pub run_id: Option<Id>,
    pub executor: Option<Id>,
    /// 1-based step being worked on (0 before start).
    #[serde(default)]
    pub current_step: u32,
    #[serde(default)]
    pub evidence: BTreeMap<String, String>,
    pub error: Option<Value>,
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    pub closure: Option<Closure>,
    #[serde(deserialize_with = "crate::time::stored::either")]
    pub created_at: Timestamp,
    /// The start deadline counts from here (declare, register, retry, release, stall-return).
    pub deadline_from: Option<Timestamp>,
    #[serde(default, deserialize_with = "crate::time::stored::opt_either")]
    pub started_at: Option<Timestamp>,
    #[serde(default, deserialize_with = "crate::time::stored::opt_either")]
    pub finished_at: Option<Timestamp>,
    #[serde(deserialize_with = "crate::time::stored::either")]
    pub updated_at: Timestamp,
    /// The task's place in the work graph (queue, priority, dependencies),
    /// if it was added to one or declared with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<crate::graph::Node>,
    /// The tasks that depend on this one (each one's add wrote itself
    /// here, in the same commit): the success of this task wakes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependents: Vec<TaskId>,
    /// An operator asked the holder to stop; the task becomes CANCELLED
    /// when the holder gives it back or its lease ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested: Option<CancelRequest>,
    /// A recurring schedule this record holds (a `schedule:NAME` record:
    /// never granted; cancelled by an operator to stop it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<crate::graph::Schedule>,
    /// Why the schedule's last tick made no task, until one makes it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_failure: Option<crate::graph::ScheduleFailure>,
    /// A concurrency key this record holds (a `key:KEY` record: never
    /// granted; its limit, holders and parked tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_limit: Option<crate::graph::KeyLimit>,
    /// A queue's policy this record holds (a `queue:QUEUE` record: never
    /// granted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_policy: Option<crate::graph::QueuePolicy>,
    /// The newest refusals a server answered (the `refusals:recent`
    /// record: never granted), oldest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_log: Option<Vec<crate::refusal::RefusalNote>>,
    /// When retention pruned this ended task: its body and events are
    /// gone, this record is its tombstone (state, fences, times), and no
    /// request but another prune is ever decided on it again.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::time::stored::opt_either"
    )]
    pub pruned_at: Option<Timestamp>,
    /// A tombstone pruned with a time to be forgotten: a prune whose
    /// cutoff (`before`) reaches this removes the record, and its id is
    /// free again ([`crate::Request::Prune`]'s `forget_after_ms`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::time::stored::opt_either"
    )]
    pub forget_at: Option<Timestamp>,
    /// The steps the task's attempts recorded (`checkpoint`), in the order
    /// they were recorded: each grant carries them, so the next attempt
    /// skips them. Never overwritten; pruned with the task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<Checkpoint>,
}

/// A tombstone as stores keep it: what a pruned task still has, and no key
/// for what it no longer has (its body, run, evidence, error, metadata and
/// deadlines are gone). Read back as a [`TaskRecord`], whose missing fields
/// take their empty values. Every other record is stored whole.
#[derive(serde::Serialize)]
struct StoredTombstone<'a> {
    task: &'a TaskId,
    state: State,
    revision: u64,
    attempt: u64,
    #[serde(skip_serializing_if = "is_zero_u32")]
    stalls: u32,
    iteration: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<StoredLease<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    closure: Option<&'a Closure>,
    #[serde(serialize_with = "ms")]
    created_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_ms")]
    started_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_ms")]
    finished_at: Option<Timestamp>,
    #[serde(serialize_with = "ms")]
    updated_at: Timestamp,
    #[serde(serialize_with = "ms")]
    pruned_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_ms")]
    forget_at: Option<Timestamp>,
}

/// A tombstone's last lease as stored: its times as milliseconds.
#[derive(serde::Serialize)]
struct StoredLease<'a> {
    owner: &'a OwnerId,
    attempt: u64,
    fence: u64,
    #[serde(serialize_with = "ms")]
    expires_at: Timestamp,
    #[serde(serialize_with = "ms")]
    claimed_at: Timestamp,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    expired: bool,
    #[serde(skip_serializing_if = "is_zero")]
    lock_delay_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_ms")]
    ends_by: Option<Timestamp>,
}

use crate::time::stored::{as_ms as ms, opt_as_ms as opt_ms};

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl TaskRecord {
    /// Serializes the record as stores keep it: a tombstone in its compact
    /// form (no key for what it no longer has, its times as numbers: about
    /// two thirds of the bytes), anything else
    /// whole. What reads it back is the record's own `Deserialize`.
    pub fn serialize_stored<S: serde::Serializer>(
        &self,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::Serialize;
        match self.pruned_at {
            Some(pruned_at) => StoredTombstone {
                task: &self.task,
                state: self.state,
                revision: self.revision,
                attempt: self.attempt,
                stalls: self.stalls,
                iteration: self.iteration,
                lease: self.lease.as_ref().map(|l| StoredLease {
                    owner: &l.owner,
                    attempt: l.attempt,
                    fence: l.fence,
                    expires_at: l.expires_at,
                    claimed_at: l.claimed_at,
                    expired: l.expired,
                    lock_delay_ms: l.lock_delay_ms,
                    ends_by: l.ends_by,
                }),
                closure: self.closure.as_ref(),
                created_at: self.created_at,
                started_at: self.started_at,
                finished_at: self.finished_at,
                updated_at: self.updated_at,
                pruned_at,
                forget_at: self.forget_at,
            }
            .serialize(s),
            None => self.serialize(s),
        }
    }

    /// The record as stores keep it, as JSON ([`TaskRecord::serialize_stored`]).
    pub fn to_stored_json(&self) -> serde_json::Result<String> {
        let mut out = Vec::with_capacity(512);
        self.serialize_stored(&mut serde_json::Serializer::new(&mut out))?;
        // serde_json writes UTF-8 only.
        String::from_utf8(out).map_err(serde::ser::Error::custom)
    }
}

/// A failed attempt waiting to be tried again ([`TaskRecord::retry_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RetryWait {
    /// The attempt that failed (the next is this plus one).
    pub attempt: u64,
    pub max_attempts: u32,
    /// When the next attempt may start (`None`: now).
    pub next_at: Option<Timestamp>,
}

/// One step's output, recorded under the fence of the attempt that ran it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub step: String,
    pub output: Value,
    pub fence: u64,
    pub at: Timestamp,
    /// The tasks added with this step, in the same commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spawned: Vec<TaskId>,
}

impl TaskRecord {
    /// The checkpoint recorded for `step`, if any.
    pub fn checkpoint(&self, step: &str) -> Option<&Checkpoint> {
        self.checkpoints.iter().find(|c| c.step == step)
    }
}

impl TaskRecord {
    /// Whether this record holds a setting rather than a task: a key's
    /// limit (`key:KEY`), a queue's policy (`queue:QUEUE`), a schedule
    /// (`schedule:NAME`) or a server's refusal log (`refusals:recent`).
    /// None is ever granted; lists and counts of tasks leave them out
    /// (each is read by its own command, or by id).
    pub fn holds_setting(&self) -> bool {
        self.key_limit.is_some()
            || self.queue_policy.is_some()
            || self.schedule.is_some()
            || self.refusal_log.is_some()
    }

    pub fn is_bare(&self) -> bool {
        self.manifest.is_none()
    }

    /// The retry this task waits for, if a failed attempt is to be tried
    /// again (REGISTERED with its failure's error, its retry policy
    /// allowing another attempt): which attempt failed, of how many, and
    /// when the next may start.
    pub fn retry_wait(&self) -> Option<RetryWait> {
        if self.state != State::Registered || self.error.is_none() || self.attempt == 0 {
            return None;
        }
        let node = self.node.as_ref()?;
        let policy = node.retry_policy()?;
        Some(RetryWait {
            attempt: self.attempt,
            max_attempts: policy.max_attempts,
            next_at: node.not_before,
        })
    }

    /// The queue this record is counted under in the counts every store
    /// keeps with its commits (`""` for a task outside the work graph), or
    /// `None` for a record that holds a setting, which is not a task
    /// (a pruned task's tombstone is counted, as lists show it). Stores
    /// group by this and the stored state, nothing else ([`crate::counts`]).
    pub fn census_queue(&self) -> Option<&str> {
        if self.holds_setting() {
            return None;
        }
        Some(self.node.as_ref().map_or("", |n| n.spec.queue.as_str()))
    }

    /// The run-time limit of each attempt, if the task has one (its
    /// graph node's `timeout`, or its manifest's `timeout_seconds`).
    pub fn timeout_ms(&self) -> Option<u64> {
        self.node
            .as_ref()
            .and_then(|n| n.spec.timeout_ms)
            .or_else(|| self.manifest.as_ref().and_then(|m| m.timeout_ms()))
    }

    /// How many stalls end the task: unlimited for bare tasks.
    pub fn max_attempts(&self) -> Option<u32> {
        self.manifest.as_ref().map(|m| m.max_attempts)
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
            // An ended task not yet pruned: when it ended, so that
            // retention finds what it may prune through the stores'
            // (state, due) index and never reads a tombstone again.
            s if s.is_terminal() && self.pruned_at.is_none() => {
                Some(self.finished_at.unwrap_or(self.updated_at))
            }
            // A tombstone to be forgotten: a prune whose cutoff reaches
            // its time finds it through the same index, and one without
            // is never read again.
            s if s.is_terminal() => self.forget_at,
            _ => None,
        }
    }

    /// When the start deadline the task waits on passes: for DECLARED and
    /// REGISTERED, [`TaskRecord::due_at`]; for a held declared task, the one
    /// it will wait on once its lease ends (the lease's end plus the start
    /// deadline), so an expiry found late still counts from when it
    /// happened. Judged against the record's own times by stores without an
    /// engine clock (`Judged::at` in the decision).
    pub fn start_deadline_at(&self) -> Option<Timestamp> {
        match self.state {
            State::Claimed | State::Running => {
                let m = self.manifest.as_ref()?;
                let l = self.lease.as_ref()?;
                Some(l.expires_at.plus_ms(m.start_deadline_ms()))
            }
            State::Declared | State::Registered => self.due_at(),
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
    /// When the attempt reaches its run-time limit, if the task has one:
    /// `expiry` never passes it, and the holder stops before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_by: Option<Timestamp>,
    /// The steps earlier attempts (or this one) recorded, in order: the
    /// attempt skips them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<Checkpoint>,
    /// The W3C trace context the task was added in, if it was given one
    /// (`baton run` exports it to its child as `TRACEPARENT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl Grant {
    /// Whether the lease already reaches the attempt's run-time limit (no
    /// renewal can extend it).
    pub fn at_limit(&self) -> bool {
        self.ends_by.is_some_and(|end| self.expiry >= end)
    }

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
            ends_by: l.ends_by,
            checkpoints: record.checkpoints.clone(),
            traceparent: record
                .node
                .as_ref()
                .and_then(|n| n.spec.traceparent.clone()),
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

/// Checks every intent id of one acknowledgement; the error names the
/// entry (counted from 1) that is not one.
pub fn validate_intent_ids(values: &[String]) -> Result<(), crate::error::Error> {
    for (i, id) in values.iter().enumerate() {
        validate_intent_id(id).map_err(|mut e| {
            e.message = format!("entry {}: {}", i + 1, e.message);
            e
        })?;
    }
    Ok(())
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

/// The work graph's view of a record (see [`crate::graph`]).
impl TaskRecord {
    /// Which lane of the ready index the task is in.
    pub fn lane(&self) -> Lane {
        if self.is_bare() {
            Lane::Bare
        } else {
            Lane::Declared
        }
    }

    /// The task's ready-index entry: a claimable graph task whose
    /// dependencies all succeeded (as the commit that set `ready_at` found).
    /// A store writes, moves or drops it with every change of the record.
    pub fn ready_entry(&self) -> Option<ReadyEntry> {
        let node = self.node.as_ref()?;
        let ready_at = node.ready_at?;
        if node.put_off() || node.parked {
            // In the held index by its start, until it is granted; or
            // waiting for its key, out of every index.
            return None;
        }
        (self.state == State::Registered).then(|| ReadyEntry {
            lane: self.lane(),
            queue: node.spec.queue.clone(),
            rank: priority_rank(node.spec.priority),
            ready_at,
            task: self.task.clone(),
        })
    }

    /// The task's held-index key: for a held graph task, its queue's
    /// prefix, then when its lease expires, then its id, so `next` finds
    /// the grants that ran out (claimable again, though not in the ready
    /// index) with one range read. A store keeps it like the ready entry.
    pub fn held_key(&self) -> Option<Vec<u8>> {
        let node = self.node.as_ref()?;
        let at = if self.state.is_held() {
            self.lease.as_ref()?.expires_at
        } else if self.state == State::Registered && node.put_off() && !node.parked {
            // A ready task put off to its start: found, like a grant that
            // ran out, once that time has come.
            node.due_at()?
        } else {
            return None;
        };
        let mut k = ReadyEntry::prefix(self.lane(), &node.spec.queue);
        k.extend_from_slice(&millis_key(at));
        k.extend_from_slice(self.task.as_str().as_bytes());
        Some(k)
    }

    /// The task's concurrency key, if it has one.
    pub fn key(&self) -> Option<&crate::id::Id> {
        self.node.as_ref().and_then(|n| n.spec.key.as_ref())
    }

    /// The dependencies the decision must see for `self`.
    pub fn depends_on(&self) -> &[TaskId] {
        self.node.as_ref().map_or(&[], |n| &n.spec.depends_on)
    }
}
