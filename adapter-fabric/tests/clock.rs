//! On etcd every deadline is the engine's: lease expiry (and so the
//! heartbeat timeout) by the holder key's lease, the start deadline by the
//! deadline key's. Clients an hour ahead and an hour behind share one real
//! 3-member cluster and can neither advance nor delay any of them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::conformance::fixtures::manifest;
use baton_core::{Authority, Clock, EventKind, Id, Refusal, State, SystemClock, TaskId, Timestamp};
use std::sync::Arc;
use std::time::Duration;

const HOUR: i64 = 3_600_000;

/// The system clock off by a fixed amount, as on a host whose clock is wrong.
#[derive(Debug)]
struct Skewed(i64);

impl Clock for Skewed {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(SystemClock.now().as_millis() + self.0)
    }
}

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

/// Three clients of one store: on time, an hour ahead, an hour behind.
async fn clients(c: &EtcdCluster, prefix: &str) -> [Authority<FabricStore>; 3] {
    let mut out = Vec::new();
    for skew in [0, HOUR, -HOUR] {
        let store = FabricStore::connect(FabricOptions::new(c.endpoints(), prefix))
            .await
            .unwrap();
        out.push(Authority::new(store, Arc::new(Skewed(skew))));
    }
    out.try_into().unwrap()
}

async fn declare(a: &Authority<FabricStore>, task: &TaskId, heartbeat_s: u64, start_s: u64) {
    let mut m = manifest(task.as_str(), 1, &[], heartbeat_s, 3);
    m.start_deadline_seconds = start_s;
    a.declare(m).await.unwrap();
    a.register(task, &id("run")).await.unwrap();
}

async fn state(a: &Authority<FabricStore>, task: &TaskId) -> (State, u32) {
    let r = a.get(task).await.unwrap().unwrap();
    (r.state, r.stalls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_client_can_neither_advance_nor_delay_a_start_deadline() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let [honest, ahead, behind] = clients(&cluster, "clock-start").await;
    let (long, short) = (id("ten-minutes"), id("three-seconds"));
    declare(&honest, &long, 60, 600).await;
    declare(&honest, &short, 60, 3).await;
    // An hour ahead, both deadlines look long past; the engine says neither is.
    let swept = ahead.sweep(false).await.unwrap();
    assert!(swept.is_empty(), "{swept:?}");
    assert_eq!(state(&ahead, &long).await.0, State::Registered);
    assert_eq!(state(&ahead, &short).await.0, State::Registered);
    // An hour behind, the short one looks an hour away; the engine says it passed.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert_eq!(state(&behind, &short).await.0, State::NotStarted);
    let swept = behind.sweep(false).await.unwrap();
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!(
        (&swept[0].task, swept[0].to),
        (&short, State::NotStarted),
        "{swept:?}"
    );
    assert_eq!(state(&honest, &short).await.0, State::NotStarted);
    assert_eq!(state(&ahead, &long).await.0, State::Registered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_client_can_neither_keep_nor_end_a_lease() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let [honest, ahead, behind] = clients(&cluster, "clock-lease").await;
    let (t, run) = (id("job"), id("run"));
    // 2 s leases (the heartbeat timeout), a 5 s start deadline, 3 attempts.
    declare(&honest, &t, 2, 5).await;
    let g = behind
        .task_claim(&t, &run, &id("x"), None)
        .await
        .unwrap()
        .grant()
        .unwrap();
    // An hour ahead, the lease looks long gone; the engine says it holds.
    let r = ahead.task_claim(&t, &run, &id("y"), None).await.unwrap();
    assert!(matches!(r.refusal(), Some(Refusal::Held { .. })), "{r:?}");
    // An hour behind, it looks an hour from its end; the engine ended it.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let r = behind.renew(&t, &id("x"), g.fence, None).await.unwrap();
    match r.refusal() {
        Some(Refusal::LeaseExpired { fence, .. }) => assert_eq!(*fence, g.fence),
        other => panic!("a renew after the engine's expiry: {other:?}"),
    }
    // The expiry counts as one stall of three, and the start deadline after
    // it (5 s from the expiry, by the engine) has not passed: claimable.
    assert_eq!(state(&behind, &t).await, (State::Registered, 1));
    let again = ahead
        .task_claim(&t, &run, &id("y"), None)
        .await
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(again.attempt, 2);
    let kinds: Vec<EventKind> = honest
        .events(Some(&t), None, 100)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(!kinds.contains(&EventKind::NotStarted), "{kinds:?}");
    // Once this lease ends and 5 s more pass by the engine, the task did not
    // start in time, though the client behind thinks it is an hour early.
    tokio::time::sleep(Duration::from_millis(2_000 + 5_000 + 1_500)).await;
    assert_eq!(state(&behind, &t).await, (State::NotStarted, 2));
    let swept = behind.sweep(false).await.unwrap();
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!(state(&ahead, &t).await, (State::NotStarted, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_client_can_neither_cut_short_nor_prolong_a_lock_delay() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let [_, ahead, behind] = clients(&cluster, "clock-delay").await;
    let (t, w) = (id("job"), id("w"));
    // A 2 s lease with a 4 s lock delay, granted an hour behind.
    behind
        .claim_with_lock_delay(&t, &w, Some(2_000), 4_000)
        .await
        .unwrap()
        .grant()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    // Expired unreleased: an hour ahead, the delay looks long over; it is not.
    let r = ahead.claim(&t, &id("y"), Some(2_000)).await.unwrap();
    assert!(
        matches!(r.refusal(), Some(Refusal::LockDelay { .. })),
        "{r:?}"
    );
    // Once it has run out by the engine, the client behind is granted.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    let g = behind.claim(&t, &id("z"), Some(2_000)).await.unwrap();
    assert!(g.grant().is_some(), "{g:?}");
}
