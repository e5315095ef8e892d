//! The Fabric adapter against the least a correct fenced claim needs on
//! etcd, on one 3-member cluster in one run (issue: "the adapter costs at
//! most 25% over the minimal protocol"). The bare loop grants a lease and
//! puts the holder key in one guarded transaction per grant, and deletes it
//! in one guarded transaction per completion; the adapter does a whole
//! baton claim and complete. W workers, disjoint tasks, alternating.
//!
//! `cargo run --release -p baton-benches --bin etcd_vs_bare [TASKS] [ROUNDS]`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::{Authority, Id, SystemClock};
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use std::sync::Arc;
use std::time::Instant;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

/// Grants per second of `workers` adapter workers over `tasks` disjoint tasks.
async fn adapter(cluster: &EtcdCluster, prefix: &str, workers: usize, tasks: usize) -> f64 {
    let store = FabricStore::connect(FabricOptions::new(cluster.endpoints(), prefix))
        .await
        .unwrap();
    let a = Arc::new(Authority::new(store, Arc::new(SystemClock)));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let a = a.clone();
            tokio::spawn(async move {
                let owner = id(&format!("w{w}"));
                for i in (w..tasks).step_by(workers) {
                    let t = id(&format!("t{i}"));
                    let g = a.claim(&t, &owner, Some(60_000)).await.unwrap();
                    let fence = g.grant().expect("a disjoint task is granted").fence;
                    let done = a.complete(&t, &owner, fence).await.unwrap();
                    assert!(done.record().is_some(), "{done:?}");
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    tasks as f64 / start.elapsed().as_secs_f64()
}

/// The same through a bare `etcd-client` loop: per grant a lease and one
/// guarded put of the holder key (its revision is the fence); per
/// completion one guarded delete.
async fn bare(cluster: &EtcdCluster, prefix: &str, workers: usize, tasks: usize) -> f64 {
    let client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .unwrap();
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let mut c = client.clone();
            let prefix = prefix.to_owned();
            tokio::spawn(async move {
                for i in (w..tasks).step_by(workers) {
                    let key = format!("{prefix}/h/{i}");
                    let lease = c.lease_grant(60, None).await.unwrap().id();
                    let put = Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(
                            key.clone(),
                            format!("w{w}"),
                            Some(PutOptions::new().with_lease(lease)),
                        )]);
                    let r = c.txn(put).await.unwrap();
                    assert!(r.succeeded());
                    let fence = r.header().unwrap().revision();
                    let del = Txn::new()
                        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, fence)])
                        .and_then([TxnOp::delete(key, None)]);
                    assert!(c.txn(del).await.unwrap().succeeded());
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    tasks as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("TASKS and ROUNDS are numbers"))
        .collect();
    let tasks = args.first().copied().unwrap_or(1000);
    let rounds = args.get(1).copied().unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = EtcdCluster::start();
    println!("| workers | round | bare grants/s | adapter grants/s | adapter / bare |");
    println!("|---|---|---|---|---|");
    for workers in [8, 64] {
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let p = format!("bench-{workers}-{round}");
            let b = rt.block_on(bare(&cluster, &format!("{p}-bare"), workers, tasks));
            let a = rt.block_on(adapter(&cluster, &format!("{p}-adapter"), workers, tasks));
            ratios.push(a / b);
            println!("| {workers} | {round} | {b:.0} | {a:.0} | {:.2}x |", a / b);
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "| {workers} | median | | | {:.2}x |",
            ratios[ratios.len() / 2]
        );
    }
}
