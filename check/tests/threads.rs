//! Histories recorded by real threads on the in-process stores, and on
//! stores broken on purpose: the first must check, the second must not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_check::broken::{Breakage, Broken};
use baton_check::{Limits, Plan, Report, check_files, install_guard, record_threads};
use baton_core::{MemoryStore, Store};
use std::sync::Arc;

/// Clients that share one clock (this host's), and a store that judges
/// leases by it: a few milliseconds of slack for scheduling alone.
fn limits(store: &dyn Store) -> Limits {
    let caps = store.capabilities();
    Limits {
        skew_us: 2_000,
        overstay_us: 2_000,
        granularity_ms: caps.ttl_granularity_ms,
        min_ttl_ms: caps.min_ttl_ms,
    }
}

/// How long a run records: `BATON_HISTORY_SECS` (the long run), else `short`.
fn secs(short: f64) -> f64 {
    std::env::var("BATON_HISTORY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(short)
}

fn record(store: Arc<dyn Store>, clients: u32, secs: f64) -> Report {
    record_guarded(store, clients, secs, false)
}

/// Clients that also write through a SQLite guard (every one of them to
/// the same two resources, zombies among them): `broken` skips the guard.
fn record_guarded(store: Arc<dyn Store>, clients: u32, secs: f64, broken: bool) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let guard = tempfile::tempdir().unwrap();
    let db = guard.path().join("guard.db");
    install_guard(&db).unwrap();
    let plans: Vec<Plan> = (0..clients)
        .map(|c| {
            let mut p = Plan::new(c, "t", secs);
            p.guard = Some(db.clone());
            p.guard_broken = broken;
            p
        })
        .collect();
    let files = record_threads(store.clone(), &plans, dir.path()).unwrap();
    let report = check_files(&files, limits(&*store)).unwrap();
    println!("{report}");
    report
}

/// The run exercised what it is meant to: grants, refusals of every kind
/// the model knows, and ends of every kind.
fn assert_exercised(r: &Report) {
    assert!(r.grants >= 20, "too few grants to mean anything: {r}");
    assert!(r.steps > 0, "no steps recorded: {r}");
    assert!(r.step_repeats > 0, "no step sent again: {r}");
    assert!(r.writes >= 10, "too few guarded writes: {r}");
    for reason in [
        "held",
        "stale_fence",
        "lease_expired",
        "done",
        "holder",
        "verified",
    ] {
        assert!(
            r.answers.get(reason).copied().unwrap_or(0) > 0,
            "no `{reason}` answers: {r}"
        );
    }
}

#[test]
fn memory_store_histories_are_linearizable() {
    let r = record(Arc::new(MemoryStore::new()), 8, secs(6.0));
    assert!(r.ok(), "{r}");
    assert_exercised(&r);
}

#[test]
fn sled_store_histories_are_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        baton_store_sled::SledStore::open(dir.path().join("db"), Default::default()).unwrap();
    let r = record(Arc::new(store), 6, secs(5.0));
    assert!(r.ok(), "{r}");
    assert_exercised(&r);
}

#[test]
fn a_store_that_grants_twice_is_caught() {
    let store = Broken::new(MemoryStore::new(), Breakage::GrantsTwice);
    let r = record(Arc::new(store), 6, 3.0);
    assert!(!r.ok(), "a double grant went unnoticed: {r}");
}

#[test]
fn a_store_that_accepts_a_stale_renew_is_caught() {
    let store = Broken::new(MemoryStore::new(), Breakage::AcceptsStaleRenew);
    let r = record(Arc::new(store), 6, 3.0);
    assert!(!r.ok(), "a stale renew went unnoticed: {r}");
}

#[test]
fn a_store_that_accepts_a_stale_checkpoint_is_caught() {
    let store = Broken::new(MemoryStore::new(), Breakage::AcceptsStaleCheckpoint);
    let r = record(Arc::new(store), 6, 3.0);
    assert!(!r.ok(), "a superseded attempt's step went unnoticed: {r}");
}

#[test]
fn a_guard_that_admits_every_fence_is_caught() {
    // The same clients, zombies writing under lapsed and old fences, with
    // the guard skipped: a lower fence lands after a higher one.
    let r = record_guarded(Arc::new(MemoryStore::new()), 6, 4.0, true);
    assert!(!r.ok(), "a zombie's write went unnoticed: {r}");
    assert!(
        r.violations.iter().any(|v| v.contains("guarded writes")),
        "{r}"
    );
}
