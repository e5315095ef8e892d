//! Property tests on the decision function: random request sequences, with
//! stale fences, foreign owners, operators and time jumps, never break the
//! invariants (one holder with the highest fence, fences strictly
//! increasing, no stale write accepted, SUCCEEDED never granted again,
//! terminals left only by retry or an operator).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::conformance::fixtures::manifest;
use baton_core::{
    Actor, Id, Judged, Operation, Preconditions, Request, RequestKind, State, TaskRecord,
    Timestamp, Verdict, decide,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
struct Step {
    task: usize,
    actor: usize,
    kind: u8,
    /// 0: the current fence, 1: an older one, 2: a made-up one.
    fence: u8,
    step: u32,
    ttl_ms: u64,
    advance_ms: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        0..4usize,
        0..4usize,
        0..15u8,
        0..3u8,
        0..5u32,
        1..8_000u64,
        prop_oneof![0..500u64, 0..20_000u64],
    )
        .prop_map(
            |(task, actor, kind, fence, step, ttl_ms, advance_ms)| Step {
                task,
                actor,
                kind,
                fence,
                step,
                ttl_ms,
                advance_ms,
            },
        );
    proptest::collection::vec(step, 1..120)
}

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

struct World {
    now: Timestamp,
    records: BTreeMap<usize, TaskRecord>,
    fence: u64,
    fences_seen: BTreeMap<usize, Vec<u64>>,
    succeeded: BTreeMap<usize, bool>,
}

fn request(s: &Step, world: &World) -> Request {
    let me = id(&format!("w{}", s.actor));
    let run = id("run");
    let seen = world.fences_seen.get(&s.task).cloned().unwrap_or_default();
    let fence = match s.fence {
        0 => seen.last().copied().unwrap_or(1),
        1 => seen.first().copied().unwrap_or(1),
        _ => world.fence + 7,
    };
    let op = Actor::Operator(id("alice"));
    match s.kind {
        0 => Request::Claim {
            owner: me,
            ttl_ms: Some(s.ttl_ms),
            lock_delay_ms: None,
        },
        1 => Request::Renew {
            owner: me,
            fence,
            ttl_ms: Some(s.ttl_ms),
        },
        2 => Request::Release { owner: me, fence },
        3 => Request::Recover {
            owner: me,
            ttl_ms: Some(s.ttl_ms),
        },
        4 => Request::Complete { owner: me, fence },
        5 => Request::Fail {
            owner: me,
            fence,
            error: None,
        },
        6 => Request::Cancel {
            by: Actor::Worker(me),
            fence: Some(fence),
            force: false,
        },
        7 => Request::TaskClaim {
            run_id: run,
            executor: me,
            ttl_ms: None,
        },
        8 => Request::Start {
            run_id: run,
            executor: me,
            fence,
        },
        9 => Request::Heartbeat {
            run_id: run,
            executor: me,
            fence,
            step: s.step,
            ttl_ms: None,
        },
        10 => Request::Succeed {
            run_id: run,
            executor: me,
            fence,
            evidence: BTreeMap::new(),
        },
        11 => Request::Redispatch {
            by: if s.actor == 0 { Actor::Worker(me) } else { op },
            iteration: u64::from(s.step) + 1,
        },
        12 => Request::Finalize {
            by: op,
            error: None,
        },
        13 => Request::Retry { run_id: run },
        _ => Request::Cancel {
            by: op,
            fence: None,
            force: false,
        },
    }
}

fn is_grant(k: RequestKind) -> bool {
    matches!(
        k,
        RequestKind::Claim | RequestKind::Recover | RequestKind::TaskClaim
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_every_invariant(seq in steps()) {
        let mut w = World { now: Timestamp::from_millis(1_767_225_600_000), records: BTreeMap::new(), fence: 0, fences_seen: BTreeMap::new(), succeeded: BTreeMap::new() };
        // Tasks 2 and 3 are declared (one step, no evidence, two attempts).
        for t in [2usize, 3] {
            let task = id(&format!("t{t}"));
            let mut m = manifest(task.as_str(), 1, &[], 5, 2);
            m.start_deadline_seconds = 60;
            for req in [Request::Declare { manifest: m }, Request::Register { run_id: id("run") }] {
                let op = Operation { task: task.clone(), request: req, pre: Preconditions::none(), now: w.now, clock: Default::default() };
                let d = decide(&op, w.records.get(&t), Judged::of(w.records.get(&t), w.now));
                if let Verdict::Commit(c) = d.verdict { w.records.insert(t, c.record); }
            }
        }
        for s in &seq {
            w.now = w.now.plus_ms(s.advance_ms);
            let task = id(&format!("t{}", s.task));
            let req = request(s, &w);
            let before = w.records.get(&s.task).cloned();
            let op = Operation { task, request: req.clone(), pre: Preconditions::none(), now: w.now, clock: Default::default() };
            let judged = Judged::of(before.as_ref(), w.now);
            let live = before.as_ref().is_some_and(|r| baton_core::live_lease(r, judged.lease_holds));
            let mut d = decide(&op, before.as_ref(), judged);
            if d.mints_fence() {
                w.fence += 1;
                d.assign_fence(w.fence);
            }
            // What the request saw (after time settled the record).
            let seen = d.current.clone();
            if let Some(r) = d.record_to_write() {
                w.records.insert(s.task, r.clone());
            }
            let Verdict::Commit(c) = &d.verdict else { continue };
            let after = &c.record;
            // Fences strictly increase and the holder holds the newest one.
            if is_grant(req.kind()) {
                let f = after.current_fence().unwrap();
                prop_assert!(w.fences_seen.values().flatten().all(|&g| g < f), "fence {} reused or regressed", f);
                w.fences_seen.entry(s.task).or_default().push(f);
                prop_assert!(!w.succeeded.get(&s.task).copied().unwrap_or(false), "a succeeded task was granted again");
            }
            // A holder-only write commits only under the current, live fence.
            if let Some(f) = req.fence() {
                let s0 = seen.as_ref().unwrap();
                prop_assert_eq!(s0.current_fence(), Some(f), "accepted under a stale fence");
                prop_assert!(s0.state.is_held(), "accepted after the lease ended");
                prop_assert!(live, "accepted on an expired lease");
            }
            // Terminal states are left only by retry or an operator.
            if let Some(s0) = &seen
                && s0.state.is_terminal()
                && after.state != s0.state
            {
                prop_assert!(matches!(req.kind(), RequestKind::Retry | RequestKind::Redispatch | RequestKind::Finalize));
                if req.kind() != RequestKind::Retry {
                    prop_assert!(req.actor().is_operator());
                }
                prop_assert!(s0.state != State::Succeeded, "SUCCEEDED was left");
            }
            prop_assert_eq!(after.revision, seen.as_ref().map_or(0, |r| r.revision) + 1);
            if after.state == State::Succeeded {
                w.succeeded.insert(s.task, true);
            }
        }
    }
}
