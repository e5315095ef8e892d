//! Failing closed on a real server: the server down, a read-only server, a
//! statement past its timeout, a session killed mid-transaction, a schema
//! from a newer baton; each answers
//! without granting, and the same store works again once the fault is gone.
//! Also: processes opening a fresh database at once do not race.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, ErrorKind, Id, Store, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn id(s: &str) -> Id {
    Id::parse("task", s).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn open(rt: &tokio::runtime::Runtime, url: &str) -> Authority<PostgresStore> {
    let s = rt.block_on(PostgresStore::open_url(url)).unwrap();
    Authority::new(s, Arc::new(SystemClock))
}

/// Another session locks the store's task table against every writer
/// (an operator's `LOCK TABLE`, a migration) and holds it for `seconds`;
/// the thread answers psql's output once it committed.
fn hold_the_lock(port: u16, seconds: u32) -> std::thread::JoinHandle<std::process::Output> {
    hold_table(port, "faults", "f.tasks", seconds)
}

/// Another session holds `table` of database `db` locked (EXCLUSIVE) for
/// `seconds`; the thread answers psql's output once it committed.
fn hold_table(
    port: u16,
    db: &'static str,
    table: &'static str,
    seconds: u32,
) -> std::thread::JoinHandle<std::process::Output> {
    std::thread::spawn(move || {
        std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "baton", "-d", db])
            .args([
                "-c",
                &format!(
                    "BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE; SELECT pg_sleep({seconds}); COMMIT;"
                ),
            ])
            .output()
            .unwrap()
    })
}

/// One claim on a runtime of its own (for a claim made on another thread).
fn rt_claim(a: &Authority<PostgresStore>, task: &str) -> baton_core::Result<baton_core::Reply> {
    rt().block_on(a.claim(&id(task), &id("w"), Some(60_000)))
}

/// Ends every session of baton's on `db` (a failover, an operator's kill).
fn drop_sessions(pg: &PgCluster, db: &str) {
    pg.sql(&format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"
    ));
}

/// Waits (up to 3 s) until a session on `db` waits on a lock, then ends
/// it; how many sessions it ended.
fn end_the_session_waiting_on_a_lock(pg: &PgCluster, db: &str) -> u32 {
    for _ in 0..60 {
        let killed = pg
            .sql_in(
                db,
                &format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                     WHERE datname = '{db}' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                ),
            )
            .parse::<u32>()
            .unwrap();
        if killed > 0 {
            return killed;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    0
}

/// Claims `task` until it is granted (the pool may need a try to notice a
/// broken connection), for at most 10 s.
fn claim_eventually(rt: &tokio::runtime::Runtime, a: &Authority<PostgresStore>, task: &str) {
    let start = Instant::now();
    loop {
        match rt.block_on(a.claim(&id(task), &id("w"), Some(60_000))) {
            Ok(r) if r.grant().is_some() => return,
            Ok(r) => panic!("{task}: {r:?}"),
            Err(e) if start.elapsed() < Duration::from_secs(10) => {
                assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{task}: the store did not recover: {e}"),
        }
    }
}

/// Reads `task` (a pooled connection the fault broke fails once, closed:
/// read again) and checks that no one holds it.
fn not_held(rt: &tokio::runtime::Runtime, a: &Authority<PostgresStore>, task: &str) {
    for _ in 0..20 {
        match rt.block_on(a.get(&id(task))) {
            Ok(r) => {
                let held = r.is_some_and(|r| r.lease.is_some());
                assert!(!held, "{task} was granted during the fault");
                return;
            }
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    panic!("{task} could not be read after the fault");
}

#[test]
fn faults_answer_unavailable_grant_nothing_and_heal() {
    let Some(mut pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = rt();
    pg.sql("CREATE DATABASE faults");
    let url = format!(
        "postgres://baton@127.0.0.1:{}/faults?schema=f&statement_timeout=400ms&connect_timeout=1s",
        pg.port
    );
    let a = open(&rt, &url);
    claim_eventually(&rt, &a, "before");

    // A read-only server (a replica, or default_transaction_read_only).
    pg.sql("ALTER DATABASE faults SET default_transaction_read_only = on");
    drop_sessions(&pg, "faults");
    let mut saw_read_only = false;
    for _ in 0..5 {
        let e = rt
            .block_on(a.claim(&id("ro"), &id("w"), Some(60_000)))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        if e.message.contains("read-only") {
            saw_read_only = true;
            break;
        }
    }
    assert!(saw_read_only, "no claim named the read-only server");
    pg.sql("ALTER DATABASE faults RESET default_transaction_read_only");
    drop_sessions(&pg, "faults");
    not_held(&rt, &a, "ro");
    claim_eventually(&rt, &a, "ro");

    // A statement past statement_timeout: another session holds the
    // task table locked for longer than the timeout.
    let holder = hold_the_lock(pg.port, 2);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let e = rt
        .block_on(a.claim(&id("slow"), &id("w"), Some(60_000)))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("statement_timeout"), "{e}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(holder.join().unwrap().status.success());
    not_held(&rt, &a, "slow");
    claim_eventually(&rt, &a, "slow");

    // The connection lost mid-transaction: a claim waits inside its
    // transaction for the lock another session holds, and its session is
    // killed there. Nothing was committed, so the answer is Unavailable,
    // never Indeterminate, and nothing is granted.
    let patient = open(
        &rt,
        &format!(
            "postgres://baton@127.0.0.1:{}/faults?schema=f&statement_timeout=10s&connect_timeout=1s&group_commit=off",
            pg.port
        ),
    );
    let holder = hold_the_lock(pg.port, 3);
    std::thread::sleep(Duration::from_millis(500));
    let claim = std::thread::spawn(move || {
        let r = rt_claim(&patient, "cut");
        (r, patient)
    });
    // Wait until the claim is waiting on the lock, then end its session.
    assert_eq!(
        end_the_session_waiting_on_a_lock(&pg, "faults"),
        1,
        "no claim was waiting on the lock"
    );
    let (r, patient) = claim.join().unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(holder.join().unwrap().status.success());
    not_held(&rt, &patient, "cut");
    claim_eventually(&rt, &patient, "cut");
    drop(patient);

    // The server down: answered at once (connect timeout), nothing granted;
    // the same store handle works once the server is back.
    pg.crash();
    let started = Instant::now();
    let e = rt
        .block_on(a.claim(&id("down"), &id("w"), Some(60_000)))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let e = rt.block_on(a.get(&id("before"))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    pg.restart();
    claim_eventually(&rt, &a, "down");
    not_held(&rt, &a, "never");
    let before = rt.block_on(a.get(&id("before"))).unwrap().unwrap();
    assert!(
        before.lease.is_some(),
        "the grant before the crash survived it"
    );

    // A schema written by a newer baton: refused on open, untouched.
    pg.sql_in("faults", "UPDATE f.schema_version SET version = 99");
    let e = rt.block_on(PostgresStore::open_url(&url)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("newer baton"), "{e}");
    assert_eq!(
        pg.sql_in("faults", "SELECT version FROM f.schema_version"),
        "99"
    );
    pg.sql_in("faults", "UPDATE f.schema_version SET version = 1");
    drop(a);
}

#[test]
fn processes_opening_a_fresh_database_at_once_do_not_race() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("fresh");
    // Eight openers with pools of their own, released together.
    let go = Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (url, go) = (url.clone(), go.clone());
            std::thread::spawn(move || {
                let rt = rt();
                go.wait();
                let s = rt.block_on(PostgresStore::open_url(&url)).unwrap();
                let a = Authority::new(s, Arc::new(SystemClock));
                let r = rt
                    .block_on(a.claim(&id(&format!("t{i}")), &id("w"), Some(60_000)))
                    .unwrap();
                r.grant().unwrap().fence
            })
        })
        .collect();
    let mut fences: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    fences.sort_unstable();
    assert_eq!(fences, (1..=8).collect::<Vec<_>>());
    assert_eq!(
        pg.sql("SELECT version FROM fresh.schema_version"),
        baton_store_postgres::SCHEMA_VERSION.to_string()
    );
    assert_eq!(pg.sql("SELECT count(*) FROM fresh.counters"), "1");
    // A store is reopened without migrating again.
    let rt = rt();
    let s = rt.block_on(PostgresStore::open_url(&url)).unwrap();
    assert!(s.capabilities().multi_process);
}

/// Retention cut off the hard way: a prune waits inside its transaction
/// for the events table (another session holds it locked) and its session
/// is killed there. A batch's tombstones and the removal of their events
/// commit together or not at all: after the kill every task still has its
/// body and its events; once the lock is gone a new pass prunes them all,
/// each tombstone without an event, no pruned id is granted again, and
/// the fences go on from where they were. Then forgetting, killed the same
/// way while it waits for the tasks' rows: every tombstone stays, and the
/// next pass forgets them all (counts too), each id granted anew later.
#[test]
fn a_prune_killed_mid_transaction_prunes_nothing_half() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = rt();
    pg.sql("CREATE DATABASE retention");
    let url = format!(
        "postgres://baton@127.0.0.1:{}/retention?schema=r&statement_timeout=10s&connect_timeout=1s&group_commit=off",
        pg.port
    );
    let a = open(&rt, &url);
    let w = id("w");
    // More than one commit's worth (PRUNE_BATCH), each with its events.
    let n = baton_core::authority::PRUNE_BATCH + 10;
    let tasks: Vec<String> = (0..n).map(|i| format!("ended-{i:03}")).collect();
    let mut last_fence = 0;
    for t in &tasks {
        let g = rt
            .block_on(a.claim(&id(t), &w, Some(60_000)))
            .unwrap()
            .grant()
            .unwrap();
        last_fence = last_fence.max(g.fence);
        let r = rt.block_on(a.complete(&id(t), &w, g.fence)).unwrap();
        assert!(r.record().is_some(), "{r:?}");
    }
    let events_of = |t: &str| -> usize {
        rt.block_on(a.events(Some(&id(t)), None, 100))
            .unwrap()
            .items
            .len()
    };
    assert!(tasks.iter().all(|t| events_of(t) >= 2));

    let holder = hold_table(pg.port, "retention", "r.events", 4);
    std::thread::sleep(Duration::from_millis(500));
    let operator = baton_core::Actor::Operator(id("alice"));
    let pruning = {
        let url = url.clone();
        let operator = operator.clone();
        std::thread::spawn(move || {
            let rt = crate::rt();
            let a = open(&rt, &url);
            rt.block_on(a.prune(operator, 0, usize::MAX))
        })
    };
    // Wait until the prune waits on the lock, then end its session.
    assert_eq!(
        end_the_session_waiting_on_a_lock(&pg, "retention"),
        1,
        "no prune was waiting on the lock"
    );
    let e = pruning.join().unwrap().unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Indeterminate),
        "{e}"
    );
    assert!(holder.join().unwrap().status.success());
    // Nothing of it committed: every task whole, with its events.
    for t in &tasks {
        let r = loop {
            match rt.block_on(a.get(&id(t))) {
                Ok(r) => break r.unwrap(),
                Err(e) => assert_eq!(e.kind, ErrorKind::Unavailable, "{e}"),
            }
        };
        assert!(r.pruned_at.is_none(), "{t} was pruned by a killed pass");
        assert!(events_of(t) >= 2, "{t} lost its events to a killed pass");
    }

    // The lock gone, a pass prunes every one, each without an event, each
    // tombstone marked to be forgotten by any later pass.
    let pruned = rt
        .block_on(a.prune_and_forget(operator.clone(), 0, Some(0), usize::MAX))
        .unwrap();
    assert_eq!((pruned.pruned, pruned.forgotten), (n as u64, 0));
    for t in &tasks {
        let r = rt.block_on(a.get(&id(t))).unwrap().unwrap();
        assert!(r.pruned_at.is_some(), "{t}: {r:?}");
        assert_eq!(events_of(t), 0, "{t} kept events");
        let again = rt.block_on(a.claim(&id(t), &w, Some(60_000))).unwrap();
        assert!(
            again.refusal().is_some_and(|r| r.reason() == "pruned"),
            "{t} granted again: {again:?}"
        );
    }
    let g = rt
        .block_on(a.claim(&id("after"), &w, Some(60_000)))
        .unwrap()
        .grant()
        .unwrap();
    assert!(g.fence > last_fence, "{} after {last_fence}", g.fence);
    let last_fence = g.fence;

    // Forgetting cut off the same way: the pass waits for the tasks' row
    // locks (another session holds the table) and is killed there; every
    // tombstone stays. Then a pass forgets them all, their counts with
    // them, and each id is granted anew under a later fence.
    let holder = hold_table(pg.port, "retention", "r.tasks", 4);
    std::thread::sleep(Duration::from_millis(500));
    let forgetting = {
        let url = url.clone();
        let operator = operator.clone();
        std::thread::spawn(move || {
            let rt = crate::rt();
            let a = open(&rt, &url);
            rt.block_on(a.prune_and_forget(operator, 0, None, usize::MAX))
        })
    };
    assert_eq!(
        end_the_session_waiting_on_a_lock(&pg, "retention"),
        1,
        "no forgetting pass was waiting on the lock"
    );
    let e = forgetting.join().unwrap().unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Indeterminate),
        "{e}"
    );
    assert!(holder.join().unwrap().status.success());
    for t in &tasks {
        let r = loop {
            match rt.block_on(a.get(&id(t))) {
                Ok(r) => break r,
                Err(e) => assert_eq!(e.kind, ErrorKind::Unavailable, "{e}"),
            }
        };
        assert!(
            r.is_some_and(|r| r.pruned_at.is_some()),
            "{t} forgotten by a killed pass"
        );
    }
    let done = rt
        .block_on(a.prune_and_forget(operator, 0, None, usize::MAX))
        .unwrap();
    assert_eq!((done.pruned, done.forgotten), (0, n as u64));
    let counts = rt.block_on(a.counts()).unwrap();
    assert_eq!(
        counts.totals().iter().map(|(_, n)| n).sum::<u64>(),
        1,
        "only `after` is left: {counts:?}"
    );
    for t in &tasks {
        assert!(rt.block_on(a.get(&id(t))).unwrap().is_none(), "{t} kept");
    }
    let g = rt
        .block_on(a.claim(&id(&tasks[0]), &w, Some(60_000)))
        .unwrap()
        .grant()
        .unwrap();
    assert!(g.fence > last_fence, "{} after {last_fence}", g.fence);
    drop(a);
}
