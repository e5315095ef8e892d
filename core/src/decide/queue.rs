//! Records a server keeps beside the tasks, never granted. Queue
//! policies: defaults a task takes from its queue when it is added
//! (a retry policy, for a task added without one). The queue's record
//! (`queue:QUEUE`) is never granted; an add reads it with the task's
//! dependencies ([`crate::decide::upstream_ids`]) and the new node keeps
//! the policy it found, so a policy set later changes only later adds.

use super::*;
use crate::graph::{QUEUE_PREFIX, RetryPolicy};

/// Creating a record whose id names a queue's policy or the refusal
/// log, other than by its own request: refused, so no task can stand in
/// for either.
pub(super) fn reserved(op: &Operation) -> Option<Verdict> {
    use crate::refusal::REFUSALS_PREFIX;
    let id = op.task.as_str();
    let (prefix, what) = if id.starts_with(QUEUE_PREFIX)
        && !matches!(
            op.request,
            Request::QueuePolicy { .. } | Request::QueuePause { .. }
        ) {
        (QUEUE_PREFIX, "queues' policies")
    } else if id.starts_with(REFUSALS_PREFIX) && !matches!(op.request, Request::NoteRefusals { .. })
    {
        (REFUSALS_PREFIX, "the refusals a server keeps")
    } else if id.starts_with(crate::graph::SCHEDULE_PREFIX)
        && !matches!(op.request, Request::Schedule { .. })
    {
        (crate::graph::SCHEDULE_PREFIX, "recurring schedules")
    } else {
        return None;
    };
    Some(Verdict::Invalid(Error::invalid(
        "task",
        format!("ids that start with {prefix:?} name {what} (got {id:?})"),
    )))
}

/// Adds refusals a server answered to its log (`refusals:recent`),
/// keeping the newest [`crate::refusal::RefusalNote::KEPT`]. The system
/// writes it (a server with tokens admits it from an operator's token
/// only: `access::needs_operator`); no event (a refusal changed no task).
pub(super) fn note_refusals(
    op: &Operation,
    rec: Option<&TaskRecord>,
    notes: &[crate::refusal::RefusalNote],
) -> Verdict {
    use crate::refusal::{RefusalNote, refusals_record_id};
    if op.task != refusals_record_id() {
        return Verdict::Invalid(Error::invalid(
            "task",
            format!(
                "refusals are kept on {:?} (got {:?})",
                crate::refusal::REFUSALS_RECORD,
                op.task.as_str()
            ),
        ));
    }
    if notes.is_empty() {
        return Verdict::Ack;
    }
    let mut r = match rec {
        Some(r) if r.refusal_log.is_some() => next(r, op.now),
        Some(r) => return illegal(r, &op.request),
        None => first_record(&op.task, State::Registered, op.now),
    };
    let log = r.refusal_log.get_or_insert_with(Vec::new);
    log.extend(notes.iter().cloned());
    let over = log.len().saturating_sub(RefusalNote::KEPT);
    log.drain(..over);
    commit(r, Vec::new())
}

/// What a request changes of a queue's policy: the rest is kept.
#[derive(Debug, Clone, Copy)]
pub(super) enum Change {
    /// The retry policy (`queue set`).
    Retry(Option<RetryPolicy>),
    /// Paused or resumed (`queue pause`, `queue resume`).
    Paused(bool),
}

/// Changes the policy on the queue's record (`rec`, `None` before the
/// first), keeping what the change does not name. Pausing a paused queue
/// (or resuming one that runs) changes nothing: it keeps when it was
/// paused.
pub(super) fn decide(
    op: &Operation,
    rec: Option<&TaskRecord>,
    by: &Actor,
    change: Change,
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
    let was = rec.and_then(|r| r.queue_policy).unwrap_or_default();
    let mut policy = was;
    let details = match change {
        Change::Retry(retry) => {
            policy.retry = retry;
            json!({"retry": retry})
        }
        Change::Paused(paused) => {
            policy.paused_at = match (paused, was.paused_at) {
                (true, Some(at)) => Some(at),
                (true, None) => Some(op.now),
                (false, _) => None,
            };
            json!({"paused": paused})
        }
    };
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
    .details(details);
    commit(r, vec![e])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::refusal::{REFUSALS_RECORD, RefusalNote};

    fn op(task: &str, request: Request, at: i64) -> Operation {
        Operation {
            task: crate::id::TaskId::parse("task", task).unwrap(),
            request,
            pre: Default::default(),
            now: Timestamp::from_millis(at),
            clock: Default::default(),
        }
    }

    fn note(i: i64) -> RefusalNote {
        RefusalNote {
            task: crate::id::TaskId::parse("task", &format!("t{i}")).unwrap(),
            request: RequestKind::Claim,
            refusal: json!({"refused": "held"}),
            at: Timestamp::from_millis(i),
        }
    }

    #[test]
    fn the_refusal_log_keeps_the_newest_and_nothing_stands_in_for_it() {
        let first: Vec<RefusalNote> = (0..30).map(note).collect();
        let d = crate::decide::decide(
            &op(REFUSALS_RECORD, Request::NoteRefusals { notes: first }, 1),
            None,
            Judged::default(),
        );
        let Verdict::Commit(c) = &d.verdict else {
            panic!("{d:?}")
        };
        let rec = c.record.clone();
        assert_eq!(rec.refusal_log.as_ref().map(Vec::len), Some(30));
        let more: Vec<RefusalNote> = (30..60).map(note).collect();
        let d = crate::decide::decide(
            &op(REFUSALS_RECORD, Request::NoteRefusals { notes: more }, 2),
            Some(&rec),
            Judged::default(),
        );
        let Verdict::Commit(c) = &d.verdict else {
            panic!("{d:?}")
        };
        let log = c.record.refusal_log.clone().unwrap();
        assert_eq!(log.len(), RefusalNote::KEPT);
        assert_eq!(log.first().map(|n| n.at), Some(Timestamp::from_millis(10)));
        assert_eq!(log.last().map(|n| n.at), Some(Timestamp::from_millis(59)));
        // Never granted; no other request creates a `refusals:` record.
        let claim = Request::Claim {
            owner: crate::id::Id::parse("owner", "w").unwrap(),
            ttl_ms: None,
            lock_delay_ms: None,
        };
        let d = crate::decide::decide(
            &op(REFUSALS_RECORD, claim.clone(), 3),
            Some(&c.record),
            Judged::default(),
        );
        assert!(matches!(d.verdict, Verdict::Refuse { .. }), "{d:?}");
        let d = crate::decide::decide(&op("refusals:other", claim, 3), None, Judged::default());
        assert!(matches!(d.verdict, Verdict::Invalid(_)), "{d:?}");
        // Notes go on the log's own id only.
        let d = crate::decide::decide(
            &op(
                "refusals:other",
                Request::NoteRefusals {
                    notes: vec![note(1)],
                },
                4,
            ),
            None,
            Judged::default(),
        );
        assert!(matches!(d.verdict, Verdict::Invalid(_)), "{d:?}");
    }
}
