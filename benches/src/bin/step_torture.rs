//! The step torture: a 10-step task whose worker process is killed with
//! SIGKILL at a random moment, then resumed by another worker; in one run
//! of five the first worker is instead paused (SIGSTOP) past its lease and
//! resumed (SIGCONT) once the second has finished, a zombie that goes on
//! recording steps. Each worker records every step it starts and every
//! answer to its checkpoints in a log of its own (appended with one
//! `write` per line, so a kill loses nothing written), and the store's
//! events say under which fence each step was recorded. Counted per store:
//!
//! * `completed_rerun`: steps the first attempt recorded that the second
//!   started again (the bar: 0);
//! * `inflight_rerun_max`: steps started by both attempts but recorded by
//!   neither first, per crash (the bar: at most 1);
//! * `stale_accepted`: checkpoints the store recorded under a fence lower
//!   than one it had granted before (the bar: 0);
//! * `unfinished`: runs whose task did not end SUCCEEDED with all 10 steps.
//!
//! Then, on SQLite, what a checkpoint costs: the commits of one worker
//! recording steps one at a time (`commits_per_checkpoint`), and the
//! grants and checkpoints per commit of 64 workers at once, which share
//! the group commit (`requests_per_commit`).
//!
//! `step_torture RUNS@STORE_URL...` prints one JSON line per store; run by
//! `scripts/step-torture RUNS`, which starts Postgres and etcd.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by panicking

use baton_core::{Id, Reply, Step};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const STEPS: u32 = 10;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => worker(&args[2], &args[3], Path::new(&args[4]), &args[5]),
        Some(_) => {
            let dir = PathBuf::from(std::env::var("ST_DIR").expect("ST_DIR is set"));
            for arg in &args[1..] {
                let (runs, url) = arg.split_once('@').expect("RUNS@STORE_URL");
                torture(url, runs.parse().expect("RUNS is a number"), &dir);
            }
            cost(&format!("sqlite:{}", dir.join("cost.db").display()));
        }
        None => panic!("usage: step_torture RUNS@STORE_URL..."),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

/// A small generator, seeded by the clock: the moments of the kills.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The lease a worker takes, in ms: etcd's leases count in seconds.
fn lease_ms(url: &str) -> u64 {
    if url.starts_with("etcd") { 1000 } else { 300 }
}

// ---------------------------------------------------------------------------
// A worker: claim (waiting out another's lease), then each step not yet
// recorded: log its start, work a little, record it, log the answer.

fn worker(url: &str, task: &str, log: &Path, owner: &str) {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut line = |s: String| out.write_all(format!("{s}\n").as_bytes()).unwrap();
    let rt = rt();
    rt.block_on(async {
        let a = baton_open::authority_for(url).await.unwrap();
        let (task, owner) = (id(task), id(owner));
        // A store that cannot answer (SQLite while a paused process holds
        // its write lock) granted nothing: ask again, as a worker does.
        let deadline = Instant::now() + Duration::from_secs(60);
        let reply = loop {
            match a
                .claim_waiting(&task, &owner, Some(lease_ms(url)), 30_000)
                .await
            {
                Ok(r) => break r,
                Err(e) if e.kind.is_temporary() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => {
                    line(format!("error claim {e}"));
                    return;
                }
            }
        };
        let Some(g) = reply.grant() else {
            line(format!(
                "refused claim {}",
                reply.refusal().map_or("?", |r| r.reason())
            ));
            return;
        };
        line(format!("grant {}", g.fence));
        let mut rng = Rng(std::process::id() as u64 * 7919 + 1);
        for i in 1..=STEPS {
            let name = format!("s{i}");
            if g.checkpoints.iter().any(|c| c.step == name) {
                line(format!("skip {i}"));
                continue;
            }
            line(format!("start {i}"));
            tokio::time::sleep(Duration::from_millis(1 + rng.below(6))).await;
            let step = Step {
                owner: owner.clone(),
                fence: g.fence,
                step: id(&name),
                output: json!({"step": i, "by": owner.as_str()}),
                spawn: Vec::new(),
                wait: false,
            };
            // Sent again while the store cannot answer: a step that landed
            // is acknowledged.
            let mut answer = a.checkpoint(&task, step.clone()).await;
            while let Err(e) = &answer {
                if !e.kind.is_temporary() || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                answer = a.checkpoint(&task, step.clone()).await;
            }
            match answer {
                Ok(Ok(Reply::Committed(_))) => line(format!("rec {i}")),
                Ok(Ok(Reply::Acknowledged(_))) => line(format!("ack {i}")),
                Ok(Ok(Reply::Refused(r))) => {
                    line(format!("refused {i} {}", r.reason()));
                    return;
                }
                Ok(Err((_, r))) => {
                    line(format!("refused {i} {}", r.reason()));
                    return;
                }
                Err(e) => {
                    line(format!("error {i} {e}"));
                    return;
                }
            }
        }
        let mut done = a.complete(&task, &owner, g.fence).await;
        while done.as_ref().is_err_and(|e| e.kind.is_temporary()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            done = a.complete(&task, &owner, g.fence).await;
        }
        match done {
            Ok(r) if !r.is_refused() => line("complete".into()),
            other => line(format!("complete refused {other:?}")),
        }
    });
}

// ---------------------------------------------------------------------------
// The orchestrator.

fn spawn(url: &str, task: &str, log: &Path, owner: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["worker", url, task, &log.display().to_string(), owner])
        .spawn()
        .unwrap()
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn steps_with(lines: &[String], word: &str) -> Vec<u32> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(word)?.strip_prefix(' ')?.parse().ok())
        .collect()
}

#[derive(Default)]
struct Tally {
    runs: usize,
    crashes: usize,
    zombies: usize,
    completed_rerun: usize,
    inflight_rerun: usize,
    inflight_rerun_max: usize,
    stale_accepted: usize,
    zombie_refused: usize,
    /// Zombies paused while they held the store's write lock (SQLite):
    /// resumed before the other worker could go on.
    zombies_blocking: usize,
    unfinished: usize,
}

fn torture(url: &str, runs: usize, dir: &Path) {
    let rt = rt();
    let a = rt.block_on(baton_open::authority_for(url)).unwrap();
    let mut rng = Rng(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1);
    let lease = lease_ms(url);
    let stamp = std::process::id();
    let mut t = Tally::default();
    let started = Instant::now();
    for run in 0..runs {
        let task = format!("steps-{stamp}-{run}");
        let (log_a, log_b) = (
            dir.join(format!("{task}-a.log")),
            dir.join(format!("{task}-b.log")),
        );
        let zombie = rng.below(5) == 0;
        let mut first = spawn(url, &task, &log_a, "first");
        // Somewhere in its ten steps (its start-up included).
        std::thread::sleep(Duration::from_millis(20 + rng.below(60)));
        let pid = Pid::from_raw(first.id() as i32);
        if zombie {
            let _ = kill(pid, Signal::SIGSTOP);
            std::thread::sleep(Duration::from_millis(lease + 200));
        } else {
            let _ = kill(pid, Signal::SIGKILL);
        }
        let mut second = spawn(url, &task, &log_b, "second");
        if zombie {
            // A process paused inside a SQLite write holds the file's lock:
            // nobody writes until it goes on. Then it is let go first.
            let until = Instant::now() + Duration::from_secs(5);
            while second.try_wait().unwrap().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if second.try_wait().unwrap().is_none() {
                t.zombies_blocking += 1;
            }
            let _ = kill(pid, Signal::SIGCONT);
        }
        second.wait().unwrap();
        let _ = first.wait();
        let (la, lb) = (lines(&log_a), lines(&log_b));
        let fence_of = |l: &[String]| -> Option<u64> {
            l.iter()
                .find_map(|x| x.strip_prefix("grant ")?.parse().ok())
        };
        let (fa, fb) = (fence_of(&la), fence_of(&lb));
        let record = rt.block_on(a.get(&id(&task))).unwrap();
        let recorded_by = |i: u32| {
            record.as_ref().and_then(|r| {
                r.checkpoints
                    .iter()
                    .find(|c| c.step == format!("s{i}"))
                    .map(|c| c.fence)
            })
        };
        let finished = record.as_ref().is_some_and(|r| {
            r.state == baton_core::State::Succeeded && r.checkpoints.len() == STEPS as usize
        });
        if !finished {
            t.unfinished += 1;
            eprintln!(
                "{task}: not finished: {:?} {la:?} {lb:?}",
                record.as_ref().map(|r| r.state)
            );
        }
        let crashed = fa.is_some() && fb.is_some() && !la.iter().any(|l| l == "complete");
        t.runs += 1;
        if crashed {
            if zombie {
                t.zombies += 1;
            } else {
                t.crashes += 1;
            }
        }
        let (started_a, started_b) = (steps_with(&la, "start"), steps_with(&lb, "start"));
        let mut inflight = 0;
        for i in started_b.iter().copied() {
            if recorded_by(i).is_some() && recorded_by(i) == fa {
                t.completed_rerun += 1;
                eprintln!("{task}: step {i} recorded by the first attempt ran again");
            } else if started_a.contains(&i) {
                inflight += 1;
            }
        }
        t.inflight_rerun += inflight;
        t.inflight_rerun_max = t.inflight_rerun_max.max(inflight);
        if zombie && la.iter().any(|l| l.starts_with("refused ")) {
            t.zombie_refused += 1;
        }
        // The store's own word: no step recorded under a fence lower than
        // one granted before it.
        let events = rt.block_on(a.events(Some(&id(&task)), None, 1000)).unwrap();
        let mut granted = 0;
        for e in &events.items {
            match e.kind {
                baton_core::EventKind::Claimed | baton_core::EventKind::Recovered => {
                    granted = granted.max(e.fence.unwrap_or(0));
                }
                baton_core::EventKind::Checkpointed if e.fence.unwrap_or(0) < granted => {
                    t.stale_accepted += 1;
                    eprintln!(
                        "{task}: a checkpoint under fence {:?} after fence {granted}",
                        e.fence
                    );
                }
                _ => {}
            }
        }
        let _ = std::fs::remove_file(&log_a);
        let _ = std::fs::remove_file(&log_b);
        let _ = fb;
    }
    let store = url.split(':').next().unwrap_or(url);
    println!(
        "{}",
        json!({
            "store": store,
            "runs": t.runs,
            "crashes": t.crashes,
            "zombies": t.zombies,
            "zombies_refused": t.zombie_refused,
            "zombies_blocking": t.zombies_blocking,
            "completed_rerun": t.completed_rerun,
            "inflight_rerun": t.inflight_rerun,
            "inflight_rerun_max": t.inflight_rerun_max,
            "stale_accepted": t.stale_accepted,
            "unfinished": t.unfinished,
            "seconds": started.elapsed().as_secs(),
        })
    );
}

// ---------------------------------------------------------------------------
// What a checkpoint costs on SQLite, in commits.

fn cost(url: &str) {
    let rt = rt();
    rt.block_on(async {
        let opened = baton_open::open_url(url).await.unwrap();
        let meter = opened.meter.clone().expect("SQLite counts its commits");
        let a = std::sync::Arc::new(baton_core::Authority::new(
            opened.store,
            std::sync::Arc::new(baton_core::SystemClock),
        ));
        let one = |a: std::sync::Arc<baton_open::DynAuthority>, task: String| async move {
            let (task, owner) = (id(&task), id("w"));
            let g = a
                .claim(&task, &owner, Some(60_000))
                .await
                .unwrap()
                .grant()
                .unwrap();
            for i in 1..=STEPS {
                let step = Step {
                    owner: owner.clone(),
                    fence: g.fence,
                    step: id(&format!("s{i}")),
                    output: json!(i),
                    spawn: Vec::new(),
                    wait: false,
                };
                let r = a.checkpoint(&task, step).await.unwrap().unwrap();
                assert!(!r.is_refused(), "{r:?}");
            }
            a.complete(&task, &owner, g.fence).await.unwrap();
        };
        // One worker, one step at a time.
        let before = meter.commits().unwrap();
        one(a.clone(), "cost-alone".into()).await;
        let alone = meter.commits().unwrap() - before;
        // 64 at once.
        let before = meter.commits().unwrap();
        let mut all = Vec::new();
        for w in 0..64 {
            all.push(tokio::spawn(one(a.clone(), format!("cost-{w}"))));
        }
        for h in all {
            h.await.unwrap();
        }
        let shared = meter.commits().unwrap() - before;
        let requests = 64 * (STEPS as u64 + 2);
        println!(
            "{}",
            json!({
                "store": "sqlite",
                "cost": "commits",
                "commits_per_request_alone": alone as f64 / (STEPS as f64 + 2.0),
                "workers": 64,
                "requests": requests,
                "commits": shared,
                "requests_per_commit": requests as f64 / shared.max(1) as f64,
            })
        );
    });
}
