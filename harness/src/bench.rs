//! `baton bench`: the claim-contention harness. W workers race for T tasks
//! (in one process, or as W OS processes) and complete what they win; the
//! harness then checks that every task was granted exactly once and that no
//! write under a wrong fence was accepted, and reports throughput, commits
//! and claim latency.

use crate::{BenchArgs, BenchWorkerArgs, Order, Report};
use baton_check::history::now_us;
use baton_check::{Limits, Line, Observed, Req};
use baton_core::call::Status;
use baton_core::graph::{NewNode, NodeSpec};
use baton_core::{Error, Id, Refusal, Reply, Request};
use baton_open::{DynAuthority, authority_for};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The worker counts of `--series`.
pub const SERIES: [usize; 6] = [1, 2, 4, 8, 16, 64];

/// What one worker did.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    pub attempts: u64,
    /// (task index, fence) for every grant this worker got.
    pub grants: Vec<(usize, u64)>,
    /// Claim latencies in microseconds.
    pub latencies_us: Vec<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
    pub commits: Option<u64>,
    /// Every grant and report, for the checker: recorded compactly while
    /// the run is timed, made into a history's lines after it.
    #[serde(default)]
    pub history: Vec<Logged>,
    /// When the worker's last operation ended (microseconds on the host's
    /// monotonic clock): a run of processes ends there, not when the last
    /// process has written its report.
    #[serde(default)]
    pub finished_us: Option<u64>,
}

/// One operation as a worker records it while the run is timed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Logged {
    client: u32,
    t: (u64, u64),
    /// The task's index in the run.
    task: usize,
    req: Req,
    answer: Answered,
}

/// An answer as recorded: the usual one (a record whose lease, if any, is
/// the asker's) without an allocation, any other in full.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Answered {
    Own {
        ack: bool,
        state: baton_core::State,
        /// The lease's fence, and whether the store marked it expired.
        lease: Option<(u64, bool)>,
    },
    Other(Observed),
}

impl Answered {
    /// What `owner` was answered.
    fn of(owner: &Id, r: Result<Reply, Error>) -> Answered {
        match &r {
            Ok(Reply::Committed(rec)) | Ok(Reply::Acknowledged(rec))
                if rec.checkpoints.is_empty()
                    && rec.lease.as_ref().is_none_or(|l| &l.owner == owner) =>
            {
                Answered::Own {
                    ack: matches!(r, Ok(Reply::Acknowledged(_))),
                    state: rec.state,
                    lease: rec.lease.as_ref().map(|l| (l.fence, l.expired)),
                }
            }
            _ => Answered::Other(Observed::of_reply(r)),
        }
    }
}

/// The owner id of client `client` (a worker, or the stale writer).
fn owner_of(client: u32) -> String {
    if client == INTRUDER {
        "bench-stale-writer".to_owned()
    } else {
        format!("bench-worker-{client}")
    }
}

/// The run's history: each client's operations numbered in the order it
/// recorded them.
fn lines(logged: Vec<Logged>, prefix: &str) -> Vec<Line> {
    let mut next: BTreeMap<u32, u64> = BTreeMap::new();
    let mut out = Vec::with_capacity(logged.len() * 2);
    for op in logged {
        let n = next.entry(op.client).or_default();
        let owner = owner_of(op.client);
        let answer = match op.answer {
            Answered::Own { ack, state, lease } => Observed::Done {
                ack,
                state,
                lease: lease.map(|(fence, expired)| baton_check::history::Seen {
                    owner: owner.clone(),
                    fence,
                    expired,
                }),
                steps: Vec::new(),
            },
            Answered::Other(o) => o,
        };
        out.push(Line::Invoke {
            client: op.client,
            n: *n,
            t: op.t.0,
            task: task_name(prefix, op.task),
            owner,
            req: op.req,
        });
        out.push(Line::Return {
            client: op.client,
            n: *n,
            t: op.t.1,
            answer,
        });
        *n += 1;
    }
    out
}

impl WorkerReport {
    /// Records one operation of client `client` on task `task` (its index)
    /// for the checker.
    fn log(&mut self, client: u32, t: (u64, u64), task: usize, req: Req, answer: Answered) {
        self.history.push(Logged {
            client,
            t,
            task,
            req,
            answer,
        });
    }
}

/// A grant as the checker sees it: a claim (with the bench's TTL) that
/// took effect somewhere between `next`'s call and its answer.
fn claim_req() -> Req {
    Req::Claim {
        ttl_ms: TTL_MS,
        lock_delay_ms: 0,
    }
}

/// The lease every bench grant asks for: far longer than any run.
const TTL_MS: u64 = 600_000;

/// One run's result: the fields scripts read.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub store: String,
    pub workers: usize,
    /// Workers per process (`--connections`); 1 in one process.
    pub connections: usize,
    pub tasks: usize,
    pub processes: bool,
    pub order: &'static str,
    /// Grants a `next` could take at once (`--count`).
    pub count: u32,
    pub attempts: u64,
    pub grants: u64,
    pub commits: Option<u64>,
    pub errors: u64,
    pub seconds: f64,
    pub attempts_per_s: f64,
    pub grants_per_s: f64,
    pub commits_per_s: Option<f64>,
    pub grants_per_commit: Option<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub double_grants: u64,
    pub stale_accepted: u64,
    pub ungranted: u64,
    /// Grants and reports the history checker read (with the stale
    /// writer's tries), and what it found wrong (none, or the run failed).
    pub checked_ops: usize,
    pub history_violations: usize,
    /// A bare 4 KiB append + `fdatasync` loop beside the store's file, in
    /// the same run (the mean of one just before and one just after): the
    /// disk's ceiling for commits that each sync once. `None` off disk.
    pub ceiling_syncs_per_s: Option<f64>,
    /// `commits_per_s` as a share of that ceiling.
    pub commits_vs_ceiling: Option<f64>,
}

/// The directory a file-backed store lives in (where the ceiling loop runs).
fn store_dir(store: &str) -> Option<std::path::PathBuf> {
    let path = match baton_open::StoreUrl::parse(store).ok()? {
        baton_open::StoreUrl::Sqlite { path, .. } | baton_open::StoreUrl::Sled { path, .. } => path,
        _ => return None,
    };
    let parent = std::path::Path::new(&path).parent()?.to_path_buf();
    Some(if parent.as_os_str().is_empty() {
        std::path::PathBuf::from(".")
    } else {
        parent
    })
}

/// Appends 4 KiB and syncs it (`fdatasync`), again and again, for about
/// `budget` (at most 2000 times), in a temporary file in `dir`: how many
/// synced appends per second this disk does right now.
pub fn sync_ceiling(dir: &std::path::Path, budget: Duration) -> Option<f64> {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new_in(dir).ok()?;
    let block = [0x5au8; 4096];
    let start = Instant::now();
    let mut n = 0u32;
    while n < 2000 && start.elapsed() < budget {
        f.write_all(&block).ok()?;
        f.as_file().sync_data().ok()?;
        n += 1;
    }
    Some(f64::from(n) / start.elapsed().as_secs_f64().max(1e-9))
}

fn task_name(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i:07}")
}

fn id(s: &str) -> Result<Id, Error> {
    Id::parse("id", s)
}

/// The task indices worker `w` tries, in its order.
pub fn order_for(order: Order, w: usize, workers: usize, tasks: usize) -> Vec<usize> {
    match order {
        Order::Same => (0..tasks).collect(),
        Order::Disjoint => (w..tasks).step_by(workers.max(1)).collect(),
        // Whatever `next` hands out.
        Order::Next => Vec::new(),
        Order::Shuffled => {
            let mut v: Vec<usize> = (0..tasks).collect();
            let mut x: u64 =
                0x2545_F491_4F6C_DD1D ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for i in (1..v.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let j = usize::try_from(x % (i as u64 + 1)).unwrap_or(0);
                v.swap(i, j);
            }
            v
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    a: Arc<DynAuthority>,
    w: usize,
    workers: usize,
    tasks: usize,
    order: Order,
    count: u32,
    prefix: String,
    bar: ProgressBar,
) -> WorkerReport {
    let mut rep = WorkerReport::default();
    let Ok(owner) = id(&format!("bench-worker-{w}")) else {
        return rep;
    };
    let client = u32::try_from(w).unwrap_or(u32::MAX);
    if order == Order::Next {
        if count > 1 {
            take_batches(&a, client, &owner, &prefix, count, &bar, &mut rep).await;
        } else {
            take_next(&a, client, &owner, &prefix, &bar, &mut rep).await;
        }
        rep.finished_us = Some(now_us());
        return rep;
    }
    for i in order_for(order, w, workers, tasks) {
        let Ok(task) = id(&task_name(&prefix, i)) else {
            continue;
        };
        let t0 = Instant::now();
        let at = now_us();
        let r = a.claim(&task, &owner, Some(TTL_MS)).await;
        let done = now_us();
        rep.latencies_us
            .push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
        rep.attempts += 1;
        bar.inc(1);
        let fence = match &r {
            Ok(Reply::Committed(rec)) | Ok(Reply::Acknowledged(rec)) => rec.current_fence(),
            _ => None,
        };
        if let Err(e) = &r {
            note(&mut rep, e.to_string());
        }
        rep.log(client, (at, done), i, claim_req(), Answered::of(&owner, r));
        let Some(fence) = fence else {
            continue;
        };
        rep.grants.push((i, fence));
        complete(&a, client, (&task, i), &owner, fence, &mut rep).await;
    }
    rep.finished_us = Some(now_us());
    rep
}

/// Completes a grant, recording it; anything but a commit is an error.
async fn complete(
    a: &DynAuthority,
    client: u32,
    (task, i): (&Id, usize),
    owner: &Id,
    fence: u64,
    rep: &mut WorkerReport,
) {
    let at = now_us();
    let r = a.complete(task, owner, fence).await;
    let done = now_us();
    match &r {
        Ok(Reply::Committed(_)) => {}
        Ok(other) => note(
            rep,
            format!("the winner could not complete {task}: {other:?}"),
        ),
        Err(e) => note(rep, e.to_string()),
    }
    rep.log(
        client,
        (at, done),
        i,
        Req::Complete { fence },
        Answered::of(owner, r),
    );
}

/// The queue `--order next` adds its tasks to.
fn queue_name(prefix: &str) -> Result<Id, Error> {
    Id::parse("queue", &format!("{prefix}-q"))
}

/// Adds the run's tasks, all ready, for `--order next`.
async fn add_ready(a: &DynAuthority, prefix: &str, tasks: usize) -> Result<(), Error> {
    let queue = queue_name(prefix)?;
    let nodes = (0..tasks)
        .map(|i| {
            let task = id(&task_name(prefix, i))?;
            let spec = NodeSpec::new(&task, Some(queue.clone()), 0, Vec::new())?;
            Ok(NewNode { task, spec })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    for chunk in nodes.chunks(2_000) {
        if let Err((task, r)) = a.add_graph(chunk.to_vec()).await? {
            return Err(Error::unavailable(format!(
                "bench: adding {task} was refused: {r}"
            )));
        }
    }
    Ok(())
}

/// The index in its run of a task `next` granted.
fn index_of(task: &Id) -> Option<usize> {
    task.as_str()
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
}

/// Records a grant `next` made (asked and answered at `t`): its task, the
/// task's index in the run and the fence, or `None` (an error noted) for
/// a task not of this run.
fn granted(
    rep: &mut WorkerReport,
    client: u32,
    t: (u64, u64),
    owner: &Id,
    rec: baton_core::TaskRecord,
) -> Option<(Id, usize, u64)> {
    let fence = rec.current_fence().unwrap_or(0);
    let task = rec.task.clone();
    let Some(i) = index_of(&task) else {
        note(rep, format!("next granted a task not of this run: {task}"));
        return None;
    };
    rep.log(
        client,
        t,
        i,
        claim_req(),
        Answered::of(owner, Ok(Reply::Committed(rec))),
    );
    rep.grants.push((i, fence));
    Some((task, i, fence))
}

/// `--order next`: `next` and complete until the queue is drained.
async fn take_next(
    a: &DynAuthority,
    client: u32,
    owner: &Id,
    prefix: &str,
    bar: &ProgressBar,
    rep: &mut WorkerReport,
) {
    let Ok(queue) = queue_name(prefix) else {
        return;
    };
    loop {
        let t0 = Instant::now();
        let at = now_us();
        let r = a
            .next(owner, std::slice::from_ref(&queue), Some(TTL_MS), None)
            .await;
        let done = now_us();
        rep.latencies_us
            .push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
        rep.attempts += 1;
        bar.inc(1);
        match r {
            Ok(Reply::Committed(rec)) => {
                if let Some((task, i, fence)) = granted(rep, client, (at, done), owner, rec) {
                    complete(a, client, (&task, i), owner, fence, rep).await;
                }
            }
            Ok(Reply::Refused(Refusal::Drained { .. })) => return,
            // Another worker holds what is left: it will end soon.
            Ok(Reply::Refused(Refusal::NoneReady { .. })) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(other) => {
                note(rep, format!("next answered {other:?}"));
                return;
            }
            Err(e) => {
                note(rep, e.to_string());
                if rep.errors > 100 {
                    return;
                }
            }
        }
    }
}

/// `--order next --count N`: up to N grants a `next`, all completed in
/// one `report`, until the queue is drained.
async fn take_batches(
    a: &DynAuthority,
    client: u32,
    owner: &Id,
    prefix: &str,
    count: u32,
    bar: &ProgressBar,
    rep: &mut WorkerReport,
) {
    let Ok(queue) = queue_name(prefix) else {
        return;
    };
    let taker = baton_core::Taker::Owner {
        owner: owner.clone(),
        ttl_ms: Some(TTL_MS),
        lock_delay_ms: None,
    };
    loop {
        let t0 = Instant::now();
        let at = now_us();
        let r = a
            .next_many_for(taker.clone(), std::slice::from_ref(&queue), count)
            .await;
        let done = now_us();
        rep.latencies_us
            .push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
        rep.attempts += 1;
        let replies = match r {
            Ok(replies) => replies,
            Err(e) => {
                note(rep, e.to_string());
                if rep.errors > 100 {
                    return;
                }
                continue;
            }
        };
        let mut reports = Vec::with_capacity(replies.len());
        for reply in replies {
            match reply {
                Reply::Committed(rec) => {
                    bar.inc(1);
                    reports.extend(granted(rep, client, (at, done), owner, rec));
                }
                Reply::Refused(Refusal::Drained { .. }) => return,
                Reply::Refused(Refusal::NoneReady { .. }) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                other => {
                    note(rep, format!("next answered {other:?}"));
                    return;
                }
            }
        }
        if reports.is_empty() {
            continue;
        }
        let asked = reports
            .iter()
            .map(|(task, _, fence)| {
                (
                    task.clone(),
                    Request::Complete {
                        owner: owner.clone(),
                        fence: *fence,
                    },
                )
            })
            .collect();
        let at = now_us();
        let r = a.report_many(asked).await;
        let done = now_us();
        match r {
            Ok(answers) if answers.len() == reports.len() => {
                for ((task, i, fence), answer) in reports.iter().zip(answers) {
                    if !matches!(answer, Reply::Committed(_)) {
                        note(
                            rep,
                            format!("the winner could not complete {task}: {answer:?}"),
                        );
                    }
                    let answer = Answered::of(owner, Ok(answer));
                    rep.log(
                        client,
                        (at, done),
                        *i,
                        Req::Complete { fence: *fence },
                        answer,
                    );
                }
            }
            Ok(answers) => note(
                rep,
                format!(
                    "report answered {} of {} reports",
                    answers.len(),
                    reports.len()
                ),
            ),
            Err(e) => {
                note(rep, e.to_string());
                for (_, i, fence) in &reports {
                    rep.log(
                        client,
                        (at, done),
                        *i,
                        Req::Complete { fence: *fence },
                        Answered::Other(Observed::of_reply(Err(e.clone()))),
                    );
                }
            }
        }
    }
}

fn note(rep: &mut WorkerReport, e: String) {
    rep.errors += 1;
    rep.first_error.get_or_insert(e);
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)] as f64 / 1000.0
}

fn bar(total: u64, label: String) -> ProgressBar {
    let b = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {per_sec}") {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_prefix(label);
    b
}

/// Runs one configuration on one store.
pub async fn run_one(store: &str, args: &BenchArgs, workers: usize) -> Result<BenchResult, Error> {
    // Tasks named for this run, so a store can be benchmarked again and again.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("bench-{}-{nanos}-w{workers}", std::process::id());
    let expected = match args.order {
        Order::Disjoint | Order::Next => args.tasks as u64,
        _ => (args.tasks * workers * args.connections) as u64,
    };
    let progress = bar(expected, format!("{store} x{workers}"));
    let a = Arc::new(authority_for(store).await?);
    if args.processes && !a.store().capabilities().multi_process {
        return Err(Error::invalid(
            "store",
            "--processes needs a store several processes can open at once (sqlite:, etcd://, postgres://, or any store through a server: http://)",
        ));
    }
    let dir = store_dir(store);
    let ceiling = || {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            dir.and_then(|d| sync_ceiling(&d, Duration::from_millis(300)))
        })
    };
    let ceiling_before = ceiling().await.ok().flatten();
    if args.order == Order::Next {
        add_ready(&a, &prefix, args.tasks).await?;
    }
    let (reports, seconds) = if args.processes {
        run_processes(store, args, workers, &prefix, &progress).await?
    } else {
        let before = a.meter().and_then(|m| m.commits());
        let start = Instant::now();
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                tokio::spawn(worker(
                    a.clone(),
                    w,
                    workers,
                    args.tasks,
                    args.order,
                    args.count,
                    prefix.clone(),
                    progress.clone(),
                ))
            })
            .collect();
        let mut reports = Vec::new();
        for h in handles {
            reports.push(
                h.await
                    .map_err(|e| Error::unavailable(format!("bench worker failed: {e}")))?,
            );
        }
        let seconds = start.elapsed().as_secs_f64();
        let after = a.meter().and_then(|m| m.commits());
        if let (Some(b), Some(a), Some(first)) = (before, after, reports.first_mut()) {
            first.commits = Some(a - b);
        }
        (reports, seconds)
    };
    progress.finish_and_clear();
    let ceiling_after = ceiling().await.ok().flatten();
    let ceiling_syncs_per_s = match (ceiling_before, ceiling_after) {
        (Some(a), Some(b)) => Some((a + b) / 2.0),
        (a, b) => a.or(b),
    };
    let (double_grants, stale_accepted, ungranted, intruder) =
        verify(&a, args.tasks, &prefix, &reports).await?;
    let mut reports = reports;
    let limits = Limits::from(a.store().capabilities());
    let checked = check_history(&mut reports, intruder, &prefix, limits)?;
    if !checked.ok() {
        eprintln!("bench: the checker found the history wrong:\n{checked}");
    }
    let attempts: u64 = reports.iter().map(|r| r.attempts).sum();
    let grants: u64 = reports.iter().map(|r| r.grants.len() as u64).sum();
    let errors: u64 = reports.iter().map(|r| r.errors).sum();
    if let Some(e) = reports.iter().find_map(|r| r.first_error.clone()) {
        eprintln!("bench: {errors} operations failed; the first: {e}");
    }
    let commits: Option<u64> = reports
        .iter()
        .map(|r| r.commits)
        .try_fold(0u64, |acc, c| c.map(|c| acc + c))
        .filter(|_| !reports.is_empty());
    let commits = if args.processes {
        commits
    } else {
        reports.first().and_then(|r| r.commits)
    };
    let mut lat: Vec<u64> = reports
        .iter()
        .flat_map(|r| r.latencies_us.iter().copied())
        .collect();
    lat.sort_unstable();
    let secs = seconds.max(1e-9);
    Ok(BenchResult {
        store: store.to_owned(),
        workers,
        connections: args.connections,
        tasks: args.tasks,
        processes: args.processes,
        order: args.order.as_str(),
        count: args.count,
        attempts,
        grants,
        commits,
        errors,
        seconds,
        attempts_per_s: attempts as f64 / secs,
        grants_per_s: grants as f64 / secs,
        commits_per_s: commits.map(|c| c as f64 / secs),
        grants_per_commit: commits.filter(|&c| c > 0).map(|c| grants as f64 / c as f64),
        p50_ms: percentile(&lat, 50.0),
        p99_ms: percentile(&lat, 99.0),
        max_ms: lat.last().map_or(0.0, |&m| m as f64 / 1000.0),
        double_grants,
        stale_accepted,
        ungranted,
        checked_ops: checked.ops,
        history_violations: checked.violations.len(),
        ceiling_syncs_per_s,
        commits_vs_ceiling: match (commits.map(|c| c as f64 / secs), ceiling_syncs_per_s) {
            (Some(c), Some(ceil)) if ceil > 0.0 => Some(c / ceil),
            _ => None,
        },
    })
}

/// Every task granted exactly once; no write under a wrong fence accepted
/// (each try recorded for the checker as the client [`INTRUDER`]).
async fn verify(
    a: &DynAuthority,
    tasks: usize,
    prefix: &str,
    reports: &[WorkerReport],
) -> Result<(u64, u64, u64, Vec<Logged>), Error> {
    use futures_util::stream::{self, StreamExt, TryStreamExt};
    let mut per_task: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for r in reports {
        for (i, f) in &r.grants {
            per_task.entry(*i).or_default().push(*f);
        }
    }
    let double = per_task.values().filter(|v| v.len() > 1).count() as u64;
    let ungranted = (tasks - per_task.len().min(tasks)) as u64;
    let intruder = id("bench-stale-writer")?;
    let intruder = &intruder;
    let tried: Vec<(u64, WorkerReport)> = stream::iter(per_task.iter())
        .map(|(i, fences)| async move {
            let mut stale = 0;
            let mut log = WorkerReport::default();
            let task = id(&task_name(prefix, *i))?;
            let holder = a.holder(&task).await?.ok().flatten();
            if holder.map(|h| h.grant.fence) != fences.first().copied() {
                stale += 1; // the stored grant is not the one its winner was told
            }
            for wrong in [fences[0].saturating_sub(1).max(1), fences[0] + 1_000_000] {
                let at = now_us();
                let r = a.complete(&task, intruder, wrong).await?;
                let done = now_us();
                if let Reply::Committed(_) | Reply::Acknowledged(_) = r {
                    stale += 1;
                }
                log.log(
                    INTRUDER,
                    (at, done),
                    *i,
                    Req::Complete { fence: wrong },
                    Answered::of(intruder, Ok(r)),
                );
            }
            Ok::<_, Error>((stale, log))
        })
        .buffer_unordered(crate::next::VERIFY_AT_ONCE)
        .try_collect()
        .await?;
    let stale = tried.iter().map(|(s, _)| s).sum();
    let logged = tried.into_iter().flat_map(|(_, log)| log.history).collect();
    Ok((double, stale, ungranted, logged))
}

/// The client number the checker knows the stale writer by.
const INTRUDER: u32 = u32::MAX;

/// Checks every recorded operation of the run as one history: the
/// grants' answers, the completions and the stale writer's tries.
fn check_history(
    reports: &mut [WorkerReport],
    intruder: Vec<Logged>,
    prefix: &str,
    limits: Limits,
) -> Result<baton_check::Report, Error> {
    let mut logged: Vec<Logged> = reports
        .iter_mut()
        .flat_map(|r| std::mem::take(&mut r.history))
        .collect();
    logged.extend(intruder);
    let ops = baton_check::ops(lines(logged, prefix))
        .map_err(|e| Error::unavailable(format!("bench: the history does not pair up: {e}")))?;
    Ok(baton_check::check(&ops, limits))
}

async fn run_processes(
    store: &str,
    args: &BenchArgs,
    workers: usize,
    prefix: &str,
    progress: &ProgressBar,
) -> Result<(Vec<WorkerReport>, f64), Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::unavailable(format!("cannot find the baton binary: {e}")))?;
    let dir = tempfile::tempdir()
        .map_err(|e| Error::unavailable(format!("no temporary directory: {e}")))?;
    let go = dir.path().join("go");
    let mut children = Vec::new();
    let per = args.connections.max(1);
    for w in 0..workers {
        let mut cmd = tokio::process::Command::new(&exe);
        // The token goes to each worker in its environment, never on a
        // command line that `ps` shows.
        if let Some(t) = baton_open::token() {
            cmd.env("BATON_TOKEN", t);
        }
        let child = cmd
            .arg("--store")
            .arg(store)
            .args([
                "bench-worker",
                "--worker",
                &(w * per).to_string(),
                "--workers",
                &(workers * per).to_string(),
                "--connections",
                &per.to_string(),
            ])
            .args([
                "--tasks",
                &args.tasks.to_string(),
                "--order",
                args.order.as_str(),
                "--prefix",
                prefix,
                "--count",
                &args.count.to_string(),
            ])
            .arg("--go")
            .arg(&go)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| Error::unavailable(format!("cannot start a bench worker: {e}")))?;
        children.push(child);
    }
    // Let every process open the store before the race starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(&go, b"")
        .map_err(|e| Error::unavailable(format!("cannot signal the workers: {e}")))?;
    let start = Instant::now();
    let go_us = now_us();
    let mut reports = Vec::new();
    for child in children {
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| Error::unavailable(format!("a bench worker failed: {e}")))?;
        let rep: WorkerReport = serde_json::from_slice(&out.stdout).map_err(|e| {
            Error::unavailable(format!(
                "a bench worker reported nothing usable ({e}); exit {:?}",
                out.status.code()
            ))
        })?;
        progress.inc(rep.attempts);
        reports.push(rep);
    }
    // From the start to the last worker's last operation (each process
    // writes its report after it); the wall clock when one did not say.
    let last = reports
        .iter()
        .map(|r| r.finished_us)
        .collect::<Option<Vec<_>>>();
    let seconds = match last.and_then(|l| l.into_iter().max()) {
        Some(end) if end > go_us => (end - go_us) as f64 / 1e6,
        _ => start.elapsed().as_secs_f64(),
    };
    Ok((reports, seconds))
}

/// The hidden `bench-worker` subcommand: one worker, its report as JSON.
pub async fn run_worker(store: &str, w: &BenchWorkerArgs) -> Result<Report, Error> {
    let a = Arc::new(authority_for(store).await?);
    for _ in 0..60_000 {
        if w.go.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let before = a.meter().and_then(|m| m.commits());
    let handles: Vec<_> = (0..w.connections.max(1))
        .map(|c| {
            tokio::spawn(worker(
                a.clone(),
                w.worker + c,
                w.workers,
                w.tasks,
                w.order,
                w.count,
                w.prefix.clone(),
                ProgressBar::hidden(),
            ))
        })
        .collect();
    let mut rep = WorkerReport::default();
    for h in handles {
        let one = h
            .await
            .map_err(|e| Error::unavailable(format!("bench worker failed: {e}")))?;
        rep.attempts += one.attempts;
        rep.grants.extend(one.grants);
        rep.latencies_us.extend(one.latencies_us);
        rep.errors += one.errors;
        rep.history.extend(one.history);
        rep.finished_us = rep.finished_us.max(one.finished_us);
        if rep.first_error.is_none() {
            rep.first_error = one.first_error;
        }
    }
    rep.commits = match (before, a.meter().and_then(|m| m.commits())) {
        (Some(b), Some(after)) => Some(after - b),
        _ => None,
    };
    Ok(Report::one(serde_json::to_value(&rep).unwrap_or_default()))
}

/// The `bench` subcommand.
/// `store`: a store named with `--store` on the command line; without one
/// the harness writes into a temporary SQLite store, never into the one
/// `BATON_STORE` names. Either way it says which on standard error.
/// `human`: the results as a markdown table, not JSON.
pub async fn run(store: Option<&str>, args: &BenchArgs, human: bool) -> Result<Report, Error> {
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::unavailable(format!("bench: no temporary directory: {e}")))?;
    let store = match store {
        Some(s) => {
            say(&format!("bench: writing into the store given, {s}"));
            s.to_owned()
        }
        None => {
            let s = format!("sqlite:{}", tmp.path().join("bench.db").display());
            say(&format!(
                "bench: writing into a temporary store, {s} (removed afterwards; --store names another)"
            ));
            s
        }
    };
    let mut stores = vec![store];
    stores.extend(args.compare.iter().cloned());
    for s in &stores {
        baton_open::StoreUrl::parse(s)?;
    }
    let counts: Vec<usize> = if args.series {
        SERIES.to_vec()
    } else {
        vec![args.workers]
    };
    if counts.contains(&0) || args.tasks == 0 {
        return Err(Error::invalid(
            "workers",
            "workers and tasks must be at least 1",
        ));
    }
    if args.count > 1 && !args.next && args.order != Order::Next {
        return Err(Error::invalid(
            "count",
            "takes grants by `next`: give it with --next or --order next",
        ));
    }
    if args.connections == 0 || args.connections > 64 {
        return Err(Error::invalid("connections", "must be from 1 to 64"));
    }
    if args.next {
        let mut results = Vec::new();
        for s in &stores {
            results.push(crate::next::run_one(s, args).await?);
        }
        let ok = results
            .iter()
            .all(|r| r.double_grants == 0 && r.ungranted == 0 && r.errors == 0);
        let status = if ok { Status::Ok } else { Status::Refused };
        let items = results.iter().map(|r| json!(r)).collect();
        return Ok(Report::list(items, status));
    }
    let mut results = Vec::new();
    for s in &stores {
        for &w in &counts {
            results.push(run_one(s, args, w).await?);
        }
    }
    let ok = results
        .iter()
        .all(|r| r.double_grants == 0 && r.stale_accepted == 0 && r.ungranted == 0);
    if args.series {
        write_series(&args.out, &results)?;
    }
    let status = if ok { Status::Ok } else { Status::Refused };
    if human {
        return Ok(Report::text(markdown(&results), status));
    }
    let items = results.iter().map(|r| json!(r)).collect();
    Ok(Report::list(items, status))
}

/// A line on standard error (which way the harness writes, and where);
/// one that cannot be written is dropped.
fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

/// The results as a markdown table, with ratios to the first store's row of the same size.
pub fn markdown(results: &[BenchResult]) -> String {
    let mut s = String::from(
        "| store | workers | procs | order | attempts/s | grants/s | commits/s | ceiling syncs/s | commits/ceiling | grants/commit | p50 ms | p99 ms | max ms | max/p99 | grants/s vs first store | double | stale |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let base = results
            .iter()
            .find(|b| b.workers == r.workers)
            .map_or(r.grants_per_s, |b| b.grants_per_s);
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2}x | {} | {} |\n",
            r.store,
            r.workers,
            if r.processes { "yes" } else { "no" },
            r.order,
            r.attempts_per_s,
            r.grants_per_s,
            opt(r.commits_per_s, 0),
            opt(r.ceiling_syncs_per_s, 0),
            opt(r.commits_vs_ceiling, 2),
            opt(r.grants_per_commit, 1),
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            if r.p99_ms > 0.0 { r.max_ms / r.p99_ms } else { 0.0 },
            r.grants_per_s / base.max(1e-9),
            r.double_grants,
            r.stale_accepted,
        ));
    }
    s
}

/// Writes bench.md and bench.svg (grants/s and p99 by workers, one line per store).
fn write_series(dir: &std::path::Path, results: &[BenchResult]) -> Result<(), Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::invalid("out", format!("cannot create {}: {e}", dir.display())))?;
    std::fs::write(dir.join("bench.md"), markdown(results))
        .map_err(|e| Error::invalid("out", format!("cannot write bench.md: {e}")))?;
    std::fs::write(dir.join("bench.svg"), svg(results))
        .map_err(|e| Error::invalid("out", format!("cannot write bench.svg: {e}")))?;
    Ok(())
}

/// Two small line charts side by side: grants/s and p99 ms against workers (log scale).
fn svg(results: &[BenchResult]) -> String {
    const COLOURS: [&str; 6] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
    ];
    let mut stores: Vec<&str> = Vec::new();
    for r in results {
        if !stores.contains(&r.store.as_str()) {
            stores.push(&r.store);
        }
    }
    let (w, h, pad) = (420.0, 300.0, 50.0);
    let x_of = |workers: usize| pad + (workers as f64).log2() / 6.0 * (w - 2.0 * pad);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        2.0 * w,
        h + 20.0 * stores.len() as f64 + 10.0
    );
    for (panel, (title, pick)) in [("grants/s", 0usize), ("p99 claim latency (ms)", 1)]
        .into_iter()
        .enumerate()
    {
        let value = |r: &BenchResult| if pick == 0 { r.grants_per_s } else { r.p99_ms };
        let max = results.iter().map(value).fold(0.0_f64, f64::max).max(1e-9);
        let ox = panel as f64 * w;
        out.push_str(&format!(
            "<text x=\"{}\" y=\"20\">{title}</text>\n",
            ox + pad
        ));
        out.push_str(&format!(
            "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/><line x1=\"{0}\" y1=\"{3}\" x2=\"{0}\" y2=\"{1}\" stroke=\"black\"/>\n",
            ox + pad,
            h - pad,
            ox + w - pad,
            pad
        ));
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\">{max:.1}</text>\n",
            ox + 2.0,
            pad + 4.0
        ));
        for n in SERIES {
            out.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{}\">{n}</text>\n",
                ox + x_of(n) - 4.0,
                h - pad + 15.0
            ));
        }
        for (si, s) in stores.iter().enumerate() {
            let pts: Vec<String> = results
                .iter()
                .filter(|r| r.store == *s)
                .map(|r| {
                    format!(
                        "{:.1},{:.1}",
                        ox + x_of(r.workers),
                        h - pad - value(r) / max * (h - 2.0 * pad)
                    )
                })
                .collect();
            let c = COLOURS[si % COLOURS.len()];
            out.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
                pts.join(" ")
            ));
        }
    }
    for (si, s) in stores.iter().enumerate() {
        let c = COLOURS[si % COLOURS.len()];
        let y = h + 10.0 + 20.0 * si as f64;
        out.push_str(&format!(
            "<rect x=\"{pad}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
            y - 10.0,
            pad + 18.0,
            y,
            s.replace('&', "&amp;").replace('<', "&lt;")
        ));
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_check::history::Seen;
    use baton_core::State;

    /// The run's history goes through the checker: one grant and its
    /// completion pass; a second grant of the task while its first holder
    /// still holds it (what a broken store would answer two workers) is a
    /// violation, and so is one after its completion.
    #[test]
    fn the_checker_reads_the_runs_grants() {
        let limits = Limits {
            skew_us: 0,
            overstay_us: 0,
            granularity_ms: 1,
            min_ttl_ms: 1,
        };
        let granted = |fence| Answered::Own {
            ack: false,
            state: State::Claimed,
            lease: Some((fence, false)),
        };
        let run = |second_at: Option<u64>| {
            let mut first = WorkerReport::default();
            first.log(0, (10, 20), 0, claim_req(), granted(5));
            let done = Observed::Done {
                ack: false,
                state: State::Succeeded,
                lease: Some(Seen {
                    owner: "bench-worker-0".to_owned(),
                    fence: 5,
                    expired: false,
                }),
                steps: Vec::new(),
            };
            first.log(
                0,
                (30, 40),
                0,
                Req::Complete { fence: 5 },
                Answered::Other(done),
            );
            let mut second = WorkerReport::default();
            if let Some(at) = second_at {
                second.log(1, (at, at + 5), 0, claim_req(), granted(9));
            }
            check_history(&mut [first, second], Vec::new(), "bench-t", limits).unwrap()
        };
        let alone = run(None);
        assert!(alone.ok(), "{alone}");
        assert_eq!(alone.ops, 2);
        let doubled = run(Some(21));
        assert!(!doubled.ok(), "two holders at once passed: {doubled}");
        assert_eq!(doubled.ops, 3);
        // A grant after the completion would be wrong too (a completed task
        // is never granted again): the checker holds the store to that.
        assert!(!run(Some(50)).ok());
    }

    #[test]
    fn orders_cover_the_tasks() {
        let mut all: Vec<usize> = (0..4)
            .flat_map(|w| order_for(Order::Disjoint, w, 4, 10))
            .collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..10).collect::<Vec<_>>(),
            "disjoint shares partition the tasks"
        );
        let mut s = order_for(Order::Shuffled, 3, 4, 50);
        assert_ne!(s, (0..50).collect::<Vec<_>>());
        s.sort_unstable();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
        assert_eq!(order_for(Order::Same, 1, 4, 5), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).map(|x| x * 1000).collect();
        assert_eq!(percentile(&v, 50.0), 51.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
    }
}
