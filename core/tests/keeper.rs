//! The lease keeper on the in-memory store, driven by a manual clock: its
//! renewal cadence, its backoff when the store does not answer, and the
//! loss signal firing before the lease could end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::conformance::fixtures::manifest;
use baton_core::fault::{Fault, FaultStore};
use baton_core::{
    Authority, Ending, EventKind, Grant, Id, KeepOptions, Keeper, Loss, ManualClock, MemoryStore,
    Outcome, Refusal, State, Timestamp,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

type Auth = Arc<Authority<FaultStore<MemoryStore>>>;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

fn world() -> (Auth, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_millis(1_767_225_600_000));
    let auth = Authority::new(FaultStore::new(MemoryStore::new()), Arc::new(clock.clone()));
    (Arc::new(auth), clock)
}

async fn claim(a: &Auth, task: &str, ttl_ms: u64) -> Grant {
    a.claim(&id(task), &id("w"), Some(ttl_ms))
        .await
        .unwrap()
        .grant()
        .unwrap()
}

/// Waits (real time, bounded) until `cond` holds for the keeper.
async fn until(
    k: &Keeper<FaultStore<MemoryStore>>,
    what: &str,
    cond: impl Fn(&baton_core::Kept) -> bool,
) {
    for _ in 0..600 {
        if cond(&k.kept()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what}: {:?}", k.kept());
}

/// Lets the keeper run for a while in real time without moving the clock.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(80)).await;
}

async fn renewed_events(a: &Auth, task: &str) -> usize {
    a.events(Some(&id(task)), None, 1000)
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.kind == EventKind::Renewed)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_renews_every_third_of_the_ttl() {
    let (a, clock) = world();
    let g = claim(&a, "t", 3_000).await;
    let k = a.keep(g.clone(), KeepOptions::default());
    assert_eq!(k.schedule().renew_every_ms, 1_000);
    // Not before a third of the TTL has passed.
    clock.advance_ms(999);
    settle().await;
    assert_eq!(k.kept().renewals, 0);
    clock.advance_ms(1);
    until(&k, "first renewal", |s| s.renewals == 1).await;
    for n in 2..=5 {
        clock.advance_ms(1_000);
        until(&k, "next renewal", |s| s.renewals == n).await;
    }
    assert_eq!(renewed_events(&a, "t").await, 5);
    // Each renewal moves the expiry a full TTL past when it was sent.
    assert_eq!(k.grant().expiry, clock_now(&a).plus_ms(3_000));
    assert_eq!(k.grant().fence, g.fence);
    assert!(k.lost().is_none());
}

fn clock_now(a: &Auth) -> Timestamp {
    a.now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_retries_an_unanswered_renewal_and_gives_up_before_the_lease_ends() {
    let (a, clock) = world();
    let start = a.now();
    let g = claim(&a, "t", 3_000).await;
    let k = a.keep(
        g.clone(),
        KeepOptions {
            grace_ms: 500,
            ..Default::default()
        },
    );
    let s = k.schedule();
    assert_eq!((s.grace_ms, s.margin_ms), (500, 300));
    assert_eq!(k.stop_at(), start.plus_ms(3_000 - 800));
    a.store().set_always(Some(Fault::UnavailableBefore));
    clock.advance_ms(1_000);
    until(&k, "a retry", |s| s.retries >= 1).await;
    // It keeps retrying, with waits that grow, and stays quiet until stop_at.
    let mut last = k.kept().retries;
    let mut grew = 0;
    while a.now() < start.plus_ms(2_100) {
        clock.advance_ms(100);
        settle().await;
        let r = k.kept().retries;
        grew += usize::from(r > last);
        last = r;
        assert!(k.lost().is_none(), "lost early at {}", a.now());
    }
    assert!(grew >= 3, "retried only {grew} more times");
    assert!(last < 20, "no backoff: {last} retries in 1.1 s");
    // At expiry - grace - margin the holder must stop, with the lease still live.
    clock.advance_ms(100);
    until(&k, "the loss", |s| s.lost.is_some()).await;
    match k.lost().unwrap() {
        Loss::Unrenewed { error: Some(e) } => {
            assert_eq!(e.kind, baton_core::ErrorKind::Unavailable)
        }
        other => panic!("{other:?}"),
    }
    assert!(a.now() < k.stopped_by() && k.stopped_by() < g.expiry);
    let h = a.holder(&id("t")).await.unwrap().unwrap().unwrap();
    assert!(h.live, "told to stop while the lease still holds");
    // Once lost, it renews no more, even when the store is back.
    a.store().set_always(None);
    clock.advance_ms(1_000);
    settle().await;
    assert_eq!(renewed_events(&a, "t").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renewal_is_a_loss_at_once() {
    let (a, clock) = world();
    let g = claim(&a, "t", 3_000).await;
    let k = a.keep(g.clone(), KeepOptions::default());
    // The same owner claims again: the kept fence is stale now.
    let again = claim(&a, "t", 3_000).await;
    assert!(again.fence > g.fence);
    clock.advance_ms(1_000);
    until(&k, "the loss", |s| s.lost.is_some()).await;
    assert!(
        matches!(k.lost(), Some(Loss::Refused(Refusal::StaleFence { .. }))),
        "{:?}",
        k.lost()
    );
    let lost = tokio::time::timeout(Duration::from_secs(1), k.wait_lost())
        .await
        .unwrap();
    assert!(matches!(lost, Loss::Refused(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_release_and_drop_end_the_renewals() {
    let (a, clock) = world();
    // finish(success) completes a bare task.
    let k = a.keep(claim(&a, "done", 3_000).await, KeepOptions::default());
    clock.advance_ms(1_000);
    until(&k, "a renewal", |s| s.renewals == 1).await;
    let r = k
        .finish(Outcome::Success {
            evidence: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(r.record().unwrap().state, State::Succeeded);
    // release() gives it back; dropping stops renewing.
    let k = a.keep(claim(&a, "back", 3_000).await, KeepOptions::default());
    let r = k.release().await.unwrap();
    assert_eq!(r.record().unwrap().state, State::Registered);
    let k = a.keep(claim(&a, "dropped", 3_000).await, KeepOptions::default());
    drop(k);
    for _ in 0..3 {
        clock.advance_ms(1_000);
        settle().await;
    }
    for t in ["done", "back", "dropped"] {
        assert!(
            renewed_events(&a, t).await <= 1,
            "{t} renewed after its end"
        );
    }
    assert_eq!(renewed_events(&a, "dropped").await, 0);
    // A declared task: finish(failure) fails it under its run.
    let (t, run) = (id("declared"), id("run"));
    a.declare(manifest(t.as_str(), 1, &[], 60, 1))
        .await
        .unwrap();
    a.register(&t, &run).await.unwrap();
    let g = a
        .task_claim(&t, &run, &id("x"), None)
        .await
        .unwrap()
        .grant()
        .unwrap();
    let k = a.keep(
        g,
        KeepOptions {
            run_id: Some(run.clone()),
            ..Default::default()
        },
    );
    assert_eq!(k.schedule().renew_every_ms, 20_000);
    let r = k
        .finish(Outcome::Failure {
            error: json!({"exit_code": 3}),
        })
        .await
        .unwrap();
    let rec = r.record().unwrap();
    assert_eq!(rec.state, State::Failed);
    assert_eq!(rec.error, Some(json!({"exit_code": 3})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_the_store_did_not_answer_is_sent_again() {
    let (a, _clock) = world();
    let k = a.keep(claim(&a, "t", 3_000).await, KeepOptions::default());
    // The complete lands but its answer is lost: the repeat is acknowledged.
    a.store().inject_next(Fault::IndeterminateAfter);
    let r = k
        .finish(Outcome::Success {
            evidence: Default::default(),
        })
        .await
        .unwrap();
    assert!(r.is_idempotent(), "{r:?}");
    assert_eq!(r.record().unwrap().state, State::Succeeded);
}

/// A waiting `next` counts its deadline on the authority's clock, as
/// every time in core: with the clock moved an hour on while it waits,
/// a wait of ten minutes ends at its next try, answering `none_ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_next_ends_by_the_authoritys_clock() {
    let (a, clock) = world();
    let spec = baton_core::graph::NodeSpec::new(&id("busy"), Some(id("q")), 0, []).unwrap();
    a.add(&id("busy"), spec).await.unwrap();
    let held = a
        .next(&id("w1"), &[id("q")], Some(3_600_000), None)
        .await
        .unwrap();
    assert!(held.grant().is_some(), "{held:?}");
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let taker = baton_core::graph::Taker::Owner {
                owner: id("w2"),
                ttl_ms: None,
                lock_delay_ms: None,
            };
            a.next_waiting(taker, &[id("q")], 600_000).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "ten minutes have not passed");
    clock.advance_ms(3_600_000 - 1000);
    let reply = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the wait ended once the authority's clock passed its deadline")
        .unwrap()
        .unwrap();
    assert!(
        matches!(reply, baton_core::Reply::Refused(Refusal::NoneReady { .. })),
        "{reply:?}"
    );
}

/// Kept grants ended together: one call, each decided on its own fence (a
/// superseded one refused, the others landing), sent again when its answer
/// was lost (the repeat acknowledged), and none renewed after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_all_ends_each_grant_on_its_own_fence_in_one_call() {
    let (a, clock) = world();
    let mut kept = Vec::new();
    for t in ["a", "b", "c"] {
        kept.push(a.keep(claim(&a, t, 3_000).await, KeepOptions::default()));
    }
    // The same owner claims c again: the kept grant's fence is superseded.
    let newer = claim(&a, "c", 3_000).await;
    a.store().inject_next(Fault::IndeterminateAfter);
    let endings = [
        Ending::Finish(Outcome::Success {
            evidence: Default::default(),
        }),
        Ending::Finish(Outcome::Failure {
            error: json!({"type": "ValueError"}),
        }),
        Ending::Release,
    ];
    let replies = Keeper::report_all(kept.into_iter().zip(endings).collect())
        .await
        .unwrap();
    assert_eq!(replies.len(), 3);
    assert!(replies[0].is_idempotent(), "{:?}", replies[0]);
    assert_eq!(replies[0].record().unwrap().state, State::Succeeded);
    assert_eq!(replies[1].record().unwrap().state, State::Failed);
    assert!(
        matches!(replies[2].refusal(), Some(Refusal::StaleFence { .. })),
        "{:?}",
        replies[2]
    );
    let holder = a.holder(&id("c")).await.unwrap().unwrap().unwrap();
    assert_eq!(holder.grant.fence, newer.fence, "the newer grant stands");
    for _ in 0..3 {
        clock.advance_ms(1_000);
        settle().await;
    }
    for t in ["a", "b"] {
        assert_eq!(renewed_events(&a, t).await, 0, "{t} renewed after its end");
    }
    // Nothing to end: nothing sent.
    assert!(
        Keeper::<baton_core::fault::FaultStore<MemoryStore>>::report_all(Vec::new())
            .await
            .unwrap()
            .is_empty()
    );
}
