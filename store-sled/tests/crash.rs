//! SIGKILL in the middle of a claim storm, again and again: every answered
//! grant is there after reopening, and new fences are higher than every
//! fence handed out before.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::conformance::fixtures::manifest;
use baton_core::{Authority, Id, SystemClock};
use baton_store_sled::{SledOptions, SledStore};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

const CHILD_ENV: &str = "BATON_SLED_CRASH_CHILD";

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

fn open(path: &std::path::Path) -> Authority<SledStore> {
    let opts = SledOptions {
        busy_timeout: std::time::Duration::from_secs(30),
        ..Default::default()
    };
    Authority::new(SledStore::open(path, opts).unwrap(), Arc::new(SystemClock))
}

#[test]
#[ignore = "a child process entry point, run by the test below"]
fn storm_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (path, round) = args.split_once('|').unwrap();
    let a = Arc::new(open(std::path::Path::new(path)));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let a = a.clone();
                let round = round.to_owned();
                tokio::spawn(async move {
                    for i in 0.. {
                        let name = format!("r{round}-w{w}-{i:06}");
                        let task = id(&name);
                        if i % 2 == 0 {
                            let g = a
                                .claim(&task, &id("w"), Some(3_600_000))
                                .await
                                .unwrap()
                                .grant()
                                .unwrap();
                            // Reported only after the store answered: the grant is durable.
                            println!("@@ G {} {}", task, g.fence);
                            continue;
                        }
                        // A declared task through claim, start, heartbeat and succeed.
                        let run = id("run");
                        a.declare(manifest(&name, 2, &["log"], 3600, 1))
                            .await
                            .unwrap();
                        a.register(&task, &run).await.unwrap();
                        let g = a
                            .task_claim(&task, &run, &id("w"), None)
                            .await
                            .unwrap()
                            .grant()
                            .unwrap();
                        println!("@@ G {} {}", task, g.fence);
                        a.start(&task, &run, &id("w"), g.fence).await.unwrap();
                        a.heartbeat(&task, &run, &id("w"), g.fence, 2, None)
                            .await
                            .unwrap();
                        let ev = BTreeMap::from([(
                            "log".to_owned(),
                            format!("sha256:{}", "c".repeat(64)),
                        )]);
                        a.succeed(&task, &run, &id("w"), g.fence, ev).await.unwrap();
                        println!("@@ S {} {}", task, g.fence);
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
    });
}

#[test]
fn killed_mid_storm_loses_no_answered_grant_and_never_reuses_a_fence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let mut answered: Vec<(String, u64)> = Vec::new();
    let mut succeeded: Vec<(String, u64)> = Vec::new();
    for round in 0..4 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "storm_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{}|{round}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        let want = 150 + round * 37;
        while seen < want {
            let line = lines.next().expect("the child reports grants").unwrap();
            if let Some(i) = line.find("@@ ") {
                let parts: Vec<&str> = line[i + 3..].split(' ').collect();
                let entry = (parts[1].to_owned(), parts[2].parse().unwrap());
                if parts[0] == "S" {
                    succeeded.push(entry);
                } else {
                    answered.push(entry);
                    seen += 1;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL, mid-storm
        child.wait().unwrap();
        let a = open(&path);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for (task, fence) in &answered {
            let h = rt
                .block_on(a.holder(&id(task)))
                .unwrap()
                .unwrap()
                .unwrap_or_else(|| panic!("{task} lost"));
            assert_eq!(
                h.grant.fence, *fence,
                "{task}: the answered grant is the stored one"
            );
        }
        for (task, fence) in &succeeded {
            let r = rt.block_on(a.get(&id(task))).unwrap().unwrap();
            assert_eq!(
                (r.state, r.current_fence()),
                (baton_core::State::Succeeded, Some(*fence)),
                "{task}: an answered success was lost"
            );
        }
        let max = answered.iter().map(|(_, f)| *f).max().unwrap();
        let g = rt
            .block_on(a.claim(&id(&format!("after-{round}")), &id("w"), None))
            .unwrap()
            .grant()
            .unwrap();
        assert!(
            g.fence > max,
            "a fence after the crash ({}) is above every answered one ({max})",
            g.fence
        );
        answered.push((format!("after-{round}"), g.fence));
    }
    assert!(
        !succeeded.is_empty(),
        "the storm completed declared tasks too"
    );
}
