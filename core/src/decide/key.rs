//! Concurrency keys: at most a key's limit of tasks with that key hold
//! live grants at once. The key's record (`key:KEY`) lists the tasks
//! granted under it and those waiting for a slot; whether a holder is
//! live is read from its own record in the granting commit, so a grant
//! never counts on a lease that has ended and never misses one that holds.
//!
//! A grant of a keyed task reads the key's record and its holders
//! ([`crate::decide::upstream_ids`], then the engine's second read). When
//! the key is full the grant is refused `key_full` and the task is parked:
//! out of the ready index (so `next` passes over it without reading it)
//! and on the key's list. Every change of the key with a free slot (a
//! holder's end, a grant, a new limit) puts parked tasks back, oldest
//! first.

use super::*;
use crate::graph::{KEY_PREFIX, KeyLimit, Upstream, key_record_id};

/// A grant of `rec` refused because its key is full, if it is: the key's
/// live holders (other than the task itself) are as many as its limit.
/// Without the key read (a store that read too little) a keyed task is
/// refused: fail closed.
pub(super) fn key_full(rec: &TaskRecord, upstream: &Upstream) -> Option<Refusal> {
    let key = rec.key()?;
    let Some(view) = upstream.key() else {
        return Some(Refusal::KeyFull {
            key: key.clone(),
            limit: 0,
            holders: Vec::new(),
        });
    };
    let limit = view.limit?;
    (view.live.len() >= limit as usize).then(|| Refusal::KeyFull {
        key: key.clone(),
        limit,
        holders: view.live.clone(),
    })
}

/// A keyed task refused because its key is full leaves the ready index
/// (written whatever the request comes to, like a settlement) unless it
/// is out of it already.
pub(super) fn park(d: &mut Decision, now: Timestamp) {
    let Verdict::Refuse {
        refusal: Refusal::KeyFull { key, .. },
        ..
    } = &d.verdict
    else {
        return;
    };
    let key = key.clone();
    let parkable =
        |r: &TaskRecord| r.state == State::Registered && r.node.as_ref().is_some_and(|n| !n.parked);
    let change = match d.settle.take() {
        Some(mut c) if parkable(&c.record) => {
            set_parked(&mut c.record, true);
            c.events.push(parked_event(&c.record, &key, now));
            c
        }
        Some(c) => {
            d.settle = Some(c);
            return;
        }
        None => match d.current.as_ref().filter(|r| parkable(r)) {
            Some(r) => {
                let mut p = next(r, now);
                set_parked(&mut p, true);
                let e = parked_event(&p, &key, now);
                notify::finish(p, vec![e], false)
            }
            None => return,
        },
    };
    d.settle = Some(change);
}

fn set_parked(r: &mut TaskRecord, parked: bool) {
    if let Some(n) = r.node.as_mut() {
        n.parked = parked;
    }
}

fn parked_event(r: &TaskRecord, key: &crate::id::Id, now: Timestamp) -> EventDraft {
    draft(
        r,
        EventKind::Parked,
        Some(r.state),
        Actor::System,
        None,
        now,
    )
    .details(json!({"key": key}))
}

/// What a decision on a keyed task tells its key's record, in the same
/// commit: a grant (`KeyHold`), a park (`KeyPark`), or the end of a grant
/// the store held (`KeyDrop`).
pub(super) fn follow_ups(
    op: &Operation,
    stored: Option<&TaskRecord>,
    d: &Decision,
) -> Vec<(TaskId, Request)> {
    let Some(after) = d.record_to_write() else {
        return Vec::new();
    };
    let Some(key) = after.key() else {
        return Vec::new();
    };
    let Ok(kid) = key_record_id(key) else {
        return Vec::new();
    };
    let task = op.task.clone();
    let was_parked = d
        .current
        .as_ref()
        .and_then(|r| r.node.as_ref())
        .is_some_and(|n| n.parked);
    let parked = after.node.as_ref().is_some_and(|n| n.parked);
    if d.mints_fence() {
        vec![(kid, Request::KeyHold { task })]
    } else if parked && !was_parked {
        vec![(kid, Request::KeyPark { task })]
    } else if stored.is_some_and(|r| r.state.is_held()) && !after.state.is_held() {
        vec![(kid, Request::KeyDrop { task })]
    } else {
        Vec::new()
    }
}

/// The records a decision on a key's record reads: its holders (live or
/// not) and the first parked tasks.
pub(super) fn key_reads(rec: Option<&TaskRecord>) -> Vec<TaskId> {
    let Some(k) = rec.and_then(|r| r.key_limit.as_ref()) else {
        return Vec::new();
    };
    let mut ids: Vec<TaskId> = k.holders.clone();
    ids.extend(k.parked.iter().take(KeyLimit::UNPARK_WINDOW).cloned());
    ids.sort();
    ids.dedup();
    ids
}

/// Creating a record whose id names a key, other than the key's own
/// requests: refused, so no task can stand in for a key's record.
pub(super) fn reserved(op: &Operation) -> Option<Verdict> {
    let keyish = matches!(
        op.request,
        Request::Limit { .. } | Request::KeyHold { .. } | Request::KeyPark { .. }
    );
    (op.task.as_str().starts_with(KEY_PREFIX) && !keyish).then(|| {
        Verdict::Invalid(Error::invalid(
            "task",
            format!(
                "ids that start with {KEY_PREFIX:?} name concurrency keys (got {:?})",
                op.task.as_str()
            ),
        ))
    })
}

/// The key's requests on its record (`rec`, `None` before the first).
pub(super) fn decide(op: &Operation, rec: Option<&TaskRecord>, upstream: &Upstream) -> Verdict {
    let now = op.now;
    if crate::graph::key_of_record(&op.task).is_none() {
        return Verdict::Invalid(Error::invalid(
            "task",
            format!(
                "a concurrency key's record id starts with {KEY_PREFIX:?} (got {:?})",
                op.task.as_str()
            ),
        ));
    }
    let (mut r, mut k) = match rec {
        Some(r) => match &r.key_limit {
            Some(k) => (next(r, now), k.clone()),
            None => return illegal(r, &op.request),
        },
        None => match op.request {
            Request::KeyDrop { .. } => return Verdict::Ack,
            _ => (
                first_record(&op.task, State::Registered, now),
                KeyLimit::default(),
            ),
        },
    };
    let before = k.clone();
    let mut events = Vec::new();
    let live = |t: &TaskId| upstream.state(t).is_some_and(|s| s.is_held());
    k.holders.retain(|t| live(t));
    match &op.request {
        Request::Limit { limit, by } => {
            k.limit = *limit;
            let e = draft(
                &r,
                EventKind::LimitSet,
                Some(r.state),
                by.clone(),
                None,
                now,
            )
            .details(json!({"limit": limit}));
            events.push(e);
        }
        Request::KeyHold { task } => {
            if !k.holders.contains(task) {
                k.holders.push(task.clone());
            }
            k.parked.retain(|t| t != task);
        }
        Request::KeyDrop { task } => k.holders.retain(|t| t != task),
        Request::KeyPark { task } => {
            if !k.parked.contains(task) {
                k.parked.push(task.clone());
            }
        }
        _ => return illegal(&r, &op.request),
    }
    // A parked task read and found no longer waiting (granted by a claim
    // of its id, cancelled) leaves the list; the first that wait are put
    // back while a slot is free.
    let window: Vec<TaskId> = k
        .parked
        .iter()
        .take(KeyLimit::UNPARK_WINDOW)
        .cloned()
        .collect();
    let mut room = k
        .limit
        .map_or(usize::MAX, |n| (n as usize).saturating_sub(k.holders.len()));
    for t in window {
        match upstream.state(&t) {
            Some(State::Registered) if room > 0 => {
                room -= 1;
                k.parked.retain(|p| p != &t);
            }
            // Waiting, and no slot for it yet.
            Some(State::Registered) => {}
            // Read, and no longer waiting (or gone).
            _ if upstream.was_read(&t) => k.parked.retain(|p| p != &t),
            _ => {}
        }
    }
    if k == before && events.is_empty() && rec.is_some() {
        return Verdict::Ack;
    }
    r.key_limit = Some(k);
    commit(r, events)
}

/// The parked tasks a change of a key's record put back: in the list
/// before, not after, and still waiting when read.
pub(super) fn unparked(
    op: &Operation,
    d: &Decision,
    upstream: &Upstream,
) -> Vec<(TaskId, Request)> {
    let Verdict::Commit(c) = &d.verdict else {
        return Vec::new();
    };
    let (Some(after), before) = (
        c.record.key_limit.as_ref(),
        d.current.as_ref().and_then(|r| r.key_limit.as_ref()),
    ) else {
        return Vec::new();
    };
    let held = match &op.request {
        Request::KeyHold { task } => Some(task),
        _ => None,
    };
    before
        .map(|b| b.parked.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|t| !after.parked.contains(t) && Some(*t) != held)
        .filter(|t| upstream.state(t) == Some(State::Registered))
        .map(|t| (t.clone(), Request::Unpark))
        .collect()
}

/// A parked task put back in the ready index (by a change of its key).
pub(super) fn unpark(rec: &TaskRecord, now: Timestamp) -> Verdict {
    let parked = rec.node.as_ref().is_some_and(|n| n.parked);
    if !parked || rec.state != State::Registered {
        return Verdict::Ack;
    }
    let mut r = next(rec, now);
    set_parked(&mut r, false);
    let e = ready_event(&r, now);
    commit(r, vec![e])
}
