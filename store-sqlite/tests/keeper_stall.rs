//! The keeper on a store that stops answering: a renewal in flight that
//! waits on SQLite's write lock must not hold up the keeper's deadline.
//! Another process's writer (here a connection of this test, which SQLite
//! locks against exactly as it would another process's) holds the lock for
//! longer than the lease; the keeper must say "stop" before the lease ends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::KeepOptions;
use common::{id, open_with};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_stuck_on_the_write_lock_does_not_delay_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    // The store waits up to 10 s for the lock: longer than the lease.
    let auth = Arc::new(open_with(&path, Duration::from_secs(10)).unwrap());
    let reply = auth.claim(&id("t"), &id("w"), Some(2_000)).await.unwrap();
    let grant = reply.grant().expect("granted");
    let keeper = auth.keep(
        grant,
        KeepOptions {
            grace_ms: 300,
            renew_every_ms: Some(500),
            ..Default::default()
        },
    );
    let locker = {
        let path = path.clone();
        std::thread::spawn(move || {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            std::thread::sleep(Duration::from_secs(5));
            c.execute_batch("ROLLBACK").unwrap();
        })
    };
    let loss = tokio::time::timeout(Duration::from_secs(4), keeper.wait_lost())
        .await
        .expect("the keeper said nothing while its renewal waited on the lock");
    let now = auth.now();
    let expiry = keeper.grant().expiry;
    assert!(
        now < keeper.stopped_by(),
        "told to stop at {now}, after the holder should have stopped ({}); lease ends {expiry}: {loss:?}",
        keeper.stopped_by()
    );
    drop(keeper);
    tokio::task::spawn_blocking(move || locker.join().unwrap())
        .await
        .unwrap();
}
