//! Real threads racing: one winner per free task, exact counts under compare-and-swap.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// 16 threads race to claim the same 500 tasks: exactly one grant each,
/// every loser told who holds it, every fence unique.
pub fn claim_race_single_winner<H: Harness>(ctx: &mut Ctx<H>) {
    const THREADS: usize = 16;
    const TASKS: usize = 500;
    let tasks: Vec<TaskId> = (0..TASKS).map(|i| id(&format!("race-{i:04}"))).collect();
    let results: Vec<Vec<(TaskId, Id, Reply)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let ctx = &*ctx;
                let tasks = &tasks;
                s.spawn(move || {
                    let a = ctx.auth();
                    let owner = id(&format!("worker-{t}"));
                    // Each thread walks the tasks from its own offset, so the races differ.
                    (0..TASKS)
                        .map(|i| {
                            let task = &tasks[(i + t * 31) % TASKS];
                            let r = ctx.block_on(a.claim(task, &owner, Some(600_000))).unwrap();
                            (task.clone(), owner.clone(), r)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut winners: HashMap<TaskId, (Id, u64)> = HashMap::new();
    let mut fences = BTreeSet::new();
    for (task, owner, r) in results.iter().flatten() {
        if let Some(g) = r.grant() {
            assert!(
                winners
                    .insert(task.clone(), (owner.clone(), g.fence))
                    .is_none(),
                "{task} granted twice"
            );
            assert!(fences.insert(g.fence), "fence {} issued twice", g.fence);
        }
    }
    assert_eq!(winners.len(), TASKS, "every task has exactly one winner");
    for (task, _owner, r) in results.iter().flatten() {
        if let Some(Refusal::Held { holder, fence, .. }) = r.refusal() {
            let (w, f) = &winners[task];
            assert_eq!((holder, fence), (w, f), "a loser learns who holds {task}");
        } else {
            assert!(
                r.grant().is_some(),
                "a claim either wins or is told `held`: {r:?}"
            );
        }
    }
    let a = ctx.auth();
    for (task, (owner, f)) in &winners {
        let h = ctx.block_on(a.holder(task)).unwrap().unwrap().unwrap();
        assert_eq!((&h.grant.owner, h.grant.fence, h.live), (owner, *f, true));
    }
}

/// 8 workers x 50 metadata updates guarded by `expected_revision`,
/// retried on `precondition_failed`: exactly 400 revisions.
pub fn revision_race_exact_count<H: Harness>(ctx: &mut Ctx<H>) {
    const WORKERS: usize = 8;
    const UPDATES: usize = 50;
    let a = ctx.auth();
    let task = id("counter");
    let first = ctx
        .block_on(a.claim(&task, &id("setup"), Some(600_000)))
        .unwrap();
    let start_rev = first.record().unwrap().revision;
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let ctx = &*ctx;
            let task = &task;
            s.spawn(move || {
                let a = ctx.auth();
                let me = id(&format!("w{w}"));
                for u in 0..UPDATES {
                    let mut tries = 0;
                    loop {
                        tries += 1;
                        assert!(tries < 100_000, "update never landed");
                        let rev = ctx.block_on(a.get(task)).unwrap().unwrap().revision;
                        let pre = Preconditions {
                            expected_revision: Some(rev),
                            ..Default::default()
                        };
                        let meta = BTreeMap::from([(format!("w{w}"), json!(u))]);
                        match ctx.block_on(a.annotate(task, &me, meta, pre)).unwrap() {
                            Reply::Committed(r) => {
                                assert_eq!(r.revision, rev + 1);
                                break;
                            }
                            Reply::Refused(Refusal::PreconditionFailed { which, .. }) => {
                                assert_eq!(which, "expected_revision")
                            }
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                }
            });
        }
    });
    let r = ctx.block_on(a.get(&task)).unwrap().unwrap();
    assert_eq!(r.revision, start_rev + (WORKERS * UPDATES) as u64);
    let annotated = ctx
        .task_events(&task)
        .iter()
        .filter(|e| e.kind == EventKind::Annotated)
        .count();
    assert_eq!(annotated, WORKERS * UPDATES);
    for w in 0..WORKERS {
        assert_eq!(r.metadata[&format!("w{w}")], json!(UPDATES - 1));
    }
}
