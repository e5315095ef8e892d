//! What the adapter leaves on the cluster and what it may touch: no lease
//! outlives the grant it held, and acknowledging the outbox deletes outbox
//! entries only, whatever the ids say (on a real 3-member cluster).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::{Authority, ErrorKind, Id, SystemClock};
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

async fn leases(c: &EtcdCluster) -> usize {
    let mut client = etcd_client::Client::connect(c.endpoints(), None)
        .await
        .unwrap();
    client.leases().await.unwrap().leases().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_outlives_its_grant_and_ack_touches_only_the_outbox() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let a = authority(&cluster, "leases").await;
    let (t, w) = (id("t"), id("w"));
    let hour = Some(3_600_000);
    let g = a.claim(&t, &w, hour).await.unwrap().grant().unwrap();
    for _ in 0..20 {
        a.renew(&t, &w, g.fence, hour)
            .await
            .unwrap()
            .grant()
            .unwrap();
    }
    assert_eq!(leases(&cluster).await, 1, "one lease for one live grant");
    let again = a.claim(&t, &w, hour).await.unwrap().grant().unwrap();
    assert!(again.fence > g.fence);
    assert_eq!(leases(&cluster).await, 1, "a re-grant replaces its lease");
    a.complete(&t, &w, again.fence).await.unwrap();
    assert_eq!(
        leases(&cluster).await,
        0,
        "a finished grant leaves no lease"
    );
    let r = id("r");
    let g = a.claim(&r, &w, hour).await.unwrap().grant().unwrap();
    a.release(&r, &w, g.fence).await.unwrap();
    assert_eq!(
        leases(&cluster).await,
        0,
        "a released grant leaves no lease"
    );

    // A store nested inside another's prefix: acknowledging through the
    // outer store with ids that spell the inner store's keys deletes nothing.
    let outer = authority(&cluster, "z").await;
    let inner = authority(&cluster, "z/o").await;
    let v = id("victim");
    let held = inner
        .claim(&v, &id("o"), Some(60_000))
        .await
        .unwrap()
        .grant()
        .unwrap();
    let crafted = vec!["t/76696374696d".to_owned(), "h/76696374696d".to_owned()];
    let e = outer.ack(&crafted).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    // The store refuses them too, below the authority.
    let e = baton_core::Store::ack(outer.store(), &crafted, outer.now())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    let thief = inner.claim(&v, &id("thief"), None).await.unwrap();
    assert_eq!(
        thief.refusal().map(|r| r.reason()),
        Some("held"),
        "the first owner's lease still holds: {thief:?}"
    );
    let h = inner.holder(&v).await.unwrap().unwrap().unwrap();
    assert_eq!((h.grant.fence, h.live), (held.fence, true));
    // A well-formed id that names no entry acknowledges nothing.
    let none = outer
        .ack(&["00000000-0000-0000-0000-000000000000".to_owned()])
        .await
        .unwrap();
    assert_eq!(none, 0);
}
