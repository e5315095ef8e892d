//! The write gate (`PATH-gate`): a writer that finds it taken sleeps until
//! it is free, for at most the busy timeout (then `Unavailable`, having
//! written nothing) and at most 250 ms: a gate held past that is kept by a
//! process that stopped holding no SQLite lock, and the writer goes on
//! under SQLite's own lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::ErrorKind;
use common::{id, open_with, rt};
use std::time::{Duration, Instant};

/// The gate as another process would hold it: its own open file.
fn hold_gate(db: &std::path::Path) -> std::fs::File {
    let mut name = db.as_os_str().to_owned();
    name.push("-gate");
    let f = std::fs::OpenOptions::new().write(true).open(name).unwrap();
    f.lock().unwrap();
    f
}

#[test]
fn a_writer_waits_for_the_gate_and_no_longer_than_the_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let rt = rt();
    // A busy timeout shorter than the gate's patience: Unavailable at the
    // timeout, nothing written.
    let a = open_with(&db, Duration::from_millis(150)).unwrap();
    rt.block_on(a.claim(&id("warm"), &id("w"), None)).unwrap();
    let held = hold_gate(&db);
    let t = Instant::now();
    let e = rt.block_on(a.claim(&id("t"), &id("w"), None)).unwrap_err();
    let waited = t.elapsed();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("gate"), "{e}");
    assert!(
        waited >= Duration::from_millis(120) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(rt.block_on(a.get(&id("t"))).unwrap().is_none());
    // Held briefly: the writer sleeps until it is free and goes on.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(held);
    });
    let t = Instant::now();
    let g = rt
        .block_on(a.claim(&id("t"), &id("w"), None))
        .unwrap()
        .grant();
    assert!(g.is_some());
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
    release.join().unwrap();
    // And once free, writes do not wait at all.
    assert!(
        rt.block_on(a.claim(&id("u"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

#[test]
fn a_gate_kept_by_a_stopped_process_is_gone_around() {
    // The gate held for good by a process that holds no SQLite lock (one
    // stopped just after its commit): with a busy timeout past the gate's
    // patience, the writer waits the patience, writes under SQLite's lock,
    // and its later writes do not wait for the gate at all.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let rt = rt();
    let a = open_with(&db, Duration::from_secs(5)).unwrap();
    rt.block_on(a.claim(&id("warm"), &id("w"), None)).unwrap();
    let held = hold_gate(&db);
    let t = Instant::now();
    let g = rt.block_on(a.claim(&id("t"), &id("w"), None)).unwrap();
    let waited = t.elapsed();
    assert!(g.grant().is_some(), "{g:?}");
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let t = Instant::now();
    for k in 0..5 {
        let g = rt.block_on(a.claim(&id(&format!("n{k}")), &id("w"), None));
        assert!(g.unwrap().grant().is_some());
    }
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    drop(held);
}

/// A request whose answer a read snapshot proves (a refusal with nothing to
/// record) is answered from it without the write lock. The snapshot is
/// never staler than the last answered commit of any connection: a grant
/// given back through one store is at once granted through another.
#[test]
fn a_refusal_from_a_snapshot_is_never_staler_than_the_last_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let rt = rt();
    let (x, y) = (
        open_with(&db, Duration::from_secs(5)).unwrap(),
        open_with(&db, Duration::from_secs(5)).unwrap(),
    );
    let t = id("t");
    let (wx, wy) = (id("x"), id("y"));
    let hour = Some(3_600_000);
    let mut holder = (&x, &wx, &y, &wy);
    let mut fence = rt
        .block_on(x.claim(&t, &wx, hour))
        .unwrap()
        .grant()
        .unwrap()
        .fence;
    for round in 0..300 {
        let (a, wa, b, wb) = holder;
        // Held: the other store refuses, from its snapshot.
        let r = rt.block_on(b.claim(&t, wb, hour)).unwrap();
        assert!(
            matches!(r.refusal(), Some(baton_core::Refusal::Held { .. })),
            "round {round}: {r:?}"
        );
        rt.block_on(a.release(&t, wa, fence)).unwrap();
        // Given back: the other store must grant it now, not refuse from an old snapshot.
        let g = rt.block_on(b.claim(&t, wb, hour)).unwrap();
        fence = g
            .grant()
            .unwrap_or_else(|| panic!("round {round}: refused after the release: {g:?}"))
            .fence;
        holder = (b, wb, a, wa);
    }
    // Completed: refused as completed, never as held by a stale holder.
    let (a, wa, b, wb) = holder;
    rt.block_on(a.complete(&t, wa, fence)).unwrap();
    let r = rt.block_on(b.claim(&t, wb, hour)).unwrap();
    assert_eq!(r.refusal(), Some(&baton_core::Refusal::Completed), "{r:?}");
}
