//! One sled transaction as core's engine sees it (`Txn` and `NextSource`):
//! the index entries read before it, and what it writes.

use super::*;

/// Index entries (key, task id), in key order.
pub(super) type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Index entries read before a transaction, by lane and queue, each with
/// whether it was cut at its window (the index may go on past the last
/// entry read).
#[derive(Default)]
pub(super) struct Prefetched {
    pub(super) ready: std::collections::HashMap<(Lane, Id), (Entries, bool)>,
    pub(super) held: std::collections::HashMap<(Lane, Id), (Entries, bool)>,
    /// For each task a prune of the batch names: the keys of its events
    /// (in `events_by_task`) and conflict counters, read before the
    /// transaction (a transaction cannot scan).
    pub(super) history: std::collections::HashMap<String, History>,
}

/// A task's keys in `events_by_task` and in `conflicts`.
pub(super) type History = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// One sled transaction, as core's commit helpers see it.
pub(super) struct SledTx<'a> {
    pub(super) inner: &'a Inner,
    pub(super) tasks: &'a TransactionalTree,
    pub(super) by_state: &'a TransactionalTree,
    pub(super) by_due: &'a TransactionalTree,
    pub(super) events: &'a TransactionalTree,
    pub(super) events_by_task: &'a TransactionalTree,
    pub(super) conflicts: &'a TransactionalTree,
    pub(super) outbox: &'a TransactionalTree,
    pub(super) intents: &'a TransactionalTree,
    pub(super) meta: &'a TransactionalTree,
    pub(super) ready: &'a TransactionalTree,
    pub(super) held: &'a TransactionalTree,
    pub(super) index: &'a Prefetched,
    /// This transaction's changes to the two indexes (`None`: removed).
    pub(super) ready_delta: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub(super) held_delta: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The sled error that stopped the transaction, returned from the
    /// closure as is (so a conflict runs it again).
    pub(super) failed: Option<ConflictableTransactionError<Abort>>,
    pub(super) wrote: bool,
}

impl SledTx<'_> {
    fn sled<T>(&mut self, r: TxResult<T>) -> Result<T> {
        r.map_err(|e| {
            let shown = match &e {
                ConflictableTransactionError::Abort(Abort::Corrupt(m)) => {
                    Error::corrupt(format!("{}: {m}", self.inner.path.display()))
                }
                _ => Error::unavailable(format!(
                    "{}: the transaction did not complete",
                    self.inner.path.display()
                )),
            };
            self.failed = Some(e);
            shown
        })
    }

    fn record(&mut self, task: &[u8]) -> Result<Option<TaskRecord>> {
        let got = self
            .tasks
            .get(task)
            .map_err(ConflictableTransactionError::from);
        match self.sled(got)? {
            Some(b) => {
                let decoded = baton_core::json::decode_stored(&b)
                    .map_err(|e| abort(format!("a record does not decode: {e}")));
                self.sled(decoded).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The records of the index entries in `[from, end)`: those read before
    /// the transaction with this transaction's own changes to the index
    /// applied (`delta`), each record read inside the transaction.
    fn indexed(
        &mut self,
        index: Option<&(Entries, bool)>,
        held: bool,
        from: std::ops::Bound<Vec<u8>>,
        end: &[u8],
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        let delta = if held {
            &self.held_delta
        } else {
            &self.ready_delta
        };
        let (read, cut) = index.map_or((&[][..], false), |(e, cut)| (e.as_slice(), *cut));
        let Some(ids) = merged_ids(read, delta, cut, from, end, limit) else {
            self.failed = Some(ConflictableTransactionError::Abort(Abort::Narrow));
            return Err(Error::unavailable(
                "a `next` read past its prefetched index entries",
            ));
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = self.record(&id)? {
                out.push(Snapshot::at(r, now));
            }
        }
        Ok(out)
    }

    fn put(&mut self, d: &mut Decision) -> TxResult<()> {
        let meta = self.meta;
        if d.mints_fence() {
            let fence =
                read_u64(meta.get("fence")?).map_err(ConflictableTransactionError::Abort)? + 1;
            meta.insert("fence", &be(fence))?;
            d.assign_fence(fence);
        }
        if let Some(r) = d.record_to_write() {
            let key = r.task.as_str().as_bytes();
            let current: Option<TaskRecord> = match self.tasks.get(key)? {
                Some(b) => Some(
                    baton_core::json::decode_stored(&b)
                        .map_err(|e| abort(format!("a record does not decode: {e}")))?,
                ),
                None => None,
            };
            let mut moved = BTreeMap::new();
            baton_core::counts::tally(&mut moved, current.as_ref(), -1);
            // A tombstone forgotten leaves nothing behind to count.
            let forgets = d.forgets();
            if !forgets {
                baton_core::counts::tally(&mut moved, Some(r), 1);
            }
            for ((queue, state), by) in moved {
                if by != 0 {
                    let k = count_key(&queue, state);
                    let n = match meta.get(&k)? {
                        Some(v) => read_i64(&v)
                            .ok_or_else(|| abort("a count does not decode".to_owned()))?,
                        None => 0,
                    };
                    meta.insert(k, &(n + by).to_be_bytes())?;
                }
            }
            if let Some(old) = &current {
                self.by_state.remove(prefixed_key(
                    old.state.as_str(),
                    old.task.as_str().as_bytes(),
                ))?;
                if let Some(due) = old.due_at() {
                    self.by_due
                        .remove(due_key(old.state.as_str(), due, old.task.as_str()))?;
                }
                if let Some(e) = old.ready_entry() {
                    self.ready.remove(e.key())?;
                    self.ready_delta.insert(e.key(), None);
                }
                if let Some(k) = old.held_key() {
                    self.held.remove(k.clone())?;
                    self.held_delta.insert(k, None);
                }
            }
            if forgets {
                // Its entries went with the old record's above; its
                // history went at its prune.
                self.tasks.remove(key)?;
            } else {
                if let Some(due) = r.due_at() {
                    self.by_due
                        .insert(due_key(r.state.as_str(), due, r.task.as_str()), &[])?;
                }
                if let Some(e) = r.ready_entry() {
                    self.ready.insert(e.key(), key)?;
                    self.ready_delta.insert(e.key(), Some(key.to_vec()));
                }
                if let Some(k) = r.held_key() {
                    self.held.insert(k.clone(), key)?;
                    self.held_delta.insert(k, Some(key.to_vec()));
                }
                let due = r
                    .due_at()
                    .map(|t| t.as_millis().to_be_bytes().to_vec())
                    .unwrap_or_default();
                self.by_state
                    .insert(prefixed_key(r.state.as_str(), key), due)?;
                let stored = r
                    .to_stored_json()
                    .map_err(|e| abort(format!("cannot encode a value: {e}")))?;
                self.tasks.insert(key, stored.into_bytes())?;
            }
        }
        if d.drops_history()
            && let Some(r) = d.record_to_write()
        {
            self.drop_history(r.task.as_str())?;
        }
        for e in d.events() {
            append_event(e, self.events, self.events_by_task, self.conflicts, meta)?;
        }
        for n in d.notifications() {
            let seq =
                read_u64(meta.get("outbox_seq")?).map_err(ConflictableTransactionError::Abort)? + 1;
            meta.insert("outbox_seq", &be(seq))?;
            self.outbox.insert(&be(seq), encode(n)?)?;
            self.intents.insert(n.intent_id.as_bytes(), &be(seq))?;
        }
        Ok(())
    }
}

impl SledTx<'_> {
    /// A prune: the task's events (found through its index before the
    /// transaction;
    /// an ended task's events no longer change but for a refusal counted
    /// meanwhile, which would merely stay) and its conflict counters. The
    /// event sequence lives in `meta` and never goes back; acknowledged
    /// notifications are removed when acknowledged.
    fn drop_history(&mut self, task: &str) -> TxResult<()> {
        let prefix = prefixed_key(task, &[]);
        let Some((events, conflicts)) = self.index.history.get(task) else {
            return Ok(());
        };
        for k in events {
            self.events.remove(&k[prefix.len()..])?;
            self.events_by_task.remove(k.as_slice())?;
        }
        for k in conflicts {
            self.conflicts.remove(k.as_slice())?;
        }
        Ok(())
    }
}

impl Txn for SledTx<'_> {
    fn load(&mut self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        Ok(self
            .record(task.as_str().as_bytes())?
            .map(|r| Snapshot::at(r, now)))
    }

    fn write(&mut self, d: &mut Decision) -> Result<()> {
        self.wrote = true;
        let done = self.put(d);
        self.sled(done)
    }
}

impl NextSource for SledTx<'_> {
    fn ready(&mut self, page: IndexPage<'_>) -> Result<Vec<Snapshot>> {
        let Some((from, end)) = page.ready_keys() else {
            return Ok(Vec::new());
        };
        let index = self.index.ready.get(&(page.lane, page.queue.clone()));
        let from = std::ops::Bound::Excluded(from);
        self.indexed(index, false, from, &end, page.limit, page.now)
    }

    fn expired(&mut self, page: IndexPage<'_>) -> Result<Vec<Snapshot>> {
        let (start, end) = page.held_keys();
        let index = self.index.held.get(&(page.lane, page.queue.clone()));
        let from = std::ops::Bound::Included(start);
        self.indexed(index, true, from, &end, page.limit, page.now)
    }
}

/// The task ids of the index entries in `(from, end)`, at most `limit`, in
/// key order: those read before the transaction (`read`, sorted) with the
/// transaction's own changes (`delta`; `None` removed) applied. Both sides are
/// sorted, so they are walked together and only the ids taken are copied (a
/// `next` wants one or two of the prefetched entries).
///
/// `cut`: the index may go on past the last entry of `read`. `None` when the
/// answer would need what lies there.
pub(super) fn merged_ids(
    read: &[(Vec<u8>, Vec<u8>)],
    delta: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    cut: bool,
    from: std::ops::Bound<Vec<u8>>,
    end: &[u8],
    limit: usize,
) -> Option<Vec<Vec<u8>>> {
    use std::ops::Bound;
    let unknown_past_read = cut && read.last().is_some_and(|(k, _)| k.as_slice() < end);
    let first = read.partition_point(|(k, _)| match &from {
        Bound::Included(f) => k < f,
        Bound::Excluded(f) => k <= f,
        Bound::Unbounded => false,
    });
    let mut read = read[first..]
        .iter()
        .take_while(|(k, _)| k.as_slice() < end)
        .peekable();
    let mut changed = delta
        .range((from, Bound::Excluded(end.to_vec())))
        .peekable();
    let mut ids = Vec::new();
    while ids.len() < limit {
        if unknown_past_read && read.peek().is_none() {
            return None;
        }
        let read_first = match (read.peek(), changed.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((r, _)), Some((c, _))) => r < *c,
        };
        if read_first {
            if let Some((_, task)) = read.next() {
                ids.push(task.clone());
            }
            continue;
        }
        let Some((k, v)) = changed.next() else { break };
        // The transaction's change replaces (or removes) the entry read before it.
        if read.peek().is_some_and(|(r, _)| r == k) {
            read.next();
        }
        if let Some(task) = v {
            ids.push(task.clone());
        }
    }
    Some(ids)
}

/// A `by_due` key: state NUL due time (big-endian, so keys sort by time) task id.
pub(super) fn due_key(state: &str, due: Timestamp, task: &str) -> Vec<u8> {
    let ms = u64::try_from(due.as_millis()).unwrap_or(0);
    let mut k = prefixed_key(state, &ms.to_be_bytes());
    k.extend_from_slice(task.as_bytes());
    k
}

pub(super) fn abort(m: String) -> ConflictableTransactionError<Abort> {
    ConflictableTransactionError::Abort(Abort::Corrupt(m))
}

pub(super) fn encode<T: serde::Serialize>(v: &T) -> TxResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| abort(format!("cannot encode a value: {e}")))
}

pub(super) fn append_event(
    e: &EventDraft,
    events: &TransactionalTree,
    events_by_task: &TransactionalTree,
    conflicts: &TransactionalTree,
    meta: &TransactionalTree,
) -> TxResult<()> {
    if let Some(key) = &e.conflict_key {
        let ck = prefixed_key(e.task.as_str(), key.as_bytes());
        if let Some(seq) = conflicts.get(&ck)?
            && let Some(b) = events.get(&seq)?
        {
            let mut ev: Event = baton_core::json::decode_stored(&b)
                .map_err(|err| abort(format!("an event does not decode: {err}")))?;
            ev.count += 1;
            events.insert(seq, encode(&ev)?)?;
            return Ok(());
        }
    }
    let seq = read_u64(meta.get("event_seq")?).map_err(ConflictableTransactionError::Abort)? + 1;
    meta.insert("event_seq", &be(seq))?;
    events.insert(&be(seq), encode(&Event::from_draft(seq, e.clone()))?)?;
    events_by_task.insert(prefixed_key(e.task.as_str(), &be(seq)), &[])?;
    if let Some(key) = &e.conflict_key {
        conflicts.insert(prefixed_key(e.task.as_str(), key.as_bytes()), &be(seq))?;
    }
    Ok(())
}
