//! The work graph: where a task waits (its queue and priority), what it
//! waits on (its dependencies), and the order in which `next` offers ready
//! tasks. Plain data and pure functions; the decision that grants reads
//! these facts inside the granting commit (see [`mod@crate::decide`]).
//!
//! A task is **ready** when it is claimable (REGISTERED) and every
//! dependency SUCCEEDED. SUCCEEDED is final, so a ready task never becomes
//! unready through its dependencies. A dependency that ended any other way
//! (FAILED, CANCELLED, STALLED, NOT_STARTED) **blocks** its dependents until
//! an operator redispatches it.

use crate::error::Error;
use crate::id::{Id, TaskId};
use crate::kinds::State;
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[path = "graph_index.rs"]
mod index;
#[path = "graph_schedule.rs"]
mod schedule;
pub use index::*;
pub use schedule::*;

/// The queue a task is in when none is named.
pub const DEFAULT_QUEUE: &str = "default";

/// [`DEFAULT_QUEUE`] as an id.
fn default_queue() -> Id {
    // A constant that follows every id rule: parsing it cannot fail.
    #[allow(clippy::expect_used)]
    Id::parse("queue", DEFAULT_QUEUE).expect("the default queue's name is an id")
}
/// The most dependencies one task may have.
pub const MAX_DEPENDENCIES: usize = 256;
/// The most nodes one `add` of a graph may carry.
pub const MAX_GRAPH_NODES: usize = 100_000;

/// What a task's definition says about its place in the graph: compared
/// whole when the same task is added again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeSpec {
    /// Given or not, as every front end reads it (`default`).
    #[serde(default = "default_queue")]
    pub queue: Id,
    /// Higher runs first (0 when not given).
    #[serde(default)]
    pub priority: i64,
    /// Sorted, without repeats (none when not given).
    #[serde(default)]
    pub depends_on: Vec<TaskId>,
    /// The most one attempt may run, from the grant that starts it,
    /// however often its holder renews (`None`: no limit). The lease never
    /// outlives it; an attempt that reaches it has timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// When the task may first be granted, as the add asked for it (the
    /// time it resolves to is [`Node::not_before`]). Not part of what the
    /// task is: an add repeated with another start is the same add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Start>,
    /// How a failed attempt is tried again (`None`: a failure is final
    /// until an operator redispatches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The concurrency key: at most the key's limit of tasks with this key
    /// hold live grants at once ([`KeyLimit`], set with a `Limit` request
    /// on the key's record, `key:KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Id>,
    /// The W3C trace context the task was added in (`traceparent`):
    /// carried on each grant, so the attempt's work joins that trace. Not
    /// part of what the task is: the same add from another trace is the
    /// same add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Checks a W3C `traceparent` (trace-context level 1): `VERSION-TRACEID-
/// PARENTID-FLAGS`, lowercase hex of 2, 32, 16 and 2 digits, the version
/// not `ff`, neither id all zeros (version `00` has exactly these four
/// parts).
pub fn check_traceparent(text: &str) -> Result<(), Error> {
    let bad = |why: &str| {
        Error::invalid(
            "traceparent",
            format!(
                "must be a W3C traceparent, VERSION-TRACEID-PARENTID-FLAGS such as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01: {why} (got {text:?})"
            ),
        )
    };
    let parts: Vec<&str> = text.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let (version, trace, parent, flags) = match parts[..] {
        [v, t, p, f, ..] => (v, t, p, f),
        _ => return Err(bad("four parts separated by -")),
    };
    if !hex(version, 2) || version == "ff" {
        return Err(bad("the version is two lowercase hex digits, not ff"));
    }
    if version == "00" && parts.len() != 4 {
        return Err(bad("version 00 has four parts"));
    }
    if !hex(trace, 32) || trace.bytes().all(|b| b == b'0') {
        return Err(bad("the trace id is 32 lowercase hex digits, not all zero"));
    }
    if !hex(parent, 16) || parent.bytes().all(|b| b == b'0') {
        return Err(bad(
            "the parent id is 16 lowercase hex digits, not all zero",
        ));
    }
    if !hex(flags, 2) {
        return Err(bad("the flags are two lowercase hex digits"));
    }
    Ok(())
}

/// How a task's failed attempts are tried again: the task is put off by a
/// wait that grows by `factor` each time (`backoff_ms`, then `backoff_ms *
/// factor`, ...), at most `max_backoff_ms`, give or take a quarter, until
/// `max_attempts` attempts have failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The wait after the first failed attempt.
    pub backoff_ms: u64,
    /// How many times longer each wait is than the one before (1 to 10,
    /// to a thousandth: `1.5`).
    #[serde(default = "RetryPolicy::default_factor")]
    pub factor: Factor,
    /// No wait is longer than this (before its jitter).
    #[serde(default = "RetryPolicy::default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

/// A retry policy's growth factor, in thousandths (`1.5` is 1500), so
/// that two policies compare exactly; written as a JSON number (`2`, `1.5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Factor(u32);

impl Factor {
    pub const fn whole(n: u32) -> Factor {
        Factor(n.saturating_mul(1000))
    }

    /// `value`, to a thousandth; errors name `field`.
    pub fn of(field: &str, value: f64) -> Result<Factor, Error> {
        let milli = (value * 1000.0).round();
        if !value.is_finite() || !(0.0..=f64::from(u32::MAX)).contains(&milli) {
            return Err(Error::invalid(
                field,
                format!("must be a number from 1 to 10 (got {value})"),
            ));
        }
        // In range, checked above.
        Ok(Factor(milli as u32))
    }

    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 1000.0
    }
}

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}", self.as_f64())
        }
    }
}

impl serde::Serialize for Factor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_multiple_of(1000) {
            s.serialize_u32(self.0 / 1000)
        } else {
            s.serialize_f64(self.as_f64())
        }
    }
}

impl<'de> serde::Deserialize<'de> for Factor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        Factor::of("factor", v).map_err(|e| serde::de::Error::custom(e.message))
    }
}

impl RetryPolicy {
    /// The most attempts a policy may allow.
    pub const MAX_ATTEMPTS: u32 = 1000;

    fn default_factor() -> Factor {
        Factor::whole(2)
    }

    fn default_max_backoff_ms() -> u64 {
        3_600_000
    }

    /// A policy of `max_attempts` attempts, waiting `backoff_ms` after
    /// the first failure, twice as long each time after, at most an hour.
    pub fn new(max_attempts: u32, backoff_ms: u64) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff_ms,
            factor: Self::default_factor(),
            max_backoff_ms: Self::default_max_backoff_ms(),
        }
    }

    /// A policy from its parts as given (waits in ms), each defaulted when
    /// not given (1 attempt, 1 s, a factor of 2, an hour); `None` when
    /// none is.
    pub fn from_parts(
        max_attempts: Option<u32>,
        backoff_ms: Option<u64>,
        factor: Option<f64>,
        max_backoff_ms: Option<u64>,
    ) -> Result<Option<RetryPolicy>, Error> {
        if max_attempts.is_none()
            && backoff_ms.is_none()
            && factor.is_none()
            && max_backoff_ms.is_none()
        {
            return Ok(None);
        }
        let mut p = RetryPolicy::new(max_attempts.unwrap_or(1), backoff_ms.unwrap_or(1000));
        if let Some(f) = factor {
            p.factor = Factor::of("backoff_factor", f)?;
        }
        if let Some(m) = max_backoff_ms {
            p.max_backoff_ms = m;
        }
        p.checked().map(Some)
    }

    /// The policy, if within its bounds: 1 to 1000 attempts, waits of at
    /// most 7 days, a factor of 1 to 10.
    pub fn checked(self) -> Result<RetryPolicy, Error> {
        use crate::time::{MAX_TTL_MS, MIN_TTL_MS, check_span};
        if !(1..=Self::MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(Error::invalid(
                "max_attempts",
                format!(
                    "must be from 1 to {} (got {})",
                    Self::MAX_ATTEMPTS,
                    self.max_attempts
                ),
            ));
        }
        check_span("backoff", self.backoff_ms, 0, MAX_TTL_MS)?;
        check_span("max_backoff", self.max_backoff_ms, MIN_TTL_MS, MAX_TTL_MS)?;
        if !(1000..=10_000).contains(&self.factor.0) {
            return Err(Error::invalid(
                "backoff_factor",
                format!("must be from 1 to 10 (got {})", self.factor),
            ));
        }
        Ok(self)
    }

    /// The wait after failed attempt `attempt` (1 for the first) of
    /// `task`: `backoff_ms * factor^(attempt - 1)`, at most
    /// `max_backoff_ms`, then give or take a quarter. The jitter comes from
    /// the task and the attempt, so the decision stays a function of its
    /// inputs while tasks that failed together retry apart.
    pub fn wait_ms(&self, task: &TaskId, attempt: u64) -> u64 {
        let exp = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        // In floating point (a factor of 1.5), exactly for whole factors up
        // to the cap; past u64 it is the cap anyway.
        let grown = self.backoff_ms as f64 * self.factor.as_f64().powi(exp);
        let wait = if grown.is_finite() && grown < self.max_backoff_ms as f64 {
            grown as u64
        } else {
            self.max_backoff_ms
        };
        // FNV-1a over the task id and the attempt: a spread, not a secret.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in task.as_str().bytes().chain(attempt.to_be_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let quarter = wait / 4;
        wait - quarter + h % (2 * quarter + 1)
    }
}

/// The id prefix of a concurrency key's record: `key:KEY`.
pub const KEY_PREFIX: &str = "key:";

/// The record id of concurrency key `key`: refused (naming the field
/// `key`) when the prefix makes it longer than an id may be.
pub fn key_record_id(key: &Id) -> Result<TaskId, Error> {
    Id::parse("key", &format!("{KEY_PREFIX}{}", key.as_str()))
}

/// The id prefix of a queue's record: `queue:QUEUE`.
pub const QUEUE_PREFIX: &str = "queue:";

/// The record id of queue `queue`'s policy: refused (naming the field
/// `queue`) when the prefix makes it longer than an id may be.
pub fn queue_record_id(queue: &Id) -> Result<TaskId, Error> {
    Id::parse("queue", &format!("{QUEUE_PREFIX}{}", queue.as_str()))
}

/// The queue named by a queue's record id (`queue:QUEUE`), if it is one.
pub fn queue_of_record(task: &TaskId) -> Option<Id> {
    let q = task.as_str().strip_prefix(QUEUE_PREFIX)?;
    Id::parse("queue", q).ok()
}

/// A queue's policy (its record `queue:QUEUE`, never granted): the
/// defaults a task added to the queue takes for what it does not say
/// itself, fixed when it is added (as pg-boss copies a queue's retry
/// options into each job it sends), so changing the policy changes the
/// tasks added after, never an attempt in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueuePolicy {
    /// The retry policy of a task added without one (`None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// When an operator paused the queue (`None`: it is not paused):
    /// `next` passes over a paused queue's tasks. A claim that names a
    /// task still takes it; an attempt in flight runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<Timestamp>,
}

/// The key named by a key's record id (`key:KEY`), if it is one.
pub fn key_of_record(task: &TaskId) -> Option<Id> {
    let k = task.as_str().strip_prefix(KEY_PREFIX)?;
    Id::parse("key", k).ok()
}

/// A concurrency key's record (`key:KEY`, never granted): its limit, the
/// tasks granted under it that may still hold their lease, and the tasks
/// that found it full and wait, in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyLimit {
    /// The most live grants at once (`None`: no limit, the holders are
    /// still counted so a limit set later counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Granted under this key; each is live or not by its own record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<TaskId>,
    /// Parked: ready, out of the ready index until a slot frees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parked: Vec<TaskId>,
}

impl KeyLimit {
    /// The highest limit a key may have.
    pub const MAX: u32 = 1_000_000;
    /// How many parked tasks a change of the key reads to put back (a
    /// slot's worth and more; the rest on later changes).
    pub const UNPARK_WINDOW: usize = 16;
}

/// A task holding a live grant under a key, as a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyHolder {
    pub task: TaskId,
    pub fence: Option<u64>,
}

/// What a grant of a task with a concurrency key reads of the key in the
/// granting commit: the key's record and which of its holders (other than
/// the task itself) hold a live lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyView {
    pub key: Id,
    pub limit: Option<u32>,
    pub live: Vec<KeyHolder>,
}

/// The most a start may be put off: a year.
pub const MAX_START_AFTER_MS: u64 = 366 * 24 * 3600 * 1000;

/// When a task added to the work graph may first be granted: at a time, or
/// a while after its add is decided (by the store's judge of time then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Start {
    At(Timestamp),
    AfterMs(u64),
}

impl Start {
    /// The time this start names, for an add decided at `now`.
    pub fn resolve(self, now: Timestamp) -> Timestamp {
        match self {
            Start::At(t) => t,
            Start::AfterMs(ms) => now.checked_plus_ms(ms).unwrap_or(Timestamp::MAX),
        }
    }

    /// A start read as a person writes it: an RFC 3339 time, or a duration
    /// from now (`90s`, `10m`, `2h`, `400d`); either ends by year 9999.
    pub fn parse(field: &str, text: &str) -> Result<Start, Error> {
        let text = text.trim();
        if let Ok(t) = Timestamp::parse_rfc3339(text) {
            return Ok(Start::At(t));
        }
        let d = humantime::parse_duration(text).map_err(|_| {
            Error::invalid(
                field,
                "must be an RFC 3339 time (2026-12-24T18:00:00Z) or a duration such as 90s, 10m or 2h",
            )
        })?;
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Start::AfterMs(ms).checked(field)
    }

    /// The start, if within its bounds: a time or a delay, either ending
    /// by 9999-12-31T23:59:59.999Z (the delay is checked again against
    /// the time the add is decided at).
    pub fn checked(self, field: &str) -> Result<Start, Error> {
        match self {
            Start::AfterMs(ms)
                if ms > u64::try_from(crate::time::MAX_TIMESTAMP_MS).unwrap_or(u64::MAX) =>
            {
                Err(Error::invalid(
                    field,
                    format!("must end by 9999-12-31T23:59:59.999Z (got a delay of {ms}ms)"),
                ))
            }
            s => Ok(s),
        }
    }
}

impl NodeSpec {
    /// The spec with a start: not granted before it (`None`: as soon as
    /// it is ready).
    pub fn with_start(mut self, start: Option<Start>) -> Result<NodeSpec, Error> {
        self.start = start.map(|s| s.checked("not_before")).transpose()?;
        Ok(self)
    }

    /// The spec with a retry policy (`None`: a failure is final).
    pub fn with_retry(mut self, retry: Option<RetryPolicy>) -> Result<NodeSpec, Error> {
        self.retry = retry.map(RetryPolicy::checked).transpose()?;
        Ok(self)
    }

    /// Whether `other` names the same task (everything but the start and
    /// the trace it was added in).
    pub fn same_task(&self, other: &NodeSpec) -> bool {
        let strip = |s: &NodeSpec| NodeSpec {
            start: None,
            traceparent: None,
            ..s.clone()
        };
        strip(self) == strip(other)
    }

    /// The spec with a concurrency key (`None`: none); refused when the
    /// key's record id would be longer than an id may be.
    pub fn with_key(mut self, key: Option<Id>) -> Result<NodeSpec, Error> {
        if let Some(k) = &key {
            key_record_id(k)?;
        }
        self.key = key;
        Ok(self)
    }

    /// The spec with the trace context it is added in (`None`: none).
    pub fn with_traceparent(mut self, traceparent: Option<String>) -> Result<NodeSpec, Error> {
        if let Some(t) = &traceparent {
            check_traceparent(t)?;
        }
        self.traceparent = traceparent;
        Ok(self)
    }

    /// The spec with a run-time limit per attempt (`None`: none), from
    /// 1 ms to 7 days.
    pub fn with_timeout(mut self, timeout_ms: Option<u64>) -> Result<NodeSpec, Error> {
        if let Some(ms) = timeout_ms {
            crate::time::check_span(
                "timeout",
                ms,
                crate::time::MIN_TTL_MS,
                crate::time::MAX_TTL_MS,
            )?;
        }
        self.timeout_ms = timeout_ms;
        Ok(self)
    }

    /// A spec from its parts, normalised (dependencies sorted, repeats
    /// dropped) and checked: a task may not depend on itself, and may have
    /// at most [`MAX_DEPENDENCIES`].
    pub fn new(
        task: &TaskId,
        queue: Option<Id>,
        priority: i64,
        depends_on: impl IntoIterator<Item = TaskId>,
    ) -> Result<NodeSpec, Error> {
        let depends_on: BTreeSet<TaskId> = depends_on.into_iter().collect();
        if depends_on.contains(task) {
            return Err(Error::invalid(
                "depends_on",
                format!("task {:?} may not depend on itself", task.as_str()),
            ));
        }
        if depends_on.len() > MAX_DEPENDENCIES {
            return Err(Error::invalid(
                "depends_on",
                format!(
                    "must name at most {MAX_DEPENDENCIES} tasks (got {})",
                    depends_on.len()
                ),
            ));
        }
        let queue = match queue {
            Some(q) => q,
            None => Id::parse("queue", DEFAULT_QUEUE)?,
        };
        Ok(NodeSpec {
            timeout_ms: None,
            start: None,
            retry: None,
            key: None,
            traceparent: None,
            queue,
            priority,
            depends_on: depends_on.into_iter().collect(),
        })
    }
}

/// A task's place in the work graph, kept on its record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    #[serde(flatten)]
    pub spec: NodeSpec,
    /// When the task became ready (added with every dependency done, or
    /// woken by the success of its last one): its place among equal
    /// priorities. `None` while it waits on a dependency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<Timestamp>,
    /// Not granted before this time (its add's start, resolved when the
    /// add was decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// Ready, but its key was full when a grant was asked for: out of the
    /// ready index (so `next` passes over it without reading it) until a
    /// slot frees and the key's record puts it back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parked: bool,
    /// The retry policy its queue's policy gave it when it was added
    /// (it had none of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_retry: Option<RetryPolicy>,
    /// The dependencies its holder's checkpoints added (the tasks it
    /// spawned and waits for), listed in `depends_on` too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaits: Vec<TaskId>,
}

impl Node {
    /// The spec as it was added: without the dependencies its checkpoints
    /// added since, so the same add again is still the same task.
    pub fn as_added(&self) -> NodeSpec {
        let mut spec = self.spec.clone();
        spec.depends_on.retain(|d| !self.awaits.contains(d));
        spec
    }

    /// The retry policy its failed or stalled attempts follow: its own,
    /// else the one its queue gave it when it was added.
    pub fn retry_policy(&self) -> Option<RetryPolicy> {
        self.spec.retry.or(self.queue_retry)
    }

    /// When the task may first be granted once ready: its ready time, or
    /// its start if that is later. `None` while it waits on a dependency.
    pub fn due_at(&self) -> Option<Timestamp> {
        let ready = self.ready_at?;
        Some(self.not_before.map_or(ready, |t| t.max(ready)))
    }

    /// Whether the task is put off past its ready time: its place is then
    /// in the held index, by its start, not in the ready index.
    pub fn put_off(&self) -> bool {
        match (self.ready_at, self.not_before) {
            (Some(ready), Some(start)) => start > ready,
            _ => false,
        }
    }
}

/// The states of a task's dependencies as the store found them in the
/// commit that decides (derived: an expired lease or a passed deadline
/// shows as what it comes to). `None`: no such task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstream {
    states: BTreeMap<TaskId, Option<State>>,
    /// For a grant of a task with a concurrency key: the key as read.
    key: Option<KeyView>,
    /// For an add: the policy of the task's queue, if it has one.
    queue: Option<QueuePolicy>,
    /// What each task read depends on (a checkpoint that waits for the
    /// tasks it added refuses one that depends on it).
    depends: BTreeMap<TaskId, Vec<TaskId>>,
}

impl Upstream {
    /// Nothing read: a task with dependencies is then never ready (fail closed).
    pub fn none() -> Upstream {
        Upstream::default()
    }

    /// From states already derived.
    pub fn of_states(states: impl IntoIterator<Item = (TaskId, Option<State>)>) -> Upstream {
        Upstream {
            states: states.into_iter().collect(),
            key: None,
            queue: None,
            depends: BTreeMap::new(),
        }
    }

    /// With what each task read depends on.
    pub fn with_dependencies(mut self, depends: BTreeMap<TaskId, Vec<TaskId>>) -> Upstream {
        self.depends = depends;
        self
    }

    /// What `task` depends on, if the commit read it and it has dependencies.
    pub fn depends_on(&self, task: &TaskId) -> Option<&[TaskId]> {
        self.depends.get(task).map(Vec::as_slice)
    }

    /// With the policy of the deciding task's queue, as read.
    pub fn with_queue(mut self, policy: QueuePolicy) -> Upstream {
        self.queue = Some(policy);
        self
    }

    /// The policy of the deciding task's queue, if the commit read one.
    pub fn queue(&self) -> Option<&QueuePolicy> {
        self.queue.as_ref()
    }

    /// With what the commit read of the deciding task's concurrency key.
    pub fn with_key(mut self, key: KeyView) -> Upstream {
        self.key = Some(key);
        self
    }

    /// The deciding task's concurrency key as read, if it has one and the
    /// store read it (a grant of a keyed task without it is refused:
    /// fail closed).
    pub fn key(&self) -> Option<&KeyView> {
        self.key.as_ref()
    }

    /// The derived state of `dep`, if it was read and exists.
    pub fn state(&self, dep: &TaskId) -> Option<State> {
        self.states.get(dep).copied().flatten()
    }

    fn read(&self, dep: &TaskId) -> bool {
        self.states.contains_key(dep)
    }

    /// Whether the commit read `task` (found, or found missing).
    pub fn was_read(&self, task: &TaskId) -> bool {
        self.read(task)
    }

    /// Where `depends_on` stands.
    pub fn readiness(&self, depends_on: &[TaskId]) -> Readiness {
        let mut waiting = Vec::new();
        for dep in depends_on {
            match self.state(dep) {
                Some(State::Succeeded) => {}
                Some(s) if s.is_terminal() => {
                    return Readiness::Blocked {
                        upstream: dep.clone(),
                        state: s,
                    };
                }
                Some(_) => waiting.push(dep.clone()),
                None if self.read(dep) => {
                    return Readiness::Unknown {
                        missing: dep.clone(),
                    };
                }
                // Not read: not known to be done.
                None => waiting.push(dep.clone()),
            }
        }
        if waiting.is_empty() {
            Readiness::Ready
        } else {
            Readiness::Waiting { on: waiting }
        }
    }
}

/// Where a task's dependencies stand.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "readiness", rename_all = "snake_case")]
pub enum Readiness {
    /// Every dependency SUCCEEDED.
    Ready,
    /// Some have not ended yet.
    Waiting { on: Vec<TaskId> },
    /// One ended without success.
    Blocked { upstream: TaskId, state: State },
    /// One does not exist.
    Unknown { missing: TaskId },
}

/// Which kind of task a `next` asks for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "taker", rename_all = "snake_case")]
pub enum Taker {
    /// `next`: a bare task, granted to `owner`.
    Owner {
        owner: Id,
        ttl_ms: Option<u64>,
        lock_delay_ms: Option<u64>,
    },
    /// `task next`: a declared task, claimed for the run registered for it.
    Executor { executor: Id, ttl_ms: Option<u64> },
}

/// A request for the next ready task.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NextQuery {
    pub taker: Taker,
    /// Queues to take from, in no order (ties across queues go by
    /// priority, then ready time, then id). Never empty.
    pub queues: Vec<Id>,
    pub now: Timestamp,
    /// The caller's clock, read again where the decision is serialized.
    #[serde(skip)]
    pub clock: crate::time::CommitClock,
    /// How many grants the one commit may make (`next --count`): up to
    /// this many, each with its own lease and fence, as that many `next`s
    /// one after another would make them. 1 to [`MAX_NEXT_COUNT`].
    #[serde(default = "one_grant", skip_serializing_if = "is_one_grant")]
    pub count: u32,
    /// The tasks the caller may take (a scoped token's): the scan passes
    /// over the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<crate::scope::Scope>,
}

/// The most grants one `next` may make.
pub const MAX_NEXT_COUNT: u32 = 1000;

fn one_grant() -> u32 {
    1
}

fn is_one_grant(n: &u32) -> bool {
    *n == 1
}

impl crate::time::Timed for NextQuery {
    fn timed_at_commit(&mut self) {
        self.now = self.clock.read(self.now);
    }

    fn timed_by_store(&mut self, now: Timestamp) {
        self.now = now;
        self.clock = crate::time::CommitClock::none();
    }
}

impl NextQuery {
    /// This query for one grant (what [`crate::Store::next`] makes).
    pub fn one(&self) -> NextQuery {
        NextQuery {
            count: 1,
            ..self.clone()
        }
    }

    /// The lane of the index this query takes from.
    pub fn lane(&self) -> Lane {
        match self.taker {
            Taker::Owner { .. } => Lane::Bare,
            Taker::Executor { .. } => Lane::Declared,
        }
    }
}

/// How the tasks `next` could take stand when it took none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Census {
    /// Waiting on a dependency that has not ended (or a declared task
    /// whose run is not registered yet).
    pub queued: u64,
    /// Held under a live lease.
    pub held: u64,
    /// Behind a dependency that ended without success.
    pub blocked: u64,
    /// Ready but not taken (a lock delay, a race lost in this very call,
    /// a paused queue).
    pub ready: u64,
    /// How many of the queues asked are paused (`next` passes over them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub paused: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Census {
    /// Nothing in the queues can become ready without an operator: loops can stop.
    pub fn drained(&self) -> bool {
        self.queued == 0 && self.held == 0 && self.ready == 0
    }
}

/// One node of a graph to add.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewNode {
    pub task: TaskId,
    pub spec: NodeSpec,
}

/// Orders a graph to add so every node comes after the nodes of the same
/// graph it depends on. Refuses (naming the nodes) a repeated id with two
/// definitions, a cycle, or a dependency that is neither in the graph nor
/// among the tasks `exists` knows; nothing is added then.
pub fn plan(nodes: Vec<NewNode>, exists: impl Fn(&TaskId) -> bool) -> Result<Vec<NewNode>, Error> {
    if nodes.len() > MAX_GRAPH_NODES {
        return Err(Error::invalid(
            "graph",
            format!(
                "may add at most {MAX_GRAPH_NODES} nodes at once (got {})",
                nodes.len()
            ),
        ));
    }
    let mut by_id: BTreeMap<TaskId, NewNode> = BTreeMap::new();
    for n in nodes {
        if let Some(prev) = by_id.get(&n.task) {
            if prev.spec != n.spec {
                return Err(Error::invalid(
                    "graph",
                    format!("node {:?} is listed twice, differently", n.task.as_str()),
                ));
            }
            continue;
        }
        by_id.insert(n.task.clone(), n);
    }
    let mut unknown: Vec<String> = Vec::new();
    for n in by_id.values() {
        for d in &n.spec.depends_on {
            if !by_id.contains_key(d) && !exists(d) {
                unknown.push(format!("{} -> {}", n.task.as_str(), d.as_str()));
            }
        }
    }
    if !unknown.is_empty() {
        unknown.truncate(20);
        return Err(Error::invalid(
            "depends_on",
            format!(
                "names tasks that do not exist: {} (add them first, or in the same graph)",
                unknown.join(", ")
            ),
        ));
    }
    // Kahn's algorithm over the edges inside the graph.
    let mut pending: BTreeMap<TaskId, usize> = BTreeMap::new();
    let mut dependents: BTreeMap<TaskId, Vec<TaskId>> = BTreeMap::new();
    for n in by_id.values() {
        let inside: Vec<&TaskId> = n
            .spec
            .depends_on
            .iter()
            .filter(|d| by_id.contains_key(*d))
            .collect();
        pending.insert(n.task.clone(), inside.len());
        for d in inside {
            dependents
                .entry(d.clone())
                .or_default()
                .push(n.task.clone());
        }
    }
    let mut ready: Vec<TaskId> = pending
        .iter()
        .filter(|(_, c)| **c == 0)
        .map(|(t, _)| t.clone())
        .collect();
    ready.reverse();
    let mut order = Vec::with_capacity(by_id.len());
    while let Some(t) = ready.pop() {
        for d in dependents.get(&t).into_iter().flatten() {
            if let Some(c) = pending.get_mut(d) {
                *c -= 1;
                if *c == 0 {
                    ready.push(d.clone());
                }
            }
        }
        order.push(t);
    }
    if order.len() != by_id.len() {
        let placed: BTreeSet<&TaskId> = order.iter().collect();
        let mut cycle: Vec<&str> = by_id
            .keys()
            .filter(|t| !placed.contains(t))
            .map(|t| t.as_str())
            .collect();
        cycle.truncate(20);
        return Err(Error::invalid(
            "depends_on",
            format!("the graph has a cycle through {}", cycle.join(", ")),
        ));
    }
    Ok(order.into_iter().filter_map(|t| by_id.remove(&t)).collect())
}

/// A retry policy as a graph file's node or a manifest gives it:
/// `{"max_attempts": N, "backoff": DUR, "factor": F, "max": DUR}`.
pub fn parse_retry(v: Option<&serde_json::Value>) -> Result<Option<RetryPolicy>, Error> {
    Ok(match v {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Object(r)) => {
            const RETRY: &[&str] = &["max_attempts", "backoff", "factor", "max"];
            if let Some(k) = r.keys().find(|k| !RETRY.contains(&k.as_str())) {
                return Err(Error::invalid(
                    k.as_str(),
                    format!("unknown retry field (known: {})", RETRY.join(", ")),
                ));
            }
            let text = |k: &str| -> Result<Option<&str>, Error> {
                match r.get(k) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(s)) => Ok(Some(s.as_str())),
                    Some(_) => Err(Error::invalid(
                        k,
                        format!("must be a duration, {}", crate::time::DURATION_FORMS),
                    )),
                }
            };
            let whole = |k: &str| -> Result<Option<u32>, Error> {
                match r.get(k) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(v) => v
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .map(Some)
                        .ok_or_else(|| Error::invalid(k, "must be a whole number")),
                }
            };
            let number = |k: &str| -> Result<Option<f64>, Error> {
                match r.get(k) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(v) => v
                        .as_f64()
                        .map(Some)
                        .ok_or_else(|| Error::invalid(k, "must be a number such as 2 or 1.5")),
                }
            };
            // Bounds: the policy's own check.
            let span = |k: &str, field: &str| -> Result<Option<u64>, Error> {
                text(k)?
                    .map(|t| crate::time::parse_ms(field, t))
                    .transpose()
            };
            RetryPolicy::from_parts(
                whole("max_attempts")?,
                span("backoff", "backoff")?,
                number("factor")?,
                span("max", "max_backoff")?,
            )?
        }
        Some(_) => return Err(Error::invalid("retry", "must be an object")),
    })
}

#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;
