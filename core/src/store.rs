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
pub use async_trait::async_trait;
use std::fmt::Debug;
use std::sync::Arc;

/// Told the number of requests in each durable commit a store's group
/// committer makes.
pub type BatchObserver = Arc<dyn Fn(usize) + Send + Sync>;

/// What a store tells of its own work beyond its answers, for benchmarks
/// and metrics: not part of [`Store`], which is storage only.
pub trait Meter: Send + Sync + Debug {
    /// How many durable commits (fsyncs) this store handle has made, if it
    /// counts them: benchmarks divide grants by it.
    fn commits(&self) -> Option<u64> {
        None
    }

    /// Asks to be told the size of every batch this store's group
    /// committer commits; `false` when it has none (nothing will be told).
    fn observe_batches(&self, _observer: BatchObserver) -> bool {
        false
    }
}

impl<M: Meter + ?Sized> Meter for Arc<M> {
    fn commits(&self) -> Option<u64> {
        (**self).commits()
    }
    fn observe_batches(&self, observer: BatchObserver) -> bool {
        (**self).observe_batches(observer)
    }
}

/// A stored record with what the store's judge of time says about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Due {
    Any,
    /// `due_at` is unset or later than `now`.
    NotYet,
    /// `due_at <= now`.
    Passed,
}

impl Due {
    /// Whether a record whose next self-change is `due_at` meets this
    /// condition at `now` (what a store's index holds is enough).
    pub fn admits(self, due_at: Option<Timestamp>, now: Timestamp) -> bool {
        let passed = due_at.is_some_and(|d| d <= now);
        match self {
            Due::Any => true,
            Due::NotYet => !passed,
            Due::Passed => passed,
        }
    }
}

/// One stored state with a due condition. A record matches a query when it
/// matches any of its clauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Clause {
    pub state: State,
    pub due: Due,
}

impl Clause {
    pub fn matches(&self, record: &TaskRecord, now: Timestamp) -> bool {
        record.state == self.state && self.due.admits(record.due_at(), now)
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListQuery {
    /// Only tasks whose id sorts after this one.
    pub after: Option<TaskId>,
    pub limit: usize,
    /// `None`: every task. Otherwise tasks matching any clause.
    pub clauses: Option<Vec<Clause>>,
    pub now: Timestamp,
}

/// How a store judges lease liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockKind {
    /// From the stored expiry and the time core passes in (an injected clock).
    Injected,
    /// From the engine's own clock (etcd leases): tests must wait real time.
    Engine,
}

/// What a store can do, so callers never ask `if backend == ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The store signs its callers' fences ([`Store::fence_token`]): a
    /// server with a fence key. A caller asks it for tokens only then.
    #[serde(default)]
    pub signs_fences: bool,
    /// The store answers [`Store::oldest_ready`] (every store but a
    /// server's client, whose server answers for its own store).
    #[serde(default)]
    pub reads_ready_index: bool,
}

impl Capabilities {
    /// A store whose time is the authority's clock and whose leases are
    /// kept to the millisecond (memory, SQLite, sled).
    pub fn injected_clock(durable: bool, multi_process: bool) -> Capabilities {
        Capabilities {
            clock: ClockKind::Injected,
            durable,
            multi_process,
            min_ttl_ms: 1,
            ttl_granularity_ms: 1,
            signs_fences: false,
            reads_ready_index: true,
        }
    }

    /// The lease rules the decision applies for this store.
    pub fn lease_rules(&self) -> crate::decide::LeaseRules {
        crate::decide::LeaseRules {
            granularity_ms: self.ttl_granularity_ms,
            min_ms: self.min_ttl_ms,
        }
    }
}

/// One count a store keeps: how many records of `queue` are stored in `state`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Count {
    /// The queue ("" for tasks outside the work graph).
    pub queue: String,
    pub state: State,
    pub n: u64,
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

    /// How many records are stored in each state, by the queue they are
    /// counted under ([`TaskRecord::census_queue`]; records it says are
    /// not counted are left out, as are zero counts), in any order; `None` when the
    /// store keeps no counts (core then reads the records).
    ///
    /// # Contract
    /// Writes nothing that changes an answer. The counts are changed in
    /// the same commit as the records they count, so they equal a count of
    /// the records at one moment (whatever crashed); reading them costs
    /// the same however many tasks there are.
    async fn counts(&self) -> Result<Option<Vec<Count>>> {
        Ok(None)
    }

    /// The earliest ready time at or before `now` in `lane`/`queue`'s
    /// ready index: when its longest-waiting task became ready
    /// ([`crate::graph::OldestReady`]: one seek a priority in use).
    /// `Unsupported` from a store that cannot read its index from outside
    /// (a server's client: the server answers for its own store).
    ///
    /// # Contract
    /// Writes nothing. Reads the index as of one moment, or as of each
    /// seek's moment (a wait that ended between seeks may be counted).
    async fn oldest_ready(
        &self,
        _lane: crate::graph::Lane,
        _queue: &crate::id::Id,
        _now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        Err(crate::error::Error::unsupported(
            "this store does not read its ready index from outside",
        ))
    }

    /// Applies `ops` in order as one atomic commit, each decided on the
    /// state the ones before it left, or none of them (the add of a graph).
    ///
    /// # Contract
    /// Every operation is decided as by [`Store::apply`], with its
    /// follow-ups, in the same commit. When every decision commits or
    /// acknowledges, all of it is durable before `Ok` returns; when any
    /// refuses or is invalid, nothing at all is written and the decisions
    /// say which (the first one that is not a commit or an
    /// acknowledgement). A store that cannot commit them together commits
    /// them in chunks and says so in its documentation.
    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>>;

    /// Grants the next ready task `query` asks for, or `None`.
    ///
    /// # Contract
    /// One atomic commit (or a bounded read-decide-compare loop) in which
    /// the store offers candidates from an index, never a scan of every
    /// task: the records whose [`TaskRecord::ready_entry`] is in one of the
    /// query's queues of its lane, in [`crate::graph::ReadyEntry`] order,
    /// and the held tasks whose lease it judges expired. Core orders them
    /// ([`crate::graph::NextQuery::order`]) and decides each as a grant
    /// ([`crate::graph::NextQuery::claim_for`]) until one commits; the store
    /// writes what the decisions write. Durable before the grant is
    /// answered, as for [`Store::apply`]. The ready index is kept with every
    /// record write, in the same commit.
    async fn next(&self, query: &crate::graph::NextQuery) -> Result<Option<Decision>>;

    /// Each of `ops` decided on its own (a refusal of one refuses no
    /// other), all committed together: a holder's batch of reports.
    ///
    /// # Contract
    /// One atomic commit where the store can (one fsync for the batch); the
    /// answers in the order of `ops`. The default applies them one after
    /// another, a commit each (etcd: a refusal there leaves an audit event
    /// of its own).
    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(self.apply(op).await?);
        }
        Ok(out)
    }

    /// Up to `query.count` grants (`next --count`), each with its own lease
    /// and fence, in the order that many `next`s one after another would
    /// make them; none when nothing is ready.
    ///
    /// # Contract
    /// As [`Store::next`], all in one commit where the store can: core's
    /// scan goes on past a grant, passing over the tasks it granted. The
    /// default asks `next` once per grant (a commit each), as a store whose
    /// one commit can mint one fence does (etcd: its fences are revisions).
    async fn next_many(&self, query: &crate::graph::NextQuery) -> Result<Vec<Decision>> {
        let one = query.one();
        let mut out = Vec::new();
        for _ in 0..query.count.max(1) {
            match self.next(&one).await? {
                Some(d) => out.push(d),
                None => break,
            }
        }
        Ok(out)
    }

    /// Waits until something may have become ready for `query` (a task
    /// entered a ready index), for at most `max_ms`; `Ok(true)` once it
    /// waited (for a change, or out the time), `Ok(false)` at once when the
    /// store has no change feed and the caller should back off instead.
    ///
    /// # Contract
    /// Writes nothing. A wake-up is a hint, never a grant: the caller asks
    /// `next` again, and a change missed (one made before the watch began)
    /// costs at most `max_ms`.
    async fn watch_ready(&self, _query: &crate::graph::NextQuery, _max_ms: u64) -> Result<bool> {
        Ok(false)
    }

    /// Acknowledges notifications by intent id at `now` (the authority's
    /// clock); returns how many were newly acknowledged.
    ///
    /// # Contract
    /// Idempotent: an id already acknowledged, or unknown, is ignored.
    /// Touches outbox entries only, and only by intent id.
    async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64>;

    /// A token the store's own signer gave for `task`'s attempt under
    /// `fence` (a server with a fence key signs for its clients), if it
    /// has one. Most stores have no signer.
    ///
    /// # Contract
    /// Writes nothing; signs only the fence of the task's live lease.
    /// Asked only of a store whose capabilities say `signs_fences`.
    async fn fence_token(&self, _task: &TaskId, _fence: u64) -> Result<Option<String>> {
        Ok(None)
    }
}

/// Implements [`Store`] for a type by handing every call to the store it
/// holds: `forward_store!(MyStore.field: FieldType)` (and [`Meter`] too), or
/// for a type that is `AsRef<Target>`, `forward_store!(impl[GENERICS] Type
/// => Target)`.
#[macro_export]
macro_rules! forward_store {
    ($ty:ident . $field:ident : $target:ty) => {
        impl AsRef<$target> for $ty {
            fn as_ref(&self) -> &$target {
                &self.$field
            }
        }
        $crate::forward_store!(impl[] $ty => $target);
        impl $crate::store::Meter for $ty {
            fn commits(&self) -> Option<u64> {
                $crate::store::Meter::commits(&self.$field)
            }
            fn observe_batches(&self, observer: $crate::store::BatchObserver) -> bool {
                $crate::store::Meter::observe_batches(&self.$field, observer)
            }
        }
    };
    (impl[$($gen:tt)*] $ty:ty => $target:ty) => {
        #[$crate::store::async_trait]
        impl<$($gen)*> $crate::Store for $ty {
            fn capabilities(&self) -> $crate::Capabilities {
                <Self as AsRef<$target>>::as_ref(self).capabilities()
            }
            async fn read(
                &self,
                task: &$crate::TaskId,
                now: $crate::Timestamp,
            ) -> $crate::Result<Option<$crate::Snapshot>> {
                <Self as AsRef<$target>>::as_ref(self).read(task, now).await
            }
            async fn apply(&self, op: $crate::Operation) -> $crate::Result<$crate::Decision> {
                <Self as AsRef<$target>>::as_ref(self).apply(op).await
            }
            async fn apply_all(
                &self,
                ops: Vec<$crate::Operation>,
            ) -> $crate::Result<Vec<$crate::Decision>> {
                <Self as AsRef<$target>>::as_ref(self).apply_all(ops).await
            }
            async fn next(
                &self,
                query: &$crate::graph::NextQuery,
            ) -> $crate::Result<Option<$crate::Decision>> {
                <Self as AsRef<$target>>::as_ref(self).next(query).await
            }
            async fn next_many(
                &self,
                query: &$crate::graph::NextQuery,
            ) -> $crate::Result<Vec<$crate::Decision>> {
                <Self as AsRef<$target>>::as_ref(self).next_many(query).await
            }
            async fn apply_each(
                &self,
                ops: Vec<$crate::Operation>,
            ) -> $crate::Result<Vec<$crate::Decision>> {
                <Self as AsRef<$target>>::as_ref(self).apply_each(ops).await
            }
            async fn watch_ready(
                &self,
                query: &$crate::graph::NextQuery,
                max_ms: u64,
            ) -> $crate::Result<bool> {
                <Self as AsRef<$target>>::as_ref(self).watch_ready(query, max_ms).await
            }
            async fn list(
                &self,
                query: &$crate::ListQuery,
            ) -> $crate::Result<Vec<$crate::Snapshot>> {
                <Self as AsRef<$target>>::as_ref(self).list(query).await
            }
            async fn events(
                &self,
                task: Option<&$crate::TaskId>,
                after: u64,
                limit: usize,
            ) -> $crate::Result<Vec<$crate::Event>> {
                <Self as AsRef<$target>>::as_ref(self).events(task, after, limit).await
            }
            async fn pending(
                &self,
                after: u64,
                limit: usize,
            ) -> $crate::Result<Vec<$crate::Notification>> {
                <Self as AsRef<$target>>::as_ref(self).pending(after, limit).await
            }
            async fn counts(&self) -> $crate::Result<Option<Vec<$crate::counts::Count>>> {
                <Self as AsRef<$target>>::as_ref(self).counts().await
            }
            async fn oldest_ready(
                &self,
                lane: $crate::graph::Lane,
                queue: &$crate::Id,
                now: $crate::Timestamp,
            ) -> $crate::Result<Option<$crate::Timestamp>> {
                <Self as AsRef<$target>>::as_ref(self)
                    .oldest_ready(lane, queue, now)
                    .await
            }
            async fn ack(
                &self,
                intent_ids: &[String],
                now: $crate::Timestamp,
            ) -> $crate::Result<u64> {
                <Self as AsRef<$target>>::as_ref(self).ack(intent_ids, now).await
            }
            async fn fence_token(
                &self,
                task: &$crate::TaskId,
                fence: u64,
            ) -> $crate::Result<Option<String>> {
                <Self as AsRef<$target>>::as_ref(self).fence_token(task, fence).await
            }
        }
    };
}

forward_store!(impl[S: Store + ?Sized] Arc<S> => S);
forward_store!(impl[S: Store + ?Sized] Box<S> => S);

/// The upstream of a decision, from the snapshots of its dependencies read
/// in the deciding commit (each derived at `now`); with what each depends
/// on when `dependencies` (the decisions that look: a grant does not).
pub fn upstream_of(
    found: impl IntoIterator<Item = (TaskId, Option<Snapshot>)>,
    now: Timestamp,
    dependencies: bool,
) -> crate::graph::Upstream {
    let mut queue = None;
    let mut depends = std::collections::BTreeMap::new();
    let upstream = crate::graph::Upstream::of_states(found.into_iter().map(|(id, snap)| {
        if let Some(p) = snap.as_ref().and_then(|s| s.record.queue_policy) {
            queue = Some(p);
        }
        if let Some(s) = snap.as_ref().filter(|_| dependencies)
            && !s.record.depends_on().is_empty()
        {
            depends.insert(id.clone(), s.record.depends_on().to_vec());
        }
        let state = snap.map(|s| crate::decide::derive(&s.record, s.judged, now).state);
        (id, state)
    }))
    .with_dependencies(depends);
    match queue {
        Some(p) => upstream.with_queue(p),
        None => upstream,
    }
}

/// One open commit of a store that decides under a lock or inside one
/// transaction (SQLite, sled, memory): what [`crate::engine::drive`]
/// needs of it.
pub trait Txn {
    /// The task as this commit sees it (its own writes included).
    fn load(&mut self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>>;
    /// Writes what `d` writes (assigning a fence if it mints one).
    fn write(&mut self, d: &mut Decision) -> Result<()>;
    /// The store's lease rules.
    fn rules(&self) -> crate::decide::LeaseRules {
        crate::decide::LeaseRules::default()
    }
}
