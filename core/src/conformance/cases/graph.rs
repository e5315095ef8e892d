//! The work graph: add with dependencies, `next`, readiness decided in the
//! granting commit.

use crate::conformance::fixtures::*;
use crate::conformance::*;
use crate::graph::{NewNode, NodeSpec, Taker};
use crate::workgraph::GraphState;

pub(super) fn spec(task: &str, queue: Option<&str>, priority: i64, after: &[&str]) -> NodeSpec {
    NodeSpec::new(
        &id(task),
        queue.map(id),
        priority,
        after.iter().map(|d| id(d)),
    )
    .unwrap()
}

pub(super) fn node(task: &str, after: &[&str]) -> NewNode {
    NewNode {
        task: id(task),
        spec: spec(task, None, 0, after),
    }
}

pub(super) fn granted(r: &Reply) -> TaskId {
    r.grant()
        .unwrap_or_else(|| panic!("expected a grant, got {r:?}"))
        .task
}

/// A layered graph: `layers` layers of `width`; each node of a layer
/// depends on two nodes of the layer before.
pub(super) fn layered(layers: usize, width: usize) -> Vec<NewNode> {
    let name = |l: usize, i: usize| format!("n{l:02}-{i:03}");
    let mut out = Vec::new();
    for l in 0..layers {
        for i in 0..width {
            let after: Vec<String> = if l == 0 {
                Vec::new()
            } else {
                vec![name(l - 1, i), name(l - 1, (i * 7 + 3) % width)]
            };
            let after: Vec<&str> = after.iter().map(String::as_str).collect();
            out.push(node(&name(l, i), &after));
        }
    }
    out
}

/// 16 threads drain a layered graph of 500 tasks (10 layers of 50, each
/// wider than the threads) with `next`: each task granted exactly once,
/// none before every dependency SUCCEEDED (by the event order), and the
/// loops end on `drained`. Sized to fit the CI run on two cores, where
/// it runs on every backend directly and through the server; `baton bench
/// --next` drains larger graphs.
pub fn graph_drain_exactly_once_in_dependency_order<H: Harness>(ctx: &mut Ctx<H>) {
    const THREADS: usize = 16;
    const TASKS: usize = 500;
    let graph = layered(10, TASKS / 10);
    let deps: BTreeMap<TaskId, Vec<TaskId>> = graph
        .iter()
        .map(|n| (n.task.clone(), n.spec.depends_on.clone()))
        .collect();
    let a = ctx.auth();
    let added = ctx.block_on(a.add_graph(graph)).unwrap().unwrap();
    assert_eq!(added.added, TASKS);
    let taken: Vec<Vec<TaskId>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let ctx = &*ctx;
                s.spawn(move || {
                    let a = ctx.auth();
                    let owner = id(&format!("w{t}"));
                    let mut mine = Vec::new();
                    loop {
                        let r = ctx
                            .block_on(a.next(&owner, &[], Some(600_000), None))
                            .unwrap();
                        match r {
                            Reply::Committed(_) => {
                                let g = r.grant().unwrap();
                                let done = ctx.block_on(a.complete(&g.task, &owner, g.fence));
                                assert!(done.unwrap().record().is_some());
                                mine.push(g.task);
                            }
                            Reply::Refused(Refusal::Drained { census }) => {
                                assert_eq!(census.blocked, 0);
                                return mine;
                            }
                            Reply::Refused(Refusal::NoneReady { .. }) => {
                                std::thread::sleep(std::time::Duration::from_millis(2));
                            }
                            other => panic!("next answered {other:?}"),
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut once = BTreeSet::new();
    for t in taken.iter().flatten() {
        assert!(once.insert(t.clone()), "{t} granted twice");
    }
    assert_eq!(once.len(), TASKS, "every task granted");
    // By the event order: every CLAIMED after each dependency's SUCCEEDED.
    let events = ctx.all_events();
    let mut succeeded: BTreeMap<TaskId, u64> = BTreeMap::new();
    let mut claims: BTreeMap<TaskId, u64> = BTreeMap::new();
    for e in &events {
        match e.kind {
            EventKind::Succeeded => {
                succeeded.insert(e.task.clone(), e.seq);
            }
            EventKind::Claimed => {
                assert!(
                    claims.insert(e.task.clone(), e.seq).is_none(),
                    "{} claimed twice",
                    e.task
                );
                for d in &deps[&e.task] {
                    let done = succeeded.get(d).copied();
                    assert!(
                        done.is_some_and(|s| s < e.seq),
                        "{} claimed (seq {}) before {d} succeeded ({done:?})",
                        e.task,
                        e.seq
                    );
                }
            }
            _ => {}
        }
    }
    assert_eq!(claims.len(), TASKS);
}

/// Among ready tasks: highest priority, then earliest ready time, then
/// smallest id; a queue not asked for is not taken from.
pub fn next_honours_priority_then_ready_time_then_id<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let add = |t: &str, q: Option<&str>, p: i64| {
        let r = ctx.block_on(a.add(&id(t), spec(t, q, p, &[]))).unwrap();
        assert!(matches!(r, Reply::Committed(_)), "{r:?}");
        ctx.advance_ms(5);
    };
    add("low", None, 0);
    add("z-high", None, 5);
    add("later-high", None, 5);
    add("a-high", None, 5);
    add("other-queue", Some("other"), 100);
    let w = id("w");
    let mut order = Vec::new();
    loop {
        let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
        match r.refusal() {
            None => order.push(granted(&r)),
            Some(Refusal::NoneReady { census }) => {
                assert_eq!((census.held, census.queued, census.ready), (4, 0, 0));
                break;
            }
            Some(other) => panic!("{other:?}"),
        }
    }
    let order: Vec<&str> = order.iter().map(|t| t.as_str()).collect();
    // z-high and later-high and a-high share a priority: ready time first.
    assert_eq!(order, ["z-high", "later-high", "a-high", "low"]);
    let r = ctx
        .block_on(a.next(&w, &[id("other")], Some(600_000), None))
        .unwrap();
    assert_eq!(granted(&r).as_str(), "other-queue");
    // Same ready time: the smallest id first.
    let g = vec![node("tie-b", &[]), node("tie-a", &[]), node("tie-c", &[])];
    ctx.block_on(a.add_graph(g)).unwrap().unwrap();
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert_eq!(granted(&r).as_str(), "tie-a");
}

/// A dependency that fails blocks its dependent (`next` drains with it
/// counted as blocked; a claim by id is refused `upstream_failed`); until
/// then a claim by id is refused `not_ready`; an operator's redispatch of
/// the failed dependency, run to success, makes the dependent ready.
pub fn upstream_failure_blocks_and_redispatch_unblocks<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let g = vec![node("up", &[]), node("down", &["up"])];
    ctx.block_on(a.add_graph(g)).unwrap().unwrap();
    let w = id("w");
    let r = ctx
        .block_on(a.claim(&id("down"), &w, Some(600_000)))
        .unwrap();
    assert_eq!(
        refusal(&r),
        &Refusal::NotReady {
            waiting_on: vec![id("up")]
        }
    );
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    let g = r.grant().unwrap();
    assert_eq!(g.task.as_str(), "up");
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::NoneReady { census } if census.held == 1 && census.queued == 1),
        "{r:?}"
    );
    ctx.block_on(a.fail(&id("up"), &w, g.fence, None)).unwrap();
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::Drained { census } if census.blocked == 1),
        "{r:?}"
    );
    let r = ctx
        .block_on(a.claim(&id("down"), &w, Some(600_000)))
        .unwrap();
    assert_eq!(
        refusal(&r),
        &Refusal::UpstreamFailed {
            upstream: id("up"),
            state: State::Failed
        }
    );
    let blocked = ctx
        .block_on(a.list_graph(GraphState::Blocked, None, 100))
        .unwrap();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].task.as_str(), "down");
    let op = Actor::Operator(id("ops"));
    let r = ctx.block_on(a.redispatch(&id("up"), op, 2)).unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    let g = r.grant().unwrap();
    assert_eq!(g.task.as_str(), "up");
    ctx.block_on(a.complete(&id("up"), &w, g.fence)).unwrap();
    let ready = ctx
        .block_on(a.list_graph(GraphState::Ready, None, 100))
        .unwrap();
    assert_eq!(ready.len(), 1);
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert_eq!(granted(&r).as_str(), "down");
    let kinds: Vec<EventKind> = ctx
        .task_events(&id("down"))
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [EventKind::Added, EventKind::Ready, EventKind::Claimed]
    );
}

/// Adding a graph is all or nothing: a cycle, an unknown dependency, or a
/// node that exists with another definition adds none of it; the same
/// graph again is an idempotent repeat.
pub fn add_graph_all_or_nothing<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let e = ctx
        .block_on(a.add_graph(vec![
            node("c1", &["c2"]),
            node("c2", &["c1"]),
            node("free", &[]),
        ]))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("depends_on"), "{e}");
    assert!(e.message.contains("cycle through c1, c2"), "{e}");
    let e = ctx
        .block_on(a.add_graph(vec![node("free", &[]), node("x", &["ghost"])]))
        .unwrap_err();
    assert!(e.message.contains("x -> ghost"), "{e}");
    assert!(ctx.block_on(a.get(&id("free"))).unwrap().is_none());
    let e = ctx
        .block_on(a.add(&id("solo"), spec("solo", None, 0, &["ghost"])))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("depends_on"), "{e}");
    assert!(ctx.block_on(a.get(&id("solo"))).unwrap().is_none());
    let g = vec![node("g1", &[]), node("g2", &["g1"])];
    let first = ctx.block_on(a.add_graph(g.clone())).unwrap().unwrap();
    assert_eq!((first.added, first.repeated), (2, 0));
    let again = ctx.block_on(a.add_graph(g)).unwrap().unwrap();
    assert_eq!((again.added, again.repeated), (0, 2));
    // g2 again with another dependency, with a new node beside it.
    let clash = vec![node("g3", &[]), node("g2", &[])];
    let (task, why) = ctx.block_on(a.add_graph(clash)).unwrap().unwrap_err();
    assert_eq!((task.as_str(), why), ("g2", Refusal::ManifestConflict));
    assert!(ctx.block_on(a.get(&id("g3"))).unwrap().is_none());
    let g1 = ctx.block_on(a.get(&id("g1"))).unwrap().unwrap();
    assert_eq!(g1.dependents, vec![id("g2")], "one link, not two");
}

/// Declared tasks with `depends_on` in their manifests: `task next` claims
/// the ready one for its registered run, and the dependent after.
pub fn task_next_takes_declared_tasks_in_order<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let mut m1 = manifest("build", 1, &[], 600, 1);
    m1.queue = Some(id("ci"));
    let mut m2 = manifest("deploy", 1, &[], 600, 1);
    m2.queue = Some(id("ci"));
    m2.depends_on = vec![id("build")];
    for m in [m1, m2] {
        let t = m.task_id.clone();
        ctx.block_on(a.declare(m)).unwrap();
        ctx.block_on(a.register(&t, &id(&format!("run-{t}"))))
            .unwrap();
    }
    let ex = id("ci");
    let ci = [id("ci")];
    let r = ctx.block_on(a.task_next(&ex, &ci, None)).unwrap();
    let g = r.grant().unwrap();
    assert_eq!(g.task.as_str(), "build");
    let r = ctx.block_on(a.task_next(&ex, &ci, None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::NoneReady { .. }), "{r:?}");
    // The bare lane does not see declared tasks.
    let r = ctx.block_on(a.next(&ex, &ci, None, None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::Drained { .. }), "{r:?}");
    let run = id("run-build");
    ctx.block_on(a.start(&id("build"), &run, &ex, g.fence))
        .unwrap();
    ctx.block_on(a.heartbeat(&id("build"), &run, &ex, g.fence, 1, None))
        .unwrap();
    let r = ctx
        .block_on(a.succeed(&id("build"), &run, &ex, g.fence, BTreeMap::new()))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let r = ctx.block_on(a.task_next(&ex, &ci, None)).unwrap();
    let g = r.grant().unwrap();
    assert_eq!(g.task.as_str(), "deploy");
    let got = ctx.block_on(a.get(&id("deploy"))).unwrap().unwrap();
    assert_eq!(got.run_id, Some(id("run-deploy")));
}

/// A grant whose lease expired is `next`'s again (a new attempt, a new
/// fence), though it left the ready index when it was granted.
pub fn an_expired_grant_is_next_again<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    ctx.block_on(a.add(&id("job"), spec("job", None, 0, &[])))
        .unwrap();
    let ttl = ctx.short_ttl_ms();
    let r = ctx
        .block_on(a.next(&id("w1"), &[], Some(ttl), None))
        .unwrap();
    let first = r.grant().unwrap();
    ctx.expire(ttl);
    let r = ctx
        .block_on(a.next(&id("w2"), &[], Some(600_000), None))
        .unwrap();
    let second = r.grant().unwrap();
    assert_eq!(second.task.as_str(), "job");
    assert!(second.fence > first.fence);
    assert_eq!(second.attempt, first.attempt + 1);
    let r = ctx
        .block_on(a.complete(&id("job"), &id("w1"), first.fence))
        .unwrap();
    assert!(r.is_refused(), "the first holder's fence is stale: {r:?}");
}

/// `next` passes over however many ready tasks their lock delay holds (up
/// to its scan of [`crate::next::NEXT_SCAN`]) to grant the ready ones behind
/// them: 150 high-priority grants expire unreleased under a long lock delay,
/// and the low-priority tasks are granted, in order, past all of them.
pub fn next_passes_over_many_lock_delayed_tasks<H: Harness>(ctx: &mut Ctx<H>) {
    const HELD: usize = 150;
    let a = ctx.auth();
    let mut graph: Vec<NewNode> = (0..HELD)
        .map(|i| {
            let t = format!("held-{i:03}");
            NewNode {
                task: id(&t),
                spec: spec(&t, None, 10, &[]),
            }
        })
        .collect();
    graph.extend(["z1", "z2", "z3"].map(|t| NewNode {
        task: id(t),
        spec: spec(t, None, 0, &[]),
    }));
    ctx.block_on(a.add_graph(graph)).unwrap().unwrap();
    let ttl = ctx.short_ttl_ms();
    let w = id("w");
    let mut held = BTreeSet::new();
    while held.len() < HELD {
        let r = ctx
            .block_on(a.next(&w, &[], Some(ttl), Some(3_600_000)))
            .unwrap();
        let t = granted(&r);
        assert!(t.as_str().starts_with("held-"), "priority first: {t}");
        assert!(held.insert(t.clone()), "{t} granted twice");
    }
    ctx.expire(ttl);
    let mut after = Vec::new();
    let last = loop {
        let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
        match r.refusal() {
            None => after.push(granted(&r)),
            Some(refused) => break refused.clone(),
        }
    };
    let after: Vec<&str> = after.iter().map(|t| t.as_str()).collect();
    assert_eq!(after, ["z1", "z2", "z3"], "then {last:?}");
    assert!(
        matches!(last, Refusal::NoneReady { .. }),
        "the held tasks become ready again: {last:?}"
    );
    // Now all of them wait in the ready index, ahead of a task added last.
    ctx.block_on(a.add(&id("z4"), spec("z4", None, 0, &[])))
        .unwrap();
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert_eq!(granted(&r).as_str(), "z4");
}

/// A chain hanging below a failed task can never become ready without an
/// operator, however long it is and whichever queue its links are in:
/// `next` answers `drained` (counting every link blocked), not `none_ready`
/// forever. Redispatching the failed task makes the chain move again.
pub fn a_chain_below_a_failed_task_is_drained<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let w = id("w");
    let mut g = vec![node("a", &[])];
    for i in 0..12 {
        let up = if i == 0 {
            "a".to_owned()
        } else {
            format!("l{}", i - 1)
        };
        g.push(node(&format!("l{i}"), &[&up]));
    }
    // The last link in a queue of its own.
    g.push(NewNode {
        task: id("tail"),
        spec: spec("tail", Some("other"), 0, &["l11"]),
    });
    ctx.block_on(a.add_graph(g)).unwrap().unwrap();
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    let grant = r.grant().unwrap();
    assert_eq!(grant.task.as_str(), "a");
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::NoneReady { census } if census.held == 1 && census.queued == 12),
        "{r:?}"
    );
    ctx.block_on(a.fail(&id("a"), &w, grant.fence, None))
        .unwrap();
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::Drained { census } if census.blocked == 12 && census.queued == 0),
        "{r:?}"
    );
    let other = [id("other")];
    let r = ctx
        .block_on(a.next(&w, &other, Some(600_000), None))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::Drained { census } if census.blocked == 1),
        "{r:?}"
    );
    // Every link lists as BLOCKED, not only the one next to `a`.
    let blocked = ctx
        .block_on(a.list_graph(GraphState::Blocked, None, 100))
        .unwrap();
    assert_eq!(blocked.len(), 13, "{blocked:?}");
    // The operator puts `a` back: the chain waits again, it is not drained.
    let r = ctx
        .block_on(a.redispatch(&id("a"), Actor::Operator(id("ops")), 2))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let r = ctx
        .block_on(a.next(&w, &other, Some(600_000), None))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::NoneReady { census } if census.queued == 1),
        "{r:?}"
    );
}

/// A worker waiting for work: `next` kept waiting through `drained` is
/// granted a task added while it waits, where a plain waiting `next` on
/// the same drained queue answers `drained` at once.
pub fn a_worker_waiting_for_work_gets_what_is_added<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let queues = [id("jobs")];
    let taker = crate::graph::Taker::Owner {
        owner: id("w"),
        ttl_ms: Some(600_000),
        lock_delay_ms: None,
    };
    let r = ctx
        .block_on(a.next_waiting(taker.clone(), &queues, 60_000))
        .unwrap();
    assert!(matches!(refusal(&r), Refusal::Drained { .. }), "{r:?}");
    let waiter = {
        let (a, taker, queues) = (a.clone(), taker.clone(), queues.clone());
        ctx.rt
            .spawn(async move { a.next_keep_waiting(taker, &queues, 60_000).await })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the waiter answered a drained queue");
    let added = ctx
        .block_on(a.add(&id("job"), spec("job", Some("jobs"), 0, &[])))
        .unwrap();
    assert!(!added.is_refused(), "{added:?}");
    let r = ctx.block_on(waiter).unwrap().unwrap();
    assert_eq!(granted(&r).as_str(), "job");
    // Without a wait, keep-waiting has nothing to say how long: refused.
    let e = ctx
        .block_on(a.next_as_asked(taker, &queues, None, true))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("keep_waiting"), "{e}");
}

/// A cascading cancel reaches every dependent at any depth that has not
/// ended, from a task cancelled or one that already failed, and leaves
/// tasks that do not depend on it alone.
pub fn a_cascading_cancel_reaches_every_dependent<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let w = id("w");
    let alice = Actor::Operator(id("alice"));
    let g = vec![
        node("root", &[]),
        node("mid", &["root"]),
        node("leaf", &["mid"]),
        node("side", &["root"]),
        node("apart", &[]),
    ];
    ctx.block_on(a.add_graph(g)).unwrap().unwrap();
    // `root` fails for good: everything below it can never run.
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    let grant = r.grant().unwrap();
    assert_eq!(grant.task.as_str(), "apart");
    let r = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    let root = r.grant().unwrap();
    assert_eq!(root.task.as_str(), "root");
    ctx.block_on(a.fail(&id("root"), &w, root.fence, None))
        .unwrap();
    let (first, cascaded) = ctx
        .block_on(a.cancel_cascade(&id("root"), alice, false))
        .unwrap();
    assert!(first.is_refused(), "a FAILED task stays FAILED: {first:?}");
    let mut names: Vec<&str> = cascaded.iter().map(|(t, _)| t.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["leaf", "mid", "side"]);
    for (t, r) in &cascaded {
        assert_eq!(r.record().unwrap().state, State::Cancelled, "{t}: {r:?}");
    }
    let apart = ctx.block_on(a.get(&id("apart"))).unwrap().unwrap();
    assert_eq!(apart.state, State::Claimed, "a task apart is left alone");
    let root = ctx.block_on(a.get(&id("root"))).unwrap().unwrap();
    assert_eq!(root.state, State::Failed);
}

/// A task added to start later is not granted before its start, by claim
/// or by `next`, however high its priority; `next` meanwhile grants what
/// is due, then answers `none_ready` counting it as queued (never
/// `drained`); once the start has come, `next` grants it. An add repeated
/// with another start is the same add.
pub fn a_task_added_to_start_later_is_not_granted_before<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let later = 3 * ttl;
    let w = id("w");
    let put_off = spec("later", None, 9, &[])
        .with_start(Some(crate::graph::Start::AfterMs(later)))
        .unwrap();
    ctx.block_on(a.add(&id("later"), put_off)).unwrap();
    ctx.block_on(a.add(&id("due"), spec("due", None, 0, &[])))
        .unwrap();
    let again = spec("later", None, 9, &[])
        .with_start(Some(crate::graph::Start::AfterMs(10 * later)))
        .unwrap();
    let r = ctx.block_on(a.add(&id("later"), again)).unwrap();
    assert!(r.is_idempotent(), "the same task, another start: {r:?}");
    let r = ctx.block_on(a.claim(&id("later"), &w, Some(ttl))).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::Scheduled { .. }),
        "claimed before its start: {r:?}"
    );
    let r = ctx
        .block_on(a.next(&w, &[], Some(10 * later), None))
        .unwrap();
    assert_eq!(
        granted(&r).as_str(),
        "due",
        "what is due, not what is put off"
    );
    let r = ctx
        .block_on(a.next(&w, &[], Some(10 * later), None))
        .unwrap();
    match refusal(&r) {
        Refusal::NoneReady { census } => assert_eq!(census.queued, 1, "{r:?}"),
        other => panic!("expected none_ready with the task queued: {other:?}"),
    }
    ctx.advance_ms(later + ctx.expiry_margin_ms());
    let r = ctx
        .block_on(a.next(&w, &[], Some(10 * later), None))
        .unwrap();
    assert_eq!(granted(&r).as_str(), "later", "its start has come");
}

/// More tasks put off to a later start than `next` looks at, all of a
/// higher priority, do not keep it from the one task that is due.
pub fn next_grants_what_is_due_behind_many_tasks_put_off<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let hour = crate::graph::Start::AfterMs(3_600_000);
    let mut graph: Vec<NewNode> = (0..crate::next::NEXT_SCAN + 50)
        .map(|i| {
            let t = format!("later-{i:04}");
            NewNode {
                task: id(&t),
                spec: spec(&t, None, 9, &[]).with_start(Some(hour)).unwrap(),
            }
        })
        .collect();
    graph.push(node("due", &[]));
    ctx.block_on(a.add_graph(graph)).unwrap().unwrap();
    let r = ctx
        .block_on(a.next(&id("w"), &[], Some(ctx.short_ttl_ms()), None))
        .unwrap();
    assert_eq!(granted(&r).as_str(), "due", "{r:?}");
}

/// A W3C traceparent given at add is kept with the task and carried on
/// each grant of it (a claim and `next` alike, a later attempt too); the
/// same add from another trace is the same add; a malformed one is
/// refused naming `traceparent`, and adds nothing.
pub fn a_traceparent_given_at_add_is_carried_on_each_grant<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let with = |task: &str, tp: &str| {
        spec(task, Some("traced"), 0, &[])
            .with_traceparent(Some(tp.to_owned()))
            .unwrap()
    };
    let r = ctx
        .block_on(a.add(&id("traced-1"), with("traced-1", tp)))
        .unwrap();
    assert!(!r.is_refused(), "{r:?}");
    let again = "00-11111111111111111111111111111111-2222222222222222-00";
    let r = ctx
        .block_on(a.add(&id("traced-1"), with("traced-1", again)))
        .unwrap();
    assert!(matches!(r, Reply::Acknowledged(_)), "the same add: {r:?}");
    let taker = Taker::Owner {
        owner: id("w"),
        ttl_ms: Some(ctx.short_ttl_ms()),
        lock_delay_ms: None,
    };
    let g = ctx
        .block_on(a.next_for(taker, &[id("traced")]))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(g.traceparent.as_deref(), Some(tp), "on the grant");
    ctx.block_on(a.release(&id("traced-1"), &id("w"), g.fence))
        .unwrap();
    let g = ctx
        .block_on(a.claim(&id("traced-1"), &id("w2"), None))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(g.traceparent.as_deref(), Some(tp), "on a later attempt's");
    let stored = ctx.block_on(a.get(&id("traced-1"))).unwrap().unwrap();
    assert_eq!(
        stored.node.unwrap().spec.traceparent.as_deref(),
        Some(tp),
        "kept with the task"
    );
    for bad in [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ] {
        let e = spec("traced-2", Some("traced"), 0, &[])
            .with_traceparent(Some(bad.to_owned()))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("traceparent"), "{bad}");
        // Sent past the builder, as a client's JSON would be.
        let mut node = spec("traced-2", Some("traced"), 0, &[]);
        node.traceparent = Some(bad.to_owned());
        let e = ctx.block_on(a.add(&id("traced-2"), node)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("traceparent"), "{bad}");
    }
    assert!(ctx.block_on(a.get(&id("traced-2"))).unwrap().is_none());
}

/// How long a queue's longest-waiting task has waited, read through the
/// store's indexes: the earliest ready time across priorities (not the
/// first task `next` would take), a task put off counted once its start
/// has come and not before, nothing of another queue; it moves on as the
/// oldest is granted, and a queue with nothing waiting has none. A
/// server's client says it cannot read an index from outside.
pub fn the_oldest_wait_of_a_queue_is_read_across_priorities<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let q = id("waits");
    if !a.store().capabilities().reads_ready_index {
        let e = ctx.block_on(a.oldest_waiting(&q)).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Unsupported, "{e}");
        return;
    }
    let w = id("w");
    let oldest =
        |ctx: &mut Ctx<H>, queue: &str| ctx.block_on(a.oldest_waiting(&id(queue))).unwrap();
    let ready_at = |ctx: &mut Ctx<H>, t: &str| {
        let r = ctx.block_on(a.get(&id(t))).unwrap().unwrap();
        r.node.and_then(|n| n.ready_at).unwrap()
    };
    assert_eq!(oldest(ctx, "waits"), None, "nothing waits yet");
    let step = 50;
    ctx.block_on(a.add(&id("mid"), spec("mid", Some("waits"), 5, &[])))
        .unwrap();
    ctx.advance_ms(step);
    ctx.block_on(a.add(&id("low"), spec("low", Some("waits"), 0, &[])))
        .unwrap();
    ctx.advance_ms(step);
    ctx.block_on(a.add(&id("high"), spec("high", Some("waits"), 9, &[])))
        .unwrap();
    let later = 3 * ctx.short_ttl_ms();
    let put_off = spec("put-off", Some("waits"), 1, &[])
        .with_start(Some(crate::graph::Start::AfterMs(later)))
        .unwrap();
    ctx.block_on(a.add(&id("put-off"), put_off)).unwrap();
    ctx.block_on(a.add(&id("elsewhere"), spec("elsewhere", Some("other"), 0, &[])))
        .unwrap();
    let mid = ready_at(ctx, "mid");
    assert_eq!(
        oldest(ctx, "waits"),
        Some(mid),
        "the earliest, at a middle priority"
    );
    // `next` takes the highest priority; the oldest still waits.
    let r = ctx
        .block_on(a.next(&w, std::slice::from_ref(&q), Some(600_000), None))
        .unwrap();
    assert_eq!(granted(&r).as_str(), "high");
    assert_eq!(oldest(ctx, "waits"), Some(mid));
    // Granted by name: the next oldest is the lowest priority.
    assert!(
        ctx.block_on(a.claim(&id("mid"), &w, Some(600_000)))
            .unwrap()
            .grant()
            .is_some()
    );
    let low = ready_at(ctx, "low");
    assert_eq!(oldest(ctx, "waits"), Some(low));
    assert_eq!(oldest(ctx, "other"), Some(ready_at(ctx, "elsewhere")));
    assert_eq!(oldest(ctx, "nowhere"), None);
    // The put-off task waits from its start once that has come (later
    // than `low` became ready, so `low` stays the oldest until granted).
    ctx.advance_ms(later + ctx.expiry_margin_ms());
    assert!(
        ctx.block_on(a.claim(&id("low"), &w, Some(600_000)))
            .unwrap()
            .grant()
            .is_some()
    );
    let start = ctx
        .block_on(a.get(&id("put-off")))
        .unwrap()
        .and_then(|r| r.node)
        .and_then(|n| n.not_before)
        .unwrap();
    assert_eq!(oldest(ctx, "waits"), Some(start), "waiting since its start");
    let r = ctx
        .block_on(a.next(&w, std::slice::from_ref(&q), Some(600_000), None))
        .unwrap();
    assert_eq!(granted(&r).as_str(), "put-off");
    assert_eq!(oldest(ctx, "waits"), None, "nothing waits");
}
