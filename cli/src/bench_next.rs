//! `baton bench --next`: W workers drain a layered work graph with `next`,
//! beside the same workers claiming an identical graph's tasks by id (each
//! worker its share, layer by layer, as a planner that knows the frontier
//! would), on the same store in the same run. The ratio of the two is what
//! taking "the next ready task" costs over knowing which one to take. A
//! third run claims as many tasks without dependencies by id, and what the
//! graph itself costs shows beside it.

use crate::DynAuthority;
use crate::args::BenchArgs;
use baton_core::graph::{NewNode, NodeSpec, Taker};
use baton_core::{Error, Id, Refusal, Reply, State};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One store's result.
#[derive(Debug, Clone, Serialize)]
pub struct NextResult {
    pub store: String,
    pub workers: usize,
    pub tasks: usize,
    pub layers: usize,
    /// The same layered graph claimed by id (each worker its share, in the
    /// graph's order) and completed.
    pub by_id_grants_per_s: f64,
    /// `next` over the layered graph, and complete.
    pub next_grants_per_s: f64,
    /// `next_grants_per_s / by_id_grants_per_s`: what `next` costs.
    pub ratio: f64,
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

async fn by_id_worker(a: Arc<DynAuthority>, w: usize, workers: usize, tasks: Vec<Id>) -> Tally {
    let mut t = Tally::default();
    let Ok(owner) = Id::parse("owner", &format!("bench-worker-{w}")) else {
        return t;
    };
    for task in tasks.iter().skip(w).step_by(workers) {
        match a.claim(task, &owner, Some(600_000)).await {
            Ok(r) => match r.grant() {
                Some(g) => {
                    if a.complete(task, &owner, g.fence).await.is_err() {
                        t.errors += 1;
                    }
                    t.grants.push(task.to_string());
                }
                None => t.errors += 1,
            },
            Err(_) => t.errors += 1,
        }
    }
    t
}

/// Claims its share of the graph by id, in the graph's order (layer by
/// layer); a claim refused `not_ready` (its dependencies still running on
/// other workers) is tried again after 1 ms, as a `next` that finds
/// nothing ready is.
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
                        Some(g) => {
                            if a.complete(task, &owner, g.fence).await.is_err() {
                                t.errors += 1;
                            }
                            t.grants.push(task.to_string());
                        }
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

async fn next_worker(a: Arc<DynAuthority>, w: usize, queue: Id) -> Tally {
    let mut t = Tally::default();
    let Ok(owner) = Id::parse("owner", &format!("bench-worker-{w}")) else {
        return t;
    };
    let taker = Taker::Owner {
        owner: owner.clone(),
        ttl_ms: Some(600_000),
        lock_delay_ms: None,
    };
    loop {
        match a
            .next_for(taker.clone(), std::slice::from_ref(&queue))
            .await
        {
            Ok(Reply::Committed(r)) => {
                let fence = r.current_fence().unwrap_or(0);
                if a.complete(&r.task, &owner, fence).await.is_err() {
                    t.errors += 1;
                }
                t.grants.push(r.task.to_string());
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

/// Runs the three on `store`: flat by id, the graph by id, the graph by `next`.
pub async fn run_one(store: &str, args: &BenchArgs) -> Result<NextResult, Error> {
    let a = Arc::new(crate::authority_for(store).await?);
    let workers = args.workers.max(1);
    let tasks = args.tasks.max(1);
    let layers = args.layers.clamp(1, tasks);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("bench-next-{}-{nanos}", std::process::id());
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
    add(&a, flat).await?;
    let c0 = a.store().commits();
    let (flat_by_id, flat_secs) = drain(workers, |w| {
        by_id_worker(a.clone(), w, workers, flat_ids.clone())
    })
    .await?;
    let c1 = a.store().commits();
    // The layered graph, claimed by id in its order.
    let by_id_queue = Id::parse("queue", &format!("{prefix}-ids"))?;
    let by_id_graph = layered(&format!("{prefix}-ids"), tasks, layers, &by_id_queue)?;
    let by_id_ids: Vec<Id> = by_id_graph.iter().map(|n| n.task.clone()).collect();
    add(&a, by_id_graph).await?;
    let c2 = a.store().commits();
    let (by_id, by_id_secs) = drain(workers, |w| {
        graph_worker(a.clone(), w, workers, by_id_ids.clone())
    })
    .await?;
    let c3 = a.store().commits();
    // The same graph again, drained with `next`.
    let queue = Id::parse("queue", &format!("{prefix}-dag"))?;
    let graph = layered(&prefix, tasks, layers, &queue)?;
    let graph_ids: Vec<Id> = graph.iter().map(|n| n.task.clone()).collect();
    add(&a, graph).await?;
    let c4 = a.store().commits();
    let (nexts, next_secs) = drain(workers, |w| next_worker(a.clone(), w, queue.clone())).await?;
    let c5 = a.store().commits();
    let diff = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    let mut double_grants = 0;
    let mut ungranted = 0;
    // Every task of both graphs granted once and SUCCEEDED.
    for (tallies, ids) in [(&by_id, &by_id_ids), (&nexts, &graph_ids)] {
        let mut seen = BTreeSet::new();
        for g in tallies.iter().flat_map(|t| t.grants.iter()) {
            if !seen.insert(g.as_str()) {
                double_grants += 1;
            }
        }
        for t in ids {
            let done = a.get(t).await?.is_some_and(|r| r.state == State::Succeeded);
            if !done || !seen.contains(t.as_str()) {
                ungranted += 1;
            }
        }
    }
    let rate = |tallies: &[Tally], secs: f64| {
        tallies.iter().map(|t| t.grants.len()).sum::<usize>() as f64 / secs
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let by_id_rate = rate(&by_id, by_id_secs);
    let flat_rate = rate(&flat_by_id, flat_secs);
    let next_rate = rate(&nexts, next_secs);
    Ok(NextResult {
        store: store.to_owned(),
        workers,
        tasks,
        layers,
        by_id_grants_per_s: by_id_rate,
        next_grants_per_s: next_rate,
        ratio: ratio(next_rate, by_id_rate),
        flat_by_id_grants_per_s: flat_rate,
        flat_ratio: ratio(next_rate, flat_rate),
        by_id_commits: diff(c2, c3),
        next_commits: diff(c4, c5),
        flat_by_id_commits: diff(c0, c1),
        none_ready: nexts.iter().map(|t| t.none_ready).sum(),
        not_ready: by_id.iter().map(|t| t.none_ready).sum(),
        double_grants,
        ungranted,
        errors: flat_by_id
            .iter()
            .chain(&by_id)
            .chain(&nexts)
            .map(|t| t.errors)
            .sum(),
    })
}
