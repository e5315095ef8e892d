//! A store decides a task's next write on what its own last transaction
//! left there, without reading it again; these tests change the task
//! through another store (another process, as far as the cluster can tell)
//! in between, on a real 3-member cluster, and check that every answer is
//! still the one the cluster's current state gives.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::{Authority, Id, Refusal, Reply, SystemClock};
use std::sync::Arc;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

async fn authority(c: &EtcdCluster, prefix: &str) -> Authority<FabricStore> {
    Authority::new(
        FabricStore::connect(FabricOptions::new(c.endpoints(), prefix))
            .await
            .unwrap(),
        Arc::new(SystemClock),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_store_wrote_last_never_decides_against_the_cluster() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let (a, b) = (
        authority(&cluster, "remembered").await,
        authority(&cluster, "remembered").await,
    );
    let hour = Some(3_600_000);
    let (w1, w2) = (id("w1"), id("w2"));

    // A refusal is never answered from what `a` remembers: `a` granted t to
    // w1, `b` released it since, so w2's claim through `a` is granted.
    let t = id("released-elsewhere");
    let g1 = a.claim(&t, &w1, hour).await.unwrap().grant().unwrap();
    let r = b.release(&t, &w1, g1.fence).await.unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let g2 = a.claim(&t, &w2, hour).await.unwrap();
    let g2 = g2.grant().unwrap_or_else(|| panic!("granted, not {g2:?}"));
    assert!(g2.fence > g1.fence);
    let h = a.holder(&t).await.unwrap().unwrap().unwrap();
    assert_eq!((h.grant.owner.as_str(), h.grant.fence), ("w2", g2.fence));

    // A write decided on what `a` remembers lands only if nothing changed
    // since: `b` re-granted t to w2, so w1's completion with its old fence
    // through `a` is refused as stale and w2's grant stands.
    let t = id("regranted-elsewhere");
    let g1 = a.claim(&t, &w1, hour).await.unwrap().grant().unwrap();
    b.release(&t, &w1, g1.fence).await.unwrap();
    let g2 = b.claim(&t, &w2, hour).await.unwrap().grant().unwrap();
    let late = a.complete(&t, &w1, g1.fence).await.unwrap();
    assert!(
        matches!(late, Reply::Refused(Refusal::StaleFence { .. })),
        "{late:?}"
    );
    let h = a.holder(&t).await.unwrap().unwrap().unwrap();
    assert_eq!((h.grant.owner.as_str(), h.grant.fence), ("w2", g2.fence));
    // And the current holder completes through `a`, whose memory of t is
    // now stale: it reads again and the completion lands.
    let done = a.complete(&t, &w2, g2.fence).await.unwrap();
    assert_eq!(
        done.record().map(|r| r.state),
        Some(baton_core::State::Succeeded),
        "{done:?}"
    );

    // What `a` wrote last is what the cluster holds: a claim, renewals and
    // the completion through `a` alone all land, fence by fence.
    let t = id("only-here");
    let g = a.claim(&t, &w1, hour).await.unwrap().grant().unwrap();
    for _ in 0..3 {
        let r = a.renew(&t, &w1, g.fence, hour).await.unwrap();
        assert_eq!(r.grant().map(|x| x.fence), Some(g.fence), "{r:?}");
    }
    let done = a.complete(&t, &w1, g.fence).await.unwrap();
    assert_eq!(
        done.record().map(|r| r.state),
        Some(baton_core::State::Succeeded)
    );
    let seen = b.get(&t).await.unwrap().unwrap();
    assert_eq!(seen.state, baton_core::State::Succeeded);

    // A lease `a` kept after a grant ended, and that ran out meanwhile,
    // holds up no grant: the next grant of that length is made, on a live
    // lease (the refresh finds it gone; a write naming it would fail and
    // be decided again).
    let two = Some(2_000);
    let t = id("kept-lease-ran-out");
    let g = a.claim(&t, &w1, two).await.unwrap().grant().unwrap();
    a.complete(&t, &w1, g.fence).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    let t = id("after-it-ran-out");
    let g = a.claim(&t, &w1, two).await.unwrap();
    let g = g.grant().unwrap_or_else(|| panic!("granted, not {g:?}"));
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    let h = b.holder(&t).await.unwrap().unwrap().unwrap();
    assert_eq!((h.grant.fence, h.live), (g.fence, true), "{h:?}");
    let r = b.claim(&t, &w2, two).await.unwrap();
    assert!(matches!(r, Reply::Refused(Refusal::Held { .. })), "{r:?}");
}
