//! The work graph on etcd: decisions that read other tasks (a grant's
//! dependencies) or change them (the link an add writes on each dependency,
//! the wake a success writes on each dependent), as one guarded
//! transaction over every record they read; and `next` over a ready-index
//! prefix.
//!
//! A group is decided by core's commit engine ([`baton_core::engine`]):
//! each record it asks for is read (with its holder and timer keys, at one
//! revision) or served from what the group already read or wrote; each
//! decision it writes is kept for the one transaction. That transaction
//! compares every record and key the decisions read, and writes each
//! task's final record once, with its index keys, lease keys, events and
//! notifications. `next` is the same engine's scan, offered pages of the
//! ready and held indexes; the records a page lists are compared only if
//! a decision reads them.

use super::*;
use baton_core::engine::{Answer, Engine, Job, Need, Supply};
use baton_core::graph::{NextQuery, held_range, ready_range};
use std::collections::BTreeMap;

/// How many races for a grant `next` loses before it answers that it took none.
const NEXT_TRIES: usize = 16;
/// The most decisions of passed-over candidates one `next` transaction
/// writes (about twelve keys each, under [`MAX_TXN_OPS`]); it commits them
/// and goes on.
const NEXT_WRITES: usize = 8;

/// What a commit has read: the records its decisions read (compared when
/// it commits), those the decision under way read, and those an index page
/// listed that no decision read. In a group every read is compared; in a
/// `next` only those of decisions that wrote: one that wrote nothing
/// changed nothing, and its candidates are many.
#[derive(Default)]
struct Reads {
    compared: BTreeMap<TaskId, Found>,
    current: BTreeMap<TaskId, Found>,
    listed: BTreeMap<TaskId, Found>,
    guard_all: bool,
}

impl Reads {
    fn guarding_all(compared: BTreeMap<TaskId, Found>) -> Reads {
        Reads {
            compared,
            guard_all: true,
            ..Reads::default()
        }
    }

    fn get(&self, task: &TaskId) -> Option<&Found> {
        self.compared
            .get(task)
            .or_else(|| self.current.get(task))
            .or_else(|| self.listed.get(task))
    }

    /// A decision begins (it reads its own task): what the one before it
    /// read, if it wrote nothing, is no longer guarded.
    fn begin(&mut self) {
        let done = std::mem::take(&mut self.current);
        self.listed.extend(done);
    }

    /// A decision read `task`: guarded if it writes (or in a group).
    fn read(&mut self, task: &TaskId, found: Found) {
        if self.guard_all {
            self.compared.insert(task.clone(), found);
        } else if !self.compared.contains_key(task) {
            self.current.insert(task.clone(), found);
        }
    }

    /// The decision under way writes: everything it read is guarded.
    fn wrote(&mut self) {
        let read = std::mem::take(&mut self.current);
        self.compared.extend(read);
    }
}

/// What the engine's decisions came to.
struct Decided {
    answers: Vec<Answer>,
    keep: bool,
    capped: bool,
    /// Each task's final record, and every decision that wrote, in order.
    written: BTreeMap<TaskId, TaskRecord>,
    wrote: Vec<(TaskId, Decision)>,
}

/// A record this group wrote, as its later decisions see it: a held record
/// holds the lease it was just given (or kept); no timer it set has run out.
fn as_written(r: &TaskRecord) -> Snapshot {
    Snapshot {
        record: r.clone(),
        judged: Judged {
            lease_holds: r.state.is_held(),
            deadline_passed: false,
            lock_delay_holds: false,
        },
    }
}

pub(super) fn as_found(found: &Found) -> Option<Snapshot> {
    found.record.as_ref().map(|(r, _)| Snapshot {
        record: r.clone(),
        judged: found.judged(),
    })
}

impl FabricStore {
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
            let mut reads = Reads::guarding_all(std::mem::take(&mut seed));
            let engine = if all_or_nothing {
                Engine::new([Job::All(ops.to_vec())], rules)
            } else {
                Engine::new(ops.iter().cloned().map(Job::One), rules)
            };
            let d = self.decide(engine, &mut reads, all_or_nothing).await?;
            let mut top = Vec::with_capacity(ops.len());
            for a in d.answers {
                match a {
                    Answer::All(ds) => top.extend(ds),
                    a => top.push(a.into_one()?),
                }
            }
            if d.written.is_empty() || !d.keep {
                return Ok(top);
            }
            match self
                .commit_group(&reads.compared, &d.written, &d.wrote, start, attempt)
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

    /// Runs `engine` to its end: each record it asks for from what this
    /// commit wrote or read, or read from etcd (those missing together);
    /// each write kept for the transaction; each page from an index.
    async fn decide(
        &self,
        mut engine: Engine,
        reads: &mut Reads,
        all_or_nothing: bool,
    ) -> Result<Decided> {
        let mut written: BTreeMap<TaskId, TaskRecord> = BTreeMap::new();
        let mut wrote: Vec<(TaskId, Decision)> = Vec::new();
        while let Some(need) = engine.step()? {
            // A `next`'s queues' policies are read as a decision's
            // upstream is: a pause committed meanwhile fails the compare.
            let need = match need {
                Need::Policies { tasks, now } => Need::Load {
                    tasks,
                    now,
                    upstream: true,
                },
                need => need,
            };
            let supply = match need {
                Need::Load {
                    tasks, upstream, ..
                } => {
                    if !upstream {
                        reads.begin();
                    }
                    let mut to_read = Vec::new();
                    for t in &tasks {
                        if written.contains_key(t) {
                            continue;
                        }
                        match reads.listed.remove(t) {
                            Some(found) => reads.read(t, found),
                            None if reads.get(t).is_none() => to_read.push(t.clone()),
                            None => {}
                        }
                    }
                    let found = futures_util::future::join_all(
                        to_read.iter().map(|t| self.find(t.as_str())),
                    )
                    .await;
                    for (t, f) in to_read.iter().zip(found) {
                        reads.read(t, f?);
                    }
                    Supply::Loaded(
                        tasks
                            .iter()
                            .map(|t| match written.get(t) {
                                Some(r) => Some(as_written(r)),
                                None => reads.get(t).and_then(as_found),
                            })
                            .collect(),
                    )
                }
                // Read as a decision's upstream, above.
                Need::Policies { .. } => {
                    return Err(Error::unavailable("etcd: a policy read was not performed"));
                }
                Need::Write(d) => {
                    let Some(r) = d.record_to_write() else {
                        // A refusal that would leave an audit event (a
                        // stale fence's CONFLICT_REFUSED) refuses its whole
                        // group, so nothing of the group is kept, as on
                        // every store; the answer carries the refusal.
                        if all_or_nothing && matches!(d.verdict, baton_core::Verdict::Refuse { .. })
                        {
                            engine.supply(Supply::Written(d))?;
                            continue;
                        }
                        return Err(Error::unsupported(
                            "etcd: a refusal recorded as an event inside a work-graph transaction",
                        ));
                    };
                    let task = r.task.clone();
                    reads.wrote();
                    written.insert(task.clone(), r.clone());
                    wrote.push((task, (*d).clone()));
                    Supply::Written(d)
                }
                Need::Ready {
                    lane,
                    queue,
                    after,
                    limit,
                    ..
                } => {
                    let (from, end) = ready_range(lane, &queue, after.as_ref());
                    // The range's start is exclusive: the first key after it.
                    let from = format!("{}\0", self.keys.ready(&from));
                    let page = self.page(from, self.keys.ready(&end), limit, reads).await?;
                    Supply::Page(overlaid(page, &written))
                }
                Need::Expired {
                    lane,
                    queue,
                    limit,
                    now,
                } => {
                    let (hs, he) = held_range(lane, &queue, now);
                    let page = self
                        .page(self.keys.held(&hs), self.keys.held(&he), limit, reads)
                        .await?;
                    Supply::Page(overlaid(page, &written))
                }
            };
            engine.supply(supply)?;
        }
        let capped = engine.capped();
        let (answers, keep) = engine.finish();
        Ok(Decided {
            answers,
            keep,
            capped,
            written,
            wrote,
        })
    }

    /// The records an index range lists (at most `limit`), each read with
    /// its keys; a record a decision of this commit read is given as read.
    async fn page(
        &self,
        start: String,
        end: String,
        limit: usize,
        reads: &mut Reads,
    ) -> Result<Vec<Snapshot>> {
        let ids = self.index_range(start, end, limit).await?;
        let fresh: Vec<&TaskId> = ids.iter().filter(|t| reads.get(t).is_none()).collect();
        let found =
            futures_util::future::join_all(fresh.iter().map(|t| self.find(t.as_str()))).await;
        for (t, f) in fresh.into_iter().zip(found) {
            reads.listed.insert(t.clone(), f?);
        }
        Ok(ids
            .iter()
            .filter_map(|t| reads.get(t).and_then(as_found))
            .collect())
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
        let request_id = uuid::Uuid::new_v4().to_string();
        let no_counts = BTreeMap::new();
        let plan = plan::plan(
            &self.keys,
            &plan::Decided {
                read: cache,
                wrote,
                counted: &no_counts,
                request_id: &request_id,
            },
        )?;
        let granted = self.grant_leases(&plan.wanted()).await?;
        let made: Vec<i64> = granted.iter().copied().flatten().collect();
        let txn = plan.txn(&granted);
        // What the store remembers of these tasks' last writes goes stale
        // whether or not this lands.
        for (task, _) in wrote {
            self.forget(task.as_str());
        }
        let (mut client, member) = self.client_for(start, attempt);
        let sent = tokio::time::timeout(self.attempt_timeout(), client.txn(txn)).await;
        if sent.is_err() {
            self.suspect(member);
        }
        // The leases the replaced holder and timer keys were on.
        let replaced = plan.left_over(&made);
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

    /// `next`: core's scan ([`Job::Next`]) over each queue's ready and
    /// held prefixes, its decisions in one guarded transaction. After a
    /// race lost to another commit the scan runs again on fresh reads,
    /// trying one of the first few candidates first, so contenders do not
    /// all chase the head; after [`NEXT_TRIES`] lost races `next` answers
    /// that it took none. A scan that passed over [`NEXT_WRITES`]
    /// candidates whose decisions wrote commits them and goes on.
    pub(super) async fn next_on_etcd(&self, q: &NextQuery) -> Result<Option<Decision>> {
        let rules = self.capabilities().lease_rules();
        let start = self.next_turn();
        let (mut lost, mut rounds) = (0usize, 0usize);
        loop {
            let spread = if lost == 0 {
                0
            } else {
                std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    lost,
                ) as usize
            };
            let engine = Engine::new([Job::Next(q.clone())], rules)
                .spread(spread)
                .max_writes(NEXT_WRITES);
            let mut reads = Reads::default();
            let mut d = self.decide(engine, &mut reads, false).await?;
            let answer = match d.answers.pop() {
                Some(a) => a.into_next()?,
                None => return Err(Error::unavailable("etcd: a `next` decided nothing")),
            };
            if d.written.is_empty() {
                return Ok(answer);
            }
            let attempt = (lost + rounds) as u64;
            match self
                .commit_group(&reads.compared, &d.written, &d.wrote, start, attempt)
                .await?
            {
                Some(revision) => {
                    if let Some(mut grant) = answer {
                        grant.assign_fence(revision);
                        return Ok(Some(grant));
                    }
                    rounds += 1;
                    if !d.capped || rounds * NEXT_WRITES >= baton_core::next::NEXT_SCAN {
                        return Ok(None);
                    }
                }
                None => {
                    lost += 1;
                    if lost >= NEXT_TRIES {
                        return Ok(None);
                    }
                }
            }
        }
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

    /// `apply_all` on etcd: in transactions of at most [`MAX_TXN_OPS`]
    /// keys (etcd's limit), each whole; a refusal stops at the chunk it is
    /// in, leaving the chunks before it committed.
    pub(super) async fn apply_all_on_etcd(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        // About eight keys a node (record, event, indexes, count, a link
        // per dependency).
        let per_chunk = (MAX_TXN_OPS / 12).max(1);
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

/// A page as this commit sees it: a task it wrote, as written.
fn overlaid(page: Vec<Snapshot>, written: &BTreeMap<TaskId, TaskRecord>) -> Vec<Snapshot> {
    page.into_iter()
        .map(|s| match written.get(&s.record.task) {
            Some(r) => as_written(r),
            None => s,
        })
        .collect()
}
