//! Time is judged where the decision is serialized: a claim that waits
//! behind another writer's lock is granted when it gets the lock, so its
//! lease is never over before it is answered, and event times follow the
//! store's order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::{Clock, SystemClock, Timestamp};
use common::{id, open_with, rt};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// Holds SQLite's write lock on `path` from a connection of its own for
/// `ms`, as a stuck writer would; returns once the lock is held.
fn hold_write_lock(path: &Path, ms: u64) -> std::thread::JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_owned();
    let h = std::thread::spawn(move || {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        c.execute_batch("ROLLBACK").unwrap();
    });
    rx.recv().unwrap();
    h
}

#[test]
fn a_claim_that_waited_for_the_lock_is_granted_when_it_got_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let a = open_with(&path, Duration::from_secs(20)).unwrap();
    let rt = rt();
    // A first claim creates the file's tables.
    rt.block_on(a.claim(&id("warm"), &id("w"), None)).unwrap();
    let holder = hold_write_lock(&path, 1500);
    let asked = SystemClock.now();
    let g = rt
        .block_on(a.claim(&id("x"), &id("w"), Some(1000)))
        .unwrap()
        .grant()
        .expect("granted once the lock is free");
    let answered = SystemClock.now();
    holder.join().unwrap();
    assert!(
        answered.as_millis() - asked.as_millis() >= 1400,
        "the claim waited behind the lock"
    );
    // Granted when decided, under the lock: not at the time it was asked.
    assert!(
        g.claimed_at.as_millis() >= asked.as_millis() + 1400,
        "claimed at {} though the lock was free only after {}",
        g.claimed_at,
        Timestamp::from_millis(asked.as_millis() + 1500)
    );
    assert!(
        g.expiry > answered,
        "the lease ({}) was over when it was answered ({answered})",
        g.expiry
    );
}

/// Three writers wait behind one lock, each in its own store handle (its
/// own committer, as another process would be); whichever order the lock
/// lets them in, the events' times never go back in the store's order.
#[test]
fn event_times_follow_the_order_the_write_lock_gives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let a = open_with(&path, Duration::from_secs(20)).unwrap();
    let rt = rt();
    rt.block_on(a.claim(&id("warm"), &id("w"), None)).unwrap();
    for round in 0..3 {
        let holder = hold_write_lock(&path, 600);
        let writers: Vec<_> = (0..3)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let a = open_with(&path, Duration::from_secs(20)).unwrap();
                    // Staggered, so their callers' clock readings differ.
                    std::thread::sleep(Duration::from_millis(40 * i));
                    common::rt()
                        .block_on(a.claim(&id(&format!("t{round}-{i}")), &id("w"), Some(60_000)))
                        .unwrap()
                        .grant()
                        .unwrap()
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        holder.join().unwrap();
    }
    let events = rt.block_on(a.events(None, None, 1000)).unwrap().items;
    assert!(events.len() >= 10, "{} events", events.len());
    for pair in events.windows(2) {
        assert!(
            pair[1].at >= pair[0].at,
            "event {} at {} comes after event {} at {}",
            pair[1].seq,
            pair[1].at,
            pair[0].seq,
            pair[0].at
        );
    }
}
