//! Reads: pages of records at one revision with what the engine
//! judges of them, and ordered logs (events, the outbox).

use super::*;

/// The most records one scan request asks for. A record is at most about
/// 100 KiB (a 64 KiB manifest, a 16 KiB error, 16 KiB of metadata, evidence),
/// so a page stays under the 4 MiB an etcd reply may carry.
pub(super) const SCAN_PAGE: usize = 32;

/// How many times a scan starts again after its revision was compacted.
pub(super) const SCAN_RESTARTS: usize = 5;
impl FabricStore {
    /// Records of tasks after `after`, in id order, matching `states` (all
    /// when `None`), at most `limit`, with the holder keys of that revision.
    pub(super) async fn scan(
        &self,
        after: Option<&TaskId>,
        limit: usize,
        states: Option<&BTreeSet<baton_core::State>>,
    ) -> Result<Vec<Snapshot>> {
        self.at_one_revision("list", || self.scan_at_one_revision(after, limit, states))
            .await
    }

    /// One read of the keys in `[from, end)` at revision `pinned` (the
    /// current one when `None`), with the options `shape` adds; `None`
    /// when that revision was compacted.
    pub(super) async fn range_at(
        &self,
        what: &str,
        from: &[u8],
        end: &[u8],
        pinned: Option<i64>,
        shape: impl Fn(GetOptions) -> GetOptions,
    ) -> Result<Option<etcd_client::GetResponse>> {
        self.call_retrying(what, |mut c| {
            let mut o = shape(GetOptions::new().with_range(end.to_vec()));
            if let Some(r) = pinned {
                o = o.with_revision(r);
            }
            let from = from.to_vec();
            async move { not_compacted(c.get(from, Some(o)).await) }
        })
        .await
    }

    /// A read made of several requests at one revision (`read`: `None`
    /// when that revision was compacted away between two of them), started
    /// again at the current revision (bounded) instead of asking for the
    /// compacted one again and again.
    pub(super) async fn at_one_revision<T, F, Fut>(&self, what: &str, read: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        for _ in 0..SCAN_RESTARTS {
            if let Some(found) = read().await? {
                return Ok(found);
            }
        }
        Err(Error::unavailable(format!(
            "etcd prefix {:?}: {what}: the cluster compacted the revision being read {SCAN_RESTARTS} times running",
            self.opts.prefix
        ))
        .with_context(self.context()))
    }

    /// One attempt of [`FabricStore::scan`]; `None` when the revision it
    /// read at was compacted before it finished.
    pub(super) async fn scan_at_one_revision(
        &self,
        after: Option<&TaskId>,
        limit: usize,
        states: Option<&BTreeSet<baton_core::State>>,
    ) -> Result<Option<Vec<Snapshot>>> {
        let end = prefix_end(&self.keys.tasks());
        let mut start = match after {
            Some(a) => {
                let mut k = self.keys.task(a.as_str()).into_bytes();
                k.push(0);
                k
            }
            None => self.keys.tasks().into_bytes(),
        };
        let mut out: Vec<TaskRecord> = Vec::new();
        let mut pinned: Option<i64> = None;
        loop {
            let (s, e) = (start.clone(), end.clone());
            // Never more keys than the caller still wants (when every state
            // counts), and never more than fit in one reply.
            let page = match states {
                None => SCAN_PAGE.min(limit.saturating_sub(out.len()).max(1)),
                Some(_) => SCAN_PAGE,
            };
            let page = i64::try_from(page).unwrap_or(1);
            let resp = self
                .range_at("list", &s, &e, pinned, |o| o.with_limit(page))
                .await?;
            let Some(resp) = resp else {
                return Ok(None);
            };
            pinned = pinned.or_else(|| resp.header().map(|h| h.revision()));
            let kvs = resp.kvs();
            for kv in kvs {
                let r = self.decode_record(kv)?;
                if states.is_none_or(|s| s.contains(&r.state)) {
                    out.push(r);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            if out.len() >= limit || !resp.more() || kvs.is_empty() {
                break;
            }
            if let Some(last) = kvs.last() {
                start = last.key().to_vec();
                start.push(0);
            }
        }
        self.judged(out, pinned).await
    }

    /// `records` (in id order, read at revision `pinned`) with what the
    /// engine judges of them at that revision; `None` when it was compacted.
    pub(super) async fn judged(
        &self,
        out: Vec<TaskRecord>,
        pinned: Option<i64>,
    ) -> Result<Option<Vec<Snapshot>>> {
        // Which of them hold a live grant, and which wait on a deadline that
        // has not passed, at the same revision.
        let (holders, deadlines) = (self.keys.holders(), self.keys.deadlines());
        let (live, waiting) = tokio::join!(
            self.tasks_with_key(&out, pinned, |t| self.keys.holder(t), &holders),
            self.tasks_with_key(&out, pinned, |t| self.keys.deadline(t), &deadlines),
        );
        let (Some(live), Some(waiting)) = (live?, waiting?) else {
            return Ok(None);
        };
        // The keys' presence at the scan's revision is the engine's
        // judgement, never a comparison with the caller's time.
        Ok(Some(
            out.into_iter()
                .map(|record| {
                    let t = record.task.as_str();
                    let judged = Judged {
                        lease_holds: live.contains(t),
                        deadline_passed: !waiting.contains(t),
                        // Only a grant's decision consults the lock delay,
                        // and it reads the key itself; a list never does.
                        lock_delay_holds: false,
                    };
                    Snapshot { record, judged }
                })
                .collect(),
        ))
    }

    /// Which of `records` (in id order) have a key of the kind `key_of`
    /// names (under `under`), at revision `pinned`; `None` when that
    /// revision was compacted.
    pub(super) async fn tasks_with_key(
        &self,
        records: &[TaskRecord],
        pinned: Option<i64>,
        key_of: impl Fn(&str) -> String,
        under: &str,
    ) -> Result<Option<BTreeSet<String>>> {
        let mut found = BTreeSet::new();
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return Ok(Some(found));
        };
        let from = key_of(first.task.as_str());
        let mut to = key_of(last.task.as_str()).into_bytes();
        to.push(0);
        let resp = self
            .range_at(
                "list",
                from.as_bytes(),
                &to,
                pinned,
                GetOptions::with_keys_only,
            )
            .await?;
        let Some(resp) = resp else {
            return Ok(None);
        };
        for kv in resp.kvs() {
            if let Some(t) = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(under))
                .and_then(unhex)
            {
                found.insert(t);
            }
        }
        Ok(Some(found))
    }

    /// Items under `prefix` in creation order with seq > `after`.
    pub(super) async fn ordered<T: serde::de::DeserializeOwned>(
        &self,
        prefix: String,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, T, i64)>> {
        let min_create = i64::try_from(after / PER_TXN).unwrap_or(i64::MAX);
        let want = i64::try_from(limit)
            .unwrap_or(i64::MAX)
            .saturating_add(i64::try_from(PER_TXN).unwrap_or(0));
        let resp = self
            .call_retrying("read", |mut c| {
                let o = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_min_create_revision(min_create)
                    .with_limit(want);
                let p = prefix.clone();
                async move { c.get(p, Some(o)).await }
            })
            .await?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let stored: Stored<T> = baton_core::json::decode_stored(kv.value()).map_err(|e| {
                Error::corrupt(format!(
                    "etcd prefix {:?}: a stored item does not decode: {e}",
                    self.opts.prefix
                ))
            })?;
            let seq = self
                .revision("an item's revision", kv.create_revision())?
                .saturating_mul(PER_TXN)
                .saturating_add(stored.idx);
            if seq > after {
                out.push((seq, stored.item, kv.create_revision()));
            }
        }
        out.sort_by_key(|(seq, _, _)| *seq);
        out.truncate(limit);
        Ok(out)
    }
}
