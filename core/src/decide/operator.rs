//! Operator requests (redispatch, finalize, cancel by an operator), the
//! metadata merge, and a settle with nothing more to do.

use super::*;

/// Decides an operator request, a metadata merge or a settle.
pub(super) fn decide(op: &Operation, rec: &TaskRecord, live: bool) -> Verdict {
    let req = &op.request;
    let now = op.now;
    let actor = req.actor();
    match req {
        Request::Cancel {
            fence: None, force, ..
        } => {
            if rec.state == State::Cancelled {
                return Verdict::Ack;
            }
            if rec.state.is_terminal() {
                return illegal(rec, req);
            }
            // Cooperative: a live lease's holder is asked to stop (it sees
            // the request in its next renewal's answer); the task becomes
            // CANCELLED when it gives the task back or its lease ends.
            if live && !force {
                if rec.cancel_requested.is_some() {
                    return Verdict::Ack;
                }
                let mut r = next(rec, now);
                r.cancel_requested = Some(crate::model::CancelRequest {
                    by: actor.clone(),
                    at: now,
                });
                let e = draft(
                    &r,
                    EventKind::CancelRequested,
                    Some(rec.state),
                    actor,
                    rec.current_fence(),
                    now,
                );
                return commit(r, vec![e]);
            }
            cancelled(rec, req, actor, now)
        }
        Request::Redispatch { iteration, .. } => {
            match rec.state {
                State::Succeeded => return refuse(Refusal::Completed),
                State::Failed | State::Cancelled | State::Stalled | State::NotStarted => {}
                _ => return illegal(rec, req),
            }
            if *iteration <= rec.iteration {
                return refuse(Refusal::IterationNotAdvanced {
                    iteration: *iteration,
                    current_iteration: rec.iteration,
                });
            }
            let mut r = next(rec, now);
            r.state = State::Registered;
            reset_attempt_state(&mut r, now);
            r.iteration = *iteration;
            r.stalls = 0;
            let e = draft(
                &r,
                EventKind::Redispatched,
                Some(rec.state),
                actor,
                None,
                now,
            )
            .details(json!({"previous_iteration": rec.iteration, "iteration": iteration}));
            commit(r, vec![e])
        }
        Request::Finalize { error, .. } => {
            if rec.state == State::Succeeded {
                return refuse(Refusal::Completed);
            }
            if rec
                .closure
                .as_ref()
                .is_some_and(|c| c.request == RequestKind::Finalize)
            {
                return Verdict::Ack;
            }
            let error = error
                .clone()
                .or_else(|| rec.error.clone())
                .unwrap_or_else(|| json!({"code": "finalized"}));
            close(
                rec,
                req,
                actor,
                State::Failed,
                EventKind::Finalized,
                now,
                |r| r.error = Some(error),
            )
        }
        Request::Annotate { metadata, .. } => {
            let mut r = next(rec, now);
            r.metadata
                .extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
            let keys: Vec<&String> = metadata.keys().collect();
            let e = draft(&r, EventKind::Annotated, Some(rec.state), actor, None, now)
                .details(json!({"keys": keys}));
            commit(r, vec![e])
        }
        Request::Settle => Verdict::Ack,
        // Every other request is decided by another concern's module.
        _ => illegal(rec, req),
    }
}

/// Retention: an ended task that ended at or before `before` becomes its
/// tombstone (state, attempt, iteration, the last lease with its fence,
/// its closure and times; nothing of its body), and the store drops its
/// events with it. With `forget_after_ms`, the tombstone is marked
/// forgotten by a prune whose `before` reaches `before` plus that; a
/// tombstone so marked is forgotten (removed) by such a prune. Anything
/// else is left as it is (an acknowledgement): a task still live, one that
/// ended later, one pruned already whose time to go has not come or was
/// never set.
pub(super) fn prune(rec: &TaskRecord, req: &Request, now: Timestamp) -> Verdict {
    let Request::Prune {
        before,
        forget_after_ms,
        ..
    } = req
    else {
        return illegal(rec, req);
    };
    let before = *before;
    if rec.pruned_at.is_some() {
        return match rec.forget_at {
            Some(at) if at <= before => {
                // The record as it goes: a change like any other.
                let mut r = rec.clone();
                r.revision = rec.revision + 1;
                r.updated_at = now;
                let mut c = notify::finish(r, Vec::new(), false);
                c.forgets = true;
                Verdict::Commit(c)
            }
            _ => Verdict::Ack,
        };
    }
    let ended = rec.finished_at.unwrap_or(rec.updated_at);
    // A record that holds a setting (a key's limit, a queue's policy, a
    // schedule, the refusal log) is never a task's history to forget.
    if rec.holds_setting() || !rec.state.is_terminal() || ended > before {
        return Verdict::Ack;
    }
    let mut r = super::build::first_record(&rec.task, rec.state, rec.created_at);
    r.revision = rec.revision + 1;
    r.attempt = rec.attempt;
    r.stalls = rec.stalls;
    r.iteration = rec.iteration;
    r.lease = rec.lease.clone();
    r.closure = rec.closure.clone();
    r.started_at = rec.started_at;
    r.finished_at = rec.finished_at;
    r.updated_at = now;
    r.pruned_at = Some(now);
    r.forget_at = forget_after_ms.map(|ms| before.plus_ms(ms));
    let mut c = notify::finish(r, Vec::new(), false);
    c.drops_history = true;
    Verdict::Commit(c)
}
