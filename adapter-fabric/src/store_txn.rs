//! One operation as one guarded etcd transaction: read, decide,
//! compare and write, and what to answer when the reply is lost.

use super::*;
use baton_core::decide::LeaseRules;
use baton_core::engine::{Engine, Need, Supply};

/// How the engine decided one operation.
enum One {
    /// Nothing to write: the answer.
    Answer(Decision),
    /// A write, and the engine that asked for it.
    Write(Engine, Decision),
    /// It reads or changes other tasks: the work-graph path decides it.
    Graph,
}

impl FabricStore {
    pub(super) async fn apply_op(&self, op: Operation) -> Result<Decision> {
        let rules = self.capabilities().lease_rules();
        let task = op.task.as_str().to_owned();
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
            // Decided by core's engine on the record just read, and timed
            // there when its decision begins: a try that follows another
            // writer's commit decides after it, never at an earlier time.
            let (mut engine, mut d) = match Self::decide_one(&op, &found, rules)? {
                One::Graph if cached => continue,
                One::Graph => {
                    // It reads or changes other tasks: one transaction over
                    // all of them, starting from the record just read.
                    let seed = std::collections::BTreeMap::from([(op.task.clone(), found)]);
                    let mut ds = self
                        .apply_group_from(std::slice::from_ref(&op), false, seed)
                        .await?;
                    return ds
                        .pop()
                        .ok_or_else(|| Error::unavailable("etcd: a transaction decided nothing"));
                }
                // What this store last wrote guards a write only: an answer
                // that writes nothing is decided on a read of the cluster.
                One::Answer(_) if cached => continue,
                One::Answer(d) => return Ok(d),
                One::Write(engine, d) => (engine, d),
            };
            let request_id = uuid::Uuid::new_v4().to_string();
            let counted = self.counted_of(&task, &d).await?;
            let read = std::collections::BTreeMap::from([(op.task.clone(), found.clone())]);
            let wrote = [(op.task.clone(), d.clone())];
            let plan = plan::plan(
                &self.keys,
                &plan::Decided {
                    read: &read,
                    wrote: &wrote,
                    counted: &counted,
                    request_id: &request_id,
                },
            )?;
            // The engine checks what is written (its fence pending until
            // etcd assigns it) before anything is sent.
            engine.supply(Supply::Written(Box::new(d.clone())))?;
            if engine.step()?.is_some() {
                return Err(Error::corrupt(format!(
                    "etcd: {task}: one decision asked for more after its write"
                )));
            }
            let mut wanted = plan.wanted();
            // A claim's lease granted beside its read serves its holder key.
            let pre = plan
                .leased
                .iter()
                .position(|l| l.slot == plan::Slot::Holder)
                .and_then(|i| Some((i, ahead.as_mut()?.take(plan.leased[i].secs)?)));
            if let Some((i, _)) = pre {
                wanted[i] = None;
            }
            let mut granted = self.grant_leases(&wanted).await?;
            if let Some((i, id)) = pre {
                granted[i] = Some(id);
            }
            let made: Vec<i64> = granted.iter().copied().flatten().collect();
            let on_leases = plan.leases_of(&op.task, &granted);
            let txn = plan.txn(&granted);
            let (mut client, member) = self.client_for(start, attempt);
            let sent = tokio::time::timeout(self.attempt_timeout(), client.txn(txn)).await;
            if sent.is_err() {
                self.suspect(member);
            }
            // The leases the holder and timer keys were on, which a
            // committed grant, renewal, new wait or end leaves holding nothing.
            let replaced = plan.left_over(&made);
            let landed = match sent {
                Ok(Ok(resp)) if resp.succeeded() => match resp.header() {
                    Some(header) => {
                        self.commits.fetch_add(1, Ordering::Relaxed);
                        let fence = self.revision("a transaction's revision", header.revision());
                        fence.map(|f| {
                            d.assign_fence(f);
                            let left = Self::left_by(&found, &d, header.revision(), &on_leases);
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

    /// One operation decided by core's engine on `found`: an answer that
    /// writes nothing, a write (with the engine, to check it), or `Graph`
    /// when the decision reads or changes other tasks.
    fn decide_one(op: &Operation, found: &Found, rules: LeaseRules) -> Result<One> {
        if matches!(
            op.request,
            baton_core::Request::Link { .. } | baton_core::Request::Wake
        ) {
            return Ok(One::Graph);
        }
        let mut engine = Engine::one(op.clone(), rules);
        loop {
            match engine.step()? {
                Some(Need::Load {
                    tasks,
                    upstream: false,
                    ..
                }) if tasks == std::slice::from_ref(&op.task) => {
                    engine.supply(Supply::Loaded(vec![graph::as_found(found)]))?;
                }
                Some(Need::Load { .. }) => return Ok(One::Graph),
                Some(Need::Write(d)) if !d.follow_ups.is_empty() => return Ok(One::Graph),
                Some(Need::Write(d)) => return Ok(One::Write(engine, *d)),
                Some(_) => {
                    return Err(Error::unavailable(
                        "etcd: one operation asked for a page of an index",
                    ));
                }
                None => {
                    let (mut answers, _) = engine.finish();
                    return match answers.pop() {
                        Some(a) => a.into_one().map(One::Answer),
                        None => Err(Error::unavailable("etcd: the engine decided nothing")),
                    };
                }
            }
        }
    }

    /// The stored event under each conflict key `d` counts (a refusal
    /// recorded once per fence and request), with its revision, as read.
    async fn counted_of(
        &self,
        task: &str,
        d: &Decision,
    ) -> Result<std::collections::BTreeMap<String, Option<(Stored<Event>, i64)>>> {
        let mut counted = std::collections::BTreeMap::new();
        let keys: Vec<String> = d
            .events()
            .filter_map(|e| e.conflict_key.as_ref())
            .map(|ck| self.keys.conflict(task, ck))
            .collect();
        for key in keys {
            let existing = {
                let k = key.clone();
                self.call_retrying("read", |mut c| {
                    let k = k.clone();
                    async move { c.get(k, None).await }
                })
                .await?
            };
            let stored = match existing.kvs().first() {
                Some(kv) => {
                    let stored: Stored<Event> = baton_core::json::decode_stored(kv.value())
                        .map_err(|err| {
                            Error::corrupt(format!(
                                "etcd prefix {:?}: an event does not decode: {err}",
                                self.opts.prefix
                            ))
                        })?;
                    Some((stored, kv.mod_revision()))
                }
                None => None,
            };
            counted.insert(key, stored);
        }
        Ok(counted)
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
            Some(_) if d.forgets() => None,
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
