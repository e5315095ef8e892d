//! What the store promises without a store-wide lock, checked on real
//! processes writing at once (each child runs an entry point below and
//! prints what it was answered):
//!
//! * fences are unique store-wide; a grant answered before another was
//!   asked for has the lower fence; the grants of one task, in the order
//!   its log records them, have increasing fences;
//! * a reader tailing the events while 8 processes write misses none,
//!   sees none twice, and what it saw stays where it saw it; the events
//!   of one task are numbered in the order they happened.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, EventKind, Id, Store, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PROCESSES: usize = 8;
/// The few tasks the contended children fight over.
const CONTENDED: usize = 2;

fn id(kind: &str, s: &str) -> Id {
    Id::parse(kind, s).unwrap()
}

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn env(name: &str) -> usize {
    std::env::var(name).unwrap().parse().unwrap()
}

/// What a child process is given: its number, its rounds, a store.
struct Worker {
    me: usize,
    rounds: usize,
    rt: tokio::runtime::Runtime,
    a: Authority<PostgresStore>,
    owner: Id,
}

/// `None` unless run as a child (`BATON_ORDER_URL` set).
fn child() -> Option<Worker> {
    let url = std::env::var("BATON_ORDER_URL").ok()?;
    let me = env("BATON_ORDER_ME");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = Authority::new(
        rt.block_on(PostgresStore::open_url(&url)).unwrap(),
        Arc::new(SystemClock),
    );
    Some(Worker {
        me,
        rounds: env("BATON_ORDER_ROUNDS"),
        rt,
        a,
        owner: id("owner", &format!("p{me}")),
    })
}

/// A child: `BATON_ORDER_ROUNDS` rounds over the tasks `c0`, `c1`, all
/// processes at once: claim (printing `G task fence asked answered` for a
/// grant, times in µs on this host's clock), claim again as the holder
/// every third round (a new fence), then release.
#[test]
#[ignore = "a child process entry point, run by the tests below"]
fn contended_grants() {
    let Some(w) = child() else { return };
    let (me, rounds, rt, a, owner) = (w.me, w.rounds, w.rt, w.a, w.owner);
    let mut out = std::io::stdout().lock();
    for i in 0..rounds {
        let task = id("task", &format!("c{}", (i + me) % CONTENDED));
        let mut fence = None;
        for again in 0..=usize::from(i % 3 == 0) {
            let asked = micros();
            let r = rt.block_on(a.claim(&task, &owner, Some(60_000))).unwrap();
            let answered = micros();
            let Some(g) = r.grant() else {
                assert!(again == 0, "the holder's own claim was refused: {r:?}");
                break;
            };
            writeln!(out, "G {task} {} {asked} {answered}", g.fence).unwrap();
            fence = Some(g.fence);
        }
        if let Some(f) = fence {
            let r = rt.block_on(a.release(&task, &owner, f)).unwrap();
            assert!(r.refusal().is_none(), "{r:?}");
        }
    }
    out.flush().unwrap();
}

/// A child: claims and completes `BATON_ORDER_ROUNDS` tasks of its own.
#[test]
#[ignore = "a child process entry point, run by the tests below"]
fn disjoint_writer() {
    let Some(w) = child() else { return };
    let (me, rounds, rt, a, owner) = (w.me, w.rounds, w.rt, w.a, w.owner);
    for i in 0..rounds {
        let task = id("task", &format!("w{me}-{i}"));
        let g = rt
            .block_on(a.claim(&task, &owner, Some(60_000)))
            .unwrap()
            .grant()
            .unwrap();
        let r = rt.block_on(a.complete(&task, &owner, g.fence)).unwrap();
        assert!(r.refusal().is_none(), "{r:?}");
    }
}

fn spawn(entry: &str, url: &str, me: usize, rounds: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", entry, "--ignored", "--nocapture", "--quiet"])
        .env("BATON_ORDER_URL", url)
        .env("BATON_ORDER_ME", me.to_string())
        .env("BATON_ORDER_ROUNDS", rounds.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[derive(Debug, Clone)]
struct Grant {
    task: String,
    fence: u64,
    asked: u128,
    answered: u128,
}

#[test]
fn fences_are_unique_and_follow_real_time_and_each_tasks_log() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("fences");
    // Open once first: the children then find the schema made.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(PostgresStore::open_url(&url)).unwrap();
    let children: Vec<Child> = (0..PROCESSES)
        .map(|p| spawn("contended_grants", &url, p, 150))
        .collect();
    let mut grants = Vec::new();
    for mut c in children {
        let stdout = c.stdout.take().unwrap();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.first() != Some(&"G") {
                continue;
            }
            grants.push(Grant {
                task: w[1].to_owned(),
                fence: w[2].parse().unwrap(),
                asked: w[3].parse().unwrap(),
                answered: w[4].parse().unwrap(),
            });
        }
        assert!(c.wait().unwrap().success());
    }
    let fences: BTreeSet<u64> = grants.iter().map(|g| g.fence).collect();
    assert_eq!(fences.len(), grants.len(), "a fence was handed out twice");

    // Real time: every grant answered before another was asked for has
    // the lower fence. By ask time, each grant against the highest fence
    // among those answered before it was asked.
    let mut by_answer = grants.clone();
    by_answer.sort_by_key(|g| g.answered);
    let mut by_ask = grants.clone();
    by_ask.sort_by_key(|g| g.asked);
    let (mut i, mut highest, mut compared) = (0, 0u64, 0usize);
    for g in &by_ask {
        while i < by_answer.len() && by_answer[i].answered < g.asked {
            highest = highest.max(by_answer[i].fence);
            i += 1;
        }
        compared += i;
        assert!(
            g.fence > highest,
            "{g:?} was asked for after a grant with fence {highest} was answered"
        );
    }
    assert!(compared > grants.len(), "too few grants ordered in time");

    // Each task's log: its grants in the order recorded, fences increasing,
    // and every answered grant there.
    for k in 0..CONTENDED {
        let task = id("task", &format!("c{k}"));
        let events = rt.block_on(store.events(Some(&task), 0, 100_000)).unwrap();
        let logged: Vec<u64> = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Claimed))
            .filter_map(|e| e.fence)
            .collect();
        assert!(
            logged.windows(2).all(|w| w[0] < w[1]),
            "{task}: fences out of the log's order: {logged:?}"
        );
        let answered: BTreeSet<u64> = grants
            .iter()
            .filter(|g| g.task == task.as_str())
            .map(|g| g.fence)
            .collect();
        assert!(answered.len() > 10, "{task}: too little contention");
        assert_eq!(
            answered,
            logged.iter().copied().collect::<BTreeSet<u64>>(),
            "{task}"
        );
    }
}

#[test]
fn a_reader_tailing_events_while_eight_processes_write_misses_none() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("tail");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(PostgresStore::open_url(&url)).unwrap();
    let rounds = 60;
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|p| spawn("disjoint_writer", &url, p, rounds))
        .collect();
    // Tail in small pages while they write, then once more after.
    let mut seen: Vec<(u64, String, EventKind)> = Vec::new();
    let mut reads = 0;
    let started = Instant::now();
    loop {
        let running = children.iter_mut().any(|c| c.try_wait().unwrap().is_none());
        loop {
            let after = seen.last().map_or(0, |e| e.0);
            let page = rt.block_on(store.events(None, after, 7)).unwrap();
            reads += 1;
            for e in &page {
                seen.push((e.seq, e.task.as_str().to_owned(), e.kind));
            }
            if page.len() < 7 {
                break;
            }
        }
        if !running {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "writers stalled"
        );
    }
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    // Everything, read again whole: what the tail saw, in the same order.
    let all: Vec<(u64, String, EventKind)> = rt
        .block_on(store.events(None, 0, 1_000_000))
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.task.as_str().to_owned(), e.kind))
        .collect();
    assert_eq!(
        all.len(),
        PROCESSES * rounds * 2,
        "claimed and succeeded per task"
    );
    assert_eq!(seen, all, "the tail missed, repeated or reordered events");
    assert!(reads > 20, "the tail read only {reads} times");
    // One task's events in the order they happened.
    let mut first: BTreeMap<&str, EventKind> = BTreeMap::new();
    for (_, task, kind) in &all {
        match first.get(task.as_str()) {
            None => {
                assert_eq!(*kind, EventKind::Claimed, "{task}");
                first.insert(task, *kind);
            }
            Some(_) => assert_eq!(*kind, EventKind::Succeeded, "{task}"),
        }
    }
}
