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
    if round.starts_with('k') {
        // Open, claim a few, close, again: sled writes a snapshot at every
        // open that follows writes, so kills land inside those too.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for n in 0.. {
            let a = open(std::path::Path::new(path));
            for i in 0..3 {
                let task = id(&format!("{round}-{n:04}-{i}"));
                let g = rt
                    .block_on(a.claim(&task, &id("w"), Some(3_600_000)))
                    .unwrap()
                    .grant()
                    .unwrap();
                println!("@@ G {} {}", task, g.fence);
            }
        }
        return;
    }
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

/// A small deterministic generator, so a failing storm can be replayed
/// from the seed it prints.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Several hundred SIGKILLs at random moments (while sled opens and writes
/// its startup snapshot, mid-storm, mid-flush): the store opens after every
/// one, with every answered grant and success in it. `BATON_SLED_KILLS`
/// sets the count (default 300), `BATON_SLED_SEED` replays a run.
#[test]
fn hundreds_of_kills_and_the_store_opens_after_every_one() {
    let kills: usize = std::env::var("BATON_SLED_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut seed: u64 = std::env::var("BATON_SLED_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("sled kill storm: {kills} kills, BATON_SLED_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut answered: Vec<(String, u64)> = Vec::new();
    let mut succeeded: Vec<(String, u64)> = Vec::new();
    let mut max_fence = 0;
    for round in 0..kills {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "storm_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{}|k{round}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(i) = line.find("@@ ") {
                    got.push(line[i + 3..].to_owned());
                }
            }
            got
        });
        let delay_ms = 5 + next(&mut seed) % 200;
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL; it may have died of nothing else yet
        child.wait().unwrap();
        let mut this_round = Vec::new();
        for line in reader.join().unwrap() {
            let parts: Vec<&str> = line.split(' ').collect();
            // A line cut by the kill is not an answer the child printed whole.
            let (Some(kind), Some(task), Some(Ok(fence))) = (
                parts.first(),
                parts.get(1),
                parts.get(2).map(|f| f.parse::<u64>()),
            ) else {
                continue;
            };
            let entry = ((*task).to_owned(), fence);
            if *kind == "S" {
                succeeded.push(entry);
            } else {
                this_round.push(entry);
            }
        }
        let a = Authority::new(
            SledStore::open(
                &path,
                SledOptions {
                    busy_timeout: std::time::Duration::from_secs(30),
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| {
                panic!("round {round} (BATON_SLED_SEED replays): the store does not open: {e}")
            }),
            Arc::new(SystemClock),
        );
        // This round's answers every time; everything every 25 rounds and at the end.
        let full = round % 25 == 24 || round + 1 == kills;
        answered.extend(this_round.iter().cloned());
        let check: &[(String, u64)] = if full { &answered } else { &this_round };
        for (task, fence) in check {
            let h = rt
                .block_on(a.holder(&id(task)))
                .unwrap()
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: {task} lost"));
            assert_eq!(h.grant.fence, *fence, "round {round}: {task}");
            max_fence = max_fence.max(*fence);
        }
        if full {
            for (task, fence) in &succeeded {
                let r = rt.block_on(a.get(&id(task))).unwrap().unwrap();
                assert_eq!(
                    (r.state, r.current_fence()),
                    (baton_core::State::Succeeded, Some(*fence)),
                    "round {round}: {task}: an answered success was lost"
                );
            }
            let g = rt
                .block_on(a.claim(&id(&format!("after-{round}")), &id("w"), None))
                .unwrap()
                .grant()
                .unwrap();
            assert!(g.fence > max_fence, "round {round}: a fence was reused");
            max_fence = g.fence;
            let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
            assert_eq!(drift.unwrap(), None, "round {round}: the kept counts");
        }
    }
    assert!(answered.len() > kills, "the storm granted between kills");
}
