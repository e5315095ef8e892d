//! What time has already decided: an expired lease, a passed start
//! deadline. Reads derive it; the next write persists it. Whether either
//! has happened is the store's judgement ([`Judged`]), never a comparison
//! made here with the caller's clock; `now` only stamps what is written.

use super::*;

/// The record as it is at `now`: an expired lease shows as such, a passed
/// start deadline as NOT_STARTED. Reads use this; it never writes.
pub fn derive(record: &TaskRecord, judged: Judged, now: Timestamp) -> TaskRecord {
    match settle(record, judged, now) {
        Some(c) => c.record,
        None => record.clone(),
    }
}

/// What time has already decided about `record`, as a change to persist:
/// an expired lease stalls its attempt (claimable again while
/// `stalls < max_attempts`, else STALLED), and a passed start deadline makes
/// a DECLARED or REGISTERED task NOT_STARTED. `None` when nothing is due.
pub fn settle(record: &TaskRecord, judged: Judged, now: Timestamp) -> Option<Change> {
    let mut r = record.clone();
    let mut events = Vec::new();
    let mut retried = None;
    if r.state.is_held() && !judged.lease_holds {
        let from = r.state;
        let (fence, expired_at, timed_out) = match r.lease.as_mut() {
            Some(l) => {
                l.expired = true;
                (Some(l.fence), l.expires_at, l.timed_out())
            }
            None => (None, now, false),
        };
        r.stalls = r.stalls.saturating_add(1);
        // A task with a retry policy counts a stall (or a time-out) as a
        // failed attempt: tried again after the policy's wait while
        // attempts are left, else ended STALLED.
        let policy = r.node.as_ref().and_then(|n| n.retry_policy());
        let retry = policy.and_then(|_| super::lease::retries(record));
        let again = r.max_attempts().is_none_or(|max| r.stalls < max)
            && (policy.is_none() || retry.is_some());
        if let Some(asked) = r.cancel_requested.clone() {
            // The holder asked to stop let its lease run out instead of
            // giving the task back: the cancel it was asked for.
            r.state = State::Cancelled;
            r.finished_at = Some(now);
            r.closure = Some(Closure {
                request: RequestKind::Cancel,
                actor: asked.by,
                fence,
            });
        } else if again {
            r.state = State::Registered;
            r.current_step = 0;
            // The start deadline counts afresh from when the attempt ended
            // (whether it has passed is still the judge's: `start_deadline_at`).
            r.deadline_from = Some(expired_at.min(now));
            if let Some(p) = retry {
                let at = expired_at.min(now);
                let wait = p.wait_ms(&r.task, r.attempt);
                let until = at.checked_plus_ms(wait).unwrap_or(Timestamp::MAX);
                r.evidence.clear();
                r.started_at = None;
                if let Some(n) = r.node.as_mut() {
                    n.not_before = Some(until);
                }
                retried = Some(json!({
                    "attempt": r.attempt,
                    "max_attempts": p.max_attempts,
                    "wait_ms": wait,
                    "not_before": until,
                    "error": {"code": if timed_out { "timed_out" } else { "lease_expired" }, "at": expired_at},
                }));
            }
        } else {
            r.state = State::Stalled;
            r.finished_at = Some(now);
            r.error = Some(if timed_out {
                json!({"code": "timed_out", "at": expired_at})
            } else {
                json!({"code": "lease_expired", "expired_at": expired_at})
            });
            r.closure = Some(Closure {
                request: RequestKind::Expire,
                actor: Actor::System,
                fence,
            });
        }
        let kind = if r.state == State::Cancelled {
            EventKind::Cancelled
        } else if timed_out {
            EventKind::TimedOut
        } else {
            EventKind::Stalled
        };
        events.push(
            draft(&r, kind, Some(from), Actor::System, fence, now).details(json!({
                "expired_at": expired_at,
                "stalls": r.stalls,
                "max_attempts": r.max_attempts(),
            })),
        );
        if let Some(details) = retried {
            r.error = details.get("error").cloned();
            events.push(
                draft(
                    &r,
                    EventKind::RetryScheduled,
                    Some(r.state),
                    Actor::System,
                    fence,
                    now,
                )
                .details(details),
            );
        }
    }
    if matches!(r.state, State::Declared | State::Registered)
        && r.due_at().is_some()
        && judged.deadline_passed
    {
        let from = r.state;
        let due = r.due_at().unwrap_or(now);
        r.state = State::NotStarted;
        r.finished_at = Some(now);
        r.error = Some(json!({"code": "start_deadline_exceeded", "deadline": due}));
        r.closure = Some(Closure {
            request: RequestKind::Deadline,
            actor: Actor::System,
            fence: None,
        });
        events.push(
            draft(
                &r,
                EventKind::NotStarted,
                Some(from),
                Actor::System,
                None,
                now,
            )
            .details(json!({"deadline": due})),
        );
    }
    if events.is_empty() {
        return None;
    }
    r.revision += 1;
    r.updated_at = now;
    Some(finish(r, events, false))
}
