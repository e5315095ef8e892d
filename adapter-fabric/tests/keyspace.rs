//! What the adapter leaves on the cluster and what it may touch: no lease
//! outlives the grant it held, and acknowledging the outbox deletes outbox
//! entries only, whatever the ids say (on a real 3-member cluster).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::conformance::fixtures::manifest;
use baton_core::{Authority, ErrorKind, Id, SystemClock};
use etcd_client::LeaseTimeToLiveOptions;
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

/// The cluster's leases once those holding a key number `holding` and
/// the rest at most `kept`, or 3 s pass: (holding a key, holding nothing).
/// A member may list leases before it has applied a revoke the leader
/// answered, but a lease that leaked (1 h TTLs here) never goes away.
async fn leases(c: &EtcdCluster, holding: usize, kept: usize) -> (usize, usize) {
    let mut client = etcd_client::Client::connect(c.endpoints(), None)
        .await
        .unwrap();
    let mut seen = (usize::MAX, usize::MAX);
    for _ in 0..30 {
        let ids: Vec<i64> = client
            .leases()
            .await
            .unwrap()
            .leases()
            .iter()
            .map(|l| l.id())
            .collect();
        let mut with_keys = 0;
        for id in &ids {
            let ttl = client
                .lease_time_to_live(*id, Some(LeaseTimeToLiveOptions::new().with_keys()))
                .await
                .unwrap();
            if !ttl.keys().is_empty() {
                with_keys += 1;
            }
        }
        seen = (with_keys, ids.len() - with_keys);
        if seen.0 == holding && seen.1 <= kept {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    seen
}

/// Drops a store and waits for the revokes of what it kept.
async fn close(a: Authority<FabricStore>) {
    drop(a);
    assert!(
        baton_adapter_fabric::finish_revokes(std::time::Duration::from_secs(3)).await,
        "revokes still under way"
    );
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
    // Each renewal moves the grant to a lease the store kept (refreshed),
    // and keeps the one it left: never more than one spare.
    assert_eq!(
        leases(&cluster, 1, 1).await,
        (1, 1),
        "one lease for one live grant, one kept"
    );
    let again = a.claim(&t, &w, hour).await.unwrap().grant().unwrap();
    assert!(again.fence > g.fence);
    assert_eq!(
        leases(&cluster, 1, 1).await,
        (1, 1),
        "a re-grant replaces its lease"
    );
    a.complete(&t, &w, again.fence).await.unwrap();
    assert_eq!(
        leases(&cluster, 0, 2).await,
        (0, 2),
        "a finished grant's lease holds nothing, kept for the next grant"
    );
    let r = id("r");
    let g = a.claim(&r, &w, hour).await.unwrap().grant().unwrap();
    assert_eq!(leases(&cluster, 1, 1).await, (1, 1), "it was reused");
    a.release(&r, &w, g.fence).await.unwrap();
    close(a).await;
    assert_eq!(
        leases(&cluster, 0, 0).await,
        (0, 0),
        "a store let go revokes what it kept: no lease outlives the grants"
    );
    // A declared task also keeps its start deadline on a lease: one while it
    // waits, two while held (the grant's, and the deadline after it), none
    // once it ends; each renewal replaces both.
    let a = authority(&cluster, "leases").await;
    let (dt, run) = (id("declared"), id("run"));
    a.declare(manifest(dt.as_str(), 1, &[], 3_600, 1))
        .await
        .unwrap();
    a.register(&dt, &run).await.unwrap();
    assert_eq!(
        leases(&cluster, 1, 32).await.0,
        1,
        "a waiting task's deadline"
    );
    let g = a
        .task_claim(&dt, &run, &w, None)
        .await
        .unwrap()
        .grant()
        .unwrap();
    a.start(&dt, &run, &w, g.fence).await.unwrap();
    for _ in 0..5 {
        let r = a.heartbeat(&dt, &run, &w, g.fence, 1, None).await.unwrap();
        assert!(r.record().is_some(), "{r:?}");
    }
    let (holding, kept) = leases(&cluster, 2, 32).await;
    assert_eq!(holding, 2, "a held task's grant and deadline");
    assert!(kept <= 32, "at most a pool's worth kept: {kept}");
    let r = a
        .succeed(&dt, &run, &w, g.fence, Default::default())
        .await
        .unwrap();
    assert_eq!(r.record().unwrap().state, baton_core::State::Succeeded);
    assert_eq!(
        leases(&cluster, 0, 32).await.0,
        0,
        "an ended task's leases hold nothing"
    );
    close(a).await;
    assert_eq!(
        leases(&cluster, 0, 0).await,
        (0, 0),
        "an ended task keeps no lease"
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

/// Large records page by what fits in a reply, and a list honours its limit:
/// 80 declared tasks with manifests of about 62 KB would make a 512-key page
/// of over 4 MiB, which etcd's client refuses for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_records_list_and_sweep_in_pages_that_fit() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let a = authority(&cluster, "large").await;
    let steps: Vec<String> = (0..60)
        .map(|i| format!("{i:04}-{}", "s".repeat(1000)))
        .collect();
    for i in 0..80 {
        let m = baton_core::Manifest::from_value(&serde_json::json!({
            "task_id": format!("big-{i:03}"), "executor": "ci", "source_branch": "main",
            "source_oid": "0", "target_version": "1", "steps": steps,
        }))
        .unwrap();
        a.declare(m).await.unwrap();
    }
    let page = a.list(None, None, 10).await.unwrap();
    assert_eq!(page.items.len(), 10);
    let mut seen = page.items.len();
    let mut next = page.next;
    while let Some(after) = next {
        let p = a.list(None, Some(&after), 25).await.unwrap();
        seen += p.items.len();
        next = p.next;
    }
    assert_eq!(seen, 80);
    a.sweep(true).await.unwrap();
}

/// Stores with different prefixes never see each other's keys, however the
/// prefixes nest; `a`, `/a`, `a/` and `//a//` name one store; a store left
/// in an earlier layout is refused rather than shown empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_isolate_stores_however_they_nest() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let outer = authority(&cluster, "n").await;
    let w = id("w");
    outer.claim(&id("mine"), &w, None).await.unwrap();
    for nested in ["n/t", "n/h", "n/e", "n/o", "n/t/deep"] {
        let inner = authority(&cluster, nested).await;
        let g = inner
            .claim(&id("victim"), &id("o"), Some(60_000))
            .await
            .unwrap();
        assert!(g.grant().is_some(), "{nested}");
        let m = baton_core::Manifest::from_value(&serde_json::json!({
            "task_id": "declared", "executor": "ci", "source_branch": "main",
            "source_oid": "0", "target_version": "1", "steps": ["a"],
        }))
        .unwrap();
        inner.declare(m).await.unwrap();
    }
    let all = outer.list(None, None, 100).await.unwrap().items;
    let names: Vec<&str> = all.iter().map(|r| r.task.as_str()).collect();
    assert_eq!(names, ["mine"], "the outer store sees only its own task");
    for cursor in ["a", "mine", "victim", "zzzz", "\u{ff}"] {
        let page = outer.list(None, Some(cursor), 100).await.unwrap().items;
        assert!(page.iter().all(|r| r.task.as_str() == "mine"), "{cursor}");
    }
    outer.sweep(false).await.unwrap();
    assert!(outer.get(&id("victim")).await.unwrap().is_none());
    let events = outer.events(None, None, 100).await.unwrap().items;
    assert!(
        events.iter().all(|e| e.task.as_str() == "mine"),
        "{events:?}"
    );

    let a = authority(&cluster, "a").await;
    let g = a
        .claim(&id("one"), &w, None)
        .await
        .unwrap()
        .grant()
        .unwrap();
    for same in ["/a", "a/", "//a//"] {
        let h = authority(&cluster, same)
            .await
            .holder(&id("one"))
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(h.grant.fence, g.fence, "{same:?} names the store \"a\"");
    }

    // A store written by an earlier layout (records at PREFIX/t/<hex>).
    let mut raw = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .unwrap();
    raw.put("old/t/6869", "{}", None).await.unwrap();
    let e = FabricStore::connect(FabricOptions::new(cluster.endpoints(), "old"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("earlier baton"), "{e}");
    let e = FabricStore::connect(FabricOptions::new(cluster.endpoints(), "bad\u{0}p"))
        .await
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("prefix"));
}

/// Compactions while lists read page after page: a list that loses its
/// revision starts again at the current one instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_list_survives_compactions_between_its_pages() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let a = Arc::new(authority(&cluster, "compact").await);
    let w = id("w");
    for i in 0..120 {
        a.claim(&id(&format!("seed-{i:03}")), &w, Some(600_000))
            .await
            .unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let compacted = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let compactor = {
        let (a, stop, compacted, endpoints) = (
            a.clone(),
            stop.clone(),
            compacted.clone(),
            cluster.endpoints(),
        );
        tokio::spawn(async move {
            let mut raw = etcd_client::Client::connect(endpoints, None).await.unwrap();
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                a.claim(&id(&format!("churn-{n}")), &id("w"), Some(600_000))
                    .await
                    .unwrap();
                let rev = raw
                    .get("x", None)
                    .await
                    .unwrap()
                    .header()
                    .unwrap()
                    .revision();
                if raw.compact(rev, None).await.is_ok() {
                    compacted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                // Often, as a cluster under a tight retention compacts:
                // many times within one list of several pages, though not
                // more often than a page can be read on a busy machine
                // (every 15 ms was, with another cluster on the cores;
                // every 50 ms was too, once, with builds on both cores).
                tokio::time::sleep(std::time::Duration::from_millis(120)).await;
            }
        })
    };
    // At least 40 rounds, and on until the lists have run through 20
    // compactions (however fast either side runs on a busy machine).
    let mut round = 0;
    while round < 40 || compacted.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        assert!(
            round < 4_000,
            "only {} compactions in {round} rounds",
            compacted.load(std::sync::atomic::Ordering::Relaxed)
        );
        let page = a.list(None, None, 120).await;
        let page = page.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(page.items.len(), 120, "round {round}");
        let running = a
            .list(Some(baton_core::State::Claimed), None, 120)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(running.items.len(), 120, "round {round}");
        round += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    compactor.await.unwrap();
}

/// A store written before the state and count indexes (its records
/// alone, no index keys, no marker) is indexed when first opened: the
/// counts then equal a count of its records, and a list by state finds
/// what a scan finds, also after writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_from_before_the_counts_is_indexed_when_opened() {
    use baton_core::Store;
    use baton_core::counts::{Counts, drift, recount};
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let a = authority(&cluster, "earlier").await;
    let w = id("w");
    let hour = Some(3_600_000);
    let f = a
        .claim(&id("done"), &w, hour)
        .await
        .unwrap()
        .grant()
        .unwrap();
    a.complete(&id("done"), &w, f.fence).await.unwrap();
    a.claim(&id("held"), &w, hour).await.unwrap();
    a.declare(manifest("declared", 1, &[], 60, 1))
        .await
        .unwrap();
    let alice = baton_core::Actor::Operator(id("alice"));
    a.set_limit(&id("repo"), Some(1), alice).await.unwrap();
    let before = Counts::of_stored(recount(a.store(), a.now()).await.unwrap());
    close(a).await;
    // Undo the indexes: what a store written by an earlier build holds.
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .unwrap();
    for family in ["s/", "c/", "v/"] {
        client
            .delete(
                format!("earlier\0{family}"),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .unwrap();
    }
    let a = authority(&cluster, "earlier").await;
    let kept = a.store().counts().await.unwrap().expect("indexed on open");
    assert_eq!(Counts::of_stored(kept), before);
    assert_eq!(
        before.queues[""][&baton_core::State::Succeeded],
        1,
        "{before:?}"
    );
    let held = a
        .list(Some(baton_core::State::Claimed), None, 100)
        .await
        .unwrap()
        .items;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].task.as_str(), "held");
    let f = held[0].lease.as_ref().unwrap().fence;
    a.complete(&id("held"), &w, f).await.unwrap();
    assert_eq!(drift(a.store(), a.now()).await.unwrap(), None);
    assert!(
        a.list(Some(baton_core::State::Claimed), None, 100)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    close(a).await;
}
