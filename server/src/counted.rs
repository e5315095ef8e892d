//! The server's store as the server itself uses it: every decision made
//! through it counted in the metrics and every refusal kept for the
//! refusal log, whoever asked for it. A caller's request (through
//! `caller.rs`), the sweeper's beat, a schedule's tick and retention all
//! reach the store here, so a lease the sweeper ends is counted as one a
//! request ends.

use crate::metrics::Metrics;
use async_trait::async_trait;
use baton_core::decide::Decision;
use baton_core::graph::NextQuery;
use baton_core::refusal::RefusalNote;
use baton_core::{
    Capabilities, Clock, Event, ListQuery, Notification, Operation, RequestKind, Result, Snapshot,
    Store, TaskId, Timestamp,
};
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Refusals answered and not yet written to the store's refusal log.
pub(crate) type Unsaved = Arc<Mutex<VecDeque<RefusalNote>>>;

pub(crate) struct Counted {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    unsaved: Unsaved,
    clock: Arc<dyn Clock>,
    spans: Arc<crate::spans::Spans>,
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counted")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Counted {
    pub(crate) fn new(
        inner: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        unsaved: Unsaved,
        clock: Arc<dyn Clock>,
        spans: Arc<crate::spans::Spans>,
    ) -> Counted {
        Counted {
            inner,
            metrics,
            unsaved,
            clock,
            spans,
        }
    }

    /// Counts a decision, and keeps it for the refusal log if it refused.
    fn decided(&self, d: &Decision, kind: RequestKind, task: &TaskId) {
        self.metrics.decided(d, kind);
        self.spans.decided(d, kind, task);
        if let baton_core::Verdict::Refuse { refusal, .. } = &d.verdict
            && let Ok(mut unsaved) = self.unsaved.lock()
        {
            if unsaved.len() >= RefusalNote::KEPT {
                unsaved.pop_front();
            }
            unsaved.push_back(RefusalNote {
                task: task.clone(),
                request: kind,
                refusal: baton_core::authority::refusal_json(refusal),
                at: self.clock.now(),
            });
        }
    }

    /// A store error, counted.
    fn counted<T>(&self, r: Result<T>) -> Result<T> {
        r.inspect_err(|e| self.metrics.store_error(e))
    }

    fn many(
        &self,
        asked: &[(RequestKind, TaskId)],
        applied: Result<Vec<Decision>>,
    ) -> Result<Vec<Decision>> {
        let ds = self.counted(applied)?;
        for (d, (kind, task)) in ds.iter().zip(asked) {
            self.decided(d, *kind, task);
        }
        Ok(ds)
    }
}

/// What each of `ops` asks, and of which task: what its decision is counted as.
fn asked(ops: &[Operation]) -> Vec<(RequestKind, TaskId)> {
    ops.iter()
        .map(|o| (o.request.kind(), o.task.clone()))
        .collect()
}

#[async_trait]
impl Store for Counted {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let r = self.inner.read(task, now).await;
        self.counted(r)
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        let kind = op.request.kind();
        let task = op.task.clone();
        let d = self.counted(self.inner.apply(op).await)?;
        self.decided(&d, kind, &task);
        Ok(d)
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let asked = asked(&ops);
        let applied = self.inner.apply_all(ops).await;
        self.many(&asked, applied)
    }

    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let asked = asked(&ops);
        let applied = self.inner.apply_each(ops).await;
        self.many(&asked, applied)
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        Ok(self.next_many(&query.one()).await?.into_iter().next())
    }

    async fn next_many(&self, query: &NextQuery) -> Result<Vec<Decision>> {
        let ds = self.counted(self.inner.next_many(query).await)?;
        for d in &ds {
            if let Some(r) = d.current.as_ref().or(d.record_to_write()) {
                self.decided(d, RequestKind::Claim, &r.task);
            }
        }
        Ok(ds)
    }

    async fn watch_ready(&self, query: &NextQuery, max_ms: u64) -> Result<bool> {
        let r = self.inner.watch_ready(query, max_ms).await;
        self.counted(r)
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let r = self.inner.list(query).await;
        self.counted(r)
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let r = self.inner.events(task, after, limit).await;
        self.counted(r)
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let r = self.inner.pending(after, limit).await;
        self.counted(r)
    }

    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        let r = self.inner.counts().await;
        self.counted(r)
    }

    async fn oldest_ready(
        &self,
        lane: baton_core::graph::Lane,
        queue: &baton_core::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let r = self.inner.oldest_ready(lane, queue, now).await;
        self.counted(r)
    }

    async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64> {
        let r = self.inner.ack(intent_ids, now).await;
        self.counted(r)
    }

    async fn fence_token(&self, task: &TaskId, fence: u64) -> Result<Option<String>> {
        let r = self.inner.fence_token(task, fence).await;
        self.counted(r)
    }
}
