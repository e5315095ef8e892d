//! Fences: a stale fence is refused and audited for every holder request, fences only grow, a re-claim makes the old fence stale.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// Which request a stale-fence case sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Late {
    Renew,
    Heartbeat,
    Start,
    Succeed,
    TaskFail,
    Fail,
    Complete,
    Release,
    Cancel,
}

/// A worker's lease expires, another takes the task over, and the late
/// worker's request with its old fence is refused `stale_fence`: one
/// CONFLICT_REFUSED event, repeats counted on it, the record unchanged.
fn stale_fence_after_takeover<H: Harness>(ctx: &mut Ctx<H>, late: Late) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let declared = matches!(
        late,
        Late::Heartbeat | Late::Start | Late::Succeed | Late::TaskFail
    );
    let task = id(&format!("stale-{late:?}"));
    let (old_a, new_b) = (id("worker-a"), id("worker-b"));
    let run = id("run-1");
    let (f1, f2) = if declared {
        let hb_s = ttl.div_ceil(1000);
        ctx.block_on(a.declare(manifest(task.as_str(), 1, &[], hb_s, 2)))
            .unwrap();
        ctx.block_on(a.register(&task, &run)).unwrap();
        let f1 = fence(
            &ctx.block_on(a.task_claim(&task, &run, &old_a, None))
                .unwrap(),
        );
        if late != Late::Start {
            ctx.block_on(a.start(&task, &run, &old_a, f1)).unwrap();
        }
        ctx.expire(hb_s * 1000);
        let f2 = fence(
            &ctx.block_on(a.task_claim(&task, &run, &new_b, None))
                .unwrap(),
        );
        (f1, f2)
    } else {
        let f1 = fence(&ctx.block_on(a.claim(&task, &old_a, Some(ttl))).unwrap());
        ctx.expire(ttl);
        let f2 = fence(&ctx.block_on(a.claim(&task, &new_b, Some(600_000))).unwrap());
        (f1, f2)
    };
    assert!(f2 > f1);
    let before = ctx.block_on(a.get(&task)).unwrap().unwrap();
    let events_before = ctx.task_events(&task).len();
    let send = || -> Reply {
        let r = match late {
            Late::Renew => ctx.block_on(a.renew(&task, &old_a, f1, None)),
            Late::Release => ctx.block_on(a.release(&task, &old_a, f1)),
            Late::Complete => ctx.block_on(a.complete(&task, &old_a, f1)),
            Late::Fail => ctx.block_on(a.fail(&task, &old_a, f1, Some(json!({"late": true})))),
            Late::Cancel => ctx.block_on(a.cancel(&task, &old_a, f1)),
            Late::Start => ctx.block_on(a.start(&task, &run, &old_a, f1)),
            Late::Heartbeat => ctx.block_on(a.heartbeat(&task, &run, &old_a, f1, 1, None)),
            Late::Succeed => ctx.block_on(a.succeed(&task, &run, &old_a, f1, BTreeMap::new())),
            Late::TaskFail => {
                ctx.block_on(a.task_fail(&task, &run, &old_a, f1, json!({"late": true})))
            }
        };
        r.unwrap()
    };
    for round in 1..=3u64 {
        let r = send();
        assert_eq!(
            refusal(&r),
            &Refusal::StaleFence {
                fence: f1,
                current_fence: Some(f2)
            },
            "{late:?} with a stale fence"
        );
        let after = ctx.block_on(a.get(&task)).unwrap().unwrap();
        assert_eq!(after, before, "a refused request changes nothing");
        let events = ctx.task_events(&task);
        assert_eq!(
            events.len(),
            events_before + 1,
            "one CONFLICT_REFUSED event, repeats counted"
        );
        let last = events.last().unwrap();
        assert_eq!(last.kind, EventKind::ConflictRefused);
        assert_eq!(last.fence, Some(f1));
        assert_eq!(last.count, round);
    }
    let v = ctx.block_on(a.verify(&task, f1)).unwrap().unwrap();
    assert!(!v.current);
    assert_eq!(v.current_fence, Some(f2));
}

pub fn stale_fence_renew<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Renew)
}

pub fn stale_fence_heartbeat<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Heartbeat)
}

pub fn stale_fence_start<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Start)
}

pub fn stale_fence_succeed<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Succeed)
}

pub fn stale_fence_task_fail<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::TaskFail)
}

pub fn stale_fence_fail<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Fail)
}

pub fn stale_fence_complete<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Complete)
}

pub fn stale_fence_release<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Release)
}

pub fn stale_fence_cancel<H: Harness>(ctx: &mut Ctx<H>) {
    stale_fence_after_takeover(ctx, Late::Cancel)
}

/// Fences grow strictly across tasks, re-claims, releases, completions
/// and (for durable stores) a reopen.
pub fn fences_strictly_increase<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let w = id("w");
    let mut fences = Vec::new();
    for i in 0..5 {
        let t = id(&format!("f-{i}"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        fences.push(f);
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        fences.push(f);
        ctx.block_on(a.release(&t, &w, f)).unwrap();
        let f = fence(&ctx.block_on(a.claim(&t, &id("other"), None)).unwrap());
        fences.push(f);
        assert!(
            !ctx.block_on(a.complete(&t, &id("other"), f))
                .unwrap()
                .is_refused()
        );
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences strictly increase: {fences:?}"
    );
    drop(a);
    ctx.reopen();
    let a = ctx.auth();
    let f = fence(
        &ctx.block_on(a.claim(&id("after-reopen"), &w, None))
            .unwrap(),
    );
    assert!(
        f > *fences.last().unwrap(),
        "a fence after reopen is higher than every earlier one"
    );
}

/// A holder that claims again gets a new fence and keeps its attempt;
/// its earlier fence is stale from then on.
pub fn holder_reclaim_makes_old_fence_stale<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w) = (id("reclaim"), id("w"));
    let g1 = ctx
        .block_on(a.claim(&t, &w, None))
        .unwrap()
        .grant()
        .unwrap();
    let g2 = ctx
        .block_on(a.claim(&t, &w, None))
        .unwrap()
        .grant()
        .unwrap();
    assert!(g2.fence > g1.fence);
    assert_eq!(g2.attempt, g1.attempt);
    let r = ctx.block_on(a.renew(&t, &w, g1.fence, None)).unwrap();
    assert_eq!(
        refusal(&r),
        &Refusal::StaleFence {
            fence: g1.fence,
            current_fence: Some(g2.fence)
        }
    );
    assert!(
        !ctx.block_on(a.verify(&t, g1.fence))
            .unwrap()
            .unwrap()
            .current
    );
    assert!(
        ctx.block_on(a.verify(&t, g2.fence))
            .unwrap()
            .unwrap()
            .current
    );
    assert!(
        !ctx.block_on(a.renew(&t, &w, g2.fence, None))
            .unwrap()
            .is_refused()
    );
}

/// What a guard in the user's storage relies on: a later attempt's fence
/// is above every fence granted before it, on this task or any other, so
/// one mark per resource refuses the zombie's write even when different
/// tasks write the same resource ([`crate::fencing::admit`]).
pub fn a_guard_refuses_the_attempt_a_later_grant_replaced<H: Harness>(ctx: &mut Ctx<H>) {
    use crate::fencing::{Admitted, Refused, admit};
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let t = id("guarded");
    let zombie = fence(&ctx.block_on(a.claim(&t, &id("w1"), Some(ttl))).unwrap());
    ctx.expire(ttl);
    let later = fence(&ctx.block_on(a.claim(&t, &id("w2"), None)).unwrap());
    // Another task writes the same resource, granted after both.
    let other = fence(
        &ctx.block_on(a.claim(&id("other-writer"), &id("w3"), None))
            .unwrap(),
    );
    let mut mark = None;
    for (f, want) in [
        (later, Ok(Admitted::First)),
        (later, Ok(Admitted::Equal)),
        (other, Ok(Admitted::Raised { from: later })),
    ] {
        assert_eq!(admit("shared", mark, f), want, "fence {f}");
        mark = Some(f);
    }
    match admit("shared", mark, zombie) {
        Err(Refused::Stale { fence, highest, .. }) => assert_eq!((fence, highest), (zombie, other)),
        other => panic!("the zombie's fence {zombie} was not refused: {other:?}"),
    }
    // Its report is refused too: the word and the deed.
    assert!(
        ctx.block_on(a.complete(&t, &id("w1"), zombie))
            .unwrap()
            .is_refused()
    );
}
