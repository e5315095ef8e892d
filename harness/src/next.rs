//! `baton bench --next`: W workers drain a layered work graph with `next`,
//! beside the same workers claiming an identical graph's tasks by id (each
//! worker its share, layer by layer, as a planner that knows the frontier
//! would), on the same store in the same run. The ratio of the two is what
//! taking "the next ready task" costs over knowing which one to take. A
//! third run claims as many tasks without dependencies by id, and what the
//! graph itself costs shows beside it. `--rounds` repeats the three on
//! fresh tasks, alternating which graph goes first (each run leaves the
//! store larger for the next), and reports medians.

use crate::BenchArgs;
use baton_core::graph::{NewNode, NodeSpec, Taker};
use baton_core::{Error, Id, Refusal, Reply, State};
use baton_open::DynAuthority;
use futures_util::{StreamExt, TryStreamExt};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many tasks a benchmark's check (`bench::verify`, and the graph's
/// here) takes at once: each check is a read and two refused writes (each
/// a durable commit), so one at a time took several times the storm
/// itself; concurrently they share commits.
pub(crate) const VERIFY_AT_ONCE: usize = 32;

/// One store's result.
#[derive(Debug, Clone, Serialize)]
pub struct NextResult {
    pub store: String,
    pub workers: usize,
    /// Grants a `next` may make at once (`--count`), reported together.
    pub count: u32,
    pub tasks: usize,
    pub layers: usize,
    /// Rounds run; the rates and ratios below are medians over them, the
    /// commits and counts sums.
    pub rounds: usize,
    /// The layered graph claimed by id (each worker its share, in the
    /// graph's order) and completed.
    pub by_id_grants_per_s: f64,
    /// `next` over the layered graph, and complete.
    pub next_grants_per_s: f64,
    /// `next` over the graph by id, the median of each round's: what
    /// `next` costs.
    pub ratio: f64,
    /// Each round's ratio, in order (the graph by id ran first in the
    /// first round, `next` in the second, and so on).
    pub ratios: Vec<f64>,
    /// As many tasks without dependencies claimed by id (disjoint shares,
    /// adjacent ids) and completed.
    pub flat_by_id_grants_per_s: f64,
    /// `next_grants_per_s / flat_by_id_grants_per_s`: what `next` and the
    /// graph's dependencies cost together.
    pub flat_ratio: f64,
    /// Durable commits each run made (where the store counts them).
    pub by_id_commits: Option<u64>,
    pub next_commits: Option<u64>,
    pub flat_by_id_commits: Option<u64>,
    /// `next` answers that found nothing ready (a layer still running).
    pub none_ready: u64,
    /// Claims by id refused `not_ready` (tried again after 1 ms).
    pub not_ready: u64,
    pub double_grants: u64,
    pub ungranted: u64,
    pub errors: u64,
}

fn id(s: &str) -> Result<Id, Error> {
    Id::parse("task", s)
}

/// The graph: `layers` layers; each node after two of the layer before.
fn layered(prefix: &str, tasks: usize, layers: usize, queue: &Id) -> Result<Vec<NewNode>, Error> {
    let width = tasks.div_ceil(layers).max(1);
    let name = |l: usize, i: usize| format!("{prefix}-n{l:03}-{i:06}");
    let mut out = Vec::with_capacity(tasks);
    'outer: for l in 0..layers {
        for i in 0..width {
            if out.len() == tasks {
                break 'outer;
            }
            let after = if l == 0 {
                Vec::new()
            } else {
                vec![id(&name(l - 1, i))?, id(&name(l - 1, (i * 7 + 3) % width))?]
            };
            let task = id(&name(l, i))?;
            let spec = NodeSpec::new(&task, Some(queue.clone()), 0, after)?;
            out.push(NewNode { task, spec });
        }
    }
    Ok(out)
}

async fn add(a: &DynAuthority, nodes: Vec<NewNode>) -> Result<(), Error> {
    // In chunks that stay whole (a chunk's dependencies are in it or before it).
    for chunk in nodes.chunks(2_000) {
        if let Err((task, r)) = a.add_graph(chunk.to_vec()).await? {
            return Err(Error::unavailable(format!(
                "bench: adding {task} was refused: {r}"
            )));
        }
    }
    Ok(())
}

#[derive(Default)]
struct Tally {
    grants: Vec<String>,
    none_ready: u64,
    errors: u64,
}

/// Completes a grant and counts it (a failed completion as an error).
async fn complete(a: &DynAuthority, t: &mut Tally, task: &Id, owner: &Id, fence: u64) {
    if a.complete(task, owner, fence).await.is_err() {
        t.errors += 1;
    }
    t.grants.push(task.to_string());
}

/// Claims its share of `tasks` by id, in their order (a graph's layer by
/// layer); a claim refused `not_ready` (its dependencies still running on
/// other workers) is tried again after 1 ms, as a `next` that finds
/// nothing ready is. Tasks without dependencies are simply claimed.
async fn graph_worker(a: Arc<DynAuthority>, w: usize, workers: usize, tasks: Vec<Id>) -> Tally {
    let mut t = Tally::default();
    let Ok(owner) = Id::parse("owner", &format!("bench-worker-{w}")) else {
        return t;
    };
    for task in tasks.iter().skip(w).step_by(workers) {
        loop {
            match a.claim(task, &owner, Some(600_000)).await {
                Ok(Reply::Refused(Refusal::NotReady { .. })) => {
                    t.none_ready += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Ok(r) => {
                    match r.grant() {
                        Some(g) => complete(&a, &mut t, task, &owner, g.fence).await,
                        None => t.errors += 1,
                    }
                    break;
                }
                Err(_) => {
                    t.errors += 1;
                    break;
                }
            }
        }
    }
    t
}

async fn next_worker(a: Arc<DynAuthority>, w: usize, queue: Id, count: u32) -> Tally {
    let mut t = Tally::default();
    let Ok(owner) = Id::parse("owner", &format!("bench-worker-{w}")) else {
        return t;
    };
    let taker = Taker::Owner {
        owner: owner.clone(),
        ttl_ms: Some(600_000),
        lock_delay_ms: None,
    };
    if count > 1 {
        return batch_worker(a, t, owner, taker, queue, count).await;
    }
    loop {
        match a
            .next_for(taker.clone(), std::slice::from_ref(&queue))
            .await
        {
            Ok(Reply::Committed(r)) => {
                let fence = r.current_fence().unwrap_or(0);
                complete(&a, &mut t, &r.task, &owner, fence).await;
            }
            Ok(Reply::Refused(Refusal::NoneReady { .. })) => {
                t.none_ready += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(Reply::Refused(Refusal::Drained { .. })) => return t,
            Ok(_) | Err(_) => {
                t.errors += 1;
                if t.errors > 1_000 {
                    return t;
                }
            }
        }
    }
}

/// [`next_worker`] by batches: up to `count` grants a `next`, reported in
/// one call.
async fn batch_worker(
    a: Arc<DynAuthority>,
    mut t: Tally,
    owner: Id,
    taker: Taker,
    queue: Id,
    count: u32,
) -> Tally {
    loop {
        match a
            .next_many_for(taker.clone(), std::slice::from_ref(&queue), count)
            .await
        {
            Ok(replies) => {
                if let [Reply::Refused(r)] = replies.as_slice() {
                    match r {
                        Refusal::NoneReady { .. } => {
                            t.none_ready += 1;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            continue;
                        }
                        Refusal::Drained { .. } => return t,
                        _ => {
                            t.errors += 1;
                            continue;
                        }
                    }
                }
                let reports: Vec<(Id, baton_core::Request)> = replies
                    .iter()
                    .filter_map(|r| r.grant())
                    .map(|g| {
                        (
                            g.task.clone(),
                            baton_core::Request::Complete {
                                owner: owner.clone(),
                                fence: g.fence,
                            },
                        )
                    })
                    .collect();
                for (task, _) in &reports {
                    t.grants.push(task.to_string());
                }
                match a.report_many(reports).await {
                    Ok(done) => t.errors += done.iter().filter(|r| r.is_refused()).count() as u64,
                    Err(_) => t.errors += 1,
                }
            }
            Err(_) => {
                t.errors += 1;
                if t.errors > 1_000 {
                    return t;
                }
            }
        }
    }
}

/// Runs `workers` copies of `f` and waits for them all; and how long it took.
async fn drain<F, Fut>(workers: usize, f: F) -> Result<(Vec<Tally>, f64), Error>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Tally> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..workers).map(|w| tokio::spawn(f(w))).collect();
    let mut out = Vec::with_capacity(workers);
    for h in handles {
        out.push(
            h.await
                .map_err(|e| Error::unavailable(format!("bench worker failed: {e}")))?,
        );
    }
    Ok((out, start.elapsed().as_secs_f64().max(1e-9)))
}

/// One round's measure of each run, and what its check found.
struct Round {
    flat_rate: f64,
    by_id_rate: f64,
    next_rate: f64,
    flat_commits: Option<u64>,
    by_id_commits: Option<u64>,
    next_commits: Option<u64>,
    none_ready: u64,
    not_ready: u64,
    double_grants: u64,
    ungranted: u64,
    errors: u64,
}

/// A graph to drain: its queue and tasks, added to the store.
async fn add_graph(
    a: &DynAuthority,
    name: &str,
    tasks: usize,
    layers: usize,
) -> Result<(Id, Vec<Id>), Error> {
    let queue = Id::parse("queue", name)?;
    let graph = layered(name, tasks, layers, &queue)?;
    let ids: Vec<Id> = graph.iter().map(|n| n.task.clone()).collect();
    add(a, graph).await?;
    Ok((queue, ids))
}

fn rate(tallies: &[Tally], secs: f64) -> f64 {
    tallies.iter().map(|t| t.grants.len()).sum::<usize>() as f64 / secs
}

/// The three runs on fresh tasks named after `prefix`; the graph by id
/// first unless `next_first`.
async fn round(
    a: &Arc<DynAuthority>,
    prefix: &str,
    workers: usize,
    tasks: usize,
    layers: usize,
    next_first: bool,
    count: u32,
) -> Result<Round, Error> {
    // Claim by id: the same number of tasks, added without dependencies.
    let flat_queue = Id::parse("queue", &format!("{prefix}-flat"))?;
    let flat: Vec<NewNode> = (0..tasks)
        .map(|i| {
            let task = id(&format!("{prefix}-flat-{i:06}"))?;
            let spec = NodeSpec::new(&task, Some(flat_queue.clone()), 0, Vec::new())?;
            Ok(NewNode { task, spec })
        })
        .collect::<Result<_, Error>>()?;
    let flat_ids: Vec<Id> = flat.iter().map(|n| n.task.clone()).collect();
    add(a, flat).await?;
    let c0 = a.meter().and_then(|m| m.commits());
    let (flat_by_id, flat_secs) = drain(workers, |w| {
        graph_worker(a.clone(), w, workers, flat_ids.clone())
    })
    .await?;
    let flat_commits = diff(c0, a.meter().and_then(|m| m.commits()));
    // Two identical graphs: one claimed by id in its order, one drained
    // with `next`; each added just before it runs (the run right after an
    // add pays for what the add left to write, a checkpoint or a flush).
    let mut by_id = (Vec::new(), 1e-9, None, Vec::new());
    let mut nexts = (Vec::new(), 1e-9, None, Vec::new());
    for run_next in [next_first, !next_first] {
        if run_next {
            let (queue, ids) = add_graph(a, &format!("{prefix}-dag"), tasks, layers).await?;
            let c = a.meter().and_then(|m| m.commits());
            let (t, secs) =
                drain(workers, |w| next_worker(a.clone(), w, queue.clone(), count)).await?;
            nexts = (t, secs, diff(c, a.meter().and_then(|m| m.commits())), ids);
        } else {
            let (_, ids) = add_graph(a, &format!("{prefix}-ids"), tasks, layers).await?;
            let c = a.meter().and_then(|m| m.commits());
            let (t, secs) = drain(workers, |w| {
                graph_worker(a.clone(), w, workers, ids.clone())
            })
            .await?;
            by_id = (t, secs, diff(c, a.meter().and_then(|m| m.commits())), ids);
        }
    }
    let mut double_grants = 0;
    let mut ungranted = 0;
    // Every task of both graphs granted once and SUCCEEDED.
    for (tallies, ids) in [(&by_id.0, &by_id.3), (&nexts.0, &nexts.3)] {
        let mut seen = BTreeSet::new();
        for g in tallies.iter().flat_map(|t| t.grants.iter()) {
            if !seen.insert(g.as_str()) {
                double_grants += 1;
            }
        }
        let seen = &seen;
        // Several at a time: through a server one at a time takes longer
        // than the run it checks.
        let missing: Vec<bool> = futures_util::stream::iter(ids.iter())
            .map(|t| async move {
                let done = a.get(t).await?.is_some_and(|r| r.state == State::Succeeded);
                Ok::<bool, Error>(!done || !seen.contains(t.as_str()))
            })
            .buffer_unordered(VERIFY_AT_ONCE)
            .try_collect()
            .await?;
        ungranted += missing.into_iter().filter(|m| *m).count() as u64;
    }
    Ok(Round {
        flat_rate: rate(&flat_by_id, flat_secs),
        by_id_rate: rate(&by_id.0, by_id.1),
        next_rate: rate(&nexts.0, nexts.1),
        flat_commits,
        by_id_commits: by_id.2,
        next_commits: nexts.2,
        none_ready: nexts.0.iter().map(|t| t.none_ready).sum(),
        not_ready: by_id.0.iter().map(|t| t.none_ready).sum(),
        double_grants,
        ungranted,
        errors: flat_by_id
            .iter()
            .chain(&by_id.0)
            .chain(&nexts.0)
            .map(|t| t.errors)
            .sum(),
    })
}

fn diff(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.zip(b).map(|(a, b)| b.saturating_sub(a))
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs `--rounds` rounds of the three on `store` (flat by id, the graph
/// by id, the graph by `next`); each rate and ratio is the median over
/// the rounds, the counts are their sums.
pub async fn run_one(store: &str, args: &BenchArgs) -> Result<NextResult, Error> {
    let a = Arc::new(baton_open::authority_for(store).await?);
    let workers = args.workers.max(1);
    let tasks = args.tasks.max(1);
    let layers = args.layers.clamp(1, tasks);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("bench-next-{}-{nanos}", std::process::id());
    let mut rounds = Vec::new();
    for r in 0..args.rounds.max(1) {
        let name = format!("{prefix}-r{r}");
        rounds.push(round(&a, &name, workers, tasks, layers, r % 2 == 1, args.count).await?);
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let med = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let sum = |f: &dyn Fn(&Round) -> u64| rounds.iter().map(f).sum::<u64>();
    let total = |f: &dyn Fn(&Round) -> Option<u64>| rounds.iter().map(f).sum::<Option<u64>>();
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|r| ratio(r.next_rate, r.by_id_rate))
        .collect();
    Ok(NextResult {
        store: store.to_owned(),
        workers,
        count: args.count,
        tasks,
        layers,
        rounds: rounds.len(),
        by_id_grants_per_s: med(&|r| r.by_id_rate),
        next_grants_per_s: med(&|r| r.next_rate),
        ratio: median(ratios.clone()),
        ratios,
        flat_by_id_grants_per_s: med(&|r| r.flat_rate),
        flat_ratio: med(&|r| ratio(r.next_rate, r.flat_rate)),
        by_id_commits: total(&|r| r.by_id_commits),
        next_commits: total(&|r| r.next_commits),
        flat_by_id_commits: total(&|r| r.flat_commits),
        none_ready: sum(&|r| r.none_ready),
        not_ready: sum(&|r| r.not_ready),
        double_grants: sum(&|r| r.double_grants),
        ungranted: sum(&|r| r.ungranted),
        errors: sum(&|r| r.errors),
    })
}
