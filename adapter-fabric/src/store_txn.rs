//! One operation as one guarded etcd transaction: read, decide,
//! compare and write, and what to answer when the reply is lost.

use super::*;

impl FabricStore {
    pub(super) async fn apply_op(&self, mut op: Operation) -> Result<Decision> {
        let rules = self.capabilities().lease_rules();
        let task = op.task.as_str().to_owned();
        let (tk, hk) = (self.keys.task(&task), self.keys.holder(&task));
        let (dk, lk) = (self.keys.deadline(&task), self.keys.lock_delay(&task));
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        // Writes sent whose replies never came, with the leases each made:
        // each is guarded by the revisions it read, so once anything else
        // commits on top of those it can never land; until then, the record
        // says whether it did.
        let mut unanswered: Vec<(String, Decision, Vec<i64>)> = Vec::new();
        let start = self.next_turn();
        let mut recalled = self.recall(&task);
        // A claim's lease is granted (or a kept one refreshed) beside the
        // first read, not after the decision; if the decision does not
        // take it, it goes back to the pool.
        let mut ahead: Option<Ahead> = None;
        for attempt in 0..self.opts.max_attempts as u64 {
            let cached = recalled.is_some();
            let found = match (recalled.take(), self.lease_ahead(&op)) {
                (Some(f), _) => f,
                (None, Some(secs)) if attempt == 0 => {
                    let (found, lease) = tokio::join!(self.find(&task), self.grant_lease(secs));
                    ahead = Some(Ahead {
                        store: self.clone(),
                        secs,
                        id: lease.ok(),
                    });
                    found?
                }
                (None, _) => self.find(&task).await?,
            };
            if !cached && let Some(landed) = self.landed(&found, &mut unanswered).await {
                self.forget(&task);
                return landed;
            }
            // Timed after the read each try: a try that follows another
            // writer's commit decides after it, never at an earlier time.
            op.timed_at_commit();
            let record = found.record.as_ref().map(|(r, _)| r);
            let mut d = decide_with(&op, record, found.judged(), rules);
            if cached && (!d.writes() || Self::is_graph(&op, record, &d)) {
                // What this store last wrote guards a write only: an answer
                // that writes nothing, or a group over other tasks, is
                // decided on a read of the cluster.
                continue;
            }
            if Self::is_graph(&op, record, &d) {
                // It reads or changes other tasks: one transaction over all
                // of them, starting from the record just read.
                let seed = std::collections::BTreeMap::from([(op.task.clone(), found)]);
                let mut ds = self
                    .apply_group_from(std::slice::from_ref(&op), false, seed)
                    .await?;
                return ds
                    .pop()
                    .ok_or_else(|| Error::unavailable("etcd: a transaction decided nothing"));
            }
            if !d.writes() {
                return Ok(d);
            }
            let request_id = uuid::Uuid::new_v4().to_string();
            // The timer keys: each exists until its timer runs out, on an
            // etcd lease, so the engine's clock judges it.
            let timers = [
                (&dk, found.deadline.as_ref(), d.deadline),
                (&lk, found.lock_delay.as_ref(), d.lock_delay),
            ];
            // Guarded by every key as read: a lease or timer that ran out
            // since (its key deleted by the engine) fails the transaction,
            // and the decision is made again on the new facts.
            let mut compares = vec![
                match &found.record {
                    Some((_, rev)) => Compare::mod_revision(tk.clone(), CompareOp::Equal, *rev),
                    None => Compare::create_revision(tk.clone(), CompareOp::Equal, 0),
                },
                unchanged(&hk, found.holder.as_ref()),
            ];
            compares.extend(timers.iter().map(|(k, read, _)| unchanged(k, *read)));
            let mut ops = Vec::new();
            let mut wanted = vec![match d.lease {
                LeaseEffect::Granted { ttl_ms } | LeaseEffect::Extended { ttl_ms } => {
                    Some(lease_secs(ttl_ms))
                }
                LeaseEffect::Ended | LeaseEffect::Unchanged => None,
            }];
            wanted.extend(timers.iter().map(|(_, _, effect)| match effect {
                TimerEffect::Set { in_ms } => Some(lease_secs(*in_ms)),
                TimerEffect::Cleared | TimerEffect::Unchanged => None,
            }));
            let pre = wanted[0].and_then(|secs| ahead.as_mut()?.take(secs));
            if pre.is_some() {
                wanted[0] = None;
            }
            let mut granted = self.grant_leases(&wanted).await?;
            if pre.is_some() {
                granted[0] = pre;
            }
            let lease_id = granted.first().copied().flatten();
            let made: Vec<i64> = granted.iter().copied().flatten().collect();
            if let Some(after) = d.record_to_write() {
                let env = Envelope {
                    record: after.clone(),
                    request: request_id.clone(),
                };
                ops.push(TxnOp::put(tk.clone(), encode(&env)?, None));
                self.index_ops(record, Some(after), &mut ops);
            }
            match (d.lease, lease_id) {
                (LeaseEffect::Granted { .. } | LeaseEffect::Extended { .. }, Some(id)) => {
                    // A holder key on an etcd lease of the grant's length: the
                    // grant is live exactly while the engine keeps the key.
                    let owner = d
                        .record_to_write()
                        .and_then(|r| r.lease.as_ref())
                        .map_or("", |l| l.owner.as_str())
                        .to_owned();
                    ops.push(TxnOp::put(
                        hk.clone(),
                        owner,
                        Some(PutOptions::new().with_lease(id)),
                    ));
                }
                (LeaseEffect::Ended, _) if found.holder.is_some() => {
                    ops.push(TxnOp::delete(hk.clone(), None));
                }
                _ => {}
            }
            for ((key, read, effect), lease) in timers.iter().zip(granted.iter().skip(1)) {
                match (effect, lease) {
                    (TimerEffect::Set { .. }, Some(id)) => {
                        ops.push(TxnOp::put(
                            (*key).clone(),
                            "",
                            Some(PutOptions::new().with_lease(*id)),
                        ));
                    }
                    (TimerEffect::Cleared, _) if read.is_some() => {
                        ops.push(TxnOp::delete((*key).clone(), None));
                    }
                    _ => {}
                }
            }
            let revision = d.record_to_write().map_or(0, |r| r.revision);
            let drafts: Vec<baton_core::model::EventDraft> = d.events().cloned().collect();
            for (idx, e) in drafts.iter().enumerate() {
                let idx = idx as u64;
                if let Some(ck) = &e.conflict_key {
                    let key = self.keys.conflict(&task, ck);
                    let existing = {
                        let k = key.clone();
                        self.call_retrying("read", |mut c| {
                            let k = k.clone();
                            async move { c.get(k, None).await }
                        })
                        .await?
                    };
                    match existing.kvs().first() {
                        Some(kv) => {
                            let mut stored: Stored<Event> =
                                baton_core::json::decode_stored(kv.value()).map_err(|err| {
                                    Error::corrupt(format!(
                                        "etcd prefix {:?}: an event does not decode: {err}",
                                        self.opts.prefix
                                    ))
                                })?;
                            stored.item.count += 1;
                            compares.push(Compare::mod_revision(
                                key.clone(),
                                CompareOp::Equal,
                                kv.mod_revision(),
                            ));
                            ops.push(TxnOp::put(key, encode(&stored)?, None));
                        }
                        None => {
                            compares.push(Compare::create_revision(
                                key.clone(),
                                CompareOp::Equal,
                                0,
                            ));
                            let stored = Stored {
                                item: Event::from_draft(0, e.clone()),
                                idx,
                            };
                            ops.push(TxnOp::put(key, encode(&stored)?, None));
                        }
                    }
                } else {
                    let stored = Stored {
                        item: Event::from_draft(0, e.clone()),
                        idx,
                    };
                    ops.push(TxnOp::put(
                        self.keys.event(&task, revision, idx as usize),
                        encode(&stored)?,
                        None,
                    ));
                }
            }
            if d.drops_history() {
                // A prune: every event of the task (events are numbered by
                // etcd's revisions, which never go back; acknowledged
                // notifications were deleted when acknowledged).
                ops.push(TxnOp::delete(
                    self.keys.events_of(&task),
                    Some(DeleteOptions::new().with_prefix()),
                ));
            }
            let notes: Vec<NotificationDraft> = d.notifications().cloned().collect();
            for (idx, n) in notes.iter().enumerate() {
                let stored = Stored {
                    item: n.clone(),
                    idx: idx as u64,
                };
                ops.push(TxnOp::put(
                    self.keys.outbox(&n.intent_id),
                    encode(&stored)?,
                    None,
                ));
            }
            let txn = Txn::new().when(compares).and_then(ops);
            let (mut client, member) = self.client_for(start, attempt);
            let sent = tokio::time::timeout(self.attempt_timeout(), client.txn(txn)).await;
            if sent.is_err() {
                self.suspect(member);
            }
            // The leases the holder and deadline keys were on, which a
            // committed grant, renewal, new wait or end leaves holding nothing.
            let holder_left = found
                .holder
                .as_ref()
                .map(|k| k.lease)
                .filter(|_| d.lease != LeaseEffect::Unchanged);
            let timers_left = timers.iter().filter_map(|(_, read, effect)| {
                read.map(|k| k.lease)
                    .filter(|_| *effect != TimerEffect::Unchanged)
            });
            let replaced: Vec<i64> = holder_left
                .into_iter()
                .chain(timers_left)
                .filter(|l| *l != 0 && !made.contains(l))
                .collect();
            let landed = match sent {
                Ok(Ok(resp)) if resp.succeeded() => match resp.header() {
                    Some(header) => {
                        self.commits.fetch_add(1, Ordering::Relaxed);
                        let fence = self.revision("a transaction's revision", header.revision());
                        fence.map(|f| {
                            d.assign_fence(f);
                            let left = Self::left_by(&found, &d, header.revision(), &granted);
                            match left {
                                Some(mut left) => {
                                    left.written_by = Some(request_id.clone());
                                    self.remember(&task, left);
                                }
                                None => self.forget(&task),
                            }
                            d
                        })
                    }
                    // Committed, but the reply does not say at which revision:
                    // the stored record does.
                    None => {
                        self.forget(&task);
                        self.resolve(
                            &task,
                            &request_id,
                            d,
                            Some("a reply without a header".into()),
                        )
                        .await
                    }
                },
                Ok(Ok(_)) => {
                    // Someone changed what we read: let the unused leases go and decide again.
                    // (What this store remembered going stale is not a lost race.)
                    if !cached {
                        self.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    self.revoke_later(made);
                    continue;
                }
                Ok(Err(e)) if names_a_lost_lease(&e) => {
                    // A lease it named ran out before it arrived (one kept
                    // for reuse, refreshed just before it lapsed): etcd
                    // applied nothing. Decide again, on new leases: none of
                    // these is kept (which one lapsed, the error does not say).
                    self.forget(&task);
                    for id in &made {
                        self.pool.lost(*id);
                    }
                    self.revoke_later(made);
                    if tokio::time::Instant::now() >= deadline {
                        return Err(self.map_err("write", e));
                    }
                    continue;
                }
                Ok(Err(e)) if cause_of(&e) == Cause::NeverSent => {
                    // Refused before it reached a leader: nothing was applied, so
                    // deciding again (likely through another member) is safe.
                    self.revoke_all(&made).await;
                    if tokio::time::Instant::now() >= deadline {
                        return Err(self.map_err("write", e));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                // No reply (a member that hangs, a reply lost): read again and
                // either find this write landed or decide anew on what is there.
                Ok(Err(_)) | Err(_) => {
                    self.forget(&task);
                    unanswered.push((request_id, d, made));
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                    continue;
                }
            };
            if landed.is_ok() {
                // Revoked rather than left to expire (a long TTL would keep
                // them for hours): the lease the holder key left, and those of
                // earlier attempts, which can no longer land.
                let stale: Vec<i64> = unanswered
                    .drain(..)
                    .flat_map(|(_, _, leases)| leases)
                    .chain(replaced)
                    .collect();
                self.revoke_later(stale);
            }
            return landed;
        }
        if !unanswered.is_empty() {
            // Out of time with writes unanswered: one last look.
            return match self.find(&task).await {
                Ok(found) => match self.landed(&found, &mut unanswered).await {
                    Some(landed) => landed,
                    None => Err(Error::indeterminate(format!(
                        "etcd: {task}: {} writes went unanswered within {:?} and none has landed yet; one may still: read before retrying",
                        unanswered.len(),
                        self.opts.timeout
                    ))
                    .with_context(self.context())),
                },
                Err(e) => Err(Error::indeterminate(format!(
                    "etcd: {task}: a write went unanswered and the cluster cannot be read ({}); read before retrying",
                    e.message
                ))
                .with_context(self.context())),
            };
        }
        Err(Error::unavailable(format!(
            "etcd prefix {:?}: {task}: {} attempts all lost to concurrent changes",
            self.opts.prefix, self.opts.max_attempts
        )))
    }

    /// What a committed decision left on its task's keys, as a read at
    /// `revision` would find them: `found` changed by the decision's record,
    /// lease and timer effects (`granted`: the leases made for the holder,
    /// deadline and lock-delay keys, in that order). `None` when the write
    /// cannot be described without reading (a lease it needed went missing).
    pub(super) fn left_by(
        found: &Found,
        d: &Decision,
        revision: i64,
        granted: &[Option<i64>],
    ) -> Option<Found> {
        let on = |lease: Option<i64>| {
            lease.map(|lease| KeyRead {
                mod_revision: revision,
                lease,
            })
        };
        let holder = match d.lease {
            LeaseEffect::Granted { .. } | LeaseEffect::Extended { .. } => {
                Some(on(granted.first().copied().flatten())?)
            }
            LeaseEffect::Ended => None,
            LeaseEffect::Unchanged => found.holder,
        };
        let timer = |effect: TimerEffect, read: Option<KeyRead>, lease: Option<i64>| match effect {
            TimerEffect::Set { .. } => on(lease).map(Some),
            TimerEffect::Cleared => Some(None),
            TimerEffect::Unchanged => Some(read),
        };
        let deadline = timer(
            d.deadline,
            found.deadline,
            granted.get(1).copied().flatten(),
        )?;
        let lock_delay = timer(
            d.lock_delay,
            found.lock_delay,
            granted.get(2).copied().flatten(),
        )?;
        let record = match d.record_to_write() {
            Some(r) => Some((r.clone(), revision)),
            None => found.record.clone(),
        };
        Some(Found {
            record,
            holder,
            deadline,
            lock_delay,
            written_by: None,
        })
    }

    /// Whether one of the unanswered writes is the one that stored the record
    /// just read: then it is the answer (the others can never land, so
    /// their leases are revoked).
    pub(super) async fn landed(
        &self,
        found: &Found,
        unanswered: &mut Vec<(String, Decision, Vec<i64>)>,
    ) -> Option<Result<Decision>> {
        let by = found.written_by.as_ref()?;
        let rev = found.record.as_ref()?.1;
        let i = unanswered.iter().position(|(id, _, _)| id == by)?;
        let (_, mut d, _) = unanswered.swap_remove(i);
        let stale: Vec<i64> = unanswered
            .drain(..)
            .flat_map(|(_, _, leases)| leases)
            .collect();
        self.revoke_all(&stale).await;
        self.commits.fetch_add(1, Ordering::Relaxed);
        Some(self.revision("a transaction's revision", rev).map(|fence| {
            d.assign_fence(fence);
            d
        }))
    }

    /// A transaction's reply was lost: find out whether it landed.
    pub(super) async fn resolve(
        &self,
        task: &str,
        request_id: &str,
        mut d: Decision,
        cause: Option<String>,
    ) -> Result<Decision> {
        let cause = cause.unwrap_or_else(|| format!("no answer within {:?}", self.opts.timeout));
        let tk = self.keys.task(task);
        let reread = self
            .call_retrying("read", |mut c| {
                let tk = tk.clone();
                async move { c.get(tk, None).await }
            })
            .await;
        match reread {
            Ok(resp) => match resp.kvs().first() {
                Some(kv) => {
                    let env: std::result::Result<Envelope, _> =
                        baton_core::json::decode_stored(kv.value());
                    if env.is_ok_and(|e| e.request == request_id) {
                        self.commits.fetch_add(1, Ordering::Relaxed);
                        d.assign_fence(self.revision("a grant's revision", kv.mod_revision())?);
                        return Ok(d);
                    }
                    Err(Error::indeterminate(format!(
                        "etcd: {task}: the write's reply was lost ({cause}) and it has not landed yet; it may still: read before retrying"
                    )))
                }
                None => Err(Error::indeterminate(format!(
                    "etcd: {task}: the write's reply was lost ({cause}); read before retrying"
                ))),
            },
            Err(e) => Err(Error::indeterminate(format!(
                "etcd: {task}: the write's reply was lost ({cause}) and the cluster cannot be read ({}); read before retrying",
                e.message
            ))),
        }
    }
}
