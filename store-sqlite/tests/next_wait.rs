//! Waiting for the next ready task without a herd: 8 workers, each with a
//! store handle of its own (its own connections, as separate processes
//! have), wait with `next --wait`; one task becomes ready and exactly one
//! is granted while the rest keep waiting, and the polls that find nothing
//! never take the write lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::graph::{NodeSpec, Taker};
use baton_core::{Refusal, Reply};
use common::{id, open_with, rt};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[test]
fn eight_waiting_workers_and_one_ready_task_make_one_grant_and_no_burst() {
    const WORKERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let adder = open_with(&db, Duration::from_secs(5)).unwrap();
    let rt = rt();
    // A graph task that is not ready yet keeps the queue from being drained.
    rt.block_on(adder.add(&id("first"), spec("first", &[])))
        .unwrap();
    rt.block_on(adder.add(&id("later"), spec("later", &["first"])))
        .unwrap();
    let owner = id("holder");
    let g = rt
        .block_on(adder.next(&owner, &[], Some(600_000), None))
        .unwrap()
        .grant()
        .unwrap();
    let granted = AtomicUsize::new(0);
    let started = Instant::now();
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let db = db.clone();
                let granted = &granted;
                s.spawn(move || {
                    let a = open_with(&db, Duration::from_secs(5)).unwrap();
                    let rt = common::rt();
                    let taker = Taker::Owner {
                        owner: id(&format!("w{w}")),
                        ttl_ms: Some(600_000),
                        lock_delay_ms: None,
                    };
                    let r = rt.block_on(a.next_waiting(taker, &[], 4_000)).unwrap();
                    if r.grant().is_some() {
                        granted.fetch_add(1, Ordering::SeqCst);
                    }
                    (r, a.store().write_transactions(), started.elapsed())
                })
            })
            .collect();
        // Everyone is waiting (polling) for a while: nothing is ready.
        std::thread::sleep(Duration::from_millis(1_500));
        assert_eq!(granted.load(Ordering::SeqCst), 0);
        // `first` succeeds: `later` becomes ready, in the same commit.
        rt.block_on(adder.complete(&id("first"), &owner, g.fence))
            .unwrap();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
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
                Reply::Refused(Refusal::Drained { .. } | Refusal::NoneReady { .. })
            ),
            "{r:?}"
        );
        // They kept waiting after the grant, to their deadline or to drained.
        assert!(*waited >= Duration::from_millis(1_500), "{waited:?}");
    }
    // Polls that found nothing took no write lock: each worker began at
    // most a couple of write transactions, around the moment `later`
    // became ready (8 in all if every worker tried once for it).
    let writes: u64 = results.iter().map(|(_, w, _)| *w).sum();
    assert!(writes <= 2 * WORKERS as u64, "write transactions: {writes}");
}

fn spec(task: &str, after: &[&str]) -> NodeSpec {
    NodeSpec::new(&id(task), None, 0, after.iter().map(|d| id(d))).unwrap()
}
