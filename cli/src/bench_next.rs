//! `baton bench --next`: W workers drain a layered work graph with `next`,
//! beside the same workers claiming the same number of tasks by id, on the
//! same store in the same run. The ratio of the two is what taking "the
//! next ready task" costs over knowing which one to take.

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
    /// Claim by id (disjoint shares, no dependencies) and complete.
    pub by_id_grants_per_s: f64,
    /// `next` over the layered graph, and complete.
    pub next_grants_per_s: f64,
    /// `next_grants_per_s / by_id_grants_per_s`.
    pub ratio: f64,
    /// Durable commits each half made (where the store counts them).
    pub by_id_commits: Option<u64>,
    pub next_commits: Option<u64>,
    /// `next` answers that found nothing ready (a layer still running).
    pub none_ready: u64,
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

/// Runs both halves on `store`.
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
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(by_id_worker(a.clone(), w, workers, flat_ids.clone())))
        .collect();
    let mut by_id = Vec::new();
    for h in handles {
        by_id.push(
            h.await
                .map_err(|e| Error::unavailable(format!("bench worker failed: {e}")))?,
        );
    }
    let by_id_secs = start.elapsed().as_secs_f64().max(1e-9);
    let c1 = a.store().commits();
    // `next` over the layered graph.
    let queue = Id::parse("queue", &format!("{prefix}-dag"))?;
    let graph = layered(&prefix, tasks, layers, &queue)?;
    let graph_ids: Vec<Id> = graph.iter().map(|n| n.task.clone()).collect();
    add(&a, graph).await?;
    let c2 = a.store().commits();
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(next_worker(a.clone(), w, queue.clone())))
        .collect();
    let mut nexts = Vec::new();
    for h in handles {
        nexts.push(
            h.await
                .map_err(|e| Error::unavailable(format!("bench worker failed: {e}")))?,
        );
    }
    let next_secs = start.elapsed().as_secs_f64().max(1e-9);
    let c3 = a.store().commits();
    let diff = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    let mut seen = BTreeSet::new();
    let mut double_grants = 0;
    for g in nexts.iter().flat_map(|t| t.grants.iter()) {
        if !seen.insert(g.clone()) {
            double_grants += 1;
        }
    }
    let mut ungranted = 0;
    for t in &graph_ids {
        let done = a.get(t).await?.is_some_and(|r| r.state == State::Succeeded);
        if !done || !seen.contains(t.as_str()) {
            ungranted += 1;
        }
    }
    let by_id_grants: usize = by_id.iter().map(|t| t.grants.len()).sum();
    let next_grants = seen.len();
    let by_id_rate = by_id_grants as f64 / by_id_secs;
    let next_rate = next_grants as f64 / next_secs;
    Ok(NextResult {
        store: store.to_owned(),
        workers,
        tasks,
        layers,
        by_id_grants_per_s: by_id_rate,
        next_grants_per_s: next_rate,
        ratio: if by_id_rate > 0.0 {
            next_rate / by_id_rate
        } else {
            0.0
        },
        by_id_commits: diff(c0, c1),
        next_commits: diff(c2, c3),
        none_ready: nexts.iter().map(|t| t.none_ready).sum(),
        double_grants,
        ungranted,
        errors: by_id.iter().chain(&nexts).map(|t| t.errors).sum(),
    })
}
