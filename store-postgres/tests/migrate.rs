//! A store written by an earlier schema migrates forward when it is
//! opened, and keeps every promise across it: the records read back, the
//! fence counter goes on from the highest fence handed out, events and
//! notifications keep their numbers and new ones come after, a repeated
//! conflict still counts on its first event.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, EventKind, Id, State, Store, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;

/// A store written by schema version 1 (the store-wide counter row),
/// dumped from a real one: fences 1 to 4 handed out, events numbered
/// 1 to 12 (8 went to a repeated conflict), notifications 1 (acknowledged)
/// and 2 (pending).
const V1: &str = include_str!("fixtures/schema_v1.sql");

fn id(kind: &str, s: &str) -> Id {
    Id::parse(kind, s).unwrap()
}

#[test]
fn a_version_1_store_migrates_on_open_and_goes_on() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    pg.sql(&V1.replace("__SCHEMA__", "old"));
    assert_eq!(pg.sql("SELECT version FROM old.schema_version"), "1");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt
        .block_on(PostgresStore::open_url(&pg.url("old")))
        .unwrap();
    assert_eq!(
        pg.sql("SELECT version FROM old.schema_version"),
        baton_store_postgres::SCHEMA_VERSION.to_string()
    );
    let a = Authority::new(store.clone(), Arc::new(SystemClock));

    // The records as they were.
    let t2 = rt.block_on(a.get(&id("task", "t2"))).unwrap().unwrap();
    assert_eq!(t2.state, State::Succeeded);
    let b = rt.block_on(a.get(&id("task", "b"))).unwrap().unwrap();
    assert_eq!(b.state, State::Registered);

    // Counted on upgrade (schema 4): the counts are the records' own.
    use baton_core::counts::Counts;
    let counted = || {
        let drift = rt.block_on(baton_core::counts::drift(&store, a.now()));
        assert_eq!(drift.unwrap(), None);
        Counts::of_stored(rt.block_on(store.counts()).unwrap().unwrap())
    };
    let c = counted();
    assert!(c.queues[""][&State::Succeeded] >= 1, "{c:?}");

    // The events with their numbers, then new ones after them.
    let before = rt.block_on(store.events(None, 0, 1000)).unwrap();
    let seqs: Vec<u64> = before.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12]);

    // The fence counter goes on from 4.
    let g = rt
        .block_on(a.claim(&id("task", "new"), &id("owner", "w"), Some(60_000)))
        .unwrap();
    assert_eq!(g.grant().unwrap().fence, 5, "{g:?}");
    let after = rt.block_on(store.events(None, 12, 1000)).unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!((after[0].seq, after[0].kind), (13, EventKind::Claimed));

    // A repeated conflict counts on the event it first made (seq 7).
    let r = rt
        .block_on(a.complete(&id("task", "t1"), &id("owner", "w9"), 1))
        .unwrap();
    assert!(r.refusal().is_some(), "{r:?}");
    let t1 = rt
        .block_on(store.events(Some(&id("task", "t1")), 0, 100))
        .unwrap();
    let conflict = t1
        .iter()
        .find(|e| e.kind == EventKind::ConflictRefused)
        .unwrap();
    assert_eq!((conflict.seq, conflict.count), (7, 3));

    // The pending notification keeps its number; the acknowledged one stays acknowledged.
    let pending = rt.block_on(store.pending(0, 100)).unwrap();
    let seqs: Vec<u64> = pending.iter().map(|n| n.seq).collect();
    assert_eq!(seqs, [2]);

    // The graph edge survived: b becomes ready when a succeeds.
    let ga = rt
        .block_on(a.claim(&id("task", "a"), &id("owner", "w"), Some(60_000)))
        .unwrap();
    let fence = ga.grant().unwrap().fence;
    assert_eq!(fence, 6);
    rt.block_on(a.complete(&id("task", "a"), &id("owner", "w"), fence))
        .unwrap();
    let next = rt
        .block_on(a.next(&id("owner", "w2"), &[], Some(60_000), None))
        .unwrap();
    assert_eq!(next.grant().unwrap().task.as_str(), "b", "{next:?}");
    counted();
}
