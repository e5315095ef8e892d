//! etcd leases: the grants a transaction asks for (a claim's granted
//! beside its read, so its transaction need not wait for one), and the
//! revokes of those that hold nothing any more.
//!
//! Every grant's lease is granted fresh, through the cluster's log, never a
//! kept one refreshed by a keep-alive: a keep-alive is answered by whichever
//! member believes it leads, and one a deposed leader answers (a leader
//! starved of CPU steps down late) is lost when the next leader promotes,
//! whose expiries count from its promotion; a lease refreshed so could end
//! before the grant it holds says. A grant applied through the log is
//! counted by the leader that committed it, and a later leader gives it its
//! whole TTL again.

use super::*;

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

/// A lease granted before the decision that may use it (a claim's, beside
/// the read): revoked unless the decision takes it.
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
    /// their own, counted until done so the process can [`finish_revokes`].
    pub(super) fn revoke_later(&self, ids: Vec<i64>) {
        if ids.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime (a drop at exit): the leases run out their TTL
        };
        revoking().send_modify(|n| *n += 1);
        let store = self.clone();
        runtime.spawn(async move {
            store.revoke_all(&ids).await;
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
        Ok(id)
    }
}
