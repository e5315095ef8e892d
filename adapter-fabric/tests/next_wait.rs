//! Waiting on etcd without a herd: 8 workers, each with its own client,
//! wait with `next --wait` (a watch on the ready prefix); one task becomes
//! ready, exactly one worker is granted it, the rest keep waiting, and the
//! wake-up costs no burst of transactions that lose their compare.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::graph::{NodeSpec, Taker};
use baton_core::{Authority, Id, Refusal, Reply, SystemClock};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

async fn client(c: &EtcdCluster) -> Authority<FabricStore> {
    let store = FabricStore::connect(FabricOptions::new(c.endpoints(), "herd"))
        .await
        .unwrap();
    Authority::new(store, Arc::new(SystemClock))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_watching_workers_and_one_ready_task_make_one_grant_and_no_burst() {
    const WORKERS: usize = 8;
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let a = client(&cluster).await;
    let spec = |t: &str, after: &[&str]| {
        NodeSpec::new(&id(t), None, 0, after.iter().map(|d| id(d))).unwrap()
    };
    a.add(&id("first"), spec("first", &[])).await.unwrap();
    a.add(&id("later"), spec("later", &["first"]))
        .await
        .unwrap();
    let owner = id("holder");
    let g = a
        .next(&owner, &[], Some(60_000), None)
        .await
        .unwrap()
        .grant()
        .unwrap();
    let started = Instant::now();
    let mut waiters = Vec::new();
    for w in 0..WORKERS {
        let c = client(&cluster).await;
        waiters.push(tokio::spawn(async move {
            let taker = Taker::Owner {
                owner: id(&format!("w{w}")),
                ttl_ms: Some(60_000),
                lock_delay_ms: None,
            };
            let r = c.next_waiting(taker, &[], 6_000).await.unwrap();
            (r, c.store().lost_races(), started.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    a.complete(&id("first"), &owner, g.fence).await.unwrap();
    let mut results = Vec::new();
    for w in waiters {
        results.push(w.await.unwrap());
    }
    let winners: Vec<_> = results
        .iter()
        .filter(|(r, _, _)| r.grant().is_some())
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one worker is granted: {results:?}"
    );
    assert_eq!(winners[0].0.grant().unwrap().task.as_str(), "later");
    for (r, _, waited) in results.iter().filter(|(r, _, _)| r.grant().is_none()) {
        assert!(
            matches!(
                r,
                Reply::Refused(Refusal::NoneReady { .. } | Refusal::Drained { .. })
            ),
            "{r:?}"
        );
        assert!(*waited >= Duration::from_millis(1_500), "{waited:?}");
    }
    // Woken together, the workers spread their tries: most find the entry
    // already taken and send no transaction at all.
    let lost: u64 = results.iter().map(|(_, l, _)| *l).sum();
    assert!(
        lost < WORKERS as u64 / 2,
        "transactions that lost their compare: {lost}"
    );
}
