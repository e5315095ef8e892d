//! The counts a status reads cost the same however many tasks there are:
//! they read the due records alone (here the held ones), never every task.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::fault::FaultStore;
use baton_core::graph::{NewNode, NodeSpec};
use baton_core::time::ManualClock;
use baton_core::{Authority, State, Timestamp};
use baton_store_sqlite::{SqliteOptions, SqliteStore};
use common::{id, rt};
use std::sync::Arc;

#[test]
fn counts_read_the_due_records_and_never_every_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("s.db"), SqliteOptions::default()).unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_767_225_600_000)));
    let a = Authority::new(FaultStore::new(store), clock.clone());
    let rt = rt();
    let waiting = 3000;
    rt.block_on(async {
        let nodes: Vec<NewNode> = (0..waiting)
            .map(|i| {
                let task = id(&format!("bulk-{i:05}"));
                let spec = NodeSpec::new(&task, Some(id("bulk")), 0, []).unwrap();
                NewNode { task, spec }
            })
            .collect();
        a.add_graph(nodes).await.unwrap().unwrap();
        for i in 0..5 {
            a.claim(&id(&format!("short-{i}")), &id("w"), Some(1000))
                .await
                .unwrap();
        }
        for i in 0..2 {
            a.claim(&id(&format!("long-{i}")), &id("w"), Some(600_000))
                .await
                .unwrap();
        }
    });
    clock.advance_ms(5000);
    let before = a.store().records_listed();
    let counts = rt.block_on(a.counts()).unwrap();
    let listed = a.store().records_listed() - before;
    assert!(
        listed <= 7,
        "the counts read {listed} records: more than the 7 held ones"
    );
    assert_eq!(counts.queues["bulk"][&State::Registered], waiting);
    assert_eq!(counts.queues[""][&State::Registered], 5, "{counts:?}");
    assert_eq!(counts.queues[""][&State::Claimed], 2, "{counts:?}");
    assert_eq!(counts.due.len(), 5, "the expired leases, derived");
    // And they are the records' own count.
    let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
    assert_eq!(drift.unwrap(), None);
}
