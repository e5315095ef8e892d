//! Retention and the sweep: what an authority does to many tasks at once
//! (prune what ended long ago; persist what changed by itself), each task
//! its own request through the store.

use super::*;

/// What a retention pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Ended tasks that became tombstones.
    pub pruned: u64,
    /// Tombstones whose time came, removed.
    pub forgotten: u64,
}

impl<S: Store> Authority<S> {
    /// Who may make an act over many tasks is the decision's to say: one
    /// of its requests asked on no record, before any is read; refused
    /// (`what` was refused: ...) when it needs an operator.
    pub(super) fn may_act(request: Request, now: Timestamp, what: &str) -> Result<()> {
        let probe = Operation {
            task: crate::refusal::refusals_record_id(),
            request,
            pre: Preconditions::none(),
            now,
            clock: crate::time::CommitClock::none(),
        };
        match crate::decide::decide(&probe, None, crate::decide::Judged::default()).verdict {
            Verdict::Refuse {
                refusal: refusal @ Refusal::OperatorRequired { .. },
                ..
            } => Err(Error::not_permitted(format!(
                "{what} was refused: {refusal}"
            ))),
            _ => Ok(()),
        }
    }

    /// Retention: prunes tasks that ended at least `older_than_ms` ago
    /// (by this authority's clock), at most `max` of them, in commits of
    /// [`PRUNE_BATCH`]: each becomes its tombstone and loses its events and
    /// acknowledged notifications ([`Request::Prune`]). Finds them through
    /// the stores' (state, due) index, where an ended task is due at its
    /// end and a tombstone is not at all, so a pass never reads what an
    /// earlier one pruned. Returns how many it pruned.
    pub async fn prune(&self, by: Actor, older_than_ms: u64, max: usize) -> Result<u64> {
        self.prune_and_forget(by, older_than_ms, None, max)
            .await
            .map(|p| p.pruned)
    }

    /// [`Authority::prune`], and with `forget_after_ms` each tombstone it
    /// makes is marked to be forgotten by a pass whose cutoff is that much
    /// later (with the same `older_than_ms`, that long after this one).
    /// Every pass forgets the marked tombstones whose time came, found
    /// through the same index (a marked tombstone is due at its time):
    /// their records go and their ids are free again, the one cost (an id
    /// forgotten can be granted anew, under a higher fence, as the fence
    /// counter never goes back). At most `max` records changed in all.
    pub async fn prune_and_forget(
        &self,
        by: Actor,
        older_than_ms: u64,
        forget_after_ms: Option<u64>,
        max: usize,
    ) -> Result<Pruned> {
        let now = self.clock.now();
        let before = Timestamp(
            now.as_millis()
                .saturating_sub(i64::try_from(older_than_ms).unwrap_or(i64::MAX)),
        );
        // Whether or not anything is due.
        let probe = Request::Prune {
            by: by.clone(),
            before,
            forget_after_ms,
        };
        Self::may_act(probe, now, "prune")?;
        let mut out = Pruned::default();
        for state in State::ALL.into_iter().filter(|s| s.is_terminal()) {
            let mut cursor: Option<TaskId> = None;
            loop {
                let changed = out.pruned + out.forgotten;
                let left = max.saturating_sub(usize::try_from(changed).unwrap_or(usize::MAX));
                if left == 0 {
                    return Ok(out);
                }
                let limit = PRUNE_BATCH.min(left);
                let query = ListQuery {
                    after: cursor.clone(),
                    limit,
                    clauses: Some(vec![Clause {
                        state,
                        due: crate::store::Due::Passed,
                    }]),
                    now: before,
                };
                let batch = self.store.list(&query).await?;
                let Some(last) = batch.last() else {
                    break;
                };
                cursor = Some(last.record.task.clone());
                let at = self.clock.now();
                let ops: Vec<Operation> = batch
                    .iter()
                    .map(|s| Operation {
                        task: s.record.task.clone(),
                        request: Request::Prune {
                            by: by.clone(),
                            before,
                            forget_after_ms,
                        },
                        pre: Preconditions::none(),
                        now: at,
                        clock: self.commit_clock(),
                    })
                    .collect();
                let decided = self.store.apply_all(ops).await?;
                // A refusal (an operator's act asked by a worker) or bad
                // input stops the pass: nothing of this batch was written.
                for d in &decided {
                    match &d.verdict {
                        // Forgotten meanwhile by another pass.
                        Verdict::Refuse {
                            refusal: Refusal::NotFound,
                            ..
                        } => {}
                        Verdict::Refuse { refusal, .. } => {
                            return Err(Error::not_permitted(format!(
                                "prune was refused: {refusal}"
                            )));
                        }
                        Verdict::Invalid(e) => return Err(e.clone()),
                        _ => {}
                    }
                }
                out.pruned += decided.iter().filter(|d| d.drops_history()).count() as u64;
                out.forgotten += decided.iter().filter(|d| d.forgets()).count() as u64;
                if batch.len() < limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Persists the derived change of every task whose lease or start
    /// deadline has passed (with its events and notifications). Never needed
    /// for correctness; it makes the outbox speak for tasks nobody touches.
    pub async fn sweep(&self, dry_run: bool) -> Result<Vec<Swept>> {
        // An operator's act: a store that authenticates its callers (a
        // server with tokens) refuses it up front, whether or not
        // anything is due.
        if let Some(p) = &self.permits {
            p.permit(crate::access::Act::Sweep).await?;
        }
        let now = self.clock.now();
        let mut swept = Vec::new();
        let mut cursor: Option<TaskId> = None;
        loop {
            let query = ListQuery {
                after: cursor.clone(),
                limit: 500,
                clauses: Some(Clause::due_now()),
                now,
            };
            let batch = self.store.list(&query).await?;
            let exhausted = batch.len() < 500;
            for snap in batch {
                cursor = Some(snap.record.task.clone());
                let derived = derive(&snap.record, snap.judged, now);
                if derived.state == snap.record.state {
                    continue;
                }
                if dry_run {
                    swept.push(Swept {
                        task: derived.task,
                        from: snap.record.state,
                        to: derived.state,
                    });
                    continue;
                }
                let op = Operation {
                    task: snap.record.task.clone(),
                    request: Request::Settle,
                    pre: Preconditions::none(),
                    now: self.clock.now(),
                    clock: self.commit_clock(),
                };
                let d = self.store.apply(op).await?;
                if let Some(c) = &d.settle {
                    swept.push(Swept {
                        task: c.record.task.clone(),
                        from: snap.record.state,
                        to: c.record.state,
                    });
                }
            }
            if exhausted {
                return Ok(swept);
            }
        }
    }
}
