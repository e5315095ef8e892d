//! One [`Store`] for every store whose work is blocking calls on a
//! transaction type of its own (SQLite, sled): the store says how to
//! commit a batch of jobs and how to read ([`Blocking`]); [`BlockingStore`]
//! runs that on tokio's blocking pool, through a group committer when the
//! store has one, with a panic turned into `Unavailable`.

use crate::Decision;
use crate::commit::{Answer, GroupCommitter, Job, job_alone_or_grouped, on_blocking_pool};
use crate::counts::Count;
use crate::error::Result;
use crate::graph::NextQuery;
use crate::id::TaskId;
use crate::model::{Event, Notification};
use crate::request::Operation;
use crate::store::{Capabilities, ListQuery, Snapshot, Store};
use crate::time::Timestamp;
use async_trait::async_trait;
use std::sync::Arc;

/// What a blocking store does, each call on the caller's thread (a thread
/// of the blocking pool, or the committer's).
pub trait Blocking: Send + Sync + 'static {
    /// Decides `jobs` in order in one atomic, durable commit, one answer a
    /// job, or an error meaning nothing was applied (the contract of
    /// [`GroupCommitter::start`]).
    fn commit_jobs(&self, jobs: &[Job]) -> Result<Vec<Answer>>;
    /// As [`Store::read`].
    fn snapshot(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>>;
    /// Whether `query` may find a candidate, read without the write path;
    /// `false` answers `next` with `None` at once. `true` when the store
    /// cannot tell cheaply.
    fn may_offer(&self, _query: &NextQuery) -> Result<bool> {
        Ok(true)
    }
    /// As [`Store::list`].
    fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>>;
    /// As [`Store::events`].
    fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>>;
    /// As [`Store::pending`].
    fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>>;
    /// As [`Store::counts`], for a store that keeps counts.
    fn counts(&self) -> Result<Vec<Count>>;
    /// The first key of `index` in `(from, end)`, both exclusive (for
    /// [`Store::oldest_ready`]).
    fn first_index_key(
        &self,
        index: crate::graph::IndexName,
        from: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>>;
    /// As [`Store::ack`].
    fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64>;
    /// How many durable commits this handle has made.
    fn commits(&self) -> u64;
}

/// A [`Blocking`] store as a [`Store`].
pub struct BlockingStore<B> {
    inner: Arc<B>,
    committer: Option<Arc<GroupCommitter>>,
    /// Names the store in errors (`sqlite PATH`).
    name: Arc<str>,
    capabilities: Capabilities,
}

impl<B: Blocking> BlockingStore<B> {
    /// `inner`, named `name` in errors, its jobs committed by `committer`
    /// (which commits with `inner`), or each in a commit of its own when
    /// `None`.
    pub fn new(
        inner: Arc<B>,
        committer: Option<GroupCommitter>,
        name: String,
        capabilities: Capabilities,
    ) -> BlockingStore<B> {
        BlockingStore {
            inner,
            committer: committer.map(Arc::new),
            name: name.into(),
            capabilities,
        }
    }

    /// The store itself.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The group committer, when commits are grouped.
    pub fn committer(&self) -> Option<&GroupCommitter> {
        self.committer.as_deref()
    }

    async fn job(&self, job: Job) -> Result<Answer> {
        job_alone_or_grouped(
            self.committer.as_deref(),
            None,
            || self.name.to_string(),
            self.inner.clone(),
            job,
            B::commit_jobs,
        )
        .await
    }

    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T> + Send + 'static,
    {
        on_blocking_pool(self.name.to_string(), self.inner.clone(), f).await
    }
}

impl<B> Clone for BlockingStore<B> {
    fn clone(&self) -> Self {
        BlockingStore {
            inner: self.inner.clone(),
            committer: self.committer.clone(),
            name: self.name.clone(),
            capabilities: self.capabilities,
        }
    }
}

impl<B> std::fmt::Debug for BlockingStore<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingStore")
            .field("store", &self.name)
            .field("grouped", &self.committer.is_some())
            .finish()
    }
}

#[async_trait]
impl<B: Blocking> Store for BlockingStore<B> {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        let task = task.clone();
        self.run(move |inner| inner.snapshot(&task, now)).await
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        self.job(Job::One(op)).await?.into_one()
    }

    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        // Through the committer, the batch shares a commit (and its fsync)
        // with every other caller's jobs queued meanwhile.
        if let Some(committer) = &self.committer {
            return committer.submit_each(ops).await;
        }
        crate::commit::jobs_together(
            None,
            self.name.to_string(),
            self.inner.clone(),
            ops.into_iter().map(Job::One).collect(),
            B::commit_jobs,
        )
        .await?
        .into_iter()
        .map(Answer::into_one)
        .collect()
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.job(Job::All(ops)).await?.into_all()
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        Ok(self.next_many(&query.one()).await?.into_iter().next())
    }

    async fn next_many(&self, query: &NextQuery) -> Result<Vec<Decision>> {
        let q = query.clone();
        if !self.run(move |inner| inner.may_offer(&q)).await? {
            return Ok(Vec::new());
        }
        self.job(Job::Next(query.clone())).await?.into_next_all()
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let query = query.clone();
        self.run(move |inner| inner.list(&query)).await
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let task = task.cloned();
        self.run(move |inner| inner.events(task.as_ref(), after, limit))
            .await
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        self.run(move |inner| inner.pending(after, limit)).await
    }

    async fn counts(&self) -> Result<Option<Vec<Count>>> {
        self.run(|inner| inner.counts().map(Some)).await
    }

    async fn oldest_ready(
        &self,
        lane: crate::graph::Lane,
        queue: &crate::id::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let read = crate::graph::OldestReady::new(lane, queue, now);
        self.run(move |inner| read.read(|index, from, end| inner.first_index_key(index, from, end)))
            .await
    }

    async fn ack(&self, intent_ids: &[String], now: Timestamp) -> Result<u64> {
        let ids = intent_ids.to_vec();
        self.run(move |inner| inner.ack(&ids, now)).await
    }
}

impl<B: Blocking> crate::store::Meter for BlockingStore<B> {
    fn commits(&self) -> Option<u64> {
        Some(self.inner.commits())
    }

    fn observe_batches(&self, observer: crate::store::BatchObserver) -> bool {
        self.committer
            .as_ref()
            .map(|c| c.observe(observer))
            .is_some()
    }
}
