//! The pure decision function: what every request costs before any IO.

use baton_benches::id;
use baton_core::conformance::fixtures::manifest;
use baton_core::{Judged, Operation, Preconditions, Request, Timestamp, Verdict, decide};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn op(request: Request, now_ms: u64) -> Operation {
    Operation {
        task: id("t"),
        request,
        pre: Preconditions::none(),
        now: Timestamp::from_millis(1_767_225_600_000).plus_ms(now_ms),
        clock: Default::default(),
    }
}

fn commit(mut d: baton_core::Decision) -> baton_core::TaskRecord {
    d.assign_fence(5);
    match d.verdict {
        Verdict::Commit(c) => c.record,
        other => panic!("setup did not commit: {other:?}"),
    }
}

/// What a store's judge of time says: the lease holds, or neither holds.
const HOLDS: Judged = Judged {
    lease_holds: true,
    deadline_passed: false,
    lock_delay_holds: false,
};
const NEITHER: Judged = Judged {
    lease_holds: false,
    deadline_passed: false,
    lock_delay_holds: false,
};

fn bench(c: &mut Criterion) {
    let claim = op(
        Request::Claim {
            owner: id("w"),
            ttl_ms: Some(60_000),
            lock_delay_ms: None,
        },
        0,
    );
    c.bench_function("decide/claim a new task", |b| {
        b.iter(|| decide(black_box(&claim), None, NEITHER))
    });
    let held = commit(decide(&claim, None, NEITHER));
    let other = op(
        Request::Claim {
            owner: id("x"),
            ttl_ms: Some(60_000),
            lock_delay_ms: None,
        },
        1,
    );
    c.bench_function("decide/claim a held task (refused)", |b| {
        b.iter(|| decide(black_box(&other), Some(&held), HOLDS))
    });
    let renew = op(
        Request::Renew {
            owner: id("w"),
            fence: 1,
            ttl_ms: None,
        },
        1,
    );
    c.bench_function("decide/renew (stale fence, conflict event)", |b| {
        b.iter(|| decide(black_box(&renew), Some(&held), HOLDS))
    });
    // A declared task at RUNNING with 3 steps.
    let m = manifest("t", 3, &["log"], 60, 1);
    let mut r = commit(decide(
        &op(Request::Declare { manifest: m }, 0),
        None,
        NEITHER,
    ));
    r = commit(decide(
        &op(Request::Register { run_id: id("run") }, 1),
        Some(&r),
        NEITHER,
    ));
    r = commit(decide(
        &op(
            Request::TaskClaim {
                run_id: id("run"),
                executor: id("x"),
                ttl_ms: None,
            },
            2,
        ),
        Some(&r),
        NEITHER,
    ));
    let f = r.current_fence().unwrap_or(0);
    r = commit(decide(
        &op(
            Request::Start {
                run_id: id("run"),
                executor: id("x"),
                fence: f,
            },
            3,
        ),
        Some(&r),
        HOLDS,
    ));
    let hb = op(
        Request::Heartbeat {
            run_id: id("run"),
            executor: id("x"),
            fence: f,
            step: 2,
            ttl_ms: None,
        },
        4,
    );
    c.bench_function("decide/heartbeat", |b| {
        b.iter(|| decide(black_box(&hb), Some(&r), HOLDS))
    });
    let expired = op(Request::Settle, 3_600_000);
    c.bench_function("decide/settle an expired lease", |b| {
        b.iter(|| decide(black_box(&expired), Some(&r), NEITHER))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
