//! The etcd store: one guarded transaction per decision.

use crate::keys::{Keys, prefix_end, unhex};
use async_trait::async_trait;
use baton_core::model::{NotificationDraft, PENDING_FENCE};
use baton_core::{
    Capabilities, ClockKind, Decision, Error, Event, Judged, LeaseEffect, ListQuery, Notification,
    Operation, Result, Snapshot, Store, TaskId, TaskRecord, TimerEffect, Timestamp,
};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KeyValue,
    LeaseGrantOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[path = "store_conn.rs"]
mod conn;
#[path = "store_counts.rs"]
mod counts;
#[path = "store_leases.rs"]
mod leases;
#[path = "store_plan.rs"]
mod plan;
#[path = "store_reads.rs"]
mod reads;
#[path = "store_txn.rs"]
mod txn;
use conn::*;
pub use leases::finish_revokes;
use leases::*;
use reads::*;
#[path = "store_graph.rs"]
mod graph;

/// How to reach the cluster, and the limits the adapter keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricOptions {
    pub endpoints: Vec<String>,
    /// Every key of this store lives under it, so stores can share a cluster.
    pub prefix: String,
    /// etcd's smallest lease TTL: 1.5 x the election timeout, rounded up (2 s by default).
    pub min_ttl_secs: u64,
    /// The deadline of every call to the cluster.
    pub timeout: Duration,
    /// How many times a decision is retried when a concurrent change beat it.
    pub max_attempts: usize,
}

impl FabricOptions {
    pub fn new(endpoints: Vec<String>, prefix: &str) -> Self {
        FabricOptions {
            endpoints,
            prefix: prefix.to_owned(),
            min_ttl_secs: 2,
            timeout: Duration::from_secs(3),
            max_attempts: 64,
        }
    }
}

/// A baton store on an etcd cluster. Clones share one client.
#[derive(Clone)]
pub struct FabricStore {
    client: Client,
    /// One client per member, for retries: a call that went unanswered is
    /// sent again to the next member in turn, not back through a balancer
    /// that may pick the same hung member again.
    members: Vec<Client>,
    /// Where the next call starts in `members` (spreads the load).
    turn: std::sync::Arc<AtomicU64>,
    /// Per member, until when (ms since `born`) it is passed over because a
    /// call to it went unanswered.
    suspect: std::sync::Arc<Vec<AtomicU64>>,
    born: std::time::Instant,
    keys: Keys,
    opts: FabricOptions,
    commits: std::sync::Arc<AtomicU64>,
    /// Transactions that failed their compare (a lost race), for tests and benchmarks.
    lost: std::sync::Arc<AtomicU64>,
    /// What this store's own last transaction on a task left there (record,
    /// holder and timer keys, with their revisions): the next write to the
    /// task decides on it and guards its transaction with those revisions,
    /// saving a read; anything changed since fails the guard, and it reads
    /// and decides again. Never the ground for an answer that writes nothing.
    recent: std::sync::Arc<std::sync::Mutex<HashMap<String, Found>>>,
    /// Leases this store granted that hold nothing now, for its next grants.
    pool: std::sync::Arc<LeasePool>,
}

impl fmt::Debug for FabricStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FabricStore")
            .field("endpoints", &self.opts.endpoints)
            .field("prefix", &self.opts.prefix)
            .finish()
    }
}

/// A record as stored: with the id of the request that wrote it, so a
/// writer whose reply was lost can tell whether its write landed.
#[derive(Serialize, Deserialize)]
struct Envelope {
    #[serde(serialize_with = "TaskRecord::serialize_stored")]
    record: TaskRecord,
    request: String,
}

/// An event or a notification as stored, with its index in its transaction
/// (the sequence number is create_revision * 256 + index).
#[derive(Serialize, Deserialize)]
struct Stored<T> {
    item: T,
    idx: u64,
}

/// The most events or notifications one transaction writes (the seq scheme's limit).
const PER_TXN: u64 = 256;

/// The most operations one transaction may carry (etcd's default
/// `--max-txn-ops` is 128); a group of adds is cut into chunks below it.
const MAX_TXN_OPS: usize = 120;

/// What a read of one task found: the record with its revision, the holder
/// key and the deadline key, all at one revision.
#[derive(Debug, Clone)]
struct Found {
    record: Option<(TaskRecord, i64)>,
    holder: Option<KeyRead>,
    deadline: Option<KeyRead>,
    lock_delay: Option<KeyRead>,
    /// The request id of the write that stored the record.
    written_by: Option<String>,
}

/// What a transaction's guard needs of a key read (or written): the
/// revision that last changed it and the etcd lease it is on (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyRead {
    mod_revision: i64,
    lease: i64,
}

impl From<&KeyValue> for KeyRead {
    fn from(kv: &KeyValue) -> Self {
        KeyRead {
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        }
    }
}

impl Found {
    /// The engine's judgement: a lease holds while its holder key exists, a
    /// start deadline has not passed while its deadline key exists, a lock
    /// delay holds while its key exists. The keys live on etcd leases, so
    /// the leader's clock decides, never ours.
    fn judged(&self) -> Judged {
        Judged {
            lease_holds: self.holder.is_some(),
            deadline_passed: self.deadline.is_none(),
            lock_delay_holds: self.lock_delay.is_some(),
        }
    }
}

/// Whole seconds of an etcd lease for `ms` (at least one).
fn lease_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

impl FabricStore {
    /// Connects to the cluster (failing closed within the timeout).
    pub async fn connect(opts: FabricOptions) -> Result<FabricStore> {
        if let Some(c) = opts.prefix.chars().find(|c| c.is_control()) {
            return Err(Error::invalid(
                "prefix",
                format!(
                    "must not contain control characters (found U+{:04X})",
                    c as u32
                ),
            ));
        }
        if opts.endpoints.is_empty() {
            return Err(Error::invalid(
                "store",
                "an etcd URL needs at least one HOST:PORT",
            ));
        }
        let connect = ConnectOptions::new()
            .with_timeout(opts.timeout)
            .with_connect_timeout(opts.timeout)
            .with_require_leader(true)
            .with_keep_alive(Duration::from_secs(2), opts.timeout);
        let mut members = Vec::with_capacity(opts.endpoints.len());
        for ep in &opts.endpoints {
            // Connections are made as calls need them: a hung member costs
            // nothing here.
            let one = Client::connect([ep.as_str()], Some(connect.clone()));
            if let Ok(Ok(c)) = tokio::time::timeout(opts.timeout, one).await {
                members.push(c);
            }
        }
        let fut = Client::connect(opts.endpoints.clone(), Some(connect));
        let client = match tokio::time::timeout(opts.timeout, fut).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                let eps = endpoints(&opts.endpoints);
                let context = format!("etcd {eps}/{}", opts.prefix);
                return Err(map_etcd(&eps, &context, "connect", e));
            }
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "etcd {}: no answer within {:?}",
                    endpoints(&opts.endpoints),
                    opts.timeout
                )));
            }
        };
        let pool = std::sync::Arc::new(LeasePool {
            client: client.clone(),
            timeout: opts.timeout,
            probe: Keys::new(&opts.prefix).task(""),
            state: Default::default(),
        });
        let store = FabricStore {
            client,
            suspect: std::sync::Arc::new(members.iter().map(|_| AtomicU64::new(0)).collect()),
            members,
            turn: Default::default(),
            born: std::time::Instant::now(),
            keys: Keys::new(&opts.prefix),
            opts,
            commits: Default::default(),
            lost: Default::default(),
            recent: Default::default(),
            pool,
        };
        store.refuse_earlier_layout().await?;
        store.index_earlier_records().await?;
        Ok(store)
    }

    /// An earlier baton kept a store's records at `PREFIX/t/<hex task>`,
    /// where a store with a nested prefix could reach them. Such a store is
    /// refused, not silently shown empty: it must be moved or rewritten.
    async fn refuse_earlier_layout(&self) -> Result<()> {
        let old = crate::keys::Keys::earlier_layout_tasks(&self.opts.prefix);
        let resp = self
            .call_retrying("open", |mut c| {
                let old = old.clone();
                async move {
                    let o = GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_limit(16);
                    c.get(old, Some(o)).await
                }
            })
            .await?;
        let earlier = resp.kvs().iter().any(|kv| {
            kv.key()
                .strip_prefix(old.as_bytes())
                .is_some_and(|rest| !rest.is_empty() && rest.iter().all(u8::is_ascii_hexdigit))
        });
        if earlier {
            return Err(Error::unsupported(format!(
                "etcd prefix {:?}: records in the layout of an earlier baton (keys under {old:?}), which nested prefixes could reach; this build keeps each store under \"PREFIX\\0\" and does not read them",
                self.opts.prefix
            ))
            .with_context(self.context()));
        }
        Ok(())
    }

    /// How many of this handle's transactions failed their compare (lost a
    /// race and were decided again).
    pub fn lost_races(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    fn context(&self) -> String {
        format!(
            "etcd {}/{}",
            endpoints(&self.opts.endpoints),
            self.opts.prefix
        )
    }

    fn map_err(&self, what: &str, e: etcd_client::Error) -> Error {
        map_etcd(&endpoints(&self.opts.endpoints), &self.context(), what, e)
    }

    /// A fence or revision as etcd reported it: never negative, or the
    /// reply cannot be trusted.
    fn revision(&self, what: &str, n: i64) -> Result<u64> {
        u64::try_from(n).map_err(|_| {
            Error::corrupt(format!(
                "etcd prefix {:?}: {what} is negative ({n})",
                self.opts.prefix
            ))
            .with_context(self.context())
        })
    }

    /// What this store's last transaction on `task` left, if it remembers.
    fn recall(&self, task: &str) -> Option<Found> {
        // A poisoned lock only means a panic elsewhere while it was held;
        // the map is still whole (each call inserts or removes one entry).
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.get(task).cloned()
    }

    fn remember(&self, task: &str, found: Found) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() >= RECENT && !recent.contains_key(task) {
            recent.clear();
        }
        recent.insert(task.to_owned(), found);
    }

    fn forget(&self, task: &str) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.remove(task);
    }

    /// Reads a task's record, holder key and deadline key at one revision.
    async fn find(&self, task: &str) -> Result<Found> {
        let keys = [
            self.keys.task(task),
            self.keys.holder(task),
            self.keys.deadline(task),
            self.keys.lock_delay(task),
        ];
        let resp = self
            .call_retrying("read", |mut c| {
                let txn = Txn::new().and_then(keys.clone().map(|k| TxnOp::get(k, None)));
                async move { c.txn(txn).await }
            })
            .await?;
        let mut kvs = resp.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let record_kv = kvs.next().flatten();
        let mut key = || kvs.next().flatten().as_ref().map(KeyRead::from);
        let (holder, deadline, lock_delay) = (key(), key(), key());
        let (record, written_by) = match record_kv {
            Some(kv) => {
                let (r, by) = self.decode_envelope(&kv)?;
                (Some((r, kv.mod_revision())), Some(by))
            }
            None => (None, None),
        };
        Ok(Found {
            record,
            holder,
            deadline,
            lock_delay,
            written_by,
        })
    }

    fn decode_record(&self, kv: &KeyValue) -> Result<TaskRecord> {
        self.decode_envelope(kv).map(|(r, _)| r)
    }

    /// A stored record, and the id of the request that wrote it.
    fn decode_envelope(&self, kv: &KeyValue) -> Result<(TaskRecord, String)> {
        let env: Envelope = baton_core::json::decode_stored(kv.value()).map_err(|e| {
            Error::corrupt(format!(
                "etcd prefix {:?}: a record does not decode: {e}",
                self.opts.prefix
            ))
        })?;
        let mut r = env.record;
        // A grant's fence is the revision that wrote it; the record says "pending" until its next write.
        if let Some(l) = r.lease.as_mut()
            && l.fence == PENDING_FENCE
        {
            l.fence = self.revision("a grant's revision", kv.mod_revision())?;
        }
        Ok((r, env.request))
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::corrupt(format!("cannot encode a value: {e}")))
}

#[async_trait]
impl Store for FabricStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock: ClockKind::Engine,
            durable: true,
            multi_process: true,
            min_ttl_ms: self.opts.min_ttl_secs * 1000,
            ttl_granularity_ms: 1000,
            signs_fences: false,
            reads_ready_index: true,
        }
    }

    async fn read(&self, task: &TaskId, _now: Timestamp) -> Result<Option<Snapshot>> {
        let found = self.find(task.as_str()).await?;
        let judged = found.judged();
        Ok(found.record.map(|(record, _)| Snapshot { record, judged }))
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        self.apply_op(op).await
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.apply_all_on_etcd(ops).await
    }

    async fn next(&self, query: &baton_core::NextQuery) -> Result<Option<Decision>> {
        self.next_on_etcd(&query.one()).await
    }

    async fn watch_ready(&self, _query: &baton_core::NextQuery, max_ms: u64) -> Result<bool> {
        self.watch_ready_on_etcd(max_ms).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        // By stored state through the state index (a superset of the
        // clauses: the due condition is the engine's keys, judged with
        // them); a scan of every record before the store is indexed.
        let states: Option<BTreeSet<baton_core::State>> = query
            .clauses
            .as_ref()
            .map(|cs| cs.iter().map(|c| c.state).collect());
        if let Some(states) = &states
            && let Some(found) = self
                .list_by_state(query.after.as_ref(), query.limit, states)
                .await?
        {
            return Ok(found);
        }
        self.scan(query.after.as_ref(), query.limit, states.as_ref())
            .await
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let prefix = match task {
            Some(t) => self.keys.events_of(t.as_str()),
            None => self.keys.events(),
        };
        let items: Vec<(u64, Event, i64)> = self.ordered(prefix, after, limit).await?;
        Ok(items
            .into_iter()
            .map(|(seq, mut e, create)| {
                e.seq = seq;
                if e.fence == Some(PENDING_FENCE) {
                    e.fence = u64::try_from(create).ok();
                }
                e
            })
            .collect())
    }

    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        self.kept_counts().await
    }

    /// One key a seek, through the ready index's keys (hex, so in the
    /// index's order); each seek at the current revision.
    async fn oldest_ready(
        &self,
        lane: baton_core::graph::Lane,
        queue: &baton_core::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let mut read = baton_core::graph::OldestReady::new(lane, queue, now);
        while let Some((index, from, end)) = read.range() {
            let (key_of, root): (fn(&crate::keys::Keys, &[u8]) -> String, String) = match index {
                baton_core::graph::IndexName::Ready => {
                    (crate::keys::Keys::ready, self.keys.readies())
                }
                baton_core::graph::IndexName::Held => (crate::keys::Keys::held, self.keys.helds()),
            };
            // Exclusive of `from`: the least key after it.
            let mut first = key_of(&self.keys, &from).into_bytes();
            first.push(0);
            let end = key_of(&self.keys, &end).into_bytes();
            let got = self
                .range_at("read", &first, &end, None, |o| o.with_limit(1))
                .await?
                .ok_or_else(|| Error::unavailable("etcd: a current read was compacted"))?;
            let key = match got.kvs().first() {
                Some(kv) => {
                    let text = kv.key_str().map_err(|e| Error::corrupt(e.to_string()))?;
                    let index = text
                        .strip_prefix(root.as_str())
                        .and_then(crate::keys::unhex_bytes)
                        .ok_or_else(|| {
                            Error::corrupt(format!("etcd: a ready-index key {text:?}"))
                        })?;
                    Some(index)
                }
                None => None,
            };
            read.found(key.as_deref());
        }
        Ok(read.oldest())
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let items: Vec<(u64, NotificationDraft, i64)> =
            self.ordered(self.keys.outboxes(), after, limit).await?;
        Ok(items
            .into_iter()
            .map(|(seq, mut n, create)| {
                if n.payload.get("fence") == Some(&serde_json::json!(PENDING_FENCE)) {
                    n.payload["fence"] = serde_json::json!(create);
                }
                Notification::from_draft(seq, n)
            })
            .collect())
    }

    async fn ack(&self, intent_ids: &[String], _now: Timestamp) -> Result<u64> {
        // Only outbox entries, only by intent id: an id is never a path into
        // another part of the key space (or another store's).
        for id in intent_ids {
            baton_core::model::validate_intent_id(id)?;
        }
        let mut acked = 0;
        for id in intent_ids {
            let key = self.keys.outbox(id);
            let resp = self
                .call_retrying("ack", |mut c| {
                    // Deleted only if it exists as an outbox entry now.
                    let txn = Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Greater, 0)])
                        .and_then([TxnOp::delete(key.clone(), None)]);
                    async move { c.txn(txn).await }
                })
                .await?;
            if resp.succeeded() {
                acked += 1;
            }
        }
        Ok(acked)
    }
}

impl baton_core::store::Meter for FabricStore {
    fn commits(&self) -> Option<u64> {
        Some(self.commits.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    /// A call to an address nobody listens on fails as unreachable (its
    /// member is passed over); an answer from a member that was reached
    /// does not.
    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_an_answer_is_not() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(); // the listener is dropped: nothing listens there now
        let o = ConnectOptions::new().with_timeout(Duration::from_secs(2));
        let mut c = Client::connect([format!("127.0.0.1:{port}")], Some(o))
            .await
            .unwrap();
        let e = c.get("k", None).await.unwrap_err();
        assert!(unreachable(&e), "{e:?}");
        let answered = etcd_client::Error::GRpcStatus(tonic::Status::invalid_argument(
            "etcdserver: key is not provided",
        ));
        assert!(!unreachable(&answered));
        let no_leader =
            etcd_client::Error::GRpcStatus(tonic::Status::unavailable("etcdserver: no leader"));
        assert!(!unreachable(&no_leader));
    }
}
