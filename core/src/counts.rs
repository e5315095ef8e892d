//! How many tasks stand in each state, per queue, without reading them.
//!
//! Every store keeps one count per (queue, stored state) and changes it in
//! the same commit as the record it counts ([`Store::counts`]), so a status
//! read costs the same at ten tasks as at a million. A stored state is not
//! yet the state a task derives to: a lease that ran out or a start
//! deadline that passed since the last write changes it by itself. Those
//! records are exactly the ones the stores' due index finds
//! ([`Clause::due_now`]), so the counts read them alone, derive each, and
//! move it from its stored state to its derived one.
//!
//! What is counted, and under which queue, is the record's own rule
//! ([`TaskRecord::census_queue`]); a store only groups by it.

use crate::authority::Authority;
use crate::decide::derive;
use crate::error::Result;
use crate::model::{State, TaskRecord};
use crate::store::{Clause, ListQuery, Store};
use crate::time::Timestamp;
use std::collections::BTreeMap;

/// The most due records one reading of the counts derives (the sweeper
/// keeps them few; past this the counts say they are `truncated`).
pub const DUE_BOUND: usize = 10_000;

pub use crate::store::Count;

/// Tasks by queue and derived state, at one reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// By queue ("" for tasks outside the work graph), then by derived state.
    pub queues: BTreeMap<String, BTreeMap<State, u64>>,
    /// The due records, as derived now (expired leases not yet swept among them).
    pub due: Vec<TaskRecord>,
    /// More records were due than [`DUE_BOUND`]: some are counted by their stored state.
    pub truncated: bool,
}

impl Counts {
    /// From what a store keeps (zero counts left out).
    pub fn of_stored(stored: impl IntoIterator<Item = Count>) -> Counts {
        let mut counts = Counts::default();
        for c in stored {
            if c.n > 0 {
                *counts
                    .queues
                    .entry(c.queue)
                    .or_default()
                    .entry(c.state)
                    .or_default() += c.n;
            }
        }
        counts
    }

    /// One record of `queue` counted in `from` derives to `to` now.
    fn moved(&mut self, queue: &str, from: State, to: State) {
        let states = self.queues.entry(queue.to_owned()).or_default();
        if let Some(n) = states.get_mut(&from) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                states.remove(&from);
            }
        }
        *states.entry(to).or_default() += 1;
    }

    /// Every queue's counts added up, for each state (0 where none).
    pub fn totals(&self) -> Vec<(State, u64)> {
        State::ALL
            .iter()
            .map(|s| {
                let n = self.queues.values().filter_map(|q| q.get(s)).sum();
                (*s, n)
            })
            .collect()
    }
}

/// The counts a store keeps, computed from its records (what a store
/// without counts of its own answers, and what the tests compare against).
pub fn count_records<'a>(records: impl IntoIterator<Item = &'a TaskRecord>) -> Vec<Count> {
    let mut by: BTreeMap<(String, State), u64> = BTreeMap::new();
    for r in records {
        if let Some(q) = r.census_queue() {
            *by.entry((q.to_owned(), r.state)).or_default() += 1;
        }
    }
    by.into_iter()
        .map(|((queue, state), n)| Count { queue, state, n })
        .collect()
}

/// Counts every record `store` holds by reading them all: what its kept
/// counts must equal (tests compare them after crashes and storms).
pub async fn recount<S: Store + ?Sized>(
    store: &S,
    now: crate::time::Timestamp,
) -> Result<Vec<Count>> {
    let mut records = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(&ListQuery {
                after: after.clone(),
                limit: crate::authority::MAX_PAGE,
                clauses: None,
                now,
            })
            .await?;
        let last = page.len() < crate::authority::MAX_PAGE;
        after = page.last().map(|s| s.record.task.clone());
        records.extend(page.into_iter().map(|s| s.record));
        if last {
            return Ok(count_records(&records));
        }
    }
}

/// Where the counts `store` keeps differ from a count of its records
/// (`None` when they agree): what a test asks after a crash or a storm.
pub async fn drift<S: Store + ?Sized>(
    store: &S,
    now: crate::time::Timestamp,
) -> Result<Option<String>> {
    let Some(kept) = store.counts().await? else {
        return Ok(Some("the store keeps no counts".to_owned()));
    };
    let kept = Counts::of_stored(kept).queues;
    let counted = Counts::of_stored(recount(store, now).await?).queues;
    Ok((kept != counted).then(|| format!("kept {kept:?}, counted {counted:?}")))
}

/// Adds a record's place in the counts to `by` (`sign` +1 for a record
/// written, -1 for the one it replaces): how a store that counts in its
/// own code keeps them.
pub fn tally(by: &mut BTreeMap<(String, State), i64>, record: Option<&TaskRecord>, sign: i64) {
    if let Some(r) = record
        && let Some(q) = r.census_queue()
    {
        *by.entry((q.to_owned(), r.state)).or_default() += sign;
    }
}

/// Counts kept as signed sums by [`tally`], as a store answers them
/// (zeros left out).
pub fn from_sums(sums: &BTreeMap<(String, State), i64>) -> Vec<Count> {
    sums.iter()
        .filter(|(_, n)| **n > 0)
        .map(|((queue, state), n)| Count {
            queue: queue.clone(),
            state: *state,
            n: n.unsigned_abs(),
        })
        .collect()
}

impl<S: Store> Authority<S> {
    /// Since when `queue`'s longest-waiting task has been ready and not
    /// granted (its bare and declared tasks alike), by this authority's
    /// clock; `None` when nothing waits. Through the store's ready index,
    /// one seek a priority in use ([`Store::oldest_ready`]).
    pub async fn oldest_waiting(&self, queue: &crate::Id) -> Result<Option<Timestamp>> {
        let now = self.clock.now();
        let mut oldest: Option<Timestamp> = None;
        for lane in [crate::graph::Lane::Bare, crate::graph::Lane::Declared] {
            if let Some(t) = self.store.oldest_ready(lane, queue, now).await? {
                oldest = Some(oldest.map_or(t, |o| o.min(t)));
            }
        }
        Ok(oldest)
    }

    /// Tasks by queue and derived state: the store's counts, with the due
    /// records (at most [`DUE_BOUND`]) moved to the state they derive to.
    /// A store that keeps no counts is counted by reading its records (at
    /// most [`DUE_BOUND`]; `truncated` past that).
    pub async fn counts(&self) -> Result<Counts> {
        let now = self.clock.now();
        let (mut counts, only) = match self.store.counts().await? {
            Some(stored) => (Counts::of_stored(stored), Some(Clause::due_now())),
            None => (Counts::default(), None),
        };
        let mut after = None;
        let mut read = 0;
        loop {
            let want = (DUE_BOUND - read).min(crate::authority::MAX_PAGE);
            let page = self
                .store
                .list(&ListQuery {
                    after: after.clone(),
                    limit: want,
                    clauses: only.clone(),
                    now,
                })
                .await?;
            read += page.len();
            let last = page.len() < want;
            for snap in page {
                after = Some(snap.record.task.clone());
                let Some(queue) = snap.record.census_queue().map(str::to_owned) else {
                    continue;
                };
                let derived = derive(&snap.record, snap.judged, now);
                if only.is_none() {
                    *counts
                        .queues
                        .entry(queue)
                        .or_default()
                        .entry(derived.state)
                        .or_default() += 1;
                } else if derived.state != snap.record.state {
                    counts.moved(&queue, snap.record.state, derived.state);
                }
                // A store may answer more than the due records (a superset
                // of the clauses): only those that changed by themselves.
                if derived.state != snap.record.state {
                    counts.due.push(derived);
                }
            }
            if last {
                return Ok(counts);
            }
            if read >= DUE_BOUND {
                counts.truncated = true;
                return Ok(counts);
            }
        }
    }
}
