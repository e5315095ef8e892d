//! Durable steps: the holder records a step's output under its fence
//! (`checkpoint`), so that the task's next attempt skips what this one
//! did; with it, the tasks the step added in the same commit, and whether
//! the task waits for them.

use super::*;
use crate::graph::Readiness;
use crate::model::Checkpoint;
use crate::request::{MAX_CHECKPOINTS, MAX_CHECKPOINTS_BYTES};

/// A checkpoint on a task whose holder's fence and lease were checked
/// already: a step recorded again with the same output (and the same added
/// tasks) is an acknowledgement, with another a conflict naming the step;
/// a new step is appended.
pub(super) fn decide(op: &Operation, rec: &TaskRecord, upstream: &Upstream) -> Verdict {
    let Request::Checkpoint {
        step,
        output,
        spawned,
        wait,
        fence,
        ..
    } = &op.request
    else {
        return illegal(rec, &op.request);
    };
    if let Some(had) = rec.checkpoint(step.as_str()) {
        return if had.output == *output && had.spawned == *spawned {
            Verdict::Ack
        } else {
            refuse(Refusal::CheckpointConflict {
                step: step.clone(),
                fence: had.fence,
            })
        };
    }
    if rec.checkpoints.len() >= MAX_CHECKPOINTS {
        return Verdict::Invalid(Error::invalid(
            "step",
            format!("a task records at most {MAX_CHECKPOINTS} steps, and this one has"),
        ));
    }
    let size = |v: &Value| serde_json::to_string(v).map_or(usize::MAX, |s| s.len());
    let held: usize = rec.checkpoints.iter().map(|c| size(&c.output)).sum();
    let total = held.saturating_add(size(output));
    if total > MAX_CHECKPOINTS_BYTES {
        return Verdict::Invalid(Error::invalid(
            "output",
            format!(
                "the task's checkpoints would take {total} bytes of JSON; a task's may take at most {MAX_CHECKPOINTS_BYTES}"
            ),
        ));
    }
    if spawned.contains(&op.task) {
        return Verdict::Invalid(Error::invalid(
            "spawn",
            format!("task {} may not add itself", op.task),
        ));
    }
    let now = op.now;
    let mut r = next(rec, now);
    if *wait && let Err(e) = wait_for(&mut r, spawned, upstream) {
        return Verdict::Invalid(e);
    }
    r.checkpoints.push(Checkpoint {
        step: step.as_str().to_owned(),
        output: output.clone(),
        fence: *fence,
        at: now,
        spawned: spawned.clone(),
    });
    let e = draft(
        &r,
        EventKind::Checkpointed,
        None,
        op.request.actor(),
        Some(*fence),
        now,
    )
    .details(json!({
        "step": step,
        "bytes": size(output),
        "spawned": spawned,
        "wait": wait,
    }));
    commit(r, vec![e])
}

/// Makes `r`, a graph task, depend on `spawned` too (each must exist: the
/// adds come first in the commit), out of the ready index until they have
/// all succeeded. The store links each to it in the same commit.
fn wait_for(r: &mut TaskRecord, spawned: &[TaskId], upstream: &Upstream) -> Result<(), Error> {
    if spawned.is_empty() {
        return Err(Error::invalid(
            "wait",
            "names no task to wait for: give the tasks to add (spawn)",
        ));
    }
    if let Readiness::Unknown { missing } = upstream.readiness(spawned) {
        return Err(Error::invalid(
            "spawn",
            format!("names a task that does not exist: {missing}"),
        ));
    }
    if let Some(child) = spawned
        .iter()
        .find(|t| upstream.depends_on(t).is_some_and(|d| d.contains(&r.task)))
    {
        return Err(Error::invalid(
            "spawn",
            format!(
                "task {child} depends on {}, which would wait for it: neither could run",
                r.task
            ),
        ));
    }
    let task = r.task.clone();
    let Some(node) = r.node.as_mut() else {
        return Err(Error::invalid(
            "wait",
            format!(
                "task {task} is not in the work graph: only a graph task (add, next) waits for the tasks it adds"
            ),
        ));
    };
    let mut deps = node.spec.depends_on.clone();
    for t in spawned {
        if !deps.contains(t) {
            deps.push(t.clone());
            node.awaits.push(t.clone());
        }
    }
    deps.sort();
    if deps.len() > crate::graph::MAX_DEPENDENCIES {
        return Err(Error::invalid(
            "spawn",
            format!(
                "the task would depend on {} tasks; at most {}",
                deps.len(),
                crate::graph::MAX_DEPENDENCIES
            ),
        ));
    }
    node.spec.depends_on = deps;
    node.awaits.sort();
    if upstream.readiness(&node.spec.depends_on) != Readiness::Ready {
        node.ready_at = None;
    }
    Ok(())
}
