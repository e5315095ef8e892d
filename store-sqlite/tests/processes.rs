//! Many OS processes on one database file: exactly one grant per task,
//! and a completed task is never granted again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::{Authority, Id, Reply, SystemClock};
use baton_store_sqlite::{SqliteOptions, SqliteStore};
use common::{child, child_args, report, reported};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const PROCESSES: usize = 8;

fn authority(path: &str) -> Authority<SqliteStore> {
    let opts = SqliteOptions {
        busy_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    Authority::new(
        SqliteStore::open(path, opts).expect("open the store"),
        Arc::new(SystemClock),
    )
}

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

/// Waits until the parent creates the start file, so all children race at once.
fn wait_for_start(path: &str) {
    let go = format!("{path}.go");
    for _ in 0..30_000 {
        if Path::new(&go).exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("never told to start");
}

#[test]
#[ignore = "a child process entry point, run by the tests below"]
fn child_entry() {
    let Some(args) = child_args() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mode, path, me) = (args[0].as_str(), args[1].as_str(), args[2].as_str());
    let tasks: usize = args[3].parse().unwrap();
    let a = authority(path);
    let owner = id(me);
    let offset: usize = me.trim_start_matches("proc-").parse::<usize>().unwrap() * 37;
    wait_for_start(path);
    let rounds = if mode == "loop" { 3 } else { 1 };
    for _ in 0..rounds {
        for i in 0..tasks {
            let task = id(&format!("task-{:03}", (i + offset) % tasks));
            let r = rt.block_on(a.claim(&task, &owner, Some(600_000))).unwrap();
            if let Reply::Committed(rec) = &r {
                let fence = rec.current_fence().unwrap();
                report(format!("G {task} {fence}"));
                if mode == "loop" {
                    let done = rt.block_on(a.complete(&task, &owner, fence)).unwrap();
                    assert!(matches!(done, Reply::Committed(_)), "{done:?}");
                    report(format!("C {task} {fence}"));
                }
            }
        }
    }
}

fn race(mode: &str, tasks: usize) -> (Vec<String>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let path_s = path.to_str().unwrap().to_owned();
    drop(authority(&path_s)); // create the schema before the race
    let n = tasks.to_string();
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            child("child_entry", &[mode, &path_s, &format!("proc-{p}"), &n])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(format!("{path_s}.go"), b"").unwrap();
    let lines = children
        .into_iter()
        .flat_map(|c| reported(&c.wait_with_output().unwrap()))
        .collect();
    (lines, dir)
}

#[test]
fn eight_processes_race_for_300_tasks_one_grant_each() {
    let (lines, dir) = race("race", 300);
    let mut by_task: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut fences = BTreeSet::new();
    for l in &lines {
        let parts: Vec<&str> = l.split(' ').collect();
        assert_eq!(parts[0], "G");
        let fence: u64 = parts[2].parse().unwrap();
        assert!(fences.insert(fence), "fence {fence} issued twice");
        by_task.entry(parts[1].to_owned()).or_default().push(fence);
    }
    assert_eq!(by_task.len(), 300, "every task granted");
    for (task, grants) in &by_task {
        assert_eq!(grants.len(), 1, "{task} granted {} times", grants.len());
    }
    // What the processes were told is what the file holds.
    let a = authority(dir.path().join("baton.db").to_str().unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (task, grants) in &by_task {
        let h = rt.block_on(a.holder(&id(task))).unwrap().unwrap().unwrap();
        assert_eq!((h.grant.fence, h.live), (grants[0], true));
    }
}

#[test]
fn claim_complete_loops_never_regrant_a_completed_task() {
    let (lines, _dir) = race("loop", 50);
    let mut granted: BTreeMap<String, u32> = BTreeMap::new();
    let mut completed = BTreeSet::new();
    for l in &lines {
        let parts: Vec<&str> = l.split(' ').collect();
        match parts[0] {
            "G" => *granted.entry(parts[1].to_owned()).or_default() += 1,
            "C" => assert!(
                completed.insert(parts[1].to_owned()),
                "{} completed twice",
                parts[1]
            ),
            other => panic!("unexpected report {other}"),
        }
    }
    assert_eq!(granted.len(), 50);
    assert!(
        granted.values().all(|&n| n == 1),
        "a completed task was granted again: {granted:?}"
    );
    assert_eq!(completed.len(), 50);
}
