//! The work graph on etcd: decisions that read other tasks (a grant's
//! dependencies) or change them (the link an add writes on each dependency,
//! the wake a success writes on each dependent), as one guarded
//! transaction over every record they read; and `next` over a ready-index
//! prefix.
//!
//! A group is decided on an overlay: core's `apply_in` runs against the
//! records read so far; when it asks for one not read yet, the record is
//! read (with its holder and timer keys, at one revision) and the group is
//! decided again from the start. The transaction then compares every
//! record and key it read, and writes each task's final record once, with
//! its index keys, lease keys, events and notifications.

use super::*;
use baton_core::graph::{NextQuery, ReadyEntry, held_range};
use baton_core::store::{Txn as Commit, apply_in};
use std::collections::BTreeMap;

/// The most operations one transaction may carry (etcd's default
/// `--max-txn-ops` is 128); a group of adds is cut into chunks below it.
const MAX_TXN_OPS: usize = 120;
/// Candidates read from each queue's index per `next` try.
const NEXT_CANDIDATES: usize = 8;
/// How many grants `next` tries before it answers that it took none.
const NEXT_TRIES: usize = 16;

/// The group's view: records read from etcd, records it wrote.
struct Overlay<'a> {
    cache: &'a BTreeMap<TaskId, Found>,
    rules: baton_core::LeaseRules,
    written: BTreeMap<TaskId, TaskRecord>,
    /// Every decision that wrote, in order, with its task.
    wrote: Vec<(TaskId, Decision)>,
    missing: Option<TaskId>,
}

impl Commit for Overlay<'_> {
    fn load(&mut self, task: &TaskId, _now: Timestamp) -> Result<Option<Snapshot>> {
        if let Some(r) = self.written.get(task) {
            // Written by this group: a held record holds the lease it was
            // just given (or kept); no timer it set has run out.
            let judged = Judged {
                lease_holds: r.state.is_held(),
                deadline_passed: false,
                lock_delay_holds: false,
            };
            return Ok(Some(Snapshot {
                record: r.clone(),
                judged,
            }));
        }
        match self.cache.get(task) {
            Some(found) => Ok(found.record.as_ref().map(|(r, _)| Snapshot {
                record: r.clone(),
                judged: found.judged(),
            })),
            None => {
                self.missing = Some(task.clone());
                Err(Error::unavailable("etcd: a record is still to be read"))
            }
        }
    }

    fn write(&mut self, d: &mut Decision) -> Result<()> {
        let Some(r) = d.record_to_write() else {
            return Err(Error::unsupported(
                "etcd: a refusal recorded as an event inside a work-graph transaction",
            ));
        };
        let task = r.task.clone();
        self.written.insert(task.clone(), r.clone());
        self.wrote.push((task, d.clone()));
        Ok(())
    }

    fn rules(&self) -> baton_core::LeaseRules {
        self.rules
    }
}

/// What a group comes to once every record it needs is read.
enum Dry {
    /// Decided: the top-level decisions, and whether to write them.
    Decided {
        top: Vec<Decision>,
        written: BTreeMap<TaskId, TaskRecord>,
        wrote: Vec<(TaskId, Decision)>,
        keep: bool,
    },
    /// This record must be read first.
    Needs(TaskId),
}

fn dry(
    ops: &[Operation],
    cache: &BTreeMap<TaskId, Found>,
    rules: baton_core::LeaseRules,
    all_or_nothing: bool,
) -> Result<Dry> {
    let mut ov = Overlay {
        cache,
        rules,
        written: BTreeMap::new(),
        wrote: Vec::new(),
        missing: None,
    };
    let mut top = Vec::with_capacity(ops.len());
    let mut keep = true;
    for op in ops {
        match apply_in(&mut ov, op) {
            Ok((d, _)) => {
                let fine = matches!(
                    d.verdict,
                    baton_core::Verdict::Commit(_) | baton_core::Verdict::Ack
                );
                top.push(d);
                if all_or_nothing && !fine {
                    keep = false;
                    break;
                }
            }
            Err(e) => {
                return match ov.missing.take() {
                    Some(task) => Ok(Dry::Needs(task)),
                    None => Err(e),
                };
            }
        }
    }
    Ok(Dry::Decided {
        top,
        written: ov.written,
        wrote: ov.wrote,
        keep,
    })
}

/// What the group does to one key on an etcd lease (a holder or a timer).
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyAct {
    Put { secs: u64 },
    Delete,
    Keep,
}

fn holder_act(e: LeaseEffect, was: KeyAct) -> KeyAct {
    match e {
        LeaseEffect::Granted { ttl_ms } | LeaseEffect::Extended { ttl_ms } => KeyAct::Put {
            secs: lease_secs(ttl_ms),
        },
        LeaseEffect::Ended => KeyAct::Delete,
        LeaseEffect::Unchanged => was,
    }
}

fn timer_act(e: TimerEffect, was: KeyAct) -> KeyAct {
    match e {
        TimerEffect::Set { in_ms } => KeyAct::Put {
            secs: lease_secs(in_ms),
        },
        TimerEffect::Cleared => KeyAct::Delete,
        TimerEffect::Unchanged => was,
    }
}

impl FabricStore {
    /// Whether `op`'s decision must go through [`FabricStore::apply_group`]:
    /// it reads other tasks or changes them.
    pub(super) fn is_graph(op: &Operation, record: Option<&TaskRecord>, d: &Decision) -> bool {
        !d.follow_ups.is_empty()
            || !baton_core::decide::upstream_ids(&op.request, record).is_empty()
            || matches!(
                op.request,
                baton_core::Request::Link { .. } | baton_core::Request::Wake
            )
    }

    /// Applies `ops` (each with its follow-ups) as one guarded transaction,
    /// decided again on the new records whenever a compare fails. With
    /// `all_or_nothing`, nothing is written unless every top-level decision
    /// commits or acknowledges.
    pub(super) async fn apply_group(
        &self,
        ops: &[Operation],
        all_or_nothing: bool,
    ) -> Result<Vec<Decision>> {
        self.apply_group_from(ops, all_or_nothing, BTreeMap::new())
            .await
    }

    /// [`FabricStore::apply_group`] starting from records already read
    /// (`seed`, read at one revision each: they are compared like the
    /// rest), so a caller that has read its task does not read it again.
    pub(super) async fn apply_group_from(
        &self,
        ops: &[Operation],
        all_or_nothing: bool,
        mut seed: BTreeMap<TaskId, Found>,
    ) -> Result<Vec<Decision>> {
        let rules = self.capabilities().lease_rules();
        let start = self.next_turn();
        for attempt in 0..self.opts.max_attempts as u64 {
            // The seed serves the first attempt; a lost compare reads anew.
            let mut cache: BTreeMap<TaskId, Found> = std::mem::take(&mut seed);
            let (mut top, written, wrote, keep) = loop {
                match dry(ops, &cache, rules, all_or_nothing)? {
                    Dry::Needs(task) => {
                        let found = self.find(task.as_str()).await?;
                        cache.insert(task, found);
                    }
                    Dry::Decided {
                        top,
                        written,
                        wrote,
                        keep,
                    } => break (top, written, wrote, keep),
                }
            };
            if written.is_empty() || !keep {
                return Ok(top);
            }
            match self
                .commit_group(&cache, &written, &wrote, start, attempt)
                .await?
            {
                Some(revision) => {
                    for d in &mut top {
                        d.assign_fence(revision);
                    }
                    return Ok(top);
                }
                // Someone changed what was read: decide again.
                None => continue,
            }
        }
        Err(Error::unavailable(format!(
            "etcd prefix {:?}: a work-graph transaction lost {} times running to concurrent changes",
            self.opts.prefix, self.opts.max_attempts
        )))
    }

    /// Sends one group's transaction. `Some(revision)` once committed,
    /// `None` when a compare failed (nothing was written).
    async fn commit_group(
        &self,
        cache: &BTreeMap<TaskId, Found>,
        written: &BTreeMap<TaskId, TaskRecord>,
        wrote: &[(TaskId, Decision)],
        start: u64,
        attempt: u64,
    ) -> Result<Option<u64>> {
        let mut compares = Vec::new();
        for (task, found) in cache {
            let t = task.as_str();
            compares.push(match &found.record {
                Some((_, rev)) => Compare::mod_revision(self.keys.task(t), CompareOp::Equal, *rev),
                None => Compare::create_revision(self.keys.task(t), CompareOp::Equal, 0),
            });
            compares.push(unchanged(&self.keys.holder(t), found.holder.as_ref()));
            compares.push(unchanged(&self.keys.deadline(t), found.deadline.as_ref()));
            compares.push(unchanged(
                &self.keys.lock_delay(t),
                found.lock_delay.as_ref(),
            ));
        }
        let request_id = uuid::Uuid::new_v4().to_string();
        let mut ops = Vec::new();
        // Per task: what happens to its holder, deadline and lock-delay keys.
        let mut acts: BTreeMap<&TaskId, [KeyAct; 3]> = BTreeMap::new();
        for (task, d) in wrote {
            let a = acts.entry(task).or_insert([KeyAct::Keep; 3]);
            a[0] = holder_act(d.lease, a[0]);
            a[1] = timer_act(d.deadline, a[1]);
            a[2] = timer_act(d.lock_delay, a[2]);
        }
        let mut wanted: Vec<Option<u64>> = Vec::new();
        let mut slots: Vec<(String, String)> = Vec::new();
        for (task, a) in &acts {
            let t = task.as_str();
            let owner = written
                .get(*task)
                .and_then(|r| r.lease.as_ref())
                .map_or(String::new(), |l| l.owner.to_string());
            let keys = [
                self.keys.holder(t),
                self.keys.deadline(t),
                self.keys.lock_delay(t),
            ];
            let found = cache.get(*task);
            let read = [
                found.and_then(|f| f.holder.as_ref()),
                found.and_then(|f| f.deadline.as_ref()),
                found.and_then(|f| f.lock_delay.as_ref()),
            ];
            for (i, act) in a.iter().enumerate() {
                match act {
                    KeyAct::Put { secs } => {
                        wanted.push(Some(*secs));
                        let value = if i == 0 { owner.clone() } else { String::new() };
                        slots.push((keys[i].clone(), value));
                    }
                    KeyAct::Delete if read[i].is_some() => {
                        ops.push(TxnOp::delete(keys[i].clone(), None));
                    }
                    KeyAct::Delete | KeyAct::Keep => {}
                }
            }
        }
        let granted = self.grant_leases(&wanted).await?;
        let made: Vec<i64> = granted.iter().copied().flatten().collect();
        for ((key, value), lease) in slots.into_iter().zip(&granted) {
            if let Some(id) = lease {
                ops.push(TxnOp::put(
                    key,
                    value,
                    Some(PutOptions::new().with_lease(*id)),
                ));
            }
        }
        for (task, r) in written {
            let t = task.as_str();
            let env = Envelope {
                record: r.clone(),
                request: request_id.clone(),
            };
            ops.push(TxnOp::put(self.keys.task(t), encode(&env)?, None));
            let old = cache
                .get(task)
                .and_then(|f| f.record.as_ref())
                .map(|(r, _)| r);
            self.index_ops(old, Some(r), &mut ops);
        }
        let (mut ev_idx, mut note_idx) = (0u64, 0u64);
        if wrote
            .iter()
            .any(|(_, d)| d.events().any(|e| e.conflict_key.is_some()))
        {
            self.revoke_all(&made).await;
            return Err(Error::unsupported(
                "etcd: a counted refusal inside a work-graph transaction",
            ));
        }
        for (task, d) in wrote {
            let revision = written.get(task).map_or(0, |r| r.revision);
            for e in d.events() {
                let stored = Stored {
                    item: Event::from_draft(0, e.clone()),
                    idx: ev_idx,
                };
                ops.push(TxnOp::put(
                    self.keys.event(task.as_str(), revision, ev_idx as usize),
                    encode(&stored)?,
                    None,
                ));
                ev_idx += 1;
            }
            for n in d.notifications() {
                let stored = Stored {
                    item: n.clone(),
                    idx: note_idx,
                };
                ops.push(TxnOp::put(
                    self.keys.outbox(&n.intent_id),
                    encode(&stored)?,
                    None,
                ));
                note_idx += 1;
            }
        }
        if ev_idx >= PER_TXN || note_idx >= PER_TXN || ops.len() > MAX_TXN_OPS {
            self.revoke_all(&made).await;
            return Err(Error::unsupported(format!(
                "etcd: one work-graph transaction would write {} keys ({ev_idx} events); add fewer nodes at once",
                ops.len()
            )));
        }
        let txn = Txn::new().when(compares).and_then(ops);
        // What the store remembers of these tasks' last writes goes stale
        // whether or not this lands.
        for task in acts.keys() {
            self.forget(task.as_str());
        }
        let (mut client, member) = self.client_for(start, attempt);
        let sent = tokio::time::timeout(self.attempt_timeout(), client.txn(txn)).await;
        if sent.is_err() {
            self.suspect(member);
        }
        // The leases the replaced holder and timer keys were on.
        let replaced: Vec<i64> = acts
            .iter()
            .flat_map(|(task, a)| {
                let f = cache.get(*task);
                let read = [
                    f.and_then(|f| f.holder.as_ref()),
                    f.and_then(|f| f.deadline.as_ref()),
                    f.and_then(|f| f.lock_delay.as_ref()),
                ];
                a.iter()
                    .zip(read)
                    .filter(|(act, _)| **act != KeyAct::Keep)
                    .filter_map(|(_, kv)| kv.map(|k| k.lease))
                    .collect::<Vec<_>>()
            })
            .filter(|l| *l != 0 && !made.contains(l))
            .collect();
        match sent {
            Ok(Ok(resp)) if resp.succeeded() => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.revoke_later(replaced);
                match resp.header() {
                    Some(h) => self
                        .revision("a transaction's revision", h.revision())
                        .map(Some),
                    None => self.group_landed(written, &request_id).await.map(Some),
                }
            }
            Ok(Ok(_)) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
                self.revoke_all(&made).await;
                Ok(None)
            }
            Ok(Err(e)) if cause_of(&e) == Cause::NeverSent => {
                self.revoke_all(&made).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(None)
            }
            // No reply: the first record it wrote says whether it landed.
            Ok(Err(_)) | Err(_) => self.group_landed(written, &request_id).await.map(Some),
        }
    }

    /// After a reply that was lost or said too little: the revision at which
    /// the group's transaction landed, read from a record it wrote, or
    /// `Indeterminate` when it has not (it may still).
    async fn group_landed(
        &self,
        written: &BTreeMap<TaskId, TaskRecord>,
        request_id: &str,
    ) -> Result<u64> {
        let Some(task) = written.keys().next() else {
            return Err(Error::indeterminate(
                "etcd: a transaction without writes went unanswered",
            ));
        };
        let found = self.find(task.as_str()).await.map_err(|e| {
            Error::indeterminate(format!(
                "etcd: {task}: a work-graph write went unanswered and the cluster cannot be read ({}); read before retrying",
                e.message
            ))
        })?;
        match (&found.written_by, &found.record) {
            (Some(by), Some((_, rev))) if by == request_id => {
                self.revision("a transaction's revision", *rev)
            }
            _ => Err(Error::indeterminate(format!(
                "etcd: {task}: a work-graph write went unanswered and has not landed yet; it may still: read before retrying"
            ))
            .with_context(self.context())),
        }
    }

    /// The ready- and held-index keys a record write moves: what `old` had
    /// and `new` has not is deleted, what `new` has and `old` had not is put.
    pub(super) fn index_ops(
        &self,
        old: Option<&TaskRecord>,
        new: Option<&TaskRecord>,
        ops: &mut Vec<TxnOp>,
    ) {
        let ready = |r: Option<&TaskRecord>| r.and_then(TaskRecord::ready_entry).map(|e| e.key());
        let held = |r: Option<&TaskRecord>| r.and_then(TaskRecord::held_key);
        let task = new.or(old).map_or(String::new(), |r| r.task.to_string());
        for (before, after, key) in [
            (
                ready(old),
                ready(new),
                Keys::ready as fn(&Keys, &[u8]) -> String,
            ),
            (held(old), held(new), Keys::held),
        ] {
            if before == after {
                continue;
            }
            if let Some(b) = before {
                ops.push(TxnOp::delete(key(&self.keys, &b), None));
            }
            if let Some(a) = after {
                ops.push(TxnOp::put(key(&self.keys, &a), task.clone(), None));
            }
        }
    }

    /// Task ids under an index range `[start, end)` of one of the indexes.
    async fn index_range(&self, start: String, end: String, limit: usize) -> Result<Vec<TaskId>> {
        let resp = self
            .call_retrying("read", |mut c| {
                let (start, end) = (start.clone(), end.clone());
                async move {
                    let o = GetOptions::new()
                        .with_range(end)
                        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
                    c.get(start, Some(o)).await
                }
            })
            .await?;
        resp.kvs()
            .iter()
            .map(|kv| {
                let s = std::str::from_utf8(kv.value()).map_err(|_| {
                    Error::corrupt(format!(
                        "etcd prefix {:?}: an index entry names no task",
                        self.opts.prefix
                    ))
                })?;
                TaskId::parse("task", s)
            })
            .collect()
    }

    /// `next`: candidates from each queue's ready prefix and held prefix,
    /// ordered by core and tried in that order, each in its own guarded
    /// transaction. One refused whoever asks (its lock delay holds, it is
    /// not ready) is passed over, as core's `take_next` does, up to
    /// [`baton_core::next::NEXT_SCAN`] of them. After a race lost to another
    /// grant the index is read again and one of the first few is tried at
    /// random, so contenders do not all chase the head; after
    /// [`NEXT_TRIES`] lost races `next` answers that it took none.
    pub(super) async fn next_on_etcd(&self, q: &NextQuery) -> Result<Option<Decision>> {
        let mut tried: BTreeSet<TaskId> = BTreeSet::new();
        let mut lost = 0;
        while lost < NEXT_TRIES && tried.len() < baton_core::next::NEXT_SCAN {
            let mut ids = BTreeSet::new();
            for queue in &q.queues {
                let prefix = ReadyEntry::prefix(q.lane(), queue);
                let end = baton_core::graph::prefix_end(&prefix);
                let want = NEXT_CANDIDATES + tried.len();
                ids.extend(
                    self.index_range(self.keys.ready(&prefix), self.keys.ready(&end), want)
                        .await?,
                );
                let (hs, he) = held_range(q.lane(), queue, q.now);
                ids.extend(
                    self.index_range(self.keys.held(&hs), self.keys.held(&he), want)
                        .await?,
                );
            }
            let fresh: Vec<TaskId> = ids.into_iter().filter(|t| !tried.contains(t)).collect();
            if fresh.is_empty() {
                return Ok(None);
            }
            let found =
                futures_util::future::join_all(fresh.iter().map(|t| self.read_snapshot(t))).await;
            let mut candidates: Vec<Snapshot> = Vec::new();
            for f in found {
                if let Some(s) = f? {
                    candidates.push(s);
                }
            }
            q.order(&mut candidates);
            candidates.retain(|c| q.takeable(c));
            if candidates.is_empty() {
                return Ok(None);
            }
            // The head first; after a lost race, any of the first few.
            if lost > 0 {
                let few = candidates.len().min(3) as u64;
                let pick = (std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    lost,
                ) % few) as usize;
                candidates[..=pick].rotate_right(1);
            }
            for c in candidates {
                tried.insert(c.record.task.clone());
                let Some(op) = q.claim_for(&c.record) else {
                    continue;
                };
                let mut ds = self.apply_group(std::slice::from_ref(&op), false).await?;
                let Some(d) = ds.pop() else { continue };
                if d.mints_fence() {
                    return Ok(Some(d));
                }
                let lost_race = matches!(
                    &d.verdict,
                    baton_core::Verdict::Refuse { refusal, .. } if refusal.held_by_another()
                );
                if lost_race {
                    lost += 1;
                    break;
                }
            }
        }
        Ok(None)
    }

    /// Waits (at most `max_ms`) for a put under the ready prefix: a task
    /// that became ready. The first message of a watch only says it was
    /// created; deletes (grants taking entries) are filtered out.
    pub(super) async fn watch_ready_on_etcd(&self, max_ms: u64) -> Result<bool> {
        use etcd_client::{WatchFilterType, WatchOptions};
        let key = self.keys.readies();
        let mut client = self.client.clone();
        let wait = async move {
            let opts = WatchOptions::new()
                .with_prefix()
                .with_filters([WatchFilterType::NoDelete]);
            let mut stream = client.watch(key, Some(opts)).await?;
            while let Some(resp) = stream.message().await? {
                if !resp.events().is_empty() {
                    break;
                }
            }
            Ok::<(), etcd_client::Error>(())
        };
        match tokio::time::timeout(Duration::from_millis(max_ms), wait).await {
            Err(_) | Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => Err(self.map_err("watch", e)),
        }
    }

    async fn read_snapshot(&self, task: &TaskId) -> Result<Option<Snapshot>> {
        let found = self.find(task.as_str()).await?;
        let judged = found.judged();
        Ok(found.record.map(|(record, _)| Snapshot { record, judged }))
    }

    /// `apply_all` on etcd: in transactions of at most [`MAX_TXN_OPS`]
    /// keys (etcd's limit), each whole; a refusal stops at the chunk it is
    /// in, leaving the chunks before it committed.
    pub(super) async fn apply_all_on_etcd(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        // About six keys a node (record, event, index, a link per dependency).
        let per_chunk = (MAX_TXN_OPS / 8).max(1);
        let mut out = Vec::with_capacity(ops.len());
        for chunk in ops.chunks(per_chunk) {
            let ds = self.apply_group(chunk, true).await?;
            let refused = ds.iter().any(|d| {
                !matches!(
                    d.verdict,
                    baton_core::Verdict::Commit(_) | baton_core::Verdict::Ack
                )
            });
            out.extend(ds);
            if refused {
                break;
            }
        }
        Ok(out)
    }
}
