//! Fault injection over any store: the simulation's faults, and a way for
//! callers to test how they handle `Unavailable` and `Indeterminate`
//! (`memory:?fault=unavailable` or `memory:?fault=indeterminate` in the CLI).

use crate::decide::Decision;
use crate::error::{Error, Result};
use crate::id::TaskId;
use crate::model::{Event, Notification};
use crate::request::Operation;
use crate::store::{Capabilities, ListQuery, Snapshot, Store};
use crate::time::Timestamp;
use async_trait::async_trait;
use std::sync::Mutex;

/// What a write suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The store fails before applying anything.
    UnavailableBefore,
    /// The write applies, then its answer is lost.
    IndeterminateAfter,
}

/// Wraps a store; writes suffer the fault set for every write, or the one
/// injected for the next write. Reads pass through.
#[derive(Debug)]
pub struct FaultStore<S> {
    inner: S,
    always: Mutex<Option<Fault>>,
    next: Mutex<Option<Fault>>,
    /// How many records `list` has returned through this handle.
    listed: std::sync::atomic::AtomicU64,
}

impl<S> FaultStore<S> {
    /// No fault until one is injected.
    pub fn new(inner: S) -> Self {
        FaultStore {
            inner,
            always: Mutex::new(None),
            next: Mutex::new(None),
            listed: Default::default(),
        }
    }

    /// Every write suffers `fault`.
    pub fn always(inner: S, fault: Fault) -> Self {
        FaultStore {
            inner,
            always: Mutex::new(Some(fault)),
            next: Mutex::new(None),
            listed: Default::default(),
        }
    }

    /// The next write suffers `fault`.
    pub fn inject_next(&self, fault: Fault) {
        if let Ok(mut n) = self.next.lock() {
            *n = Some(fault);
        }
    }

    /// From now on every write suffers `fault` (or none: `None`).
    pub fn set_always(&self, fault: Option<Fault>) {
        if let Ok(mut a) = self.always.lock() {
            *a = fault;
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// How many records `list` has returned through this handle (a test
    /// of what a read costs counts them).
    pub fn records_listed(&self) -> u64 {
        self.listed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<S> FaultStore<S> {
    /// Runs one write under the fault due, if any.
    async fn write<T>(&self, w: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let once = self.next.lock().ok().and_then(|mut n| n.take());
        let always = self.always.lock().ok().and_then(|a| *a);
        match once.or(always) {
            Some(Fault::UnavailableBefore) => Err(Error::unavailable(
                "injected fault: the store did not answer",
            )),
            Some(Fault::IndeterminateAfter) => {
                w.await?;
                Err(Error::indeterminate(
                    "injected fault: the write applied but its answer was lost",
                ))
            }
            None => w.await,
        }
    }
}

#[async_trait]
impl<S: Store> Store for FaultStore<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn fence_token(&self, task: &TaskId, fence: u64) -> Result<Option<String>> {
        self.inner.fence_token(task, fence).await
    }
    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        self.inner.read(task, now).await
    }
    async fn apply(&self, op: Operation) -> Result<Decision> {
        self.write(self.inner.apply(op)).await
    }
    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.write(self.inner.apply_all(ops)).await
    }
    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.write(self.inner.apply_each(ops)).await
    }
    async fn next_many(&self, query: &crate::graph::NextQuery) -> Result<Vec<Decision>> {
        self.write(self.inner.next_many(query)).await
    }

    async fn next(&self, query: &crate::graph::NextQuery) -> Result<Option<Decision>> {
        self.write(self.inner.next(query)).await
    }
    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let found = self.inner.list(query).await?;
        self.listed
            .fetch_add(found.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(found)
    }
    async fn watch_ready(&self, query: &crate::graph::NextQuery, max_ms: u64) -> Result<bool> {
        self.inner.watch_ready(query, max_ms).await
    }
    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.inner.events(task, after, limit).await
    }
    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        self.inner.pending(after, limit).await
    }
    async fn ack(&self, ids: &[String], now: Timestamp) -> Result<u64> {
        self.inner.ack(ids, now).await
    }
    async fn counts(&self) -> Result<Option<Vec<crate::counts::Count>>> {
        self.inner.counts().await
    }

    async fn oldest_ready(
        &self,
        lane: crate::graph::Lane,
        queue: &crate::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        self.inner.oldest_ready(lane, queue, now).await
    }
}
