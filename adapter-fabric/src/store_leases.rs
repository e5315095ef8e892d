//! etcd leases: the pool of leases granted ahead (so a grant's
//! transaction need not wait for one), their revokes, and the grants
//! a transaction asks for.

use super::*;

/// Leases a store granted that hold nothing any more (their grant ended,
/// or moved to another lease), kept a short while for the store's next
/// grants of the same length instead of revoking one and granting
/// another: two writes through the cluster's log become one keep-alive
/// and one linearizable read, neither of them a write. A kept lease is
/// refreshed to its whole TTL before it is used, after the operation's
/// `now` was taken, as a new one would be granted, and the refresh is
/// proven to hold across a leader change ([`LeasePool::refresh`]), so
/// reuse moves no expiry. A lease is revoked instead when the
/// pool is full, once it has waited [`POOL_IDLE`], and when the last clone
/// of the store is dropped ([`settle`] waits for those revokes).
pub(super) struct LeasePool {
    pub(super) client: Client,
    pub(super) timeout: Duration,
    /// A key read (linearizably, counting only) to prove a refresh.
    pub(super) probe: String,
    pub(super) state: std::sync::Mutex<PoolState>,
}

#[derive(Default)]
pub(super) struct PoolState {
    /// The leases this store granted and still owns, with their TTLs (s).
    pub(super) mine: HashMap<i64, u64>,
    /// Those that hold nothing now: TTL, id, since when.
    pub(super) free: Vec<(u64, i64, std::time::Instant)>,
}

/// How many unused leases a store keeps.
pub(super) const POOL: usize = 32;
/// How long an unused lease is kept before it is revoked.
pub(super) const POOL_IDLE: Duration = Duration::from_secs(10);
/// How many granted leases a store keeps track of (forgotten ones are
/// revoked when they end, not kept).
pub(super) const MINE: usize = 4096;

impl LeasePool {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // A poisoned lock only means a panic elsewhere while it was held;
        // each call leaves the maps whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn granted(&self, id: i64, secs: u64) {
        let mut st = self.state();
        if st.mine.len() >= MINE {
            st.mine.clear();
        }
        st.mine.insert(id, secs);
    }

    /// Keeps what it can of `ids` (leases now holding nothing); returns
    /// those to revoke: not this store's, over the pool's size, or kept
    /// too long already.
    pub(super) fn put(&self, ids: &[i64]) -> Vec<i64> {
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
    pub(super) fn take(&self, secs: u64) -> Option<i64> {
        let now = std::time::Instant::now();
        let mut st = self.state();
        let i = st
            .free
            .iter()
            .rposition(|(s, _, since)| *s == secs && now.duration_since(*since) < POOL_IDLE)?;
        Some(st.free.swap_remove(i).1)
    }

    pub(super) fn lost(&self, id: i64) {
        self.state().mine.remove(&id);
    }

    /// Refreshes a kept lease to its whole TTL, and proves the refresh
    /// holds. A keep-alive is answered by the member that believes it
    /// leads; one that a deposed leader answered (a leader starved of CPU
    /// steps down late) is lost when the next leader promotes, which counts
    /// every expiry from its promotion, so the lease could end before the
    /// grant it is given to says. A linearizable read after the keep-alive,
    /// answered in the same term, shows that leader still held a quorum
    /// after the renewal: a later leader promotes after that, giving the
    /// lease its whole TTL again. False when the cluster no longer has the
    /// lease, did not answer in time, or changed term in between (the
    /// caller grants a new lease, through the cluster's log).
    pub(super) async fn refresh(&self, id: i64) -> bool {
        let mut c = self.client.clone();
        let probe = self.probe.clone();
        let proven = async move {
            // etcd-client sends one keep-alive and waits for its answer (a
            // lease the cluster no longer has is an error), but keeps not
            // its header: a second keep-alive on the stream says its term.
            let (mut keeper, mut stream) = c.lease_keep_alive(id).await.ok()?;
            keeper.keep_alive().await.ok()?;
            let kept = stream.message().await.ok()??;
            if kept.ttl() <= 0 {
                return None;
            }
            let term = kept.header()?.raft_term();
            let read = c
                .get(probe, Some(GetOptions::new().with_count_only()))
                .await
                .ok()?;
            (read.header()?.raft_term() == term).then_some(())
        };
        matches!(
            tokio::time::timeout(self.timeout, proven).await,
            Ok(Some(()))
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
pub(super) const RECENT: usize = 4096;

/// How many revokes of leases that hold nothing are still under way in
/// this process (they run after the answer, not before it).
pub(super) fn revoking() -> &'static tokio::sync::watch::Sender<usize> {
    static REVOKING: std::sync::OnceLock<tokio::sync::watch::Sender<usize>> =
        std::sync::OnceLock::new();
    REVOKING.get_or_init(|| tokio::sync::watch::Sender::new(0))
}

/// Waits, at most `within`, for the revokes this process still has under
/// way: a process calls it before it exits, so no lease it ended is left
/// to run out its TTL. True when none is left.
pub async fn finish_revokes(within: Duration) -> bool {
    let mut left = revoking().subscribe();
    tokio::time::timeout(within, left.wait_for(|n| *n == 0))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// A lease granted (or a kept one refreshed) before the decision that may
/// use it (a claim's, beside the read): back to the pool unless the
/// decision takes it.
pub(super) struct Ahead {
    pub(super) store: FabricStore,
    pub(super) secs: u64,
    pub(super) id: Option<i64>,
}

impl Ahead {
    /// The lease, if it has the length the decision wants.
    pub(super) fn take(&mut self, secs: u64) -> Option<i64> {
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

impl FabricStore {
    /// Revokes a lease that holds no grant any more. Best effort, within the
    /// deadline: a lease that is not revoked still expires with its TTL.
    pub(super) async fn revoke(&self, id: i64) {
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
    pub(super) fn revoke_later(&self, ids: Vec<i64>) {
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
    pub(super) fn lease_ahead(&self, op: &Operation) -> Option<u64> {
        match op.request {
            baton_core::Request::Claim {
                ttl_ms: Some(ttl), ..
            } => Some(lease_secs(self.capabilities().lease_rules().effective(ttl))),
            _ => None,
        }
    }

    /// Revokes leases that hold nothing, all at once.
    pub(super) async fn revoke_all(&self, ids: &[i64]) {
        futures_util::future::join_all(ids.iter().map(|id| self.revoke(*id))).await;
    }

    /// Grants the leases a decision needs (the holder key's and its timer
    /// keys', each of the given whole seconds) at once; if one cannot be
    /// granted, those that were are revoked and nothing is written.
    pub(super) async fn grant_leases(&self, secs: &[Option<u64>]) -> Result<Vec<Option<i64>>> {
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
    pub(super) async fn grant_lease(&self, secs: u64) -> Result<i64> {
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
}
