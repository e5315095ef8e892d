//! Stores broken on purpose, to prove the checker notices: each wraps a
//! real store and breaks one promise the model holds it to.

use async_trait::async_trait;
use baton_core::{
    Capabilities, Decision, Event, ListQuery, NextQuery, Notification, Operation, Preconditions,
    Request, Result, Snapshot, Store, TaskId, Timestamp,
};

/// How a [`Broken`] store breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    /// A claim refused because another owner's lease is live is granted
    /// anyway: the live lease is given back behind its holder's back first.
    GrantsTwice,
    /// A renew under a fence that is not the current one renews the
    /// current grant instead of being refused.
    AcceptsStaleRenew,
    /// A checkpoint under a fence that is not the current one is recorded
    /// as the current grant's.
    AcceptsStaleCheckpoint,
}

/// A real store with one promise broken.
#[derive(Debug)]
pub struct Broken<S> {
    inner: S,
    breakage: Breakage,
}

impl<S: Store> Broken<S> {
    pub fn new(inner: S, breakage: Breakage) -> Self {
        Broken { inner, breakage }
    }

    /// The request the broken store actually sends on, after doing
    /// whatever it does behind the caller's back.
    async fn corrupt(&self, op: &Operation) -> Option<Request> {
        let snap = self.inner.read(&op.task, op.now).await.ok()??;
        let lease = snap.record.lease.clone()?;
        match (&op.request, self.breakage) {
            (Request::Claim { owner, .. }, Breakage::GrantsTwice)
                if snap.lease_live() && &lease.owner != owner =>
            {
                let release = Operation {
                    task: op.task.clone(),
                    request: Request::Release {
                        owner: lease.owner,
                        fence: lease.fence,
                    },
                    pre: Preconditions::none(),
                    now: op.now,
                    clock: Default::default(),
                };
                let _ = self.inner.apply(release).await;
                None
            }
            (Request::Renew { fence, ttl_ms, .. }, Breakage::AcceptsStaleRenew)
                if *fence != lease.fence =>
            {
                Some(Request::Renew {
                    owner: lease.owner,
                    fence: lease.fence,
                    ttl_ms: *ttl_ms,
                })
            }
            (
                Request::Checkpoint {
                    fence,
                    step,
                    output,
                    spawned,
                    wait,
                    ..
                },
                Breakage::AcceptsStaleCheckpoint,
            ) if *fence != lease.fence => Some(Request::Checkpoint {
                owner: lease.owner,
                fence: lease.fence,
                step: step.clone(),
                output: output.clone(),
                spawned: spawned.clone(),
                wait: *wait,
            }),
            _ => None,
        }
    }
}

#[async_trait]
impl<S: Store> Store for Broken<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn fence_token(&self, task: &TaskId, fence: u64) -> Result<Option<String>> {
        self.inner.fence_token(task, fence).await
    }
    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        self.inner.read(task, now).await
    }
    async fn apply(&self, mut op: Operation) -> Result<Decision> {
        if let Some(request) = self.corrupt(&op).await {
            op.request = request;
        }
        self.inner.apply(op).await
    }
    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(self.apply(op).await?);
        }
        Ok(out)
    }
    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        self.inner.next(query).await
    }
    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        self.inner.list(query).await
    }
    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.inner.events(task, after, limit).await
    }
    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        self.inner.pending(after, limit).await
    }
    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        self.inner.counts().await
    }
    async fn oldest_ready(
        &self,
        lane: baton_core::graph::Lane,
        queue: &baton_core::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        self.inner.oldest_ready(lane, queue, now).await
    }
    async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64> {
        self.inner.ack(intent_ids, now).await
    }
}
