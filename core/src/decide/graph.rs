//! The work graph's requests: add, and the two follow-ups a store applies
//! in the same commit (link, on a dependency when a dependent is added;
//! wake, on a dependent when a dependency succeeds); and readiness, which
//! every grant of a graph task passes.

use super::*;
use crate::graph::{Node, NodeSpec, Readiness, Upstream};

/// Creates a bare task in REGISTERED with its place in the graph.
pub(super) fn create_added(op: &Operation, spec: &NodeSpec, upstream: &Upstream) -> Verdict {
    if spec.depends_on.contains(&op.task) {
        return Verdict::Invalid(Error::invalid(
            "depends_on",
            format!("task {:?} may not depend on itself", op.task.as_str()),
        ));
    }
    let now = op.now;
    let ready = match upstream.readiness(&spec.depends_on) {
        Readiness::Unknown { missing } => {
            return Verdict::Invalid(Error::invalid(
                "depends_on",
                format!(
                    "names a task that does not exist: {} -> {}",
                    op.task.as_str(),
                    missing.as_str()
                ),
            ));
        }
        Readiness::Ready => true,
        _ => false,
    };
    // One bound for a start however it is written: the end of time as
    // baton keeps it, 9999-12-31T23:59:59.999Z (a time past it does not
    // parse; a delay past it from now is refused here, not cut short).
    if let Some(crate::graph::Start::AfterMs(ms)) = spec.start
        && now.checked_plus_ms(ms).is_none()
    {
        return Verdict::Invalid(Error::invalid(
            "not_before",
            format!("a delay of {ms}ms from {now} ends past 9999-12-31T23:59:59.999Z"),
        ));
    }
    let mut r = first_record(&op.task, State::Registered, now);
    r.node = Some(Node {
        spec: spec.clone(),
        ready_at: ready.then_some(now),
        not_before: spec.start.map(|s| s.resolve(now)).filter(|t| *t > now),
        parked: false,
        queue_retry: queue_retry(spec, upstream),
        awaits: Vec::new(),
    });
    let mut events = vec![
        draft(&r, EventKind::Added, None, op.request.actor(), None, now).details(json!({
            "queue": spec.queue,
            "priority": spec.priority,
            "depends_on": spec.depends_on,
            "not_before": r.node.as_ref().and_then(|n| n.not_before),
        })),
    ];
    if ready {
        events.push(ready_event(&r, now));
    }
    commit(r, events)
}

/// The retry policy a task added without its own takes from its queue's
/// policy, as the add read it.
fn queue_retry(spec: &NodeSpec, upstream: &Upstream) -> Option<crate::graph::RetryPolicy> {
    if spec.retry.is_some() {
        return None;
    }
    upstream.queue().and_then(|p| p.retry)
}

/// Creates a schedule's record (`schedule:NAME`, REGISTERED, never
/// granted) with its schedule.
pub(super) fn create_schedule(
    op: &Operation,
    schedule: &crate::graph::Schedule,
    upstream: &Upstream,
) -> Verdict {
    if !op.task.as_str().starts_with(crate::graph::SCHEDULE_PREFIX) {
        return Verdict::Invalid(Error::invalid(
            "task",
            format!(
                "a schedule's id starts with {:?} (got {:?})",
                crate::graph::SCHEDULE_PREFIX,
                op.task.as_str()
            ),
        ));
    }
    if let Readiness::Unknown { missing } = upstream.readiness(&schedule.template.depends_on) {
        return Verdict::Invalid(Error::invalid(
            "depends_on",
            format!(
                "names a task that does not exist: every period of {} would wait on {} for good",
                op.task.as_str(),
                missing.as_str()
            ),
        ));
    }
    let mut r = first_record(&op.task, State::Registered, op.now);
    r.schedule = Some(schedule.clone());
    let e = draft(
        &r,
        EventKind::Scheduled,
        None,
        op.request.actor(),
        None,
        op.now,
    )
    .details(json!({
        "every_ms": schedule.every_ms,
        "cron": schedule.cron,
        "queue": schedule.template.queue
    }));
    commit(r, vec![e])
}

/// The node a declared task's manifest gives it, ready at `now` when every
/// dependency has succeeded already.
pub(super) fn declared_node(
    op: &Operation,
    manifest: &crate::manifest::Manifest,
    upstream: &Upstream,
) -> Result<Node, Error> {
    let spec = manifest.node_spec();
    match upstream.readiness(&spec.depends_on) {
        Readiness::Unknown { missing } => Err(Error::invalid(
            "depends_on",
            format!(
                "names a task that does not exist: {} -> {}",
                op.task.as_str(),
                missing.as_str()
            ),
        )),
        r => Ok(Node {
            queue_retry: queue_retry(&spec, upstream),
            spec,
            ready_at: (r == Readiness::Ready).then_some(op.now),
            not_before: None,
            parked: false,
            awaits: Vec::new(),
        }),
    }
}

/// Add, link and wake on an existing task.
pub(super) fn decide(op: &Operation, rec: &TaskRecord, upstream: &Upstream) -> Verdict {
    let now = op.now;
    match &op.request {
        Request::Schedule { schedule } => match &rec.schedule {
            Some(s) if s == schedule => Verdict::Ack,
            _ => refuse(Refusal::ManifestConflict),
        },
        Request::Add { node } => match &rec.node {
            // The same task asked for again (with whatever start): the
            // first add stands.
            Some(n) if rec.is_bare() && n.as_added().same_task(node) => Verdict::Ack,
            _ => refuse(Refusal::ManifestConflict),
        },
        Request::Link { dependent } => {
            if rec.dependents.contains(dependent) {
                return Verdict::Ack;
            }
            let mut r = next(rec, now);
            let at = r.dependents.partition_point(|d| d < dependent);
            r.dependents.insert(at, dependent.clone());
            // The dependent's ADDED (or DECLARED) event names the edge.
            commit(r, Vec::new())
        }
        Request::Wake => {
            let Some(node) = &rec.node else {
                return Verdict::Ack;
            };
            if node.ready_at.is_some()
                || upstream.readiness(&node.spec.depends_on) != Readiness::Ready
            {
                return Verdict::Ack;
            }
            let mut r = next(rec, now);
            if let Some(n) = r.node.as_mut() {
                n.ready_at = Some(now);
            }
            let e = ready_event(&r, now);
            commit(r, vec![e])
        }
        _ => illegal(rec, &op.request),
    }
}

/// A grant of a claimable graph task whose dependencies have not all
/// succeeded, or whose start has not come at `now`: refused, by claim or
/// by `next` alike.
pub(super) fn not_ready(rec: &TaskRecord, upstream: &Upstream, now: Timestamp) -> Option<Refusal> {
    if rec.state != State::Registered {
        return None;
    }
    match upstream.readiness(rec.depends_on()) {
        Readiness::Ready => rec
            .node
            .as_ref()
            .and_then(|n| n.not_before)
            .filter(|t| *t > now)
            .map(|until| Refusal::Scheduled { until }),
        Readiness::Waiting { on } => Some(Refusal::NotReady { waiting_on: on }),
        Readiness::Unknown { missing } => Some(Refusal::NotReady {
            waiting_on: vec![missing],
        }),
        Readiness::Blocked { upstream, state } => Some(Refusal::UpstreamFailed { upstream, state }),
    }
}

/// What the store must apply after `d` in the same commit: a link on each
/// dependency of a task just created with some, a wake of each dependent of
/// a task that just succeeded (and of a dependent linked to a dependency
/// that had already succeeded).
pub(super) fn follow_ups(op: &Operation, d: &Decision) -> Vec<(TaskId, Request)> {
    let Verdict::Commit(c) = &d.verdict else {
        return Vec::new();
    };
    let after = &c.record;
    let created = d.current.is_none();
    let mut out = Vec::new();
    if created {
        for dep in after.depends_on() {
            out.push((
                dep.clone(),
                Request::Link {
                    dependent: after.task.clone(),
                },
            ));
        }
    }
    let was_done = d
        .current
        .as_ref()
        .is_some_and(|r| r.state == State::Succeeded);
    if after.state == State::Succeeded && !was_done {
        for t in &after.dependents {
            out.push((t.clone(), Request::Wake));
        }
    }
    if let Request::Link { dependent } = &op.request
        && after.state == State::Succeeded
    {
        out.push((dependent.clone(), Request::Wake));
    }
    // A checkpoint that waits for the tasks it added: each records the
    // task as its dependent, so that their successes wake it.
    if let Request::Checkpoint {
        spawned,
        wait: true,
        ..
    } = &op.request
    {
        for t in spawned {
            out.push((
                t.clone(),
                Request::Link {
                    dependent: after.task.clone(),
                },
            ));
        }
    }
    out
}

/// A grant of a graph task found ready by its upstream but never stamped
/// ready (its wake was lost to nothing in the embedded stores, but a store
/// may be restored from a copy): stamped now, so that once released it is
/// back in the ready index.
pub(super) fn stamp_ready(verdict: &mut Verdict, now: Timestamp) {
    if let Verdict::Commit(c) = verdict
        && c.mints_fence
        && let Some(n) = c.record.node.as_mut()
        && n.ready_at.is_none()
    {
        n.ready_at = Some(now);
    }
}

/// The ids whose records the decision of a request on `record` needs.
fn with_queue(mut ids: Vec<TaskId>, queue: &crate::id::Id) -> Vec<TaskId> {
    if let Ok(q) = crate::graph::queue_record_id(queue) {
        ids.push(q);
    }
    ids
}

/// Whether the decision of `request` looks at what the tasks it reads
/// depend on ([`crate::graph::Upstream::depends_on`]): a checkpoint that
/// waits for the tasks it added refuses one that depends on it.
pub fn reads_dependencies(request: &crate::request::Request) -> bool {
    matches!(
        request,
        crate::request::Request::Checkpoint { wait: true, .. }
    )
}

pub fn upstream_ids(request: &crate::request::Request, record: Option<&TaskRecord>) -> Vec<TaskId> {
    use crate::request::Request;
    match request {
        // An add reads its queue's policy with its dependencies.
        Request::Add { node } => with_queue(node.depends_on.clone(), &node.queue),
        Request::Declare { manifest } => {
            with_queue(manifest.depends_on.clone(), &manifest.node_spec().queue)
        }
        Request::Claim { .. } | Request::Recover { .. } | Request::TaskClaim { .. } => {
            let mut ids = record.map(|r| r.depends_on().to_vec()).unwrap_or_default();
            // A keyed task's grant reads its key's record too (and then
            // the key's holders: the engine's second read).
            if let Some(kid) = record
                .and_then(TaskRecord::key)
                .and_then(|k| crate::graph::key_record_id(k).ok())
            {
                ids.push(kid);
            }
            ids
        }
        Request::Wake => record.map(|r| r.depends_on().to_vec()).unwrap_or_default(),
        // A checkpoint that waits reads the tasks it added (in the same
        // commit, before it): each must exist, none may depend on it.
        Request::Checkpoint {
            spawned,
            wait: true,
            ..
        } => spawned.clone(),
        // A schedule's template may only name tasks that exist: every
        // period's task would be refused for one that does not.
        Request::Schedule { schedule } if record.is_none() => schedule.template.depends_on.clone(),
        Request::Limit { .. }
        | Request::KeyHold { .. }
        | Request::KeyDrop { .. }
        | Request::KeyPark { .. } => super::key::key_reads(record),
        _ => Vec::new(),
    }
}

/// Keeps what a tick of the schedule came to on its record (the
/// scheduler's, as the system: a server admits it from an operator's
/// token only, `access::needs_operator`), when it changed: a failure (with the first time it was seen; the same error
/// again writes nothing), or none once a period's task is made again.
pub(super) fn schedule_ticked(
    op: &Operation,
    rec: Option<&TaskRecord>,
    failure: Option<&crate::graph::ScheduleFailure>,
) -> Verdict {
    let Some(rec) = rec else {
        return refuse(Refusal::NotFound);
    };
    if rec.schedule.is_none() {
        return illegal(rec, &op.request);
    }
    let same = match (&rec.schedule_failure, failure) {
        (None, None) => true,
        (Some(had), Some(f)) => had.error == f.error,
        _ => false,
    };
    if same {
        return Verdict::Ack;
    }
    let mut r = next(rec, op.now);
    r.schedule_failure = failure.map(|f| crate::graph::ScheduleFailure {
        since: op.now,
        ..f.clone()
    });
    commit(r, Vec::new())
}
