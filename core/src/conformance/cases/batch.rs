//! Batch grants: `next --count N` makes the grants N `next`s one after
//! another would make, in the same order, each with its own lease and
//! fence: priority, dependencies, a key's limit and a start to come
//! honoured alike.

use super::graph::spec;
use crate::conformance::fixtures::*;
use crate::conformance::*;
use crate::graph::{Start, Taker};
use crate::request::Request;

/// One scenario in queue `q`, ids prefixed `p`, its key `p-key` limited to
/// two at once: a (9), b (5), c (5, after a), d e f (7, keyed), g (9, starts
/// in an hour), h (1).
fn scenario<H: Harness>(ctx: &Ctx<H>, p: &str) {
    let a = ctx.auth();
    let key = id(&format!("{p}-key"));
    ctx.block_on(a.set_limit(&key, Some(2), Actor::Operator(id("alice"))))
        .unwrap();
    let t = |n: &str| format!("{p}-{n}");
    let add = |n: &str, prio: i64, after: &[&str], keyed: bool, later: bool| {
        let after: Vec<String> = after.iter().map(|d| t(d)).collect();
        let after: Vec<&str> = after.iter().map(String::as_str).collect();
        let mut s = spec(&t(n), Some(p), prio, &after);
        if keyed {
            s.key = Some(key.clone());
        }
        if later {
            s = s.with_start(Some(Start::AfterMs(3_600_000))).unwrap();
        }
        ctx.block_on(a.add(&id(&t(n)), s)).unwrap();
    };
    add("a", 9, &[], false, false);
    add("b", 5, &[], false, false);
    add("c", 5, &["a"], false, false);
    for n in ["d", "e", "f"] {
        add(n, 7, &[], true, false);
    }
    add("g", 9, &[], false, true);
    add("h", 1, &[], false, false);
}

fn taker(owner: &str) -> Taker {
    Taker::Owner {
        owner: id(owner),
        ttl_ms: Some(600_000),
        lock_delay_ms: None,
    }
}

/// What the grants were, as each scenario's names (`a`, `d`, ...).
fn names(replies: &[Reply], p: &str) -> Vec<String> {
    replies
        .iter()
        .filter_map(|r| r.grant())
        .map(|g| {
            g.task
                .as_str()
                .trim_start_matches(&format!("{p}-"))
                .to_owned()
        })
        .collect()
}

pub fn next_count_grants_what_as_many_nexts_would<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    scenario(ctx, "one");
    scenario(ctx, "many");
    // N `next`s, one after another.
    let mut singles = Vec::new();
    for _ in 0..7 {
        let r = ctx.block_on(a.next_for(taker("w1"), &[id("one")])).unwrap();
        if r.grant().is_none() {
            assert!(matches!(refusal(&r), Refusal::NoneReady { .. }), "{r:?}");
            break;
        }
        singles.push(r);
    }
    let batch = ctx
        .block_on(a.next_many_for(taker("w2"), &[id("many")], 7))
        .unwrap();
    assert_eq!(names(&singles, "one"), ["a", "d", "e", "b", "h"]);
    assert_eq!(names(&batch, "many"), names(&singles, "one"));
    // Each its own lease and fence, rising in the order they were made.
    let fences: Vec<u64> = batch
        .iter()
        .filter_map(|r| r.grant())
        .map(|g| g.fence)
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    for r in &batch {
        let g = r.grant().unwrap();
        let h = ctx.block_on(a.holder(&g.task)).unwrap().unwrap().unwrap();
        assert_eq!((h.grant.fence, h.live), (g.fence, true));
    }
    // Nothing more is ready: the refusal `next` answers.
    let again = ctx
        .block_on(a.next_many_for(taker("w2"), &[id("many")], 7))
        .unwrap();
    assert!(
        matches!(again.as_slice(), [r] if matches!(refusal(r), Refusal::NoneReady { .. })),
        "{again:?}"
    );
    // Ends free a key's slot and a dependent: both in the next batch.
    for t in ["many-a", "many-d"] {
        let g = batch
            .iter()
            .filter_map(|r| r.grant())
            .find(|g| g.task.as_str() == t)
            .unwrap();
        assert!(
            !ctx.block_on(a.complete(&g.task, &id("w2"), g.fence))
                .unwrap()
                .is_refused()
        );
    }
    let more = ctx
        .block_on(a.next_many_for(taker("w2"), &[id("many")], 7))
        .unwrap();
    assert_eq!(names(&more, "many"), ["f", "c"]);
    // Bad input names its field and grants nothing.
    let e = ctx
        .block_on(a.next_many_for(taker("w2"), &[id("many")], 0))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("count"));
}

/// A holder's reports of many grants in one call: each decided on its own
/// fence, a stale one refused without touching the others.
pub fn reports_in_one_call_are_each_decided_on_their_own_fence<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let g = |t: &str| {
        fence(
            &ctx.block_on(a.claim(&id(t), &id("w"), Some(600_000)))
                .unwrap(),
        )
    };
    let (f1, f2, f3) = (g("r1"), g("r2"), g("r3"));
    // r4's first grant runs out and another takes it: its report is stale.
    let old = fence(
        &ctx.block_on(a.claim(&id("r4"), &id("w"), Some(ttl)))
            .unwrap(),
    );
    ctx.expire(ttl);
    let new = fence(
        &ctx.block_on(a.claim(&id("r4"), &id("v"), Some(600_000)))
            .unwrap(),
    );
    let replies = ctx
        .block_on(a.report_many(vec![
            (
                id("r1"),
                Request::Complete {
                    owner: id("w"),
                    fence: f1,
                },
            ),
            (
                id("r2"),
                Request::Fail {
                    owner: id("w"),
                    fence: f2,
                    error: Some(serde_json::json!({"why": "disk"})),
                },
            ),
            (
                id("r4"),
                Request::Complete {
                    owner: id("w"),
                    fence: old,
                },
            ),
            (
                id("r3"),
                Request::Release {
                    owner: id("w"),
                    fence: f3,
                },
            ),
        ]))
        .unwrap();
    let states: Vec<Option<State>> = replies
        .iter()
        .map(|r| r.record().map(|r| r.state))
        .collect();
    assert_eq!(
        states,
        [
            Some(State::Succeeded),
            Some(State::Failed),
            None,
            Some(State::Registered)
        ]
    );
    assert!(
        matches!(refusal(&replies[2]), Refusal::StaleFence { fence, .. } if *fence == old),
        "{replies:?}"
    );
    let r4 = ctx.block_on(a.get(&id("r4"))).unwrap().unwrap();
    assert_eq!((r4.state, r4.current_fence()), (State::Claimed, Some(new)));
    // The same batch again: the ends are acknowledged, nothing changes.
    let again = ctx
        .block_on(a.report_many(vec![(
            id("r1"),
            Request::Complete {
                owner: id("w"),
                fence: f1,
            },
        )]))
        .unwrap();
    assert!(
        matches!(again.as_slice(), [Reply::Acknowledged(_)]),
        "{again:?}"
    );
    // Only reports: a claim in a batch is bad input, and nothing is applied.
    let e = ctx
        .block_on(a.report_many(vec![
            (
                id("r5"),
                Request::Complete {
                    owner: id("w"),
                    fence: f3,
                },
            ),
            (
                id("r6"),
                Request::Claim {
                    owner: id("w"),
                    ttl_ms: None,
                    lock_delay_ms: None,
                },
            ),
        ]))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("reports"));
    assert!(ctx.block_on(a.get(&id("r6"))).unwrap().is_none());
}
