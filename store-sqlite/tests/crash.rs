//! SIGKILL at random points of a claim, start, heartbeat and succeed storm,
//! many times over: afterwards every answered grant and success is there,
//! fences only grow, no task has two holders, and the file passes
//! `PRAGMA integrity_check`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::conformance::fixtures::manifest;
use baton_core::{Authority, EventKind, Id, Reply, State, SystemClock};
use baton_store_sqlite::{SqliteOptions, SqliteStore};
use common::{child, child_args, report};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

const TASKS: usize = 400;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

fn open(path: &str) -> Authority<SqliteStore> {
    let opts = SqliteOptions {
        busy_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    Authority::new(
        SqliteStore::open(path, opts).unwrap(),
        Arc::new(SystemClock),
    )
}

#[test]
#[ignore = "a child process entry point, run by the test below"]
fn storm_child() {
    let Some(args) = child_args() else { return };
    let (path, me) = (&args[0], id(&args[1]));
    let seed: u64 = args[2].parse().unwrap();
    let a = Arc::new(open(path));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let lanes: Vec<_> = (0..4u64)
            .map(|lane| {
                let (a, me) = (a.clone(), me.clone());
                tokio::spawn(async move {
                    let run = id("run");
                    let mut x = seed * 31 + lane * 7 + 1;
                    loop {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let task = id(&format!("t-{:03}", (x >> 33) % TASKS as u64));
                        let Ok(Reply::Committed(r)) = a.task_claim(&task, &run, &me, None).await
                        else {
                            continue;
                        };
                        let f = r.current_fence().unwrap();
                        report(format!("G {task} {f}"));
                        if a.start(&task, &run, &me, f).await.is_err() {
                            continue;
                        }
                        let _ = a.heartbeat(&task, &run, &me, f, 2, None).await;
                        let ev = BTreeMap::from([(
                            "log".to_owned(),
                            format!("sha256:{}", "a".repeat(64)),
                        )]);
                        if let Ok(Reply::Committed(_)) = a.succeed(&task, &run, &me, f, ev).await {
                            report(format!("S {task} {f}"));
                        }
                    }
                })
            })
            .collect();
        for l in lanes {
            let _ = l.await;
        }
    });
}

#[test]
fn sigkill_mid_storm_loses_nothing_answered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db").display().to_string();
    {
        let a = open(&path);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for i in 0..TASKS {
            let t = format!("t-{i:03}");
            rt.block_on(a.declare(manifest(&t, 2, &["log"], 3600, 1)))
                .unwrap();
            rt.block_on(a.register(&id(&t), &id("run"))).unwrap();
        }
    }
    let mut grants: Vec<(String, u64)> = Vec::new();
    let mut successes: Vec<(String, u64)> = Vec::new();
    for round in 0..6u64 {
        let mut children: Vec<_> = (0..3u64)
            .map(|p| {
                child(
                    "storm_child",
                    &[
                        &path,
                        &format!("p{round}-{p}"),
                        &(round * 10 + p).to_string(),
                    ],
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
            })
            .collect();
        // Read until a random amount of work was answered, then SIGKILL everyone.
        let want = 10 + (round as usize * 7) % 23;
        let readers: Vec<_> = children
            .iter_mut()
            .map(|c| {
                let out = c.stdout.take().unwrap();
                std::thread::spawn(move || {
                    let mut lines = Vec::new();
                    for line in BufReader::new(out).lines() {
                        let Ok(line) = line else { break };
                        if let Some(i) = line.find("@@ ") {
                            lines.push(line[i + 3..].to_owned());
                        }
                    }
                    lines
                })
            })
            .collect();
        let start = std::time::Instant::now();
        let events_now = || {
            let a = open(&path);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(a.events(None, None, 100_000))
                .unwrap()
                .items
                .len()
        };
        let baseline = events_now();
        while events_now() < baseline + want * 3 && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        for c in &mut children {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
        for r in readers {
            for line in r.join().unwrap() {
                let parts: Vec<&str> = line.split(' ').collect();
                let entry = (parts[1].to_owned(), parts[2].parse().unwrap());
                match parts[0] {
                    "G" => grants.push(entry),
                    "S" => successes.push(entry),
                    _ => {}
                }
            }
        }
        check(&path, &grants, &successes);
        eprintln!(
            "round {round}: {} grants and {} successes answered so far",
            grants.len(),
            successes.len()
        );
    }
    assert!(
        !grants.is_empty() && !successes.is_empty(),
        "the storm did some work"
    );
}

fn check(path: &str, grants: &[(String, u64)], successes: &[(String, u64)]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok", "integrity_check");
    drop(conn);
    let a = open(path);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let events = rt.block_on(a.events(None, None, 100_000)).unwrap().items;
    let granted: BTreeSet<(String, u64)> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Claimed | EventKind::Recovered))
        .map(|e| (e.task.to_string(), e.fence.unwrap()))
        .collect();
    for g in grants {
        assert!(
            granted.contains(g),
            "answered grant {g:?} is missing after the crash"
        );
    }
    for (task, fence) in successes {
        let r = rt.block_on(a.get(&id(task))).unwrap().unwrap();
        assert_eq!(
            r.state,
            State::Succeeded,
            "{task}: an answered success is missing"
        );
        assert_eq!(r.current_fence(), Some(*fence));
    }
    // The counts kept with the commits equal a count of the records.
    let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
    assert_eq!(drift.unwrap(), None, "the kept counts after the crash");
    // Fences only grow, and each task's holder is its newest grant.
    let mut last = 0;
    let mut newest: BTreeMap<String, u64> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Claimed | EventKind::Recovered))
    {
        let f = e.fence.unwrap();
        assert!(f > last, "fence {f} after {last}");
        last = f;
        newest.insert(e.task.to_string(), f);
    }
    for (task, f) in &newest {
        let r = rt.block_on(a.get(&id(task))).unwrap().unwrap();
        assert_eq!(
            r.current_fence(),
            Some(*f),
            "{task}: one holder, the newest grant"
        );
    }
    let g = rt
        .block_on(a.claim(&id(&format!("probe-{last}")), &id("w"), None))
        .unwrap()
        .grant()
        .unwrap();
    assert!(
        g.fence > last,
        "a new fence after the crash is higher than every earlier one"
    );
}
