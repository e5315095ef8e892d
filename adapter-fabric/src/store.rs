//! The etcd store: one guarded transaction per decision.

use crate::keys::{Keys, prefix_end, unhex};
use async_trait::async_trait;
use baton_core::Timed;
use baton_core::model::{NotificationDraft, PENDING_FENCE};
use baton_core::{
    Capabilities, ClockKind, Decision, Error, Event, Judged, LeaseEffect, ListQuery, Notification,
    Operation, Result, Snapshot, Store, TaskId, TaskRecord, TimerEffect, Timestamp, decide_with,
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

#[path = "store_counts.rs"]
mod counts;
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

/// Leases a store granted that hold nothing any more (their grant ended,
/// or moved to another lease), kept a short while for the store's next
/// grants of the same length instead of revoking one and granting
/// another: two writes through the cluster's log become one keep-alive,
/// which the leader answers alone. A kept lease is refreshed to its whole
/// TTL before it is used, after the decision's read, as a new one would be
/// granted, so reuse moves no expiry. A lease is revoked instead when the
/// pool is full, once it has waited [`POOL_IDLE`], and when the last clone
/// of the store is dropped ([`settle`] waits for those revokes).
struct LeasePool {
    client: Client,
    timeout: Duration,
    state: std::sync::Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// The leases this store granted and still owns, with their TTLs (s).
    mine: HashMap<i64, u64>,
    /// Those that hold nothing now: TTL, id, since when.
    free: Vec<(u64, i64, std::time::Instant)>,
}

/// How many unused leases a store keeps.
const POOL: usize = 32;
/// How long an unused lease is kept before it is revoked.
const POOL_IDLE: Duration = Duration::from_secs(10);
/// How many granted leases a store keeps track of (forgotten ones are
/// revoked when they end, not kept).
const MINE: usize = 4096;

impl LeasePool {
    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // A poisoned lock only means a panic elsewhere while it was held;
        // each call leaves the maps whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn granted(&self, id: i64, secs: u64) {
        let mut st = self.state();
        if st.mine.len() >= MINE {
            st.mine.clear();
        }
        st.mine.insert(id, secs);
    }

    /// Keeps what it can of `ids` (leases now holding nothing); returns
    /// those to revoke: not this store's, over the pool's size, or kept
    /// too long already.
    fn put(&self, ids: &[i64]) -> Vec<i64> {
        let now = std::time::Instant::now();
        let mut st = self.state();
        let mut revoke = Vec::new();
        let st = &mut *st;
        st.free.retain(|(_, id, since)| {
            let keep = now.duration_since(*since) < POOL_IDLE;
            if !keep {
                revoke.push(*id);
            }
            keep
        });
        for id in ids {
            match st.mine.get(id) {
                Some(secs) if st.free.len() < POOL => st.free.push((*secs, *id, now)),
                _ => revoke.push(*id),
            }
        }
        for id in &revoke {
            st.mine.remove(id);
        }
        revoke
    }

    /// A kept lease of `secs`, if one was kept recently enough.
    fn take(&self, secs: u64) -> Option<i64> {
        let now = std::time::Instant::now();
        let mut st = self.state();
        let i = st
            .free
            .iter()
            .rposition(|(s, _, since)| *s == secs && now.duration_since(*since) < POOL_IDLE)?;
        Some(st.free.swap_remove(i).1)
    }

    fn lost(&self, id: i64) {
        self.state().mine.remove(&id);
    }

    /// Refreshes a kept lease to its whole TTL; false when the cluster no
    /// longer has it (or did not answer in time).
    async fn refresh(&self, id: i64) -> bool {
        // etcd-client sends one keep-alive and waits for its answer; a
        // lease the cluster no longer has is an error.
        let mut c = self.client.clone();
        matches!(
            tokio::time::timeout(self.timeout, c.lease_keep_alive(id)).await,
            Ok(Ok(_))
        )
    }
}

impl Drop for LeasePool {
    fn drop(&mut self) {
        let st = std::mem::take(&mut *self.state());
        let ids: Vec<i64> = st.free.iter().map(|(_, id, _)| *id).collect();
        if ids.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime (a drop at exit): the leases run out their TTL
        };
        revoking().send_modify(|n| *n += 1);
        let (client, timeout) = (self.client.clone(), self.timeout);
        runtime.spawn(async move {
            let revokes = ids.into_iter().map(|id| {
                let mut c = client.clone();
                async move {
                    let _ = tokio::time::timeout(timeout, c.lease_revoke(id)).await;
                }
            });
            futures_util::future::join_all(revokes).await;
            revoking().send_modify(|n| *n = n.saturating_sub(1));
        });
    }
}

/// How many tasks' last writes a store remembers (cleared when full).
const RECENT: usize = 4096;

/// How many revokes of leases that hold nothing are still under way in
/// this process (they run after the answer, not before it).
fn revoking() -> &'static tokio::sync::watch::Sender<usize> {
    static REVOKING: std::sync::OnceLock<tokio::sync::watch::Sender<usize>> =
        std::sync::OnceLock::new();
    REVOKING.get_or_init(|| tokio::sync::watch::Sender::new(0))
}

/// Waits, at most `within`, for the revokes this process still has under
/// way: a process calls it before it exits, so no lease it ended is left
/// to run out its TTL. True when none is left.
pub async fn settle(within: Duration) -> bool {
    let mut left = revoking().subscribe();
    tokio::time::timeout(within, left.wait_for(|n| *n == 0))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// A lease granted (or a kept one refreshed) before the decision that may
/// use it (a claim's, beside the read): back to the pool unless the
/// decision takes it.
struct Ahead {
    store: FabricStore,
    secs: u64,
    id: Option<i64>,
}

impl Ahead {
    /// The lease, if it has the length the decision wants.
    fn take(&mut self, secs: u64) -> Option<i64> {
        if secs == self.secs {
            self.id.take()
        } else {
            None
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.store.revoke_later(vec![id]);
        }
    }
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

/// A key's revision guard: unchanged since it was read, or still absent.
fn unchanged(key: &str, read: Option<&KeyRead>) -> Compare {
    match read {
        Some(kv) => Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision),
        None => Compare::create_revision(key, CompareOp::Equal, 0),
    }
}

/// The most records one scan request asks for. A record is at most about
/// 100 KiB (a 64 KiB manifest, a 16 KiB error, 16 KiB of metadata, evidence),
/// so a page stays under the 4 MiB an etcd reply may carry.
const SCAN_PAGE: usize = 32;

/// How many times a scan starts again after its revision was compacted.
const SCAN_RESTARTS: usize = 5;
/// gRPC's status code OUT_OF_RANGE: etcd's answer for a read at a revision
/// it has compacted (or not reached yet).
const GRPC_OUT_OF_RANGE: i32 = 11;

/// A read at a pinned revision: `Ok(None)` when etcd no longer has that
/// revision, so the caller can read again at the current one.
fn not_compacted<T>(
    r: std::result::Result<T, etcd_client::Error>,
) -> std::result::Result<Option<T>, etcd_client::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(etcd_client::Error::GRpcStatus(s)) if i32::from(s.code()) == GRPC_OUT_OF_RANGE => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// gRPC's status code UNAVAILABLE (etcd-client does not re-export tonic's `Code`).
const GRPC_UNAVAILABLE: i32 = 14;
/// etcd's `rpctypes.ErrGRPCNoLeader`: a member with no leader refuses a
/// request before proposing it.
const ETCD_NO_LEADER: &str = "etcdserver: no leader";
/// etcd's `rpctypes.ErrGRPCLeaseExist`: a lease with that id was granted.
const ETCD_LEASE_EXISTS: &str = "etcdserver: lease already exists";

/// etcd's `rpctypes.ErrGRPCLeaseNotFound`: a put named a lease the
/// cluster does not have, and the whole transaction was refused.
const ETCD_LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";

fn names_a_lost_lease(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message() == ETCD_LEASE_NOT_FOUND)
}

/// What an etcd error proves about a request, from its gRPC status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// It never reached a leader: no connection (a transport failure under
    /// gRPC), or a member with no leader. Nothing was applied.
    NeverSent,
    /// It may have been applied (a timeout, a lost reply, anything else).
    Unknown,
}

fn cause_of(e: &etcd_client::Error) -> Cause {
    match e {
        etcd_client::Error::TransportError(_) => Cause::NeverSent,
        etcd_client::Error::GRpcStatus(s) if i32::from(s.code()) == GRPC_UNAVAILABLE => {
            let transport = std::error::Error::source(s).is_some();
            if transport || s.message() == ETCD_NO_LEADER {
                Cause::NeverSent
            } else {
                Cause::Unknown
            }
        }
        _ => Cause::Unknown,
    }
}

/// An etcd error as one short cause a person can act on; the whole gRPC
/// and transport chain stays in the error's source.
fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::TransportError(_) => "cannot connect".to_owned(),
        etcd_client::Error::GRpcStatus(s) => {
            if cause_of(e) == Cause::NeverSent && std::error::Error::source(s).is_some() {
                "cannot connect (connection refused or unreachable: is etcd running at that address?)"
                    .to_owned()
            } else if s.message().is_empty() {
                s.code().description().to_owned()
            } else {
                format!("{}: {}", s.code().description(), s.message())
            }
        }
        other => other.to_string(),
    }
}

/// The one place etcd's errors become baton's: `Unavailable` naming the
/// cluster and what was being done, with the native error as the source.
fn map_etcd(endpoints_text: &str, context: &str, what: &str, e: etcd_client::Error) -> Error {
    Error::unavailable(format!("etcd {endpoints_text}: {what}: {}", describe(&e)))
        .with_context(context.to_owned())
        .with_source(e)
}

/// Whether `e` says the member could not be reached at all (the call was
/// never delivered): a refused or failed connection.
fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable && s.message().contains("connect")
        }
        _ => false,
    }
}

/// The endpoints as a person writes them.
fn endpoints(list: &[String]) -> String {
    list.join(",")
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

    /// Runs one call with the deadline, retrying it on another member (a
    /// member that died keeps receiving some requests for a while): for
    /// calls whose repeat is harmless, reads and a lease grant (a lease a
    /// lost answer left behind expires on its own).
    async fn call_retrying<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        let mut last = None;
        let start = self.next_turn();
        for attempt in 0..10u64 {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let (client, member) = self.client_for(start, attempt);
            // The last member not passed over may take the rest of the
            // deadline: on a loaded machine a first connection can take
            // longer than one attempt's share.
            let until = if self.others_suspect(member) {
                deadline
            } else {
                (now + self.attempt_timeout()).min(deadline)
            };
            match tokio::time::timeout_at(until, f(client)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => {
                    // A member that refuses the connection is down: ask the
                    // others first for a while.
                    if unreachable(&e) {
                        self.suspect(member);
                    }
                    last = Some(e);
                }
                // A member that does not answer: ask the next.
                Err(_) => {
                    self.suspect(member);
                    continue;
                }
            }
            tokio::time::sleep(Duration::from_millis(10 * attempt)).await;
        }
        Err(match last {
            Some(e) => self.map_err(what, e),
            None => Error::unavailable(format!(
                "etcd {}: {what}: no answer within {:?}",
                endpoints(&self.opts.endpoints),
                self.opts.timeout
            ))
            .with_context(self.context()),
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

    /// How long one call may take before it is sent again (to whichever
    /// member the client picks next): a third of the deadline, so a member
    /// that hangs costs one short wait, not the whole deadline.
    /// The client for attempt `n` of a call that starts at `start`: the
    /// balanced client when there are no per-member ones, else each member
    /// in turn.
    fn client_for(&self, start: u64, n: u64) -> (Client, Option<usize>) {
        if self.members.is_empty() {
            return (self.client.clone(), None);
        }
        let len = self.members.len();
        let now = self.since_born_ms();
        let first = usize::try_from((start + n) % len as u64).unwrap_or(0);
        // The first member in turn that has not just failed to answer; if
        // every one has, the one in turn.
        let i = (0..len)
            .map(|k| (first + k) % len)
            .find(|i| self.suspect[*i].load(Ordering::Relaxed) <= now)
            .unwrap_or(first);
        (self.members[i].clone(), Some(i))
    }

    /// Whether every member but `i` is being passed over now.
    fn others_suspect(&self, i: Option<usize>) -> bool {
        let now = self.since_born_ms();
        (0..self.members.len())
            .filter(|k| Some(*k) != i)
            .all(|k| self.suspect[k].load(Ordering::Relaxed) > now)
    }

    /// Passes over member `i` for a while: a call to it went unanswered.
    fn suspect(&self, i: Option<usize>) {
        if let Some(i) = i {
            let until = self.since_born_ms() + 5_000;
            self.suspect[i].store(until, Ordering::Relaxed);
        }
    }

    fn since_born_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn next_turn(&self) -> u64 {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    fn attempt_timeout(&self) -> Duration {
        (self.opts.timeout / 3).max(Duration::from_millis(100))
    }

    /// Revokes a lease that holds no grant any more. Best effort, within the
    /// deadline: a lease that is not revoked still expires with its TTL.
    async fn revoke(&self, id: i64) {
        // An answer of any kind ends it (a lease already gone is fine); only
        // a member that does not answer is asked again, through the next.
        let _ = self
            .call_retrying("lease revoke", |mut c| async move {
                let _ = c.lease_revoke(id).await;
                Ok::<(), etcd_client::Error>(())
            })
            .await;
    }

    /// Revokes leases that hold nothing, after the answer: on a task of
    /// their own, counted until done so the process can [`settle`] them.
    fn revoke_later(&self, ids: Vec<i64>) {
        if ids.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime (a drop at exit): the leases run out their TTL
        };
        let ids = self.pool.put(&ids);
        if ids.is_empty() {
            return;
        }
        revoking().send_modify(|n| *n += 1);
        let store = self.clone();
        runtime.spawn(async move {
            store.revoke_all(&ids).await;
            // The last clone of a store revokes its pool as it drops:
            // counted before this revoke stops counting.
            drop(store);
            revoking().send_modify(|n| *n = n.saturating_sub(1));
        });
    }

    /// The length of the lease a claim will want, known before reading:
    /// a bare claim's own TTL under this store's rules.
    fn lease_ahead(&self, op: &Operation) -> Option<u64> {
        match op.request {
            baton_core::Request::Claim {
                ttl_ms: Some(ttl), ..
            } => Some(lease_secs(self.capabilities().lease_rules().effective(ttl))),
            _ => None,
        }
    }

    /// Revokes leases that hold nothing, all at once.
    async fn revoke_all(&self, ids: &[i64]) {
        futures_util::future::join_all(ids.iter().map(|id| self.revoke(*id))).await;
    }

    /// Grants the leases a decision needs (the holder key's and its timer
    /// keys', each of the given whole seconds) at once; if one cannot be
    /// granted, those that were are revoked and nothing is written.
    async fn grant_leases(&self, secs: &[Option<u64>]) -> Result<Vec<Option<i64>>> {
        let granted = futures_util::future::join_all(secs.iter().map(|s| async move {
            match s {
                Some(s) => self.grant_lease(*s).await.map(Some),
                None => Ok(None),
            }
        }))
        .await;
        let made: Vec<i64> = granted
            .iter()
            .filter_map(|g| g.as_ref().ok().copied().flatten())
            .collect();
        match granted.into_iter().collect::<Result<Vec<_>>>() {
            Ok(ids) => Ok(ids),
            Err(e) => {
                self.revoke_all(&made).await;
                Err(e)
            }
        }
    }

    /// Grants a lease under an id of our own choosing, so a grant retried
    /// after a lost reply finds the lease it made ("already exists")
    /// instead of making a second one that nothing would ever revoke.
    async fn grant_lease(&self, secs: u64) -> Result<i64> {
        while let Some(id) = self.pool.take(secs) {
            if self.pool.refresh(id).await {
                return Ok(id);
            }
            self.pool.lost(id);
        }
        let ttl = i64::try_from(secs).unwrap_or(i64::MAX);
        // A positive id etcd has not handed out: random, from a v4 UUID.
        let id = i64::from_be_bytes(
            uuid::Uuid::new_v4().as_bytes()[..8]
                .try_into()
                .unwrap_or([0, 0, 0, 0, 0, 0, 0, 1]),
        ) & i64::MAX;
        let id = id.max(1);
        self.call_retrying("lease grant", |mut c| async move {
            match c
                .lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(id)))
                .await
            {
                Ok(_) => Ok(()),
                Err(etcd_client::Error::GRpcStatus(s)) if s.message() == ETCD_LEASE_EXISTS => {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
        .await?;
        self.pool.granted(id, secs);
        Ok(id)
    }

    async fn apply_op(&self, mut op: Operation) -> Result<Decision> {
        let rules = self.capabilities().lease_rules();
        let task = op.task.as_str().to_owned();
        let (tk, hk) = (self.keys.task(&task), self.keys.holder(&task));
        let (dk, lk) = (self.keys.deadline(&task), self.keys.lock_delay(&task));
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        // Writes sent whose replies never came, with the leases each made:
        // each is guarded by the revisions it read, so once anything else
        // commits on top of those it can never land; until then, the record
        // says whether it did.
        let mut unanswered: Vec<(String, Decision, Vec<i64>)> = Vec::new();
        let start = self.next_turn();
        let mut recalled = self.recall(&task);
        // A claim's lease is granted (or a kept one refreshed) beside the
        // first read, not after the decision; if the decision does not
        // take it, it goes back to the pool.
        let mut ahead: Option<Ahead> = None;
        for attempt in 0..self.opts.max_attempts as u64 {
            let cached = recalled.is_some();
            let found = match (recalled.take(), self.lease_ahead(&op)) {
                (Some(f), _) => f,
                (None, Some(secs)) if attempt == 0 => {
                    let (found, lease) = tokio::join!(self.find(&task), self.grant_lease(secs));
                    ahead = Some(Ahead {
                        store: self.clone(),
                        secs,
                        id: lease.ok(),
                    });
                    found?
                }
                (None, _) => self.find(&task).await?,
            };
            if !cached && let Some(landed) = self.landed(&found, &mut unanswered).await {
                self.forget(&task);
                return landed;
            }
            // Timed after the read each try: a try that follows another
            // writer's commit decides after it, never at an earlier time.
            op.timed_at_commit();
            let record = found.record.as_ref().map(|(r, _)| r);
            let mut d = decide_with(&op, record, found.judged(), rules);
            if cached && (!d.writes() || Self::is_graph(&op, record, &d)) {
                // What this store last wrote guards a write only: an answer
                // that writes nothing, or a group over other tasks, is
                // decided on a read of the cluster.
                continue;
            }
            if Self::is_graph(&op, record, &d) {
                // It reads or changes other tasks: one transaction over all
                // of them, starting from the record just read.
                let seed = std::collections::BTreeMap::from([(op.task.clone(), found)]);
                let mut ds = self
                    .apply_group_from(std::slice::from_ref(&op), false, seed)
                    .await?;
                return ds
                    .pop()
                    .ok_or_else(|| Error::unavailable("etcd: a transaction decided nothing"));
            }
            if !d.writes() {
                return Ok(d);
            }
            let request_id = uuid::Uuid::new_v4().to_string();
            // The timer keys: each exists until its timer runs out, on an
            // etcd lease, so the engine's clock judges it.
            let timers = [
                (&dk, found.deadline.as_ref(), d.deadline),
                (&lk, found.lock_delay.as_ref(), d.lock_delay),
            ];
            // Guarded by every key as read: a lease or timer that ran out
            // since (its key deleted by the engine) fails the transaction,
            // and the decision is made again on the new facts.
            let mut compares = vec![
                match &found.record {
                    Some((_, rev)) => Compare::mod_revision(tk.clone(), CompareOp::Equal, *rev),
                    None => Compare::create_revision(tk.clone(), CompareOp::Equal, 0),
                },
                unchanged(&hk, found.holder.as_ref()),
            ];
            compares.extend(timers.iter().map(|(k, read, _)| unchanged(k, *read)));
            let mut ops = Vec::new();
            let mut wanted = vec![match d.lease {
                LeaseEffect::Granted { ttl_ms } | LeaseEffect::Extended { ttl_ms } => {
                    Some(lease_secs(ttl_ms))
                }
                LeaseEffect::Ended | LeaseEffect::Unchanged => None,
            }];
            wanted.extend(timers.iter().map(|(_, _, effect)| match effect {
                TimerEffect::Set { in_ms } => Some(lease_secs(*in_ms)),
                TimerEffect::Cleared | TimerEffect::Unchanged => None,
            }));
            let pre = wanted[0].and_then(|secs| ahead.as_mut()?.take(secs));
            if pre.is_some() {
                wanted[0] = None;
            }
            let mut granted = self.grant_leases(&wanted).await?;
            if pre.is_some() {
                granted[0] = pre;
            }
            let lease_id = granted.first().copied().flatten();
            let made: Vec<i64> = granted.iter().copied().flatten().collect();
            if let Some(after) = d.record_to_write() {
                let env = Envelope {
                    record: after.clone(),
                    request: request_id.clone(),
                };
                ops.push(TxnOp::put(tk.clone(), encode(&env)?, None));
                self.index_ops(record, Some(after), &mut ops);
            }
            match (d.lease, lease_id) {
                (LeaseEffect::Granted { .. } | LeaseEffect::Extended { .. }, Some(id)) => {
                    // A holder key on an etcd lease of the grant's length: the
                    // grant is live exactly while the engine keeps the key.
                    let owner = d
                        .record_to_write()
                        .and_then(|r| r.lease.as_ref())
                        .map_or("", |l| l.owner.as_str())
                        .to_owned();
                    ops.push(TxnOp::put(
                        hk.clone(),
                        owner,
                        Some(PutOptions::new().with_lease(id)),
                    ));
                }
                (LeaseEffect::Ended, _) if found.holder.is_some() => {
                    ops.push(TxnOp::delete(hk.clone(), None));
                }
                _ => {}
            }
            for ((key, read, effect), lease) in timers.iter().zip(granted.iter().skip(1)) {
                match (effect, lease) {
                    (TimerEffect::Set { .. }, Some(id)) => {
                        ops.push(TxnOp::put(
                            (*key).clone(),
                            "",
                            Some(PutOptions::new().with_lease(*id)),
                        ));
                    }
                    (TimerEffect::Cleared, _) if read.is_some() => {
                        ops.push(TxnOp::delete((*key).clone(), None));
                    }
                    _ => {}
                }
            }
            let revision = d.record_to_write().map_or(0, |r| r.revision);
            let drafts: Vec<baton_core::model::EventDraft> = d.events().cloned().collect();
            for (idx, e) in drafts.iter().enumerate() {
                let idx = idx as u64;
                if let Some(ck) = &e.conflict_key {
                    let key = self.keys.conflict(&task, ck);
                    let existing = {
                        let k = key.clone();
                        self.call_retrying("read", |mut c| {
                            let k = k.clone();
                            async move { c.get(k, None).await }
                        })
                        .await?
                    };
                    match existing.kvs().first() {
                        Some(kv) => {
                            let mut stored: Stored<Event> =
                                baton_core::json::decode_stored(kv.value()).map_err(|err| {
                                    Error::corrupt(format!(
                                        "etcd prefix {:?}: an event does not decode: {err}",
                                        self.opts.prefix
                                    ))
                                })?;
                            stored.item.count += 1;
                            compares.push(Compare::mod_revision(
                                key.clone(),
                                CompareOp::Equal,
                                kv.mod_revision(),
                            ));
                            ops.push(TxnOp::put(key, encode(&stored)?, None));
                        }
                        None => {
                            compares.push(Compare::create_revision(
                                key.clone(),
                                CompareOp::Equal,
                                0,
                            ));
                            let stored = Stored {
                                item: Event::from_draft(0, e.clone()),
                                idx,
                            };
                            ops.push(TxnOp::put(key, encode(&stored)?, None));
                        }
                    }
                } else {
                    let stored = Stored {
                        item: Event::from_draft(0, e.clone()),
                        idx,
                    };
                    ops.push(TxnOp::put(
                        self.keys.event(&task, revision, idx as usize),
                        encode(&stored)?,
                        None,
                    ));
                }
            }
            if d.drops_history() {
                // A prune: every event of the task (events are numbered by
                // etcd's revisions, which never go back; acknowledged
                // notifications were deleted when acknowledged).
                ops.push(TxnOp::delete(
                    self.keys.events_of(&task),
                    Some(DeleteOptions::new().with_prefix()),
                ));
            }
            let notes: Vec<NotificationDraft> = d.notifications().cloned().collect();
            for (idx, n) in notes.iter().enumerate() {
                let stored = Stored {
                    item: n.clone(),
                    idx: idx as u64,
                };
                ops.push(TxnOp::put(
                    self.keys.outbox(&n.intent_id),
                    encode(&stored)?,
                    None,
                ));
            }
            let txn = Txn::new().when(compares).and_then(ops);
            let (mut client, member) = self.client_for(start, attempt);
            let sent = tokio::time::timeout(self.attempt_timeout(), client.txn(txn)).await;
            if sent.is_err() {
                self.suspect(member);
            }
            // The leases the holder and deadline keys were on, which a
            // committed grant, renewal, new wait or end leaves holding nothing.
            let holder_left = found
                .holder
                .as_ref()
                .map(|k| k.lease)
                .filter(|_| d.lease != LeaseEffect::Unchanged);
            let timers_left = timers.iter().filter_map(|(_, read, effect)| {
                read.map(|k| k.lease)
                    .filter(|_| *effect != TimerEffect::Unchanged)
            });
            let replaced: Vec<i64> = holder_left
                .into_iter()
                .chain(timers_left)
                .filter(|l| *l != 0 && !made.contains(l))
                .collect();
            let landed = match sent {
                Ok(Ok(resp)) if resp.succeeded() => match resp.header() {
                    Some(header) => {
                        self.commits.fetch_add(1, Ordering::Relaxed);
                        let fence = self.revision("a transaction's revision", header.revision());
                        fence.map(|f| {
                            d.assign_fence(f);
                            let left = Self::left_by(&found, &d, header.revision(), &granted);
                            match left {
                                Some(mut left) => {
                                    left.written_by = Some(request_id.clone());
                                    self.remember(&task, left);
                                }
                                None => self.forget(&task),
                            }
                            d
                        })
                    }
                    // Committed, but the reply does not say at which revision:
                    // the stored record does.
                    None => {
                        self.forget(&task);
                        self.resolve(
                            &task,
                            &request_id,
                            d,
                            Some("a reply without a header".into()),
                        )
                        .await
                    }
                },
                Ok(Ok(_)) => {
                    // Someone changed what we read: let the unused leases go and decide again.
                    // (What this store remembered going stale is not a lost race.)
                    if !cached {
                        self.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    self.revoke_later(made);
                    continue;
                }
                Ok(Err(e)) if names_a_lost_lease(&e) => {
                    // A lease it named ran out before it arrived (one kept
                    // for reuse, refreshed just before it lapsed): etcd
                    // applied nothing. Decide again, on new leases: none of
                    // these is kept (which one lapsed, the error does not say).
                    self.forget(&task);
                    for id in &made {
                        self.pool.lost(*id);
                    }
                    self.revoke_later(made);
                    if tokio::time::Instant::now() >= deadline {
                        return Err(self.map_err("write", e));
                    }
                    continue;
                }
                Ok(Err(e)) if cause_of(&e) == Cause::NeverSent => {
                    // Refused before it reached a leader: nothing was applied, so
                    // deciding again (likely through another member) is safe.
                    self.revoke_all(&made).await;
                    if tokio::time::Instant::now() >= deadline {
                        return Err(self.map_err("write", e));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                // No reply (a member that hangs, a reply lost): read again and
                // either find this write landed or decide anew on what is there.
                Ok(Err(_)) | Err(_) => {
                    self.forget(&task);
                    unanswered.push((request_id, d, made));
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                    continue;
                }
            };
            if landed.is_ok() {
                // Revoked rather than left to expire (a long TTL would keep
                // them for hours): the lease the holder key left, and those of
                // earlier attempts, which can no longer land.
                let stale: Vec<i64> = unanswered
                    .drain(..)
                    .flat_map(|(_, _, leases)| leases)
                    .chain(replaced)
                    .collect();
                self.revoke_later(stale);
            }
            return landed;
        }
        if !unanswered.is_empty() {
            // Out of time with writes unanswered: one last look.
            return match self.find(&task).await {
                Ok(found) => match self.landed(&found, &mut unanswered).await {
                    Some(landed) => landed,
                    None => Err(Error::indeterminate(format!(
                        "etcd: {task}: {} writes went unanswered within {:?} and none has landed yet; one may still: read before retrying",
                        unanswered.len(),
                        self.opts.timeout
                    ))
                    .with_context(self.context())),
                },
                Err(e) => Err(Error::indeterminate(format!(
                    "etcd: {task}: a write went unanswered and the cluster cannot be read ({}); read before retrying",
                    e.message
                ))
                .with_context(self.context())),
            };
        }
        Err(Error::unavailable(format!(
            "etcd prefix {:?}: {task}: {} attempts all lost to concurrent changes",
            self.opts.prefix, self.opts.max_attempts
        )))
    }

    /// What a committed decision left on its task's keys, as a read at
    /// `revision` would find them: `found` changed by the decision's record,
    /// lease and timer effects (`granted`: the leases made for the holder,
    /// deadline and lock-delay keys, in that order). `None` when the write
    /// cannot be described without reading (a lease it needed went missing).
    fn left_by(
        found: &Found,
        d: &Decision,
        revision: i64,
        granted: &[Option<i64>],
    ) -> Option<Found> {
        let on = |lease: Option<i64>| {
            lease.map(|lease| KeyRead {
                mod_revision: revision,
                lease,
            })
        };
        let holder = match d.lease {
            LeaseEffect::Granted { .. } | LeaseEffect::Extended { .. } => {
                Some(on(granted.first().copied().flatten())?)
            }
            LeaseEffect::Ended => None,
            LeaseEffect::Unchanged => found.holder,
        };
        let timer = |effect: TimerEffect, read: Option<KeyRead>, lease: Option<i64>| match effect {
            TimerEffect::Set { .. } => on(lease).map(Some),
            TimerEffect::Cleared => Some(None),
            TimerEffect::Unchanged => Some(read),
        };
        let deadline = timer(
            d.deadline,
            found.deadline,
            granted.get(1).copied().flatten(),
        )?;
        let lock_delay = timer(
            d.lock_delay,
            found.lock_delay,
            granted.get(2).copied().flatten(),
        )?;
        let record = match d.record_to_write() {
            Some(r) => Some((r.clone(), revision)),
            None => found.record.clone(),
        };
        Some(Found {
            record,
            holder,
            deadline,
            lock_delay,
            written_by: None,
        })
    }

    /// Whether one of the unanswered writes is the one that stored the record
    /// just read: then it is the answer (the others can never land, so
    /// their leases are revoked).
    async fn landed(
        &self,
        found: &Found,
        unanswered: &mut Vec<(String, Decision, Vec<i64>)>,
    ) -> Option<Result<Decision>> {
        let by = found.written_by.as_ref()?;
        let rev = found.record.as_ref()?.1;
        let i = unanswered.iter().position(|(id, _, _)| id == by)?;
        let (_, mut d, _) = unanswered.swap_remove(i);
        let stale: Vec<i64> = unanswered
            .drain(..)
            .flat_map(|(_, _, leases)| leases)
            .collect();
        self.revoke_all(&stale).await;
        self.commits.fetch_add(1, Ordering::Relaxed);
        Some(self.revision("a transaction's revision", rev).map(|fence| {
            d.assign_fence(fence);
            d
        }))
    }

    /// A transaction's reply was lost: find out whether it landed.
    async fn resolve(
        &self,
        task: &str,
        request_id: &str,
        mut d: Decision,
        cause: Option<String>,
    ) -> Result<Decision> {
        let cause = cause.unwrap_or_else(|| format!("no answer within {:?}", self.opts.timeout));
        let tk = self.keys.task(task);
        let reread = self
            .call_retrying("read", |mut c| {
                let tk = tk.clone();
                async move { c.get(tk, None).await }
            })
            .await;
        match reread {
            Ok(resp) => match resp.kvs().first() {
                Some(kv) => {
                    let env: std::result::Result<Envelope, _> =
                        baton_core::json::decode_stored(kv.value());
                    if env.is_ok_and(|e| e.request == request_id) {
                        self.commits.fetch_add(1, Ordering::Relaxed);
                        d.assign_fence(self.revision("a grant's revision", kv.mod_revision())?);
                        return Ok(d);
                    }
                    Err(Error::indeterminate(format!(
                        "etcd: {task}: the write's reply was lost ({cause}) and it has not landed yet; it may still: read before retrying"
                    )))
                }
                None => Err(Error::indeterminate(format!(
                    "etcd: {task}: the write's reply was lost ({cause}); read before retrying"
                ))),
            },
            Err(e) => Err(Error::indeterminate(format!(
                "etcd: {task}: the write's reply was lost ({cause}) and the cluster cannot be read ({}); read before retrying",
                e.message
            ))),
        }
    }

    /// Records of tasks after `after`, in id order, matching `states` (all
    /// when `None`), at most `limit`, with the holder keys of that revision.
    async fn scan(
        &self,
        after: Option<&TaskId>,
        limit: usize,
        states: Option<&BTreeSet<baton_core::State>>,
    ) -> Result<Vec<Snapshot>> {
        self.at_one_revision("list", || self.scan_at_one_revision(after, limit, states))
            .await
    }

    /// One read of the keys in `[from, end)` at revision `pinned` (the
    /// current one when `None`), with the options `shape` adds; `None`
    /// when that revision was compacted.
    pub(super) async fn range_at(
        &self,
        what: &str,
        from: &[u8],
        end: &[u8],
        pinned: Option<i64>,
        shape: impl Fn(GetOptions) -> GetOptions,
    ) -> Result<Option<etcd_client::GetResponse>> {
        self.call_retrying(what, |mut c| {
            let mut o = shape(GetOptions::new().with_range(end.to_vec()));
            if let Some(r) = pinned {
                o = o.with_revision(r);
            }
            let from = from.to_vec();
            async move { not_compacted(c.get(from, Some(o)).await) }
        })
        .await
    }

    /// A read made of several requests at one revision (`read`: `None`
    /// when that revision was compacted away between two of them), started
    /// again at the current revision (bounded) instead of asking for the
    /// compacted one again and again.
    async fn at_one_revision<T, F, Fut>(&self, what: &str, read: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        for _ in 0..SCAN_RESTARTS {
            if let Some(found) = read().await? {
                return Ok(found);
            }
        }
        Err(Error::unavailable(format!(
            "etcd prefix {:?}: {what}: the cluster compacted the revision being read {SCAN_RESTARTS} times running",
            self.opts.prefix
        ))
        .with_context(self.context()))
    }

    /// One attempt of [`FabricStore::scan`]; `None` when the revision it
    /// read at was compacted before it finished.
    async fn scan_at_one_revision(
        &self,
        after: Option<&TaskId>,
        limit: usize,
        states: Option<&BTreeSet<baton_core::State>>,
    ) -> Result<Option<Vec<Snapshot>>> {
        let end = prefix_end(&self.keys.tasks());
        let mut start = match after {
            Some(a) => {
                let mut k = self.keys.task(a.as_str()).into_bytes();
                k.push(0);
                k
            }
            None => self.keys.tasks().into_bytes(),
        };
        let mut out: Vec<TaskRecord> = Vec::new();
        let mut pinned: Option<i64> = None;
        loop {
            let (s, e) = (start.clone(), end.clone());
            // Never more keys than the caller still wants (when every state
            // counts), and never more than fit in one reply.
            let page = match states {
                None => SCAN_PAGE.min(limit.saturating_sub(out.len()).max(1)),
                Some(_) => SCAN_PAGE,
            };
            let page = i64::try_from(page).unwrap_or(1);
            let resp = self
                .range_at("list", &s, &e, pinned, |o| o.with_limit(page))
                .await?;
            let Some(resp) = resp else {
                return Ok(None);
            };
            pinned = pinned.or_else(|| resp.header().map(|h| h.revision()));
            let kvs = resp.kvs();
            for kv in kvs {
                let r = self.decode_record(kv)?;
                if states.is_none_or(|s| s.contains(&r.state)) {
                    out.push(r);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            if out.len() >= limit || !resp.more() || kvs.is_empty() {
                break;
            }
            if let Some(last) = kvs.last() {
                start = last.key().to_vec();
                start.push(0);
            }
        }
        self.judged(out, pinned).await
    }

    /// `records` (in id order, read at revision `pinned`) with what the
    /// engine judges of them at that revision; `None` when it was compacted.
    async fn judged(
        &self,
        out: Vec<TaskRecord>,
        pinned: Option<i64>,
    ) -> Result<Option<Vec<Snapshot>>> {
        // Which of them hold a live grant, and which wait on a deadline that
        // has not passed, at the same revision.
        let (holders, deadlines) = (self.keys.holders(), self.keys.deadlines());
        let (live, waiting) = tokio::join!(
            self.tasks_with_key(&out, pinned, |t| self.keys.holder(t), &holders),
            self.tasks_with_key(&out, pinned, |t| self.keys.deadline(t), &deadlines),
        );
        let (Some(live), Some(waiting)) = (live?, waiting?) else {
            return Ok(None);
        };
        // The keys' presence at the scan's revision is the engine's
        // judgement, never a comparison with the caller's time.
        Ok(Some(
            out.into_iter()
                .map(|record| {
                    let t = record.task.as_str();
                    let judged = Judged {
                        lease_holds: live.contains(t),
                        deadline_passed: !waiting.contains(t),
                        // Only a grant's decision consults the lock delay,
                        // and it reads the key itself; a list never does.
                        lock_delay_holds: false,
                    };
                    Snapshot { record, judged }
                })
                .collect(),
        ))
    }

    /// Which of `records` (in id order) have a key of the kind `key_of`
    /// names (under `under`), at revision `pinned`; `None` when that
    /// revision was compacted.
    async fn tasks_with_key(
        &self,
        records: &[TaskRecord],
        pinned: Option<i64>,
        key_of: impl Fn(&str) -> String,
        under: &str,
    ) -> Result<Option<BTreeSet<String>>> {
        let mut found = BTreeSet::new();
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return Ok(Some(found));
        };
        let from = key_of(first.task.as_str());
        let mut to = key_of(last.task.as_str()).into_bytes();
        to.push(0);
        let resp = self
            .range_at(
                "list",
                from.as_bytes(),
                &to,
                pinned,
                GetOptions::with_keys_only,
            )
            .await?;
        let Some(resp) = resp else {
            return Ok(None);
        };
        for kv in resp.kvs() {
            if let Some(t) = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(under))
                .and_then(unhex)
            {
                found.insert(t);
            }
        }
        Ok(Some(found))
    }

    /// Items under `prefix` in creation order with seq > `after`.
    async fn ordered<T: serde::de::DeserializeOwned>(
        &self,
        prefix: String,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, T, i64)>> {
        let min_create = i64::try_from(after / PER_TXN).unwrap_or(i64::MAX);
        let want = i64::try_from(limit)
            .unwrap_or(i64::MAX)
            .saturating_add(i64::try_from(PER_TXN).unwrap_or(0));
        let resp = self
            .call_retrying("read", |mut c| {
                let o = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_min_create_revision(min_create)
                    .with_limit(want);
                let p = prefix.clone();
                async move { c.get(p, Some(o)).await }
            })
            .await?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let stored: Stored<T> = baton_core::json::decode_stored(kv.value()).map_err(|e| {
                Error::corrupt(format!(
                    "etcd prefix {:?}: a stored item does not decode: {e}",
                    self.opts.prefix
                ))
            })?;
            let seq = self
                .revision("an item's revision", kv.create_revision())?
                .saturating_mul(PER_TXN)
                .saturating_add(stored.idx);
            if seq > after {
                out.push((seq, stored.item, kv.create_revision()));
            }
        }
        out.sort_by_key(|(seq, _, _)| *seq);
        out.truncate(limit);
        Ok(out)
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
        }
    }

    fn commits(&self) -> Option<u64> {
        Some(self.commits.load(Ordering::Relaxed))
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
        self.next_on_etcd(query).await
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
