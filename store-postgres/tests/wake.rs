//! Two things a batch of writers relies on: a worker waiting in `next`
//! is woken by the commit that makes a task ready (`LISTEN`/`NOTIFY`),
//! not by its next poll; and refusals repeated inside one group commit
//! count on one event, as they do one commit at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::graph::{NodeSpec, Taker};
use baton_core::store::Meter;
use baton_core::{Authority, EventKind, Id, Reply, Store, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn id(kind: &str, s: &str) -> Id {
    Id::parse(kind, s).unwrap()
}

#[test]
fn a_waiting_worker_is_woken_by_the_commit_not_its_next_poll() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("wake");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let waiter = Arc::new(Authority::new(
        rt.block_on(PostgresStore::open_url(&url)).unwrap(),
        Arc::new(SystemClock),
    ));
    // Another handle: its own pool and connections, as another host.
    let adder = Authority::new(
        rt.block_on(PostgresStore::open_url(&url)).unwrap(),
        Arc::new(SystemClock),
    );
    let queue = id("queue", "jobs");
    // One task held all along: the queue is not drained, so `next` waits.
    let held = id("task", "held");
    let spec = NodeSpec::new(&held, Some(queue.clone()), 0, Vec::new()).unwrap();
    rt.block_on(adder.add(&held, spec)).unwrap();
    let r = rt
        .block_on(adder.next(
            &id("owner", "holder"),
            std::slice::from_ref(&queue),
            Some(120_000),
            None,
        ))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    // Without a change feed the waiter backs off to a pause of 750 to
    // 1250 ms, so an answer within 250 ms of the add, four times running,
    // happens by chance about once in 250.
    for round in 0..4 {
        let (w, q) = (waiter.clone(), queue.clone());
        let waiting = rt.spawn(async move {
            let taker = Taker::Owner {
                owner: id("owner", "w"),
                ttl_ms: Some(60_000),
                lock_delay_ms: None,
            };
            let r = w.next_waiting(taker, &[q], 20_000).await.unwrap();
            (r, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(2_500));
        let task = id("task", &format!("t{round}"));
        let spec = NodeSpec::new(&task, Some(queue.clone()), 0, Vec::new()).unwrap();
        let added = Instant::now();
        rt.block_on(adder.add(&task, spec)).unwrap();
        let (reply, answered) = rt.block_on(waiting).unwrap();
        let Reply::Committed(rec) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(rec.task, task);
        let late = answered.duration_since(added);
        assert!(
            late < Duration::from_millis(250),
            "round {round}: woken {late:?} after the add"
        );
    }
}

#[test]
fn refusals_repeated_in_one_group_commit_count_on_one_event() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt
        .block_on(PostgresStore::open_url(&pg.url("repeats")))
        .unwrap();
    let a = Arc::new(Authority::new(store.clone(), Arc::new(SystemClock)));
    let task = id("task", "t");
    let g = rt
        .block_on(a.claim(&task, &id("owner", "holder"), Some(60_000)))
        .unwrap();
    let fence = g.grant().unwrap().fence;
    // 64 stale completions at once: the committer puts many in one batch.
    let commits_before = store.commits().unwrap();
    let txs_before = store.write_transactions();
    let stale: Vec<_> = (0..64)
        .map(|_| {
            let (a, task) = (a.clone(), task.clone());
            rt.spawn(async move { a.complete(&task, &id("owner", "late"), fence).await })
        })
        .collect();
    for s in stale {
        let r = rt.block_on(s).unwrap().unwrap();
        assert!(r.refusal().is_some(), "{r:?}");
    }
    let txs = store.write_transactions() - txs_before;
    assert!(txs < 64, "no batch held two of them ({txs} transactions)");
    assert!(store.commits().unwrap() > commits_before);
    let events = rt.block_on(store.events(Some(&task), 0, 100)).unwrap();
    let conflicts: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::ConflictRefused)
        .collect();
    assert_eq!(conflicts.len(), 1, "{events:?}");
    assert_eq!(conflicts[0].count, 64);
}

/// A caller on a current-thread runtime cannot wait on the store's own
/// runtime in place, so its commits go through the committer thread; one
/// on a multi-thread runtime commits in place when the committer is idle.
/// Both answer.
#[test]
fn callers_on_either_kind_of_runtime_are_answered() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("flavours");
    for rt in [
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap(),
    ] {
        let store = rt.block_on(PostgresStore::open_url(&url)).unwrap();
        let a = Authority::new(store.clone(), Arc::new(SystemClock));
        let before = store.write_transactions();
        for i in 0..20 {
            let task = id("task", &format!("{:?}-{i}", rt.handle().runtime_flavor()));
            let g = rt
                .block_on(a.claim(&task, &id("owner", "w"), Some(60_000)))
                .unwrap();
            let fence = g.grant().unwrap().fence;
            rt.block_on(a.complete(&task, &id("owner", "w"), fence))
                .unwrap();
        }
        assert_eq!(store.write_transactions() - before, 40);
    }
}
