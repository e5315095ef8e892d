//! The sled backend through the CLI, across real processes: short calls take
//! turns on the directory lock; a process that holds it past the timeout
//! makes the other fail cleanly.
#![cfg(feature = "sled")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_baton");

fn baton(store: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("BATON_STORE")
        .output()
        .unwrap()
}

#[test]
fn four_processes_race_through_the_cli_one_grant_per_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "sled:{}?busy_timeout=60s",
        dir.path().join("store").display()
    );
    let grants: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|p| {
                let store = store.clone();
                s.spawn(move || {
                    let mut won = Vec::new();
                    for i in 0..30 {
                        let task = format!("t-{:02}", (i + p * 7) % 30);
                        let out = baton(
                            &store,
                            &["claim", &task, "--owner", &format!("p{p}"), "--ttl", "1h"],
                        );
                        match out.status.code() {
                            Some(0) => won.push((task, format!("p{p}"))),
                            Some(1) => {
                                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                                assert_eq!(v["refused"].as_str(), Some("held"));
                            }
                            other => {
                                panic!("exit {other:?}: {}", String::from_utf8_lossy(&out.stderr))
                            }
                        }
                    }
                    won
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut per_task: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (t, p) in grants {
        per_task.entry(t).or_default().push(p);
    }
    assert_eq!(per_task.len(), 30);
    for (t, winners) in &per_task {
        assert_eq!(winners.len(), 1, "{t} granted to {winners:?}");
        let out = baton(&store, &["holder", t]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["owner"].as_str(), Some(winners[0].as_str()));
    }
}

#[test]
#[ignore = "a child process entry point, run by the test below"]
fn hold_the_store() {
    let Ok(path) = std::env::var("BATON_SLED_HOLD") else {
        return;
    };
    let _store = baton_store_sled::SledStore::open(&path, Default::default()).unwrap();
    println!("@@ holding");
    std::thread::sleep(std::time::Duration::from_secs(4));
}

#[test]
fn a_process_holding_the_store_past_the_timeout_makes_others_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "hold_the_store",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BATON_SLED_HOLD", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = holder.stdout.take().unwrap();
    let mut seen = String::new();
    while !seen.contains("@@ holding") {
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut out, &mut buf).unwrap();
        assert!(n > 0, "the holder exited early");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let store = format!("sled:{}?busy_timeout=300ms", path.display());
    let r = baton(&store, &["claim", "x", "--owner", "w"]);
    assert_eq!(
        r.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let err: Value = serde_json::from_slice(&r.stderr).unwrap();
    let msg = err["error"]["message"].as_str().unwrap();
    assert_eq!(err["error"]["kind"].as_str(), Some("unavailable"));
    assert!(
        msg.contains("another process holds the store")
            && msg.contains(&path.display().to_string()),
        "{msg}"
    );
    assert!(holder.wait().unwrap().success());
    // Once it lets go, the store works, and the refused claim granted nothing.
    let ok = baton(&store, &["holder", "x"]);
    assert_eq!(ok.status.code(), Some(5));
    assert_eq!(
        baton(&store, &["claim", "x", "--owner", "w"]).status.code(),
        Some(0)
    );
}
