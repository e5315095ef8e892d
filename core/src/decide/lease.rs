//! The lease requests (SPEC §4): claim, recover, renew, release, complete,
//! fail, cancel by the holder; granting and lease ends.

use super::*;

/// Decides a lease request on an existing task.
pub(super) fn decide(op: &Operation, rec: &TaskRecord, live: bool, rules: LeaseRules) -> Verdict {
    let req = &op.request;
    let now = op.now;
    let actor = req.actor();
    match req {
        Request::Claim { owner, ttl_ms, .. } => {
            if !rec.is_bare() {
                return illegal(rec, req);
            }
            claim_like(
                op,
                rules,
                rec,
                live,
                owner,
                ttl_ms.unwrap_or(DEFAULT_BARE_TTL_MS),
                EventKind::Claimed,
            )
        }
        Request::Recover { owner, ttl_ms } => {
            if live {
                // Invariant: live implies a lease.
                return match &rec.lease {
                    Some(l) => refuse(Refusal::LeaseLive {
                        holder: l.owner.clone(),
                        fence: l.fence,
                        expiry: l.expires_at,
                    }),
                    None => illegal(rec, req),
                };
            }
            if !rec.is_bare() && (rec.lease.is_none() || rec.state != State::Registered) {
                return match rec.state {
                    State::Succeeded => refuse(Refusal::Completed),
                    _ => illegal(rec, req),
                };
            }
            let ttl_ms = match declared_ttl(rec, *ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            claim_like(op, rules, rec, live, owner, ttl_ms, EventKind::Recovered)
        }
        Request::Renew { ttl_ms, .. } => {
            let ttl_ms = match declared_ttl(rec, *ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let expires_at = match lease_end(now, ttl_ms, rules) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let mut r = next(rec, now);
            if let Some(l) = r.lease.as_mut() {
                l.expires_at = l.capped(expires_at);
            }
            let expires_at = r.lease.as_ref().map_or(expires_at, |l| l.expires_at);
            let e = draft(
                &r,
                EventKind::Renewed,
                Some(rec.state),
                actor,
                req.fence(),
                now,
            )
            .details(json!({"expires_at": expires_at}));
            commit(r, vec![e])
        }
        // A holder asked to stop gives the task back: that is the cancel.
        Request::Release { .. } if rec.cancel_requested.is_some() => {
            cancelled(rec, req, actor, now)
        }
        Request::Release { .. } => {
            let mut r = next(rec, now);
            r.state = State::Registered;
            r.current_step = 0;
            r.deadline_from = Some(now);
            let e = draft(
                &r,
                EventKind::Released,
                Some(rec.state),
                actor,
                req.fence(),
                now,
            );
            commit(r, vec![e])
        }
        // A failure its task's policy tries again (unless an operator
        // asked the holder to stop): put off, not FAILED.
        Request::Fail { error, .. }
            if rec.is_bare() && rec.cancel_requested.is_none() && retries(rec).is_some() =>
        {
            retry_later(rec, req, actor, error.clone(), now)
        }
        Request::Complete { .. } | Request::Fail { .. } => {
            if !rec.is_bare() {
                return illegal(rec, req);
            }
            let (to, kind, error) = match req {
                Request::Fail { error, .. } => (State::Failed, EventKind::Failed, error.clone()),
                _ => (State::Succeeded, EventKind::Succeeded, None),
            };
            close(rec, req, actor, to, kind, now, |r| {
                if error.is_some() {
                    r.error = error;
                }
            })
        }
        Request::Cancel { fence: Some(_), .. } => cancelled(rec, req, actor, now),
        // Every other request is decided by another concern's module.
        _ => illegal(rec, req),
    }
}

/// The retry policy that tries `rec`'s failed attempt again, if any
/// (attempts are left).
pub(super) fn retries(rec: &TaskRecord) -> Option<crate::graph::RetryPolicy> {
    let p = rec.node.as_ref()?.retry_policy()?;
    (rec.attempt < u64::from(p.max_attempts)).then_some(p)
}

/// A failed attempt tried again: the task waits (REGISTERED, put off by
/// the policy's wait), with the failure's error; the holder's repeat of
/// its report is recognised as done.
pub(super) fn retry_later(
    rec: &TaskRecord,
    req: &Request,
    actor: Actor,
    error: Option<serde_json::Value>,
    now: Timestamp,
) -> Verdict {
    let Some(policy) = retries(rec) else {
        return illegal(rec, req);
    };
    let wait = policy.wait_ms(&rec.task, rec.attempt);
    let until = now.checked_plus_ms(wait).unwrap_or(Timestamp::MAX);
    let mut r = next(rec, now);
    r.state = State::Registered;
    r.current_step = 0;
    r.deadline_from = Some(now);
    // A declared task's next attempt proves its steps and evidence anew.
    r.evidence.clear();
    r.started_at = None;
    r.error = error.clone();
    r.closure = Some(Closure {
        request: req.kind(),
        actor: actor.clone(),
        fence: req.fence(),
    });
    if let Some(n) = r.node.as_mut() {
        n.not_before = Some(until);
    }
    let e = draft(
        &r,
        EventKind::RetryScheduled,
        Some(rec.state),
        actor,
        req.fence(),
        now,
    )
    .details(json!({
        "attempt": rec.attempt,
        "max_attempts": policy.max_attempts,
        "wait_ms": wait,
        "not_before": until,
        "error": error,
    }));
    commit(r, vec![e])
}

/// Grant (or re-grant) `owner` the task: a new fence always; a new attempt
/// unless the owner already holds the live lease.
pub(super) fn claim_like(
    op: &Operation,
    rules: LeaseRules,
    rec: &TaskRecord,
    live: bool,
    owner: &Id,
    ttl_ms: u64,
    kind: EventKind,
) -> Verdict {
    let req = &op.request;
    let expires_at = match lease_end(op.now, ttl_ms, rules) {
        Ok(t) => t,
        Err(e) => return Verdict::Invalid(e),
    };
    if live {
        let Some(l) = &rec.lease else {
            return illegal(rec, req);
        };
        if &l.owner != owner {
            return refuse(Refusal::Held {
                holder: l.owner.clone(),
                fence: l.fence,
                expiry: l.expires_at,
            });
        }
        // The holder claims again: a new fence makes its earlier one stale
        // (the same attempt, so the same run-time limit).
        let mut r = next(rec, op.now);
        let ends_by = l.ends_by;
        let expires_at = l.capped(expires_at);
        r.lease = Some(Lease {
            owner: owner.clone(),
            attempt: rec.attempt,
            fence: PENDING_FENCE,
            expires_at,
            claimed_at: op.now,
            expired: false,
            lock_delay_ms: lock_delay_of(rec.manifest.as_ref(), req),
            ends_by,
        });
        let e = draft(
            &r,
            kind,
            Some(rec.state),
            req.actor(),
            Some(PENDING_FENCE),
            op.now,
        )
        .details(json!({"regrant": true, "previous_fence": l.fence, "expires_at": expires_at}));
        return commit_grant(r, vec![e]);
    }
    match rec.state {
        State::Succeeded => return refuse(Refusal::Completed),
        State::Registered => {}
        _ => return illegal(rec, req),
    }
    let mut r = next(rec, op.now);
    r.state = State::Claimed;
    r.attempt += 1;
    r.current_step = 0;
    // A start that has come is spent: given back, the task is ready again
    // at once (in the ready index, not the held one).
    if let Some(n) = r.node.as_mut()
        && n.not_before.is_some_and(|t| t <= op.now)
    {
        n.not_before = None;
    }
    if !r.is_bare() {
        r.executor = Some(owner.clone());
    }
    // A new attempt: its run-time limit counts from now.
    let ends_by = rec
        .timeout_ms()
        .map(|t| op.now.checked_plus_ms(t).unwrap_or(Timestamp::MAX));
    let lease = Lease {
        owner: owner.clone(),
        attempt: r.attempt,
        fence: PENDING_FENCE,
        expires_at,
        claimed_at: op.now,
        expired: false,
        lock_delay_ms: lock_delay_of(rec.manifest.as_ref(), req),
        ends_by,
    };
    let expires_at = lease.capped(expires_at);
    r.lease = Some(Lease {
        expires_at,
        ..lease
    });
    let previous = rec.lease.as_ref().map(|l| l.fence);
    let e = draft(
        &r,
        kind,
        Some(rec.state),
        req.actor(),
        Some(PENDING_FENCE),
        op.now,
    )
    .details(json!({"previous_fence": previous, "expires_at": expires_at}));
    commit_grant(r, vec![e])
}

pub(super) fn create_bare(
    op: &Operation,
    rules: LeaseRules,
    owner: &Id,
    ttl_ms: u64,
    kind: EventKind,
) -> Verdict {
    let now = op.now;
    let expires_at = match lease_end(now, ttl_ms, rules) {
        Ok(t) => t,
        Err(e) => return Verdict::Invalid(e),
    };
    let mut r = first_record(&op.task, State::Claimed, now);
    r.attempt = 1;
    r.lease = Some(Lease {
        owner: owner.clone(),
        attempt: 1,
        fence: PENDING_FENCE,
        expires_at,
        claimed_at: now,
        expired: false,
        lock_delay_ms: lock_delay_of(None, &op.request),
        ends_by: None,
    });
    let e = draft(&r, kind, None, op.request.actor(), Some(PENDING_FENCE), now)
        .details(json!({"expires_at": expires_at}));
    Verdict::Commit(finish(r, vec![e], true))
}

/// The lock delay a new grant carries: a declared task's from its
/// manifest, a bare task's from the claim that asks for it.
fn lock_delay_of(manifest: Option<&crate::manifest::Manifest>, req: &Request) -> u64 {
    match (manifest, req) {
        (Some(m), _) => m.lock_delay_ms(),
        (None, Request::Claim { lock_delay_ms, .. }) => lock_delay_ms.unwrap_or(0),
        (None, _) => 0,
    }
}

/// When a lease granted or renewed at `now` for `ttl_ms` ends, as the store
/// can hold it (`rules`): an expiry past what a timestamp can hold is bad
/// input, never a wrapped or saturated time.
pub(super) fn lease_end(
    now: Timestamp,
    ttl_ms: u64,
    rules: LeaseRules,
) -> Result<Timestamp, Error> {
    let ttl_ms = rules.effective(ttl_ms);
    now.checked_plus_ms(ttl_ms).ok_or_else(|| {
        Error::invalid(
            "ttl",
            format!(
                "the lease would end past {} (now {now}, ttl {ttl_ms}ms)",
                Timestamp::MAX
            ),
        )
    })
}
