//! Queue policies: defaults a task takes from its queue when it is added
//! (a retry policy, for a task added without one). The queue's record
//! (`queue:QUEUE`) is never granted; an add reads it with the task's
//! dependencies ([`crate::decide::upstream_ids`]) and the new node keeps
//! the policy it found, so a policy set later changes only later adds.

use super::*;
use crate::graph::{QUEUE_PREFIX, QueuePolicy, RetryPolicy};

/// Creating a record whose id names a queue's policy, other than by the
/// policy's own request: refused, so no task can stand in for it.
pub(super) fn reserved(op: &Operation) -> Option<Verdict> {
    (op.task.as_str().starts_with(QUEUE_PREFIX)
        && !matches!(op.request, Request::QueuePolicy { .. }))
    .then(|| {
        Verdict::Invalid(Error::invalid(
            "task",
            format!(
                "ids that start with {QUEUE_PREFIX:?} name queues' policies (got {:?})",
                op.task.as_str()
            ),
        ))
    })
}

/// Sets the policy on the queue's record (`rec`, `None` before the first).
pub(super) fn decide(
    op: &Operation,
    rec: Option<&TaskRecord>,
    by: &Actor,
    retry: Option<RetryPolicy>,
) -> Verdict {
    if crate::graph::queue_of_record(&op.task).is_none() {
        return Verdict::Invalid(Error::invalid(
            "task",
            format!(
                "a queue's policy record id starts with {QUEUE_PREFIX:?} (got {:?})",
                op.task.as_str()
            ),
        ));
    }
    let policy = QueuePolicy { retry };
    let mut r = match rec {
        Some(r) if r.queue_policy == Some(policy) => return Verdict::Ack,
        Some(r) if r.queue_policy.is_some() => next(r, op.now),
        Some(r) => return illegal(r, &op.request),
        None => first_record(&op.task, State::Registered, op.now),
    };
    r.queue_policy = Some(policy);
    let e = draft(
        &r,
        EventKind::PolicySet,
        Some(r.state),
        by.clone(),
        None,
        op.now,
    )
    .details(json!({"retry": retry}));
    commit(r, vec![e])
}
