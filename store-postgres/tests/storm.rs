//! Real processes on one database, each with a pool of its own (a host):
//! one winner per task; clients killed with SIGKILL mid-storm; the server
//! crashed and restarted mid-storm. Each child runs the `storm_worker`
//! entry point below and prints every grant it was answered, flushed, so
//! the parent knows what was promised even of a process it kills.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, EventKind, Id, State, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn id(s: &str) -> Id {
    Id::parse("task", s).unwrap()
}

/// One child: `BATON_STORM_THREADS` workers sharing this process's store,
/// each going over tasks `t0..tN` (from an offset of its own) until every
/// one has succeeded: claim, print `G task fence`, complete. Errors (the
/// server away) are retried; nothing else is.
#[test]
#[ignore = "a child process entry point, run by the tests below"]
fn storm_worker() {
    let Ok(url) = std::env::var("BATON_STORM_URL") else {
        return;
    };
    let n: usize = std::env::var("BATON_STORM_TASKS").unwrap().parse().unwrap();
    let me: usize = std::env::var("BATON_STORM_ME").unwrap().parse().unwrap();
    let threads: usize = std::env::var("BATON_STORM_THREADS")
        .unwrap()
        .parse()
        .unwrap();
    let ttl: u64 = std::env::var("BATON_STORM_TTL_MS")
        .unwrap()
        .parse()
        .unwrap();
    let hold: u64 = std::env::var("BATON_STORM_HOLD_MS")
        .unwrap()
        .parse()
        .unwrap();
    let batch: u32 = std::env::var("BATON_STORM_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(PostgresStore::open_url(&url)).unwrap();
    let a = Arc::new(Authority::new(store, Arc::new(SystemClock)));
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    if batch > 0 {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (a, out) = (a.clone(), out.clone());
                rt.spawn(batches(a, out, format!("p{me}-{t}"), batch, ttl, hold))
            })
            .collect();
        for h in handles {
            rt.block_on(h).unwrap();
        }
        return;
    }
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (a, out) = (a.clone(), out.clone());
            rt.spawn(async move {
                let owner = Id::parse("owner", &format!("p{me}-{t}")).unwrap();
                let start = Instant::now();
                let mut done = BTreeSet::new();
                let mut i = (me * threads + t) * 7;
                while done.len() < n && start.elapsed() < Duration::from_secs(120) {
                    let k = i % n;
                    i += 1;
                    if done.contains(&k) {
                        continue;
                    }
                    let task = id(&format!("t{k}"));
                    let g = match a.claim(&task, &owner, Some(ttl)).await {
                        Ok(r) => match r.grant() {
                            Some(g) => g,
                            None => {
                                if matches!(r.refusal(), Some(baton_core::Refusal::Completed)) {
                                    done.insert(k);
                                }
                                continue;
                            }
                        },
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    {
                        let mut o = out.lock().unwrap();
                        writeln!(o, "G t{k} {}", g.fence).unwrap();
                        o.flush().unwrap();
                    }
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    loop {
                        match a.complete(&task, &owner, g.fence).await {
                            Ok(_) => break,
                            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                        if start.elapsed() > Duration::from_secs(120) {
                            break;
                        }
                    }
                    done.insert(k);
                }
            })
        })
        .collect();
    for h in handles {
        rt.block_on(h).unwrap();
    }
}

/// A worker taking batches from queue `storm` (`next --count`), printing
/// each grant, and reporting each batch in one call (`report`), until the
/// queue is drained. A call the server did not answer is asked again; a
/// batch whose answer was lost stays held until its lease runs out, and
/// `next` then grants it again.
async fn batches(
    a: Arc<Authority<PostgresStore>>,
    out: Arc<std::sync::Mutex<std::io::Stdout>>,
    owner: String,
    count: u32,
    ttl: u64,
    hold: u64,
) {
    use baton_core::graph::Taker;
    use baton_core::{Refusal, Reply, Request};
    let owner = Id::parse("owner", &owner).unwrap();
    let taker = Taker::Owner {
        owner: owner.clone(),
        ttl_ms: Some(ttl),
        lock_delay_ms: None,
    };
    let queue = [Id::parse("queue", "storm").unwrap()];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        let replies = match a.next_many_for(taker.clone(), &queue, count).await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        match replies.as_slice() {
            [Reply::Refused(Refusal::Drained { .. })] => return,
            [Reply::Refused(_)] => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            _ => {}
        }
        let mut reports = Vec::new();
        {
            let mut o = out.lock().unwrap();
            for g in replies.iter().filter_map(|r| r.grant()) {
                writeln!(o, "G {} {}", g.task, g.fence).unwrap();
                reports.push((
                    g.task.clone(),
                    Request::Complete {
                        owner: owner.clone(),
                        fence: g.fence,
                    },
                ));
            }
            o.flush().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(hold)).await;
        while a.report_many(reports.clone()).await.is_err()
            && start.elapsed() < Duration::from_secs(120)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until `seen` reaches `n` answered grants.
fn wait_for(seen: &Seen, n: usize) {
    let start = Instant::now();
    while seen.load(std::sync::atomic::Ordering::SeqCst) < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the storm stalled"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A child with `threads` workers over `tasks` tasks, holding each grant
/// for `hold_ms` before completing it.
fn spawn(
    url: &str,
    me: usize,
    tasks: usize,
    threads: usize,
    (ttl_ms, hold_ms): (u64, u64),
) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "storm_worker",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("BATON_STORM_URL", url)
        .env("BATON_STORM_ME", me.to_string())
        .env("BATON_STORM_TASKS", tasks.to_string())
        .env("BATON_STORM_THREADS", threads.to_string())
        .env("BATON_STORM_TTL_MS", ttl_ms.to_string())
        .env("BATON_STORM_HOLD_MS", hold_ms.to_string())
        .env("BATON_STORM_BATCH", BATCH.with(|b| b.get()).to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

type Seen = Arc<std::sync::atomic::AtomicUsize>;

thread_local! {
    /// The batch a test's children take (`next --count`; 0: claim by id).
    static BATCH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Reads a child's `G task fence` lines as they come (a thread per child),
/// counting them in `seen`.
/// Waits for every child (each must exit cleanly unless `killed_some`)
/// and gathers what their readers saw answered.
fn finish(
    children: &mut [Child],
    readers: Vec<std::thread::JoinHandle<Vec<(String, u64)>>>,
    killed_some: bool,
) -> Vec<(String, u64)> {
    for c in children.iter_mut() {
        let status = c.wait().unwrap();
        assert!(killed_some || status.success(), "{status}");
    }
    readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect()
}

fn collect(child: &mut Child, seen: &Seen) -> std::thread::JoinHandle<Vec<(String, u64)>> {
    let stdout = child.stdout.take().unwrap();
    let seen = seen.clone();
    std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .inspect(|_| {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                if w.next() != Some("G") {
                    return None;
                }
                Some((w.next()?.to_owned(), w.next()?.parse().ok()?))
            })
            .collect()
    })
}

/// What every storm must leave: each task SUCCEEDED; every answered grant
/// recorded (a CLAIMED event with its fence); no fence answered twice.
fn check(url: &str, tasks: usize, answered: &[(String, u64)]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(PostgresStore::open_url(url)).unwrap();
    let a = Authority::new(store, Arc::new(SystemClock));
    let fences: BTreeSet<u64> = answered.iter().map(|(_, f)| *f).collect();
    assert_eq!(fences.len(), answered.len(), "a fence was answered twice");
    let mut per_task: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (t, f) in answered {
        per_task.entry(t).or_default().push(*f);
    }
    for k in 0..tasks {
        let t = format!("t{k}");
        let rec = rt.block_on(a.get(&id(&t))).unwrap().unwrap();
        assert_eq!(rec.state, State::Succeeded, "{t}: {rec:?}");
        let events = rt
            .block_on(a.events(Some(&id(&t)), None, 10_000))
            .unwrap()
            .items;
        let claimed: BTreeSet<u64> = events
            .iter()
            .filter(|e| e.kind == EventKind::Claimed)
            .filter_map(|e| e.fence)
            .collect();
        for f in per_task.get(t.as_str()).into_iter().flatten() {
            assert!(
                claimed.contains(f),
                "{t}: answered fence {f} is not in the log {claimed:?}"
            );
        }
        assert!(!claimed.is_empty(), "{t} was never claimed");
    }
    // The counts kept with the commits (clients killed mid-commit
    // included) equal a count of the records.
    let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
    assert_eq!(drift.unwrap(), None, "the kept counts");
}

#[test]
fn eight_processes_and_two_hosts_race_one_winner_per_task() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    for (schema, procs, threads) in [("eight", 8, 1), ("hosts", 2, 4)] {
        let url = pg.url(schema);
        let tasks = 60;
        let mut children: Vec<Child> = (0..procs)
            .map(|p| spawn(&url, p, tasks, threads, (600_000, 0)))
            .collect();
        let seen = Seen::default();
        let readers: Vec<_> = children.iter_mut().map(|c| collect(c, &seen)).collect();
        let answered = finish(&mut children, readers, false);
        // Long leases, every grant completed: exactly one grant per task.
        let won: BTreeSet<&str> = answered.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(answered.len(), tasks, "{schema}: {answered:?}");
        assert_eq!(won.len(), tasks, "{schema}");
        check(&url, tasks, &answered);
    }
}

#[test]
fn clients_killed_mid_storm_leave_no_double_grant() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("killed");
    let tasks = 120;
    // Each grant held 50 ms, so a kill lands inside one almost always.
    let mut children: Vec<Child> = (0..8)
        .map(|p| spawn(&url, p, tasks, 1, (2000, 50)))
        .collect();
    let seen = Seen::default();
    let readers: Vec<_> = children.iter_mut().map(|c| collect(c, &seen)).collect();
    // Kill three of them at different points of the storm.
    for (victim, at) in [(1usize, tasks / 5), (4, tasks / 3), (6, tasks / 2)] {
        wait_for(&seen, at);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(children[victim].id()).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    let answered = finish(&mut children, readers, true);
    // The survivors finish everything, the killed ones' grants included
    // once their leases ran out; every answered grant is in the log.
    check(&url, tasks, &answered);
    // Grants of one task: each later one has a higher fence.
    let mut per_task: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (t, f) in &answered {
        per_task.entry(t.as_str()).or_default().push(*f);
    }
    for (t, f) in &per_task {
        let mut sorted = f.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), f.len(), "{t}: a fence answered twice {f:?}");
    }
    // A killed client's grant ran out and went to a survivor, with a higher fence.
    let regranted = per_task.values().filter(|f| f.len() > 1).count();
    assert!(
        regranted >= 1,
        "no kill landed inside a grant: {per_task:?}"
    );
    eprintln!(
        "{} grants answered, {regranted} tasks granted again after a kill",
        answered.len()
    );
}

#[test]
fn a_server_crash_mid_storm_loses_no_answered_grant_and_reuses_no_fence() {
    let Some(mut pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = format!(
        "{}&connect_timeout=1s&statement_timeout=2s",
        pg.url("crashed")
    );
    let tasks = 300;
    let mut children: Vec<Child> = (0..4)
        .map(|p| spawn(&url, p, tasks, 2, (600_000, 0)))
        .collect();
    let seen = Seen::default();
    let readers: Vec<_> = children.iter_mut().map(|c| collect(c, &seen)).collect();
    wait_for(&seen, tasks / 3);
    pg.crash();
    let at_crash = seen.load(std::sync::atomic::Ordering::SeqCst);
    assert!(at_crash < tasks, "the storm ended before the crash");
    std::thread::sleep(Duration::from_millis(500));
    pg.restart();
    let answered = finish(&mut children, readers, false);
    check(&url, tasks, &answered);
    let before: u64 = pg
        .sql("SELECT last_value FROM crashed.fence_seq")
        .parse()
        .unwrap();
    assert!(answered.iter().all(|(_, f)| *f <= before));
    eprintln!(
        "{} grants answered across the crash ({at_crash} before it)",
        answered.len()
    );
}

#[test]
fn a_server_crash_mid_batches_loses_no_answered_grant_and_reuses_no_fence() {
    let Some(mut pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = format!(
        "{}&connect_timeout=1s&statement_timeout=2s",
        pg.url("batched")
    );
    let tasks = 400;
    {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store = rt.block_on(PostgresStore::open_url(&url)).unwrap();
        let a = Authority::new(store, Arc::new(SystemClock));
        let queue = Id::parse("queue", "storm").unwrap();
        let nodes = (0..tasks)
            .map(|k| {
                let task = id(&format!("t{k}"));
                let spec =
                    baton_core::graph::NodeSpec::new(&task, Some(queue.clone()), 0, []).unwrap();
                baton_core::graph::NewNode { task, spec }
            })
            .collect();
        rt.block_on(a.add_graph(nodes)).unwrap().unwrap();
    }
    // Batches of 8, 4 processes of 2 workers; a lease of 3 s, so a batch
    // whose answer the crash lost is granted again once it runs out.
    BATCH.with(|b| b.set(8));
    let mut children: Vec<Child> = (0..4)
        .map(|p| spawn(&url, p, tasks, 2, (3_000, 0)))
        .collect();
    let seen = Seen::default();
    let readers: Vec<_> = children.iter_mut().map(|c| collect(c, &seen)).collect();
    wait_for(&seen, tasks / 3);
    pg.crash();
    let at_crash = seen.load(std::sync::atomic::Ordering::SeqCst);
    assert!(at_crash < tasks, "the storm ended before the crash");
    std::thread::sleep(Duration::from_millis(500));
    pg.restart();
    let answered = finish(&mut children, readers, false);
    check(&url, tasks, &answered);
    eprintln!(
        "{} grants answered in batches across the crash ({at_crash} before it)",
        answered.len()
    );
}
