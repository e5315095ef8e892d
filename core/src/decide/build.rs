//! Building changes: the next revision, events, refusals and commits.

use super::*;

/// A holder's or operator's terminal request.
pub(super) fn close(
    rec: &TaskRecord,
    req: &Request,
    actor: Actor,
    to: State,
    kind: EventKind,
    now: Timestamp,
    apply: impl FnOnce(&mut TaskRecord),
) -> Verdict {
    if rec.state.is_terminal() && req.kind() != RequestKind::Finalize {
        return illegal(rec, req);
    }
    let mut r = next(rec, now);
    r.state = to;
    r.finished_at = Some(now);
    r.closure = Some(Closure {
        request: req.kind(),
        actor: actor.clone(),
        fence: req.fence(),
    });
    apply(&mut r);
    let e = draft(
        &r,
        kind,
        Some(rec.state),
        actor,
        req.fence().or(rec.current_fence()),
        now,
    );
    commit(r, vec![e])
}

/// `rec` closed as CANCELLED by `req` (the holder's cancel or release, an
/// operator's cancel).
pub(super) fn cancelled(rec: &TaskRecord, req: &Request, actor: Actor, now: Timestamp) -> Verdict {
    close(
        rec,
        req,
        actor,
        State::Cancelled,
        EventKind::Cancelled,
        now,
        |_| {},
    )
}

pub(super) fn reset_attempt_state(r: &mut TaskRecord, now: Timestamp) {
    r.deadline_from = Some(now);
    r.current_step = 0;
    r.evidence.clear();
    r.error = None;
    r.closure = None;
    r.started_at = None;
    r.finished_at = None;
    r.executor = None;
    r.cancel_requested = None;
}

/// A task's first record (revision 1, attempt 0, iteration 1), in `state`
/// at `now`; the caller sets what its request gives it.
pub(super) fn first_record(task: &TaskId, state: State, now: Timestamp) -> TaskRecord {
    TaskRecord {
        task: task.clone(),
        manifest: None,
        state,
        revision: 1,
        attempt: 0,
        stalls: 0,
        iteration: 1,
        lease: None,
        run_id: None,
        executor: None,
        current_step: 0,
        evidence: Default::default(),
        error: None,
        metadata: Default::default(),
        closure: None,
        created_at: now,
        deadline_from: None,
        started_at: None,
        finished_at: None,
        updated_at: now,
        node: None,
        dependents: Vec::new(),
        cancel_requested: None,
        schedule: None,
        schedule_failure: None,
        key_limit: None,
        queue_policy: None,
        refusal_log: None,
        pruned_at: None,
        forget_at: None,
        checkpoints: Vec::new(),
    }
}

/// The next version of `rec`: revision + 1, stamped `now`.
pub(super) fn next(rec: &TaskRecord, now: Timestamp) -> TaskRecord {
    let mut r = rec.clone();
    r.revision += 1;
    r.updated_at = now;
    r
}

pub(super) fn refuse(refusal: Refusal) -> Verdict {
    Verdict::Refuse {
        refusal,
        conflict: None,
    }
}

pub(super) fn illegal(rec: &TaskRecord, req: &Request) -> Verdict {
    refuse(Refusal::IllegalTransition {
        state: rec.state,
        request: req.kind(),
    })
}

/// A refusal recorded as a CONFLICT_REFUSED event (counted per task, fence and request).
pub(super) fn conflict(op: &Operation, rec: &TaskRecord, refusal: Refusal) -> Verdict {
    with_conflict(op, rec, refuse(refusal))
}

pub(super) fn with_conflict(op: &Operation, rec: &TaskRecord, v: Verdict) -> Verdict {
    let Verdict::Refuse { refusal, .. } = v else {
        return v;
    };
    let fence = op.request.fence();
    let mut e = draft(
        rec,
        EventKind::ConflictRefused,
        Some(rec.state),
        op.request.actor(),
        fence,
        op.now,
    )
    .details(json!({
        "request": op.request.kind(),
        "reason": refusal.reason(),
        "refusal": refusal,
    }));
    e.to = Some(rec.state);
    e.conflict_key = Some(format!("{}:{}", fence.unwrap_or(0), op.request.kind()));
    Verdict::Refuse {
        refusal,
        conflict: Some(e),
    }
}

pub(super) fn commit(r: TaskRecord, events: Vec<EventDraft>) -> Verdict {
    Verdict::Commit(finish(r, events, false))
}

pub(super) fn commit_grant(r: TaskRecord, events: Vec<EventDraft>) -> Verdict {
    Verdict::Commit(finish(r, events, true))
}

/// Builds an event for `r` (its state after the change is `to`).
pub(super) fn draft(
    r: &TaskRecord,
    kind: EventKind,
    from: Option<State>,
    actor: Actor,
    fence: Option<u64>,
    at: Timestamp,
) -> EventDraft {
    EventDraft {
        task: r.task.clone(),
        kind,
        from,
        to: Some(r.state),
        actor,
        attempt: r.attempt,
        fence,
        details: Value::Null,
        at,
        conflict_key: None,
    }
}

pub(super) trait WithDetails {
    fn details(self, d: Value) -> Self;
}

impl WithDetails for EventDraft {
    fn details(mut self, d: Value) -> Self {
        self.details = d;
        self
    }
}

/// A task entered the ready index (every dependency done, or put back
/// when its key had a slot).
pub(super) fn ready_event(r: &TaskRecord, now: Timestamp) -> EventDraft {
    draft(r, EventKind::Ready, Some(r.state), Actor::System, None, now)
}
