//! The store contract: the few things a backend must do. Everything else
//! (the rules, the public API) is written once in core above it.
//!
//! # Contract
//!
//! A store keeps task records, an append-only event log with one store-wide
//! order, an outbox of notifications, and a store-wide fence counter.
//!
//! * **Atomicity.** [`Store::apply`] reads the task, calls
//!   [`crate::decide::decide`] and writes what it returns (settlement, the
//!   change or the conflict event, the events, the notifications, a new
//!   fence) as one atomic commit. A concurrent change to the same task
//!   either happens entirely before the read or entirely after the commit
//!   (a lock held across read-decide-write), or makes the commit fail its
//!   compare and the decision run again on the new record (a bounded
//!   read-decide-compare loop).
//! * **Durability.** When `apply` returns `Ok`, everything it wrote is
//!   durable; no answer, a refusal included, reveals a change that is not.
//! * **Fences.** A new fence is strictly greater than every fence the store
//!   ever issued, across tasks, restarts and crashes.
//! * **Fail closed.** When the store cannot answer it returns
//!   [`ErrorKind::Unavailable`](crate::ErrorKind) (nothing was applied),
//!   `Indeterminate` (a write may have landed), or `Corrupt`; it never
//!   returns a grant it did not commit durably.
//! * **Reads never write.**

use crate::decide::Decision;
use crate::decide::Judged;
use crate::error::Result;
use crate::id::TaskId;
use crate::model::{Event, Notification, State, TaskRecord};
use crate::request::Operation;
use crate::time::Timestamp;
use async_trait::async_trait;
use std::fmt::Debug;
use std::sync::Arc;

/// A stored record with what the store's judge of time says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub record: TaskRecord,
    pub judged: Judged,
}

impl Snapshot {
    /// Judged from the stored times at `now` (stores without an engine
    /// clock of their own).
    pub fn at(record: TaskRecord, now: Timestamp) -> Snapshot {
        let judged = Judged::at(&record, now);
        Snapshot { record, judged }
    }

    /// Whether the stored grant is live: a held state whose lease holds.
    pub fn lease_live(&self) -> bool {
        crate::decide::live_lease(&self.record, self.judged.lease_holds)
    }
}

/// Whether a stored record's next self-change ([`TaskRecord::due_at`]) has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    Any,
    /// `due_at` is unset or later than `now`.
    NotYet,
    /// `due_at <= now`.
    Passed,
}

/// One stored state with a due condition. A record matches a query when it
/// matches any of its clauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clause {
    pub state: State,
    pub due: Due,
}

impl Clause {
    pub fn matches(&self, record: &TaskRecord, now: Timestamp) -> bool {
        if record.state != self.state {
            return false;
        }
        let due = record.due_at().is_some_and(|d| d <= now);
        match self.due {
            Due::Any => true,
            Due::NotYet => !due,
            Due::Passed => due,
        }
    }

    /// The stored states and due conditions from which a task can derive to
    /// `state` at query time. A superset is fine: core filters exactly.
    pub fn for_derived(state: State) -> Vec<Clause> {
        use Due::{Any, NotYet, Passed};
        let c = |state, due| Clause { state, due };
        match state {
            State::Declared => vec![c(State::Declared, NotYet)],
            State::Registered => {
                vec![
                    c(State::Registered, NotYet),
                    c(State::Claimed, Passed),
                    c(State::Running, Passed),
                ]
            }
            State::Claimed => vec![c(State::Claimed, NotYet)],
            State::Running => vec![c(State::Running, NotYet)],
            State::NotStarted => vec![
                c(State::NotStarted, Any),
                c(State::Declared, Passed),
                c(State::Registered, Passed),
                c(State::Claimed, Passed),
                c(State::Running, Passed),
            ],
            State::Stalled => vec![
                c(State::Stalled, Any),
                c(State::Claimed, Passed),
                c(State::Running, Passed),
            ],
            s => vec![c(s, Any)],
        }
    }

    /// Every record whose derived state differs from its stored one.
    pub fn due_now() -> Vec<Clause> {
        [
            State::Declared,
            State::Registered,
            State::Claimed,
            State::Running,
        ]
        .into_iter()
        .map(|state| Clause {
            state,
            due: Due::Passed,
        })
        .collect()
    }
}

/// A page request for [`Store::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only tasks whose id sorts after this one.
    pub after: Option<TaskId>,
    pub limit: usize,
    /// `None`: every task. Otherwise tasks matching any clause.
    pub clauses: Option<Vec<Clause>>,
    pub now: Timestamp,
}

/// How a store judges lease liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// From the stored expiry and the time core passes in (an injected clock).
    Injected,
    /// From the engine's own clock (etcd leases): tests must wait real time.
    Engine,
}

/// What a store can do, so callers never ask `if backend == ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub clock: ClockKind,
    /// Survives a restart of the process.
    pub durable: bool,
    /// Several processes may use the store at once.
    pub multi_process: bool,
    /// The smallest lease TTL the store can honour, in milliseconds.
    pub min_ttl_ms: u64,
    /// Lease TTLs are whole multiples of this many milliseconds (1 for
    /// millisecond leases; 1000 for etcd's whole seconds).
    pub ttl_granularity_ms: u64,
}

impl Capabilities {
    /// The lease rules the decision applies for this store.
    pub fn lease_rules(&self) -> crate::decide::LeaseRules {
        crate::decide::LeaseRules {
            granularity_ms: self.ttl_granularity_ms,
            min_ms: self.min_ttl_ms,
        }
    }
}

/// A backend. See the module docs for the contract every method keeps.
#[async_trait]
pub trait Store: Send + Sync + Debug {
    fn capabilities(&self) -> Capabilities;

    /// Reads one task as stored, with its lease liveness at `now`.
    ///
    /// # Contract
    /// Writes nothing. Returns only durable state.
    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>>;

    /// Runs [`crate::decide::decide`] for `op` inside one atomic commit and
    /// applies its result; returns the decision with the fence filled in.
    ///
    /// # Contract
    /// Atomic and durable as in the module docs. Writes nothing when the
    /// decision writes nothing (a lost claim race, an idempotent repeat).
    /// On `Err(Unavailable)` nothing was applied.
    async fn apply(&self, op: Operation) -> Result<Decision>;

    /// Stored records in task-id order after `query.after`, at most
    /// `query.limit`, matching `query.clauses`.
    ///
    /// # Contract
    /// Writes nothing. May return a superset of the clauses (core filters
    /// by derived state); must not skip a matching record.
    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>>;

    /// Events with `seq > after`, in sequence order, at most `limit`; only
    /// `task`'s when given.
    ///
    /// # Contract
    /// Writes nothing. The sequence is one total order over the whole store.
    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>>;

    /// Unacknowledged notifications with `seq > after`, in order, at most `limit`.
    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>>;

    /// How many durable commits (fsyncs) this store handle has made, if it
    /// counts them: benchmarks divide grants by it.
    fn commits(&self) -> Option<u64> {
        None
    }

    /// Acknowledges notifications by intent id at `now` (the authority's
    /// clock); returns how many were newly acknowledged.
    ///
    /// # Contract
    /// Idempotent: an id already acknowledged, or unknown, is ignored.
    /// Touches outbox entries only, and only by intent id.
    async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64>;
}

macro_rules! forward_store {
    ($ty:ty) => {
        #[async_trait]
        impl<S: Store + ?Sized> Store for $ty {
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            fn commits(&self) -> Option<u64> {
                (**self).commits()
            }
            async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
                (**self).read(task, now).await
            }
            async fn apply(&self, op: Operation) -> Result<Decision> {
                (**self).apply(op).await
            }
            async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
                (**self).list(query).await
            }
            async fn events(
                &self,
                task: Option<&TaskId>,
                after: u64,
                limit: usize,
            ) -> Result<Vec<Event>> {
                (**self).events(task, after, limit).await
            }
            async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
                (**self).pending(after, limit).await
            }
            async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64> {
                (**self).ack(intent_ids, now).await
            }
        }
    };
}

forward_store!(Arc<S>);
forward_store!(Box<S>);
