//! An in-memory store, for tests and embedding. Clones share one store, so
//! "reopening" a clone sees everything the first one committed. It passes
//! the conformance suite like every other backend.

use crate::decide::Decision;
use crate::engine::Job;
use crate::engine::{Engine, apply_in, drive_next};
use crate::error::{Error, Result};
use crate::graph::NextQuery;
use crate::id::TaskId;
use crate::model::{Event, Notification};
use crate::next::{IndexPage, NextSource};
use crate::request::Operation;
use crate::store::Txn;
use crate::store::{Capabilities, ListQuery, Snapshot, Store};
use crate::time::Timestamp;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default, Clone)]
struct Inner {
    tasks: BTreeMap<TaskId, crate::model::TaskRecord>,
    /// The ready index: [`ReadyEntry::key`] to task.
    ready: BTreeMap<Vec<u8>, TaskId>,
    /// The held index: [`crate::model::TaskRecord::held_key`] to task.
    held: BTreeMap<Vec<u8>, TaskId>,
    /// By sequence number: a prune removes some, and a number is never
    /// given out again (`event_seq` only grows).
    events: BTreeMap<u64, Event>,
    event_seq: u64,
    conflicts: HashMap<(TaskId, String), u64>,
    outbox: BTreeMap<u64, Notification>,
    outbox_seq: u64,
    fence: u64,
    /// The counts by (queue, stored state), kept with every commit.
    counts: BTreeMap<(String, crate::model::State), i64>,
}

/// A store that lives in this process's memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        // A poisoned lock means a panic mid-commit: fail closed rather than guess.
        self.inner
            .lock()
            .map_err(|_| Error::unavailable("memory store: a writer panicked mid-commit"))
    }
}

/// Applies a decision to the in-memory state (the whole commit, under the lock).
fn commit(inner: &mut Inner, decision: &mut Decision) {
    if decision.mints_fence() {
        inner.fence += 1;
        decision.assign_fence(inner.fence);
    }
    if let Some(r) = decision.record_to_write() {
        // A tombstone forgotten leaves nothing: no record, count or entry.
        let forgets = decision.forgets();
        let old = if forgets {
            inner.tasks.remove(&r.task)
        } else {
            inner.tasks.insert(r.task.clone(), r.clone())
        };
        crate::counts::tally(&mut inner.counts, old.as_ref(), -1);
        if !forgets {
            crate::counts::tally(&mut inner.counts, Some(r), 1);
        }
        if let Some(o) = old {
            if let Some(e) = o.ready_entry() {
                inner.ready.remove(&e.key());
            }
            if let Some(k) = o.held_key() {
                inner.held.remove(&k);
            }
        }
        if let Some(e) = r.ready_entry().filter(|_| !forgets) {
            inner.ready.insert(e.key(), r.task.clone());
        }
        if let Some(k) = r.held_key().filter(|_| !forgets) {
            inner.held.insert(k, r.task.clone());
        }
    }
    if decision.drops_history()
        && let Some(r) = decision.record_to_write()
    {
        let task = r.task.clone();
        inner.events.retain(|_, e| e.task != task);
        inner.conflicts.retain(|(t, _), _| *t != task);
    }
    for draft in decision.events() {
        if let Some(key) = &draft.conflict_key {
            if let Some(&seq) = inner.conflicts.get(&(draft.task.clone(), key.clone()))
                && let Some(e) = inner.events.get_mut(&seq)
            {
                e.count += 1;
                continue;
            }
            let seq = inner.event_seq + 1;
            inner
                .conflicts
                .insert((draft.task.clone(), key.clone()), seq);
        }
        inner.event_seq += 1;
        let seq = inner.event_seq;
        inner
            .events
            .insert(seq, Event::from_draft(seq, draft.clone()));
    }
    for n in decision.notifications() {
        inner.outbox_seq += 1;
        inner.outbox.insert(
            inner.outbox_seq,
            Notification::from_draft(inner.outbox_seq, n.clone()),
        );
    }
}

/// The memory store's commit: everything under its one lock.
struct Tx<'a> {
    inner: &'a mut Inner,
}

impl Txn for Tx<'_> {
    fn load(&mut self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        Ok(self
            .inner
            .tasks
            .get(task)
            .map(|r| Snapshot::at(r.clone(), now)))
    }

    fn write(&mut self, d: &mut Decision) -> Result<()> {
        commit(self.inner, d);
        Ok(())
    }
}

impl NextSource for Tx<'_> {
    fn ready(&mut self, page: IndexPage<'_>) -> Result<Vec<Snapshot>> {
        let Some((from, end)) = page.ready_keys() else {
            return Ok(Vec::new());
        };
        use std::ops::Bound::Excluded;
        Ok(self.snapshots(
            self.inner.ready.range((Excluded(from), Excluded(end))),
            page,
        ))
    }

    fn expired(&mut self, page: IndexPage<'_>) -> Result<Vec<Snapshot>> {
        let (start, end) = page.held_keys();
        Ok(self.snapshots(self.inner.held.range(start..end), page))
    }
}

impl Tx<'_> {
    /// The records an index range names, at most `page.limit`.
    fn snapshots<'k>(
        &self,
        entries: impl Iterator<Item = (&'k Vec<u8>, &'k TaskId)>,
        page: IndexPage<'_>,
    ) -> Vec<Snapshot> {
        entries
            .take(page.limit)
            .filter_map(|(_, t)| self.inner.tasks.get(t))
            .map(|r| Snapshot::at(r.clone(), page.now))
            .collect()
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::injected_clock(false, false)
    }

    async fn read(&self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        Ok(self
            .lock()?
            .tasks
            .get(task)
            .map(|r| Snapshot::at(r.clone(), now)))
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        let mut inner = self.lock()?;
        apply_in(&mut Tx { inner: &mut inner }, &op).map(|(d, _)| d)
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let mut inner = self.lock()?;
        let before = inner.clone();
        let mut engine = Engine::new([Job::All(ops)], crate::decide::LeaseRules::default());
        let driven = drive_next(&mut engine, &mut Tx { inner: &mut inner });
        let (answers, keep) = engine.finish();
        if driven.is_err() || !keep {
            *inner = before;
        }
        driven?;
        match answers.into_iter().next() {
            Some(a) => a.into_all(),
            None => Err(Error::unavailable("the commit engine gave no answer")),
        }
    }

    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        let mut inner = self.lock()?;
        let before = inner.clone();
        let mut engine = Engine::new(
            ops.into_iter().map(Job::One),
            crate::decide::LeaseRules::default(),
        );
        let driven = drive_next(&mut engine, &mut Tx { inner: &mut inner });
        if driven.is_err() {
            *inner = before;
        }
        driven?;
        engine
            .finish()
            .0
            .into_iter()
            .map(|a| a.into_one())
            .collect()
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        Ok(self.next_many(&query.one()).await?.into_iter().next())
    }

    async fn next_many(&self, query: &NextQuery) -> Result<Vec<Decision>> {
        let mut inner = self.lock()?;
        let mut engine = Engine::new(
            [Job::Next(query.clone())],
            crate::decide::LeaseRules::default(),
        );
        drive_next(&mut engine, &mut Tx { inner: &mut inner })?;
        match engine.finish().0.into_iter().next() {
            Some(a) => a.into_next_all(),
            None => Err(Error::unavailable("the commit engine gave no answer")),
        }
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let inner = self.lock()?;
        let start = match &query.after {
            Some(a) => std::ops::Bound::Excluded(a.clone()),
            None => std::ops::Bound::Unbounded,
        };
        Ok(inner
            .tasks
            .range((start, std::ops::Bound::Unbounded))
            .map(|(_, r)| r)
            .filter(|r| {
                query
                    .clauses
                    .as_ref()
                    .is_none_or(|cs| cs.iter().any(|c| c.matches(r, query.now)))
            })
            .take(query.limit)
            .map(|r| Snapshot::at(r.clone(), query.now))
            .collect())
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let inner = self.lock()?;
        Ok(inner
            .events
            .range(after.saturating_add(1)..)
            .map(|(_, e)| e)
            .filter(|e| task.is_none_or(|t| &e.task == t))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn counts(&self) -> Result<Option<Vec<crate::counts::Count>>> {
        Ok(Some(crate::counts::from_sums(&self.lock()?.counts)))
    }

    async fn oldest_ready(
        &self,
        lane: crate::graph::Lane,
        queue: &crate::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        use std::ops::Bound::Excluded;
        let inner = self.lock()?;
        crate::graph::OldestReady::new(lane, queue, now).read(|index, from, end| {
            let keys = match index {
                crate::graph::IndexName::Ready => &inner.ready,
                crate::graph::IndexName::Held => &inner.held,
            };
            Ok(keys
                .range::<[u8], _>((Excluded(from), Excluded(end)))
                .next()
                .map(|(k, _)| k.clone()))
        })
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let inner = self.lock()?;
        Ok(inner
            .outbox
            .range(after.saturating_add(1)..)
            .take(limit)
            .map(|(_, n)| n.clone())
            .collect())
    }

    async fn ack(&self, intent_ids: &[String], _now: Timestamp) -> Result<u64> {
        let mut inner = self.lock()?;
        let before = inner.outbox.len();
        inner
            .outbox
            .retain(|_, n| !intent_ids.contains(&n.intent_id));
        Ok((before - inner.outbox.len()) as u64)
    }
}
