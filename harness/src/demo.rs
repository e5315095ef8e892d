//! `baton demo`: eight workers race over 200 tasks on a fresh store; one
//! worker stalls past its lease, loses the task to a recovery, and its late
//! completion is refused; declared tasks succeed with evidence and pass the
//! release gate; a command runs under a lease kept for it, and when the
//! store stops answering mid-run it is stopped before the lease could end.
//! Prints a timeline and a summary.

use crate::Report;
use baton_core::call::Status;
use baton_core::{Error, Id, Manifest, Reply};
use baton_open::{DynAuthority, authority_for};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORKERS: usize = 8;
const TASKS: usize = 200;

fn id(s: &str) -> Result<Id, Error> {
    Id::parse("id", s)
}

struct Timeline {
    start: Instant,
    lines: Vec<String>,
}

impl Timeline {
    fn note(&mut self, text: impl Into<String>) {
        let ms = self.start.elapsed().as_millis();
        self.lines.push(format!("{ms:>6} ms  {}", text.into()));
    }
}

#[derive(Default)]
struct Tally {
    grants: Vec<(String, String, u64)>,
    refusals: BTreeMap<String, u64>,
}

async fn worker(a: Arc<DynAuthority>, w: usize, tag: String) -> Result<Tally, Error> {
    let owner = id(&format!("worker-{w}"))?;
    let mut tally = Tally::default();
    for i in crate::order_for(crate::Order::Shuffled, w, WORKERS, TASKS) {
        let task = id(&format!("demo-{tag}-{i:03}"))?;
        match a.claim(&task, &owner, Some(30_000)).await? {
            Reply::Refused(r) => *tally.refusals.entry(r.reason().to_owned()).or_default() += 1,
            reply => {
                let fence = reply.grant().map(|g| g.fence).unwrap_or(0);
                tally
                    .grants
                    .push((task.to_string(), owner.to_string(), fence));
                if let Reply::Refused(r) = a.complete(&task, &owner, fence).await? {
                    return Err(Error::unavailable(format!(
                        "demo: the holder could not complete {task}: {r}"
                    )));
                }
            }
        }
    }
    Ok(tally)
}

fn evidence_hash(seed: usize) -> String {
    format!("sha256:{:064x}", (seed as u128 + 1) * 0x1234_5678_9abc_def1)
}

fn manifest(task: &str) -> Result<Manifest, Error> {
    Manifest::from_value(&json!({
        "task_id": task, "executor": "release-runner", "source_branch": "main",
        "source_oid": "4f2c1e0", "target_version": "1.0.0",
        "steps": ["build", "test"], "required_evidence": ["build.log"],
        "heartbeat_timeout_seconds": 60,
    }))
}

/// A refusal the demo did not expect: reported as a refusal (exit 1), not
/// as an outage.
fn stopped(what: &str, reply: &Reply) -> Report {
    let reason = reply.refusal().map_or("none", |r| r.reason());
    let message = match reply.refusal() {
        Some(r) => format!("demo: {what} was refused: {r}"),
        None => format!("demo: {what} gave no grant"),
    };
    Report::one(json!({"refused": reason, "message": message})).with_status(Status::Refused)
}

/// Runs `sleep 30` under a 2 s lease the wrapper keeps, on a store that
/// stops answering 600 ms in; returns the outcome and how long before the
/// lease's end the child was stopped. The same code as `baton run`.
async fn supervised_run(
    tag: &str,
    dir: &std::path::Path,
    tl: &mut Timeline,
) -> Result<(String, i64), Error> {
    use baton_core::fault::{Fault, FaultStore};
    use baton_core::{Authority, MemoryStore, SystemClock, Timestamp};
    let store = Arc::new(FaultStore::new(MemoryStore::new()));
    let auth = Arc::new(Authority::new(store.clone(), Arc::new(SystemClock)));
    let task = id(&format!("demo-{tag}-supervised"))?;
    let spec = baton_supervisor::Spec {
        store: "memory:".to_owned(),
        task: Some(task.clone()),
        next: None,
        holder: baton_supervisor::Holder::Bare {
            owner: id("worker-run")?,
            lock_delay_ms: None,
        },
        ttl_ms: Some(2_000),
        wait_ms: None,
        keep_waiting: false,
        grace_ms: 300,
        renew_every_ms: None,
        report: Some(dir.join("supervised.json")),
        evidence: Vec::new(),
        command: vec!["sleep".into(), "30".into()],
        human: false,
        count: 1,
    };
    tl.note(format!(
        "baton run {task} -- sleep 30: a 2s lease renewed by the wrapper; the store stops answering 600ms in"
    ));
    let (done, ()) = tokio::join!(baton_supervisor::supervised(&auth, &spec), async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        store.set_always(Some(Fault::UnavailableBefore));
    });
    let report = done.report.unwrap_or_default();
    let at = |k: &str| {
        report[k]
            .as_str()
            .and_then(|t| Timestamp::parse_rfc3339(t).ok())
    };
    let early = match (at("ended_at"), at("lease_expiry")) {
        (Some(end), Some(expiry)) => expiry.as_millis() - end.as_millis(),
        _ => 0,
    };
    let outcome = report["outcome"].as_str().unwrap_or("none").to_owned();
    tl.note(format!(
        "no renewal confirmed: the child got SIGTERM and was gone {early} ms before its lease could end; outcome {outcome}, exit {}",
        done.exit
    ));
    Ok((outcome, early))
}

/// `store`: a store named with `--store` on the command line (never the
/// `BATON_STORE` of the environment: the demo does not write into the
/// store a user works with unless told to).
/// The demo's work graph: (node, what it runs after).
const GRAPH: &[(&str, &[&str])] = &[
    ("fetch", &[]),
    ("compile-a", &["fetch"]),
    ("compile-b", &["fetch"]),
    ("docs", &["fetch"]),
    ("link", &["compile-a", "compile-b"]),
    ("package", &["link", "docs"]),
];

struct Drained {
    order: Vec<String>,
    in_order: bool,
}

/// Adds [`GRAPH`] in one commit and lets four workers take `next` from its
/// queue until it is drained; checks that each node ran after its
/// dependencies ended.
async fn drain_graph(
    a: &Arc<DynAuthority>,
    tag: &str,
    tl: &mut Timeline,
) -> Result<Drained, Error> {
    use baton_core::graph::{NewNode, NodeSpec};
    let name = |n: &str| format!("{tag}-{n}");
    let queue = id(&format!("demo-{tag}"))?;
    let mut nodes = Vec::new();
    for (n, after) in GRAPH {
        let task = id(&name(n))?;
        let after = after
            .iter()
            .map(|d| id(&name(d)))
            .collect::<Result<Vec<_>, _>>()?;
        let spec = NodeSpec::new(&task, Some(queue.clone()), 0, after)?;
        nodes.push(NewNode { task, spec });
    }
    if let Err((task, r)) = a.add_graph(nodes).await? {
        return Err(Error::unavailable(format!(
            "demo: adding the graph was refused at {task}: {r}"
        )));
    }
    tl.note(format!(
        "a graph of {} nodes in queue {queue}: fetch, then compile-a, compile-b and docs, then link, then package",
        GRAPH.len()
    ));
    let done = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (a, done, queue) = (a.clone(), done.clone(), queue.clone());
            tokio::spawn(async move {
                let owner = id(&format!("graph-worker-{w}"))?;
                loop {
                    let reply = a
                        .next_waiting(
                            baton_core::graph::Taker::Owner {
                                owner: owner.clone(),
                                ttl_ms: Some(30_000),
                                lock_delay_ms: None,
                            },
                            std::slice::from_ref(&queue),
                            10_000,
                        )
                        .await?;
                    let Some(g) = reply.grant() else {
                        return Ok::<(), Error>(());
                    };
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    a.complete(&g.task, &owner, g.fence).await?;
                    if let Ok(mut d) = done.lock() {
                        d.push((g.task.to_string(), owner.to_string()));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await
            .map_err(|e| Error::unavailable(format!("demo graph worker failed: {e}")))??;
    }
    let done = done.lock().map(|d| d.clone()).unwrap_or_default();
    let position = |n: &str| done.iter().position(|(t, _)| t == &name(n));
    let in_order = done.len() == GRAPH.len()
        && GRAPH.iter().all(|(n, after)| {
            after
                .iter()
                .all(|d| matches!((position(d), position(n)), (Some(x), Some(y)) if x < y))
        });
    let order: Vec<String> = done
        .iter()
        .map(|(t, _)| t.strip_prefix(&format!("{tag}-")).unwrap_or(t).to_owned())
        .collect();
    let ran: Vec<String> = done
        .iter()
        .map(|(t, w)| format!("{} ({w})", t.strip_prefix(&format!("{tag}-")).unwrap_or(t)))
        .collect();
    tl.note(format!(
        "4 workers drained it with next, in this order: {}",
        ran.join(", ")
    ));
    Ok(Drained { order, in_order })
}

/// What act 7 saw: the most tasks of one key granted at once by four
/// workers asking together, and whether a holder's end let one more in.
struct Keyed {
    at_once: usize,
    next_after_end: bool,
}

/// Act 7: four tasks share a key limited to 2; four workers ask `next` at
/// once; two are granted, the others wait; a completion lets one more in.
async fn key_limit(a: &Arc<DynAuthority>, tag: &str, tl: &mut Timeline) -> Result<Keyed, Error> {
    use baton_core::graph::NodeSpec;
    let queue = id(&format!("demo-{tag}-keyed"))?;
    let key = id(&format!("demo-{tag}-deploy"))?;
    a.set_limit(&key, Some(2), baton_core::Actor::Operator(id("demo")?))
        .await?;
    for i in 0..4 {
        let t = id(&format!("{tag}-deploy-{i}"))?;
        let spec = NodeSpec::new(&t, Some(queue.clone()), 0, [])?.with_key(Some(key.clone()))?;
        a.add(&t, spec).await?;
    }
    let asks = (0..4).map(|i| {
        let (a, queue) = (a.clone(), queue.clone());
        async move {
            let owner = id(&format!("deployer-{i}"))?;
            let r = a
                .next(&owner, std::slice::from_ref(&queue), Some(30_000), None)
                .await?;
            Ok::<_, Error>((owner, r))
        }
    });
    let mut held = Vec::new();
    for r in futures_util::future::join_all(asks).await {
        let (owner, r) = r?;
        if let Some(g) = r.grant() {
            held.push((owner, g));
        }
    }
    let at_once = held.len();
    tl.note(format!(
        "key {key} (limit 2): 4 workers asked at once, {at_once} granted, the rest wait for a slot"
    ));
    let Some((owner, g)) = held.first() else {
        return Err(Error::unavailable(
            "demo: no task of the key was granted".to_owned(),
        ));
    };
    a.complete(&g.task, owner, g.fence).await?;
    let fifth = id("deployer-4")?;
    let r = a
        .next(&fifth, std::slice::from_ref(&queue), Some(30_000), None)
        .await?;
    let next_after_end = r.grant().is_some();
    tl.note(format!(
        "{} completed: {}",
        g.task,
        if next_after_end {
            "a waiting task took its slot"
        } else {
            "nothing took its slot"
        }
    ));
    if let Some(g) = r.grant() {
        held.push((fifth, g));
    }
    for (owner, g) in held.iter().skip(1) {
        a.complete(&g.task, owner, g.fence).await?;
    }
    Ok(Keyed {
        at_once,
        next_after_end,
    })
}

/// What act 6 saw: a failed attempt tried again after its backoff, and a
/// task put off until its start.
struct Later {
    retried_after_ms: u64,
    ran_after_start: bool,
}

/// Act 6: a task that may be tried twice fails once and runs again after
/// its backoff; a task put off runs once its start has come, not before.
async fn retry_and_later(
    a: &Arc<DynAuthority>,
    tag: &str,
    tl: &mut Timeline,
) -> Result<Later, Error> {
    use baton_core::graph::{NodeSpec, RetryPolicy, Start, Taker};
    let queue = id(&format!("demo-{tag}-later"))?;
    let (flaky, later) = (id(&format!("{tag}-flaky"))?, id(&format!("{tag}-later"))?);
    let spec = NodeSpec::new(&flaky, Some(queue.clone()), 1, [])?
        .with_retry(Some(RetryPolicy::new(2, 300)))?;
    a.add(&flaky, spec).await?;
    let spec =
        NodeSpec::new(&later, Some(queue.clone()), 0, [])?.with_start(Some(Start::AfterMs(900)))?;
    // Its start counts from its add: measured from just before it, so a
    // busy machine's delay before the failure below cannot make a grant
    // on time look early.
    let added_at = Instant::now();
    a.add(&later, spec).await?;
    let owner = id("later-worker")?;
    let taker = || Taker::Owner {
        owner: owner.clone(),
        ttl_ms: Some(30_000),
        lock_delay_ms: None,
    };
    let queues = std::slice::from_ref(&queue);
    let first = a.next_waiting(taker(), queues, 5_000).await?;
    let Some(g) = first.grant() else {
        return Err(Error::unavailable(format!(
            "demo: {flaky} was not granted: {first:?}"
        )));
    };
    let failed_at = Instant::now();
    a.fail(
        &g.task,
        &owner,
        g.fence,
        Some(serde_json::json!({"exit": 1})),
    )
    .await?;
    tl.note(format!(
        "{flaky} (2 attempts, 300 ms backoff) failed its first attempt: put off, not FAILED; {later} is put off 900 ms"
    ));
    let mut retried_after_ms = 0;
    let mut ran_after_start = false;
    for _ in 0..2 {
        let r = a.next_waiting(taker(), queues, 5_000).await?;
        let Some(g) = r.grant() else {
            return Err(Error::unavailable(format!(
                "demo: nothing was granted: {r:?}"
            )));
        };
        let waited = u64::try_from(failed_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        if g.task == flaky {
            retried_after_ms = waited;
            tl.note(format!(
                "{flaky}: attempt {} granted {waited} ms after the failure",
                g.attempt
            ));
        } else {
            let since_add = u64::try_from(added_at.elapsed().as_millis()).unwrap_or(u64::MAX);
            ran_after_start = since_add >= 900;
            tl.note(format!(
                "{later}: granted {since_add} ms after it was added, once its start had come"
            ));
        }
        a.complete(&g.task, &owner, g.fence).await?;
    }
    Ok(Later {
        retried_after_ms,
        ran_after_start,
    })
}

pub async fn run(store: Option<&str>, json: bool) -> Result<Report, Error> {
    // Task names of their own, so a named store can run the demo again.
    let tag = format!(
        "{:06x}",
        (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0)
            ^ u128::from(std::process::id()))
            % 0x100_0000
    );
    // A fresh store in a new temporary folder unless one was named; kept
    // when the demo ends, so that what it did can be looked at.
    let url = match store {
        Some(s) => s.to_owned(),
        None => {
            let tmp = tempfile::Builder::new()
                .prefix("baton-demo-")
                .tempdir()
                .map_err(|e| Error::unavailable(format!("demo: no temporary directory: {e}")))?;
            format!("sqlite:{}", tmp.keep().join("demo.db").display())
        }
    };
    let a = Arc::new(authority_for(&url).await?);
    let mut tl = Timeline {
        start: Instant::now(),
        lines: Vec::new(),
    };
    tl.note(format!("store {url}"));

    // Act 1: eight workers race over the same 200 tasks, each in its own order.
    tl.note(format!(
        "{WORKERS} workers race to claim {TASKS} tasks; each completes what it wins"
    ));
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| tokio::spawn(worker(a.clone(), w, tag.clone())))
        .collect();
    let mut tally = Tally::default();
    for h in handles {
        let t = h
            .await
            .map_err(|e| Error::unavailable(format!("demo worker failed: {e}")))??;
        tally.grants.extend(t.grants);
        for (k, v) in t.refusals {
            *tally.refusals.entry(k).or_default() += v;
        }
    }
    let mut per_task: BTreeMap<&str, u64> = BTreeMap::new();
    let mut per_worker: BTreeMap<&str, u64> = BTreeMap::new();
    for (task, owner, _) in &tally.grants {
        *per_task.entry(task).or_default() += 1;
        *per_worker.entry(owner).or_default() += 1;
    }
    let double_grants = per_task.values().filter(|&&n| n > 1).count();
    let spread: Vec<String> = per_worker
        .iter()
        .map(|(w, n)| format!("{w}: {n}"))
        .collect();
    tl.note(format!(
        "race over: {} grants for {} tasks ({})",
        tally.grants.len(),
        per_task.len(),
        spread.join(", ")
    ));

    // Act 2: a zombie worker.
    let (task, zombie, rescuer) = (
        id(&format!("demo-{tag}-zombie"))?,
        id("worker-zombie")?,
        id("worker-rescuer")?,
    );
    let reply = a.claim(&task, &zombie, Some(400)).await?;
    let Some(g1) = reply.grant() else {
        return Ok(stopped("the zombie's claim", &reply));
    };
    // A store with a minimum lease (etcd, Postgres) rounds 400 ms up: wait
    // out the lease it actually granted, by its own clock's arithmetic.
    let lease_ms = (g1.expiry.as_millis() - g1.claimed_at.as_millis()).max(0) as u64;
    tl.note(format!(
        "{zombie} claims {task}: fence {}, lease {lease_ms}ms, then stalls",
        g1.fence
    ));
    tokio::time::sleep(Duration::from_millis(lease_ms + 200)).await;
    let reply = a.recover(&task, &rescuer, Some(30_000)).await?;
    let Some(g2) = reply.grant() else {
        return Ok(stopped("the recovery", &reply));
    };
    tl.note(format!(
        "lease expired; {rescuer} recovers {task}: fence {} (attempt {})",
        g2.fence, g2.attempt
    ));
    let late = a.complete(&task, &zombie, g1.fence).await?;
    let late_reason = match &late {
        Reply::Refused(r) => {
            tl.note(format!(
                "{zombie} wakes and completes with fence {}: refused, {} ({r})",
                g1.fence,
                r.reason()
            ));
            *tally.refusals.entry(r.reason().to_owned()).or_default() += 1;
            r.reason().to_owned()
        }
        _ => "accepted".to_owned(),
    };
    a.complete(&task, &rescuer, g2.fence).await?;
    tl.note(format!(
        "{rescuer} completes {task} with fence {}",
        g2.fence
    ));
    let stale_current = a
        .verify(&task, g1.fence)
        .await?
        .map(|v| v.current)
        .unwrap_or(true);

    // Act 3: declared tasks, through the registry to the release gate.
    let mut gates_passed = 0;
    for i in 0..3 {
        let name = format!("release-{tag}-{i}");
        let t = id(&name)?;
        let (run, exec) = (id(&format!("run-{i}"))?, id("release-runner")?);
        a.declare(manifest(&name)?).await?;
        a.register(&t, &run).await?;
        let reply = a.task_claim(&t, &run, &exec, None).await?;
        let Some(g) = reply.grant() else {
            return Ok(stopped("the declared task's claim", &reply));
        };
        a.start(&t, &run, &exec, g.fence).await?;
        let early = a.succeed(&t, &run, &exec, g.fence, BTreeMap::new()).await?;
        a.heartbeat(&t, &run, &exec, g.fence, 2, None).await?;
        let ev = BTreeMap::from([("build.log".to_owned(), evidence_hash(i))]);
        a.succeed(&t, &run, &exec, g.fence, ev).await?;
        let gate = match a.gate(&t).await? {
            Ok(gate) => gate,
            Err(r) => return Ok(stopped("the gate", &Reply::Refused(r))),
        };
        if gate.passed {
            gates_passed += 1;
        }
        if i == 0 {
            if let Reply::Refused(r) = early {
                tl.note(format!(
                    "{name}: success before the last step is refused ({})",
                    r.reason()
                ));
            }
            tl.note(format!("{name}: declared, registered, claimed (fence {}), 2 steps, succeeded with evidence; gate passed: {}", g.fence, gate.passed));
        }
    }
    tl.note(format!(
        "{gates_passed} of 3 declared tasks pass the release gate"
    ));

    // Act 4: a supervised run whose store goes away mid-run.
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::unavailable(format!("demo: no temporary directory: {e}")))?;
    let (outcome, stopped_early_ms) = supervised_run(&tag, tmp.path(), &mut tl).await?;

    // Act 5: four workers drain a small work graph with `next`.
    let graph = drain_graph(&a, &tag, &mut tl).await?;

    // Act 6: a retry after a backoff, and a task run later.
    let later = retry_and_later(&a, &tag, &mut tl).await?;

    // Act 7: a concurrency limit per key.
    let keyed = key_limit(&a, &tag, &mut tl).await?;

    let ok = double_grants == 0
        && outcome == "lost"
        && stopped_early_ms > 0
        && per_task.len() == TASKS
        && late_reason == "stale_fence"
        && !stale_current
        && gates_passed == 3
        && graph.in_order
        && later.retried_after_ms >= 225
        && later.ran_after_start
        && keyed.at_once == 2
        && keyed.next_after_end;
    let summary = json!({
        "store": url,
        "tasks": TASKS + 1 + 3 + 1,
        "raced_tasks": TASKS,
        "workers": WORKERS,
        "grants": tally.grants.len() + 2 + 3 + 1,
        "refusals": tally.refusals,
        "double_grants": double_grants,
        "stale_completion": late_reason,
        "gates_passed": gates_passed,
        "supervised_run": {"outcome": outcome, "stopped_before_lease_end_ms": stopped_early_ms},
        "graph": {"order": graph.order, "in_dependency_order": graph.in_order},
        "retried_after_ms": later.retried_after_ms,
        "ran_after_start": later.ran_after_start,
        "key_limit": {"limit": 2, "granted_at_once": keyed.at_once, "slot_reused": keyed.next_after_end},
        "ok": ok,
    });
    let status = if ok { Status::Ok } else { Status::Refused };
    if json {
        return Ok(Report::one(summary).with_status(status));
    }
    let mut text = String::from("timeline\n");
    for l in &tl.lines {
        text.push_str(&format!("  {l}\n"));
    }
    text.push_str("\nsummary\n");
    // Each refusal said as a person would: most are claims that lost a race.
    let refusals: Vec<String> = tally
        .refusals
        .iter()
        .map(|(k, v)| match k.as_str() {
            "completed" => format!("{v} claims found the task already completed"),
            "held" => format!("{v} found it held by another worker"),
            "stale_fence" => format!("{v} late report refused (stale fence)"),
            other => format!("{v} refused {other}"),
        })
        .collect();
    for (k, v) in [
        (
            "tasks",
            format!(
                "{} ({TASKS} raced, 1 recovered, 3 declared, 1 supervised)",
                TASKS + 5
            ),
        ),
        ("grants", (tally.grants.len() + 6).to_string()),
        ("refusals", refusals.join(", ")),
        ("double grants", double_grants.to_string()),
        ("late completion", late_reason),
        ("gate passed", format!("{gates_passed} of 3")),
        (
            "supervised run",
            format!("{outcome}, child stopped {stopped_early_ms} ms before its lease could end"),
        ),
        (
            "work graph",
            format!(
                "{} nodes by 4 workers, dependencies first: {}",
                graph.order.len(),
                if graph.in_order { "yes" } else { "NO" }
            ),
        ),
        (
            "retry, later",
            format!(
                "a failure tried again {} ms later; a task put off ran after its start: {}",
                later.retried_after_ms,
                if later.ran_after_start { "yes" } else { "NO" }
            ),
        ),
        (
            "key limit",
            format!(
                "{} of 4 at once under a limit of 2; a completion let the next in: {}",
                keyed.at_once,
                if keyed.next_after_end { "yes" } else { "NO" }
            ),
        ),
    ] {
        text.push_str(&format!("  {k:<16} {v}\n"));
    }
    let baton = program();
    text.push_str(&format!(
        "\nlook at what happened (the store is kept):\n  {baton} --store {url} --format human events | less\n  {baton} --store {url} --format human task list\n  {baton} --store {url} --format human graph show\n  {baton} --store {url} serve    # then open http://127.0.0.1:7440/\n"
    ));
    Ok(Report::text(text, status))
}

/// How to run this binary again from a shell: `baton` when that is what
/// the PATH finds, else its own path (as `cargo run` leaves it, in
/// `target/debug`), quoted for the shell where it needs to be.
fn program() -> String {
    let Ok(me) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return "baton".to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| std::fs::canonicalize(dir.join("baton")).is_ok_and(|found| found == me))
    });
    if on_path {
        return "baton".to_owned();
    }
    let shown = me.display().to_string();
    if shown
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
    {
        shown
    } else {
        format!("'{}'", shown.replace('\'', r"'\''"))
    }
}
