//! Counts and lists by state on etcd, from two index families written in
//! the same transaction as each record (`index_ops`):
//!
//! * `s/STATE/<hex task>`: every record by its stored state, so a list by
//!   state (the sweeper's, a status's due records) reads those records
//!   alone, in id order;
//! * `c/<hex queue>/STATE/<hex task>`: every counted record
//!   ([`TaskRecord::census_queue`]), so a count is the number of keys
//!   under one prefix, which etcd answers without reading a value
//!   (`count_only`).
//!
//! A store written before them is indexed when first opened: each record
//! gets its entries in a transaction that compares the record's revision
//! (a writer that changed it meanwhile wrote the entries itself), then the
//! marker is written. Until the marker exists, counts are `None` (core
//! reads the records) and lists scan, as before.

use super::*;
use baton_core::counts::Count;
use futures_util::StreamExt;

/// How many reads a count or an indexed list keeps in flight at once.
const IN_FLIGHT: usize = 32;

impl FabricStore {
    /// Whether every record has its index entries (the marker is written).
    async fn indexed(&self, pinned: Option<i64>) -> Result<Option<bool>> {
        let marker = self.keys.indexed_marker();
        let resp = self
            .call_retrying("read", |mut c| {
                let mut o = GetOptions::new().with_count_only();
                if let Some(r) = pinned {
                    o = o.with_revision(r);
                }
                let marker = marker.clone();
                async move { not_compacted(c.get(marker, Some(o)).await) }
            })
            .await?;
        Ok(resp.map(|r| r.count() > 0))
    }

    /// The counts, at one revision; `None` before the store is indexed.
    pub(super) async fn kept_counts(&self) -> Result<Option<Vec<Count>>> {
        self.at_one_revision("counts", || self.counts_at_one_revision())
            .await
    }

    /// One attempt of [`FabricStore::kept_counts`]: `None` when its
    /// revision was compacted; `Some(None)` before the store is indexed.
    async fn counts_at_one_revision(&self) -> Result<Option<Option<Vec<Count>>>> {
        let marker = self.keys.indexed_marker();
        let first = self
            .call_retrying("read", |mut c| {
                let marker = marker.clone();
                async move {
                    c.get(marker, Some(GetOptions::new().with_count_only()))
                        .await
                }
            })
            .await?;
        let Some(pinned) = first.header().map(|h| h.revision()) else {
            return Err(Error::unavailable("etcd: a reply without a header"));
        };
        if first.count() == 0 {
            return Ok(Some(None));
        }
        // The queues: each found by the first count key at or after the
        // end of the one before (a read a queue, not a key).
        let root = self.keys.count_entries();
        let end = prefix_end(&root);
        let mut queues = Vec::new();
        let mut from = root.clone().into_bytes();
        loop {
            let resp = self
                .range_at("read", &from, &end, Some(pinned), |o| {
                    o.with_keys_only().with_limit(1)
                })
                .await?;
            let Some(resp) = resp else {
                return Ok(None);
            };
            let Some(kv) = resp.kvs().first() else {
                break;
            };
            let rest = kv.key().get(root.len()..).unwrap_or_default();
            let Some(cut) = rest.iter().position(|b| *b == b'/') else {
                return Err(self.bad_index(kv.key()));
            };
            let hexed = String::from_utf8_lossy(&rest[..cut]).into_owned();
            let Some(queue) = unhex(&hexed) else {
                return Err(self.bad_index(kv.key()));
            };
            from = prefix_end(&format!("{root}{hexed}/"));
            queues.push(queue);
        }
        let wanted: Vec<(String, baton_core::State)> = queues
            .iter()
            .flat_map(|q| baton_core::State::ALL.iter().map(move |s| (q.clone(), *s)))
            .collect();
        let prefixes: Vec<String> = wanted
            .iter()
            .map(|(q, s)| self.keys.counted(q, *s))
            .collect();
        let counted: Vec<Result<Option<i64>>> = futures_util::stream::iter(prefixes)
            .map(|prefix| async move {
                let end = prefix_end(&prefix);
                self.range_at("read", prefix.as_bytes(), &end, Some(pinned), |o| {
                    o.with_count_only()
                })
                .await
                .map(|r| r.map(|r| r.count()))
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        let mut out = Vec::new();
        for ((queue, state), n) in wanted.into_iter().zip(counted) {
            let Some(n) = n? else {
                return Ok(None);
            };
            if n > 0 {
                out.push(Count {
                    queue,
                    state,
                    n: n.unsigned_abs(),
                });
            }
        }
        Ok(Some(Some(out)))
    }

    fn bad_index(&self, key: &[u8]) -> Error {
        Error::corrupt(format!(
            "etcd prefix {:?}: an index key that does not decode: {:?}",
            self.opts.prefix,
            String::from_utf8_lossy(key)
        ))
    }

    /// Records in `states` after `after`, in id order, at most `limit`,
    /// through the state index; `None` before the store is indexed.
    pub(super) async fn list_by_state(
        &self,
        after: Option<&TaskId>,
        limit: usize,
        states: &BTreeSet<baton_core::State>,
    ) -> Result<Option<Vec<Snapshot>>> {
        self.at_one_revision("list", || self.list_at_one_revision(after, limit, states))
            .await
    }

    async fn list_at_one_revision(
        &self,
        after: Option<&TaskId>,
        limit: usize,
        states: &BTreeSet<baton_core::State>,
    ) -> Result<Option<Option<Vec<Snapshot>>>> {
        let limit = limit.clamp(1, baton_core::authority::MAX_PAGE);
        // The first `limit` ids of each state after `after`, at one revision.
        let mut pinned: Option<i64> = None;
        let mut ids: Vec<String> = Vec::new();
        for state in states {
            let root = self.keys.state_entries(*state);
            let end = prefix_end(&root);
            let from = match after {
                Some(a) => {
                    let mut k = self.keys.in_state(*state, a.as_str()).into_bytes();
                    k.push(0);
                    k
                }
                None => root.clone().into_bytes(),
            };
            let most = i64::try_from(limit).unwrap_or(i64::MAX);
            let resp = self
                .range_at("list", &from, &end, pinned, |o| {
                    o.with_keys_only().with_limit(most)
                })
                .await?;
            let Some(resp) = resp else {
                return Ok(None);
            };
            pinned = pinned.or_else(|| resp.header().map(|h| h.revision()));
            for kv in resp.kvs() {
                let hexed = kv.key().get(root.len()..).unwrap_or_default();
                let Some(task) = unhex(&String::from_utf8_lossy(hexed)) else {
                    return Err(self.bad_index(kv.key()));
                };
                ids.push(task);
            }
        }
        if self.indexed(pinned).await? != Some(true) {
            return Ok(Some(None));
        }
        ids.sort();
        ids.dedup();
        ids.truncate(limit);
        // Each record at the same revision.
        let keys: Vec<String> = ids.iter().map(|t| self.keys.task(t)).collect();
        let read: Vec<Result<Option<Option<TaskRecord>>>> = futures_util::stream::iter(keys)
            .map(|key| async move {
                let resp = self
                    .call_retrying("list", |mut c| {
                        let mut o = GetOptions::new();
                        if let Some(r) = pinned {
                            o = o.with_revision(r);
                        }
                        let key = key.clone();
                        async move { not_compacted(c.get(key, Some(o)).await) }
                    })
                    .await?;
                match resp {
                    None => Ok(None),
                    Some(r) => match r.kvs().first() {
                        Some(kv) => Ok(Some(Some(self.decode_record(kv)?))),
                        None => Ok(Some(None)),
                    },
                }
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        let mut records = Vec::with_capacity(read.len());
        for r in read {
            match r? {
                None => return Ok(None),
                Some(Some(record)) => records.push(record),
                // An entry whose record is gone: never written by a build
                // that writes the index (records are never deleted).
                Some(None) => {}
            }
        }
        Ok(self.judged(records, pinned).await?.map(Some))
    }

    /// Gives every record written before the indexes its state and count
    /// entries, then writes the marker (see the module docs).
    pub(super) async fn index_earlier_records(&self) -> Result<()> {
        if self.indexed(None).await? == Some(true) {
            return Ok(());
        }
        let mut after: Option<TaskId> = None;
        loop {
            let page = self.scan(after.as_ref(), SCAN_PAGE, None).await?;
            let Some(last) = page.last() else {
                break;
            };
            after = Some(last.record.task.clone());
            for snap in &page {
                self.index_one(&snap.record).await?;
            }
            if page.len() < SCAN_PAGE {
                break;
            }
        }
        let marker = self.keys.indexed_marker();
        self.call_retrying("open", |mut c| {
            let marker = marker.clone();
            async move { c.put(marker, "", None).await }
        })
        .await?;
        Ok(())
    }

    /// One record's index entries, if the record is still as it was read
    /// (and as it is stored now: its revision is compared).
    async fn index_one(&self, record: &TaskRecord) -> Result<()> {
        let t = record.task.as_str();
        let tk = self.keys.task(t);
        let now = self
            .call_retrying("open", |mut c| {
                let tk = tk.clone();
                async move { c.get(tk, None).await }
            })
            .await?;
        let Some(kv) = now.kvs().first() else {
            return Ok(());
        };
        let stored = self.decode_record(kv)?;
        let mut ops = Vec::new();
        ops.push(TxnOp::put(self.keys.in_state(stored.state, t), "", None));
        if let Some(q) = stored.census_queue() {
            ops.push(TxnOp::put(
                self.keys.count_entry(q, stored.state, t),
                "",
                None,
            ));
        }
        let revision = kv.mod_revision();
        // Lost to a writer: it wrote this record's entries with it.
        self.call_retrying("open", |mut c| {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    tk.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then(ops.clone());
            async move { c.txn(txn).await }
        })
        .await?;
        Ok(())
    }
}
