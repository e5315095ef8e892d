//! SIGKILL in the middle of a claim storm, again and again: every answered
//! grant is there after reopening, and new fences are higher than every
//! fence handed out before.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, Id, SystemClock};
use baton_store_sled::{SledOptions, SledStore};
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
                        let task = id(&format!("r{round}-w{w}-{i:06}"));
                        let g = a
                            .claim(&task, &id("w"), Some(3_600_000))
                            .await
                            .unwrap()
                            .grant()
                            .unwrap();
                        // Reported only after the store answered: the grant is durable.
                        println!("@@ {} {}", task, g.fence);
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
                let (task, fence) = line[i + 3..].split_once(' ').unwrap();
                answered.push((task.to_owned(), fence.parse().unwrap()));
                seen += 1;
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
}
