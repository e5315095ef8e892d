//! Durable steps: checkpoints recorded under the holder's fence, carried by
//! every later grant, never overwritten; tasks a step spawns added in its
//! commit, once.

use super::graph::{node, spec};
use crate::conformance::fixtures::*;
use crate::conformance::*;
use crate::graph::NewNode;
use crate::workgraph::Step;
use serde_json::json;

fn step(owner: &str, fence: u64, name: &str, output: serde_json::Value) -> Step {
    Step {
        owner: id(owner),
        fence,
        step: id(name),
        output,
        spawn: Vec::new(),
        wait: false,
    }
}

fn recorded<H: Harness>(ctx: &Ctx<H>, task: &TaskId) -> Vec<(String, serde_json::Value, u64)> {
    ctx.block_on(ctx.auth().get(task))
        .unwrap()
        .expect("the task exists")
        .checkpoints
        .iter()
        .map(|c| (c.step.clone(), c.output.clone(), c.fence))
        .collect()
}

/// A step recorded under the current fence is kept and carried by every
/// later grant, in order; the same step again is an acknowledgement, with
/// another output a conflict naming it; a superseded attempt's step is
/// refused `stale_fence` and changes nothing; outputs past the limits are
/// refused naming the field.
pub fn checkpoints_are_fenced_kept_and_carried_by_later_grants<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let t = id("stepped");
    let first = fence(&ctx.block_on(a.claim(&t, &id("w1"), Some(ttl))).unwrap());
    let one = json!({"rows": 10, "path": "s3://b/part-1"});
    let r = ctx
        .block_on(a.checkpoint(&t, step("w1", first, "fetch", one.clone())))
        .unwrap()
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let again = ctx
        .block_on(a.checkpoint(&t, step("w1", first, "fetch", one.clone())))
        .unwrap()
        .unwrap();
    assert!(matches!(again, Reply::Acknowledged(_)), "{again:?}");
    let other = ctx
        .block_on(a.checkpoint(&t, step("w1", first, "fetch", json!({"rows": 11}))))
        .unwrap()
        .unwrap();
    match refusal(&other) {
        Refusal::CheckpointConflict { step, fence } => {
            assert_eq!((step.as_str(), *fence), ("fetch", first))
        }
        r => panic!("expected checkpoint_conflict, got {r:?}"),
    }
    // Bad input names its field and changes nothing.
    let big = json!("x".repeat(crate::request::MAX_CHECKPOINT_BYTES));
    let e = ctx
        .block_on(a.checkpoint(&t, step("w1", first, "huge", big)))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("output"), "{e}");
    // The holder stalls; the next attempt's grant carries the step. (Its
    // lease is long: the rest of the case must not race its end on a
    // real clock, as eight 64 KiB steps through a server on a busy
    // machine did.)
    ctx.expire(ttl);
    let g = ctx
        .block_on(a.claim(&t, &id("w2"), Some(60_000)))
        .unwrap()
        .grant()
        .expect("granted again");
    assert_eq!(g.checkpoints.len(), 1, "{g:?}");
    assert_eq!(
        (
            g.checkpoints[0].step.as_str(),
            &g.checkpoints[0].output,
            g.checkpoints[0].fence
        ),
        ("fetch", &one, first)
    );
    // The zombie's next step is refused, and nothing of it is kept.
    let zombie = ctx
        .block_on(a.checkpoint(&t, step("w1", first, "transform", json!(1))))
        .unwrap()
        .unwrap();
    assert!(
        matches!(refusal(&zombie), Refusal::StaleFence { .. }),
        "{zombie:?}"
    );
    let two = json!([1, 2, 3]);
    ctx.block_on(a.checkpoint(&t, step("w2", g.fence, "transform", two.clone())))
        .unwrap()
        .unwrap();
    // The new attempt may not rewrite what the old one recorded.
    let rewrite = ctx
        .block_on(a.checkpoint(&t, step("w2", g.fence, "fetch", json!({"rows": 0}))))
        .unwrap()
        .unwrap();
    assert!(
        matches!(refusal(&rewrite), Refusal::CheckpointConflict { .. }),
        "{rewrite:?}"
    );
    assert_eq!(
        recorded(ctx, &t),
        vec![
            ("fetch".to_owned(), one.clone(), first),
            ("transform".to_owned(), two.clone(), g.fence)
        ]
    );
    let kinds: Vec<EventKind> = ctx.task_events(&t).iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventKind::Checkpointed)
            .count(),
        2,
        "{kinds:?}"
    );
    // A task's checkpoints together stay under their limit.
    let chunk = json!("y".repeat(crate::request::MAX_CHECKPOINT_BYTES - 100));
    let mut refused_at = None;
    for i in 0..8 {
        match ctx.block_on(a.checkpoint(&t, step("w2", g.fence, &format!("c{i}"), chunk.clone()))) {
            Ok(Ok(r)) if !r.is_refused() => {}
            Ok(r) => panic!("step c{i} refused, not as too large: {r:?}"),
            Err(e) => {
                assert_eq!(e.field.as_deref(), Some("output"), "{e}");
                refused_at = Some(i);
                break;
            }
        }
    }
    assert!(
        refused_at.is_some(),
        "the task's checkpoints grew past their limit"
    );
    if ctx.durable() {
        drop(a);
        ctx.reopen();
    }
    let kept = recorded(ctx, &t);
    assert_eq!(
        kept[..2],
        [
            ("fetch".to_owned(), one, first),
            ("transform".to_owned(), two, g.fence)
        ]
    );
    // Completed, the task's record keeps them; a late step is refused.
    let a = ctx.auth();
    ctx.block_on(a.complete(&t, &id("w2"), g.fence)).unwrap();
    let late = ctx
        .block_on(a.checkpoint(&t, step("w2", g.fence, "after", json!(null))))
        .unwrap()
        .unwrap();
    assert!(late.is_refused(), "{late:?}");
    // Retention prunes them with the task.
    ctx.advance_ms(10);
    let pruned = ctx
        .block_on(a.prune(Actor::Operator(id("ops")), 0, 100))
        .unwrap();
    assert!(pruned >= 1);
    assert!(recorded(ctx, &t).is_empty());
}

/// A step that spawns tasks adds them in its own commit: repeated, it adds
/// nothing more; from a superseded attempt, nothing at all; with `wait`,
/// the task is granted again only once they have all succeeded, and that
/// grant carries the step.
pub fn a_step_spawns_its_tasks_once_and_waits_for_them<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let p = id("parent");
    ctx.block_on(a.add(&p, spec("parent", None, 0, &[])))
        .unwrap();
    let g = ctx
        .block_on(a.next(&id("w1"), &[], Some(ttl), None))
        .unwrap()
        .grant()
        .expect("the parent is granted");
    assert_eq!(g.task, p);
    let children = vec![node("child-a", &[]), node("child-b", &["child-a"])];
    let fan = |owner: &str, fence: u64, spawn: Vec<NewNode>| Step {
        spawn,
        wait: true,
        ..step(owner, fence, "fan-out", json!({"children": 2}))
    };
    let r = ctx
        .block_on(a.checkpoint(&p, fan("w1", g.fence, children.clone())))
        .unwrap()
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    // Sent again (its answer was lost): acknowledged, nothing added twice.
    let again = ctx
        .block_on(a.checkpoint(&p, fan("w1", g.fence, children.clone())))
        .unwrap()
        .unwrap();
    assert!(matches!(again, Reply::Acknowledged(_)), "{again:?}");
    let graph_ids = |ctx: &Ctx<H>| -> Vec<String> {
        let mut v: Vec<String> = ctx
            .block_on(ctx.auth().graph())
            .unwrap()
            .iter()
            .map(|n| n.task.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(graph_ids(ctx), ["child-a", "child-b", "parent"]);
    // A spawn naming a task that exists as another task adds nothing and
    // records nothing.
    ctx.block_on(a.add(&id("taken"), spec("taken", Some("elsewhere"), 5, &[])))
        .unwrap();
    let clash = ctx
        .block_on(a.checkpoint(
            &p,
            Step {
                spawn: vec![node("fresh", &[]), node("taken", &[])],
                ..step("w1", g.fence, "second", json!(2))
            },
        ))
        .unwrap();
    assert!(
        matches!(&clash, Err((t, Refusal::ManifestConflict)) if t.as_str() == "taken"),
        "{clash:?}"
    );
    assert!(ctx.block_on(a.get(&id("fresh"))).unwrap().is_none());
    assert_eq!(recorded(ctx, &p).len(), 1);
    // A task it adds that depends on it, waited for: neither could run.
    let e = ctx
        .block_on(a.checkpoint(
            &p,
            Step {
                spawn: vec![node("loop-child", &["parent"])],
                wait: true,
                ..step("w1", g.fence, "loop", json!(3))
            },
        ))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("spawn"), "{e}");
    assert!(ctx.block_on(a.get(&id("loop-child"))).unwrap().is_none());
    // The parent gives its grant back and waits: the children run first.
    ctx.block_on(a.release(&p, &id("w1"), g.fence)).unwrap();
    let next = |ctx: &Ctx<H>| {
        ctx.block_on(ctx.auth().next(&id("w2"), &[], Some(ttl), None))
            .unwrap()
    };
    for want in ["child-a", "child-b"] {
        let c = next(ctx).grant().expect("a child is granted");
        assert_eq!(c.task.as_str(), want);
        assert!(c.checkpoints.is_empty());
        ctx.block_on(a.complete(&c.task, &id("w2"), c.fence))
            .unwrap();
    }
    let back = next(ctx)
        .grant()
        .expect("the parent once its children succeeded");
    assert_eq!(back.task, p);
    assert_eq!(back.checkpoints.len(), 1);
    assert_eq!(back.checkpoints[0].step, "fan-out");
    assert_eq!(
        back.checkpoints[0]
            .spawned
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>(),
        ["child-a", "child-b"]
    );
    // The first attempt, superseded, spawns nothing.
    let zombie = ctx
        .block_on(a.checkpoint(
            &p,
            Step {
                spawn: vec![node("zombie-child", &[])],
                ..step("w1", g.fence, "late", json!(0))
            },
        ))
        .unwrap()
        .unwrap();
    assert!(zombie.is_refused(), "{zombie:?}");
    assert!(ctx.block_on(a.get(&id("zombie-child"))).unwrap().is_none());
    // The same graph added again is still the same task.
    let re = ctx
        .block_on(a.add(&p, spec("parent", None, 0, &[])))
        .unwrap();
    assert!(matches!(re, Reply::Acknowledged(_)), "{re:?}");
}
