//! Scoped tokens: a request that carries a scope (what a server's
//! admission puts on every request of a scoped token) is decided within
//! it by the store's own commit: a task outside it is not permitted and
//! nothing is written; `next` passes over what the scope does not admit.

use super::graph::spec;
use crate::access::Scope;
use crate::conformance::fixtures::*;
use crate::conformance::*;
use crate::error::ErrorKind;
use crate::graph::Taker;
use crate::request::{Operation, Request};

/// `queue:ci,prefix:agent-*`.
fn scope() -> Scope {
    Scope::parse("queue:ci,prefix:agent-*").unwrap()
}

pub fn a_scoped_request_acts_only_within_its_scope<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let store = a.store();
    let within = Some(scope());
    let op = |task: &str, request: Request| Operation {
        task: id(task),
        request,
        pre: Preconditions {
            within: within.clone(),
            ..Preconditions::default()
        },
        now: a.now(),
        clock: a.commit_clock(),
    };
    let claim = || Request::Claim {
        owner: id("w"),
        ttl_ms: Some(60_000),
        lock_delay_ms: None,
    };
    // Tasks in the scope's queue, in another, and outside the graph.
    for (task, queue) in [("build-1", "ci"), ("deploy-1", "prod"), ("build-2", "ci")] {
        ctx.block_on(a.add(&id(task), spec(task, Some(queue), 0, &[])))
            .unwrap();
    }
    let events_before = ctx.block_on(store.events(None, 0, 10_000)).unwrap().len();
    // Outside: another queue, a bare task whose id has no scoped prefix
    // (it would be created by the claim), a graph add to another queue.
    for (task, request) in [
        ("deploy-1", claim()),
        ("loose", claim()),
        (
            "deploy-2",
            Request::Add {
                node: spec("deploy-2", Some("prod"), 0, &[]),
            },
        ),
    ] {
        let e = ctx
            .block_on(store.apply(op(task, request)))
            .map(|d| d.verdict);
        match e {
            Ok(crate::decide::Verdict::Invalid(e)) => {
                assert_eq!(e.kind, ErrorKind::NotPermitted, "{task}: {e}");
                assert!(e.message.contains("outside the scope"), "{task}: {e}");
            }
            other => panic!("{task}: {other:?}"),
        }
    }
    assert!(
        ctx.block_on(a.get(&id("loose"))).unwrap().is_none(),
        "nothing created"
    );
    assert!(
        ctx.block_on(a.get(&id("deploy-2"))).unwrap().is_none(),
        "nothing added"
    );
    assert_eq!(
        ctx.block_on(a.get(&id("deploy-1"))).unwrap().unwrap().state,
        State::Registered
    );
    assert_eq!(
        ctx.block_on(store.events(None, 0, 10_000)).unwrap().len(),
        events_before,
        "a request outside the scope writes nothing"
    );
    // Inside: the scope's queue, a prefix (bare), an add to its queue.
    for (task, request) in [
        ("build-1", claim()),
        ("agent-7", claim()),
        (
            "build-3",
            Request::Add {
                node: spec("build-3", Some("ci"), 0, &[]),
            },
        ),
    ] {
        let d = ctx.block_on(store.apply(op(task, request))).unwrap();
        assert!(
            matches!(d.verdict, crate::decide::Verdict::Commit(_)),
            "{task}: {:?}",
            d.verdict
        );
    }
    // `next` over both queues with the scope: only the scope's tasks, in
    // order (deploy-1 is first by id, and passed over).
    let mut q = a
        .next_query(
            Taker::Owner {
                owner: id("w2"),
                ttl_ms: Some(60_000),
                lock_delay_ms: None,
            },
            &[id("ci"), id("prod")],
        )
        .unwrap();
    q.count = 10;
    q.within = within.clone();
    let granted: Vec<String> = ctx
        .block_on(store.next_many(&q))
        .unwrap()
        .iter()
        .filter_map(|d| d.record_to_write().map(|r| r.task.to_string()))
        .collect();
    assert_eq!(granted, ["build-2", "build-3"], "only the scope's tasks");
    assert_eq!(
        ctx.block_on(a.get(&id("deploy-1"))).unwrap().unwrap().state,
        State::Registered,
        "passed over"
    );
}
