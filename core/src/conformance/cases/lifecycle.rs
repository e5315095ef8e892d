//! The lease lifecycle: repeats, finality, stalls and attempts, deadlines, release and recovery, operators.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// The same terminal request by the same grant is acknowledged with
/// the first outcome; a different late terminal is refused and audited.
pub fn idempotent_repeats<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let w = id("w");
    // complete twice
    let t = id("done-twice");
    let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
    let first = ctx.block_on(a.complete(&t, &w, f)).unwrap();
    assert!(matches!(first, Reply::Committed(_)));
    let again = ctx.block_on(a.complete(&t, &w, f)).unwrap();
    assert!(again.is_idempotent(), "{again:?}");
    assert_eq!(again.record(), first.record());
    let late = ctx.block_on(a.fail(&t, &w, f, None)).unwrap();
    assert!(matches!(
        refusal(&late),
        Refusal::IllegalTransition {
            state: State::Succeeded,
            ..
        }
    ));
    assert_eq!(
        ctx.task_events(&t).last().unwrap().kind,
        EventKind::ConflictRefused
    );
    // fail twice: the first error stands
    let t = id("failed-twice");
    let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
    ctx.block_on(a.fail(&t, &w, f, Some(json!({"first": 1}))))
        .unwrap();
    let again = ctx
        .block_on(a.fail(&t, &w, f, Some(json!({"second": 2}))))
        .unwrap();
    assert!(again.is_idempotent());
    assert_eq!(again.record().unwrap().error, Some(json!({"first": 1})));
    // cancel twice
    let t = id("cancel-twice");
    let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
    assert!(matches!(
        ctx.block_on(a.cancel(&t, &w, f)).unwrap(),
        Reply::Committed(_)
    ));
    assert!(ctx.block_on(a.cancel(&t, &w, f)).unwrap().is_idempotent());
    assert!(
        ctx.block_on(a.cancel_as(&t, Actor::Operator(id("op"))))
            .unwrap()
            .is_idempotent()
    );
    // succeed twice: evidence is immutable once recorded
    let t = id("succeed-twice");
    let run = id("run");
    ctx.block_on(a.declare(manifest(t.as_str(), 1, &["log"], 60, 1)))
        .unwrap();
    ctx.block_on(a.register(&t, &run)).unwrap();
    let f = fence(&ctx.block_on(a.task_claim(&t, &run, &w, None)).unwrap());
    ctx.block_on(a.start(&t, &run, &w, f)).unwrap();
    let ev1 = BTreeMap::from([("log".to_owned(), hash('a'))]);
    let ev2 = BTreeMap::from([("log".to_owned(), hash('b'))]);
    assert!(matches!(
        ctx.block_on(a.succeed(&t, &run, &w, f, ev1.clone()))
            .unwrap(),
        Reply::Committed(_)
    ));
    let again = ctx
        .block_on(a.succeed(&t, &run, &w, f, ev2.clone()))
        .unwrap();
    assert!(again.is_idempotent());
    assert_eq!(again.record().unwrap().evidence, ev1);
    assert_eq!(again.evidence_ignored(&ev2), vec!["log".to_owned()]);
    assert!(again.evidence_ignored(&ev1).is_empty());
    assert_eq!(ctx.block_on(a.get(&t)).unwrap().unwrap().evidence, ev1);
}

/// A request the decision finds invalid inside the store's commit (a
/// lease that would end past what a timestamp holds) is refused as
/// invalid, writes nothing, and the same store handle goes on serving.
pub fn a_bad_request_leaves_the_store_serving<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w) = (id("end-of-time"), id("w"));
    if let TestClock::Manual(c) = &ctx.clock {
        let now = c.now();
        c.set(crate::time::Timestamp(
            crate::time::Timestamp::MAX.as_millis() - 1000,
        ));
        let e = ctx.block_on(a.claim(&t, &w, Some(60_000))).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Invalid, "{e}");
        assert_eq!(e.field.as_deref(), Some("ttl"), "{e}");
        c.set(now);
    }
    let huge = Manifest::from_value(&json!({
        "task_id": "huge", "executor": "ci", "source_branch": "main", "source_oid": "0",
        "target_version": "1", "steps": ["a"], "heartbeat_timeout_seconds": 300_000_000_000u64,
    }))
    .unwrap_err();
    assert_eq!(huge.field.as_deref(), Some("heartbeat_timeout_seconds"));
    assert!(
        ctx.block_on(a.get(&t)).unwrap().is_none(),
        "nothing was written"
    );
    for i in 0..3 {
        let g = ctx
            .block_on(a.claim(&id(&format!("after-{i}")), &w, None))
            .unwrap();
        assert!(g.grant().is_some(), "the store still grants: {g:?}");
    }
}

/// A SUCCEEDED task is never granted again: not by claim, recover or
/// redispatch, not after its lease would have expired.
pub fn completed_never_granted_again<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w, other) = (id("final"), id("w"), id("other"));
    let ttl = ctx.short_ttl_ms();
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
    ctx.block_on(a.complete(&t, &w, f)).unwrap();
    ctx.expire(ttl);
    for owner in [&w, &other] {
        assert_eq!(
            refusal(&ctx.block_on(a.claim(&t, owner, None)).unwrap()),
            &Refusal::Completed
        );
        assert_eq!(
            refusal(&ctx.block_on(a.recover(&t, owner, None)).unwrap()),
            &Refusal::Completed
        );
    }
    let r = ctx
        .block_on(a.redispatch(&t, Actor::Operator(id("op")), 2))
        .unwrap();
    assert_eq!(refusal(&r), &Refusal::Completed);
    let r = ctx
        .block_on(a.finalize(&t, Actor::Operator(id("op")), None))
        .unwrap();
    assert_eq!(refusal(&r), &Refusal::Completed);
    let rec = ctx.block_on(a.get(&t)).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.current_fence()),
        (State::Succeeded, Some(f))
    );
}

/// Bare tasks are reclaimable after any number of stalls; a declared
/// task stalls for good after `max_attempts` (default 1). The three tasks
/// go round in step, so that one wait serves each round of all three.
pub fn stalls_and_max_attempts<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let hb_s = ttl.div_ceil(1000);
    let bare = id("bare-stalls");
    let run = id("run");
    // Default max_attempts = 1: one stall and the task is STALLED.
    let once = id("declared-once");
    // max_attempts = 3: two stalls are survived, the third ends it.
    let thrice = id("declared-thrice");
    for (t, max) in [(&once, 1), (&thrice, 3)] {
        ctx.block_on(a.declare(manifest(t.as_str(), 1, &[], hb_s, max)))
            .unwrap();
        ctx.block_on(a.register(t, &run)).unwrap();
    }
    let mut last = 0;
    for round in 1..=4u32 {
        let g = ctx
            .block_on(a.claim(&bare, &id(&format!("w{round}")), Some(ttl)))
            .unwrap()
            .grant()
            .unwrap();
        assert_eq!(g.attempt, u64::from(round));
        assert!(g.fence > last);
        last = g.fence;
        if round == 1 {
            ctx.block_on(a.task_claim(&once, &run, &id("w1"), None))
                .unwrap()
                .grant()
                .unwrap();
        }
        if round <= 3 {
            let g = ctx
                .block_on(a.task_claim(&thrice, &run, &id("w"), None))
                .unwrap()
                .grant()
                .unwrap();
            assert_eq!(g.attempt, u64::from(round));
        }
        // Past the bare lease and the declared tasks' heartbeat alike.
        ctx.expire(ttl.max(hb_s * 1000));
        let rec = ctx.block_on(a.get(&bare)).unwrap().unwrap();
        assert_eq!((rec.state, rec.stalls), (State::Registered, round));
        if round == 1 {
            assert_eq!(
                ctx.block_on(a.get(&once)).unwrap().unwrap().state,
                State::Stalled
            );
            let r = ctx
                .block_on(a.task_claim(&once, &run, &id("w2"), None))
                .unwrap();
            assert!(matches!(
                refusal(&r),
                Refusal::IllegalTransition {
                    state: State::Stalled,
                    ..
                }
            ));
        }
        if round <= 3 {
            let rec = ctx.block_on(a.get(&thrice)).unwrap().unwrap();
            let want = if round < 3 {
                State::Registered
            } else {
                State::Stalled
            };
            assert_eq!((rec.state, rec.stalls), (want, round));
        }
    }
    let stalled: Vec<_> = ctx
        .task_events(&once)
        .into_iter()
        .filter(|e| e.kind == EventKind::Stalled)
        .collect();
    assert_eq!(
        stalled.len(),
        1,
        "the stall was persisted once, by the next write"
    );
}

/// A retried task's start deadline counts from the retry, so it does not
/// fall straight back to NOT_STARTED.
pub fn retried_task_counts_deadline_from_retry<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let t = id("retry-me");
    let deadline_s = ctx.short_ttl_ms().div_ceil(1000) + 1;
    let mut m = manifest(t.as_str(), 1, &[], 60, 1);
    m.start_deadline_seconds = deadline_s;
    ctx.block_on(a.declare(m)).unwrap();
    ctx.block_on(a.register(&t, &id("run-1"))).unwrap();
    ctx.expire(deadline_s * 1000);
    assert_eq!(
        ctx.block_on(a.get(&t)).unwrap().unwrap().state,
        State::NotStarted
    );
    let r = ctx.block_on(a.retry(&t, &id("run-2"))).unwrap();
    let rec = r.record().unwrap();
    assert_eq!(
        (rec.state, rec.run_id.clone()),
        (State::Registered, Some(id("run-2")))
    );
    assert_eq!(
        ctx.block_on(a.get(&t)).unwrap().unwrap().state,
        State::Registered
    );
    assert!(
        ctx.task_events(&t)
            .iter()
            .any(|e| e.kind == EventKind::Retried)
    );
    let r = ctx.block_on(a.retry(&t, &id("run-3"))).unwrap();
    assert!(matches!(
        refusal(&r),
        Refusal::IllegalTransition {
            state: State::Registered,
            ..
        }
    ));
    let g = ctx
        .block_on(a.task_claim(&t, &id("run-2"), &id("w"), None))
        .unwrap();
    assert!(g.grant().is_some());
}

/// redispatch, finalize and an operator cancel refuse a non-operator.
pub fn operator_requests_need_an_operator<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w) = (id("ops"), id("w"));
    let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
    ctx.block_on(a.fail(&t, &w, f, None)).unwrap();
    let before = ctx.block_on(a.get(&t)).unwrap().unwrap();
    let worker = Actor::Worker(w.clone());
    let r = ctx.block_on(a.redispatch(&t, worker.clone(), 2)).unwrap();
    assert!(matches!(refusal(&r), Refusal::OperatorRequired { .. }));
    let r = ctx.block_on(a.finalize(&t, worker.clone(), None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::OperatorRequired { .. }));
    let r = ctx.block_on(a.cancel_as(&t, worker)).unwrap();
    assert!(matches!(refusal(&r), Refusal::OperatorRequired { .. }));
    assert_eq!(ctx.block_on(a.get(&t)).unwrap().unwrap(), before);
    let r = ctx
        .block_on(a.redispatch(&t, Actor::Operator(id("alice")), 2))
        .unwrap();
    assert_eq!(r.record().unwrap().state, State::Registered);
}

/// Renew after expiry is refused even if nobody took the task.
pub fn renew_after_expiry_refused<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let (t, w) = (id("late-renew"), id("w"));
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
    assert!(
        !ctx.block_on(a.renew(&t, &w, f, Some(ttl)))
            .unwrap()
            .is_refused()
    );
    ctx.expire(ttl);
    let r = ctx.block_on(a.renew(&t, &w, f, None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::LeaseExpired { fence, .. } if *fence == f));
    let r = ctx.block_on(a.complete(&t, &w, f)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::LeaseExpired { .. }),
        "nor completed late"
    );
    assert_eq!(
        ctx.block_on(a.get(&t)).unwrap().unwrap().state,
        State::Registered
    );
    let r = ctx.block_on(a.renew(&id("nobody"), &w, f, None)).unwrap();
    assert_eq!(refusal(&r), &Refusal::NotFound);
}

/// release returns the task without charging a stall; recover takes over
/// only an expired lease.
pub fn release_and_recover<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let (t, w, x) = (id("rr"), id("w"), id("x"));
    let g = ctx
        .block_on(a.claim(&t, &w, Some(ttl)))
        .unwrap()
        .grant()
        .unwrap();
    let r = ctx.block_on(a.release(&t, &x, g.fence)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::NotHolder { .. }),
        "only the holder releases"
    );
    let r = ctx.block_on(a.release(&t, &w, g.fence)).unwrap();
    let rec = r.record().unwrap();
    assert_eq!((rec.state, rec.stalls), (State::Registered, 0));
    let g2 = ctx
        .block_on(a.claim(&t, &x, Some(ttl)))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(g2.attempt, g.attempt + 1);
    let r = ctx.block_on(a.recover(&t, &w, None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::LeaseLive { holder, .. } if holder == &x));
    ctx.expire(ttl);
    let g3 = ctx
        .block_on(a.recover(&t, &w, Some(ttl)))
        .unwrap()
        .grant()
        .unwrap();
    assert!(g3.fence > g2.fence);
    assert_eq!((g3.owner.clone(), g3.attempt), (w.clone(), g2.attempt + 1));
    let r = ctx.block_on(a.complete(&t, &x, g2.fence)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::StaleFence { .. }),
        "the late worker cannot complete"
    );
    assert!(
        ctx.task_events(&t)
            .iter()
            .any(|e| e.kind == EventKind::Recovered)
    );
}

/// redispatch moves a finished task to a new iteration (stalls reset,
/// next claim a new attempt); finalize fails anything but SUCCEEDED.
pub fn redispatch_and_finalize<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let op = Actor::Operator(id("alice"));
    let (t, w) = (id("rd"), id("w"));
    let g = ctx
        .block_on(a.claim(&t, &w, None))
        .unwrap()
        .grant()
        .unwrap();
    let r = ctx.block_on(a.redispatch(&t, op.clone(), 2)).unwrap();
    assert!(matches!(
        refusal(&r),
        Refusal::IllegalTransition {
            state: State::Claimed,
            ..
        }
    ));
    ctx.block_on(a.fail(&t, &w, g.fence, Some(json!({"e": 1}))))
        .unwrap();
    let r = ctx.block_on(a.redispatch(&t, op.clone(), 1)).unwrap();
    assert_eq!(
        refusal(&r),
        &Refusal::IterationNotAdvanced {
            iteration: 1,
            current_iteration: 1
        }
    );
    let r = ctx.block_on(a.redispatch(&t, op.clone(), 2)).unwrap();
    let rec = r.record().unwrap();
    assert_eq!(
        (rec.state, rec.iteration, rec.stalls, rec.error.clone()),
        (State::Registered, 2, 0, None)
    );
    let g2 = ctx
        .block_on(a.claim(&t, &w, None))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(g2.attempt, g.attempt + 1);
    assert!(g2.fence > g.fence);
    let r = ctx
        .block_on(a.finalize(&t, op.clone(), Some(json!({"why": "budget"}))))
        .unwrap();
    let rec = r.record().unwrap();
    assert_eq!(
        (rec.state, rec.error.clone()),
        (State::Failed, Some(json!({"why": "budget"})))
    );
    assert!(
        ctx.block_on(a.finalize(&t, op.clone(), None))
            .unwrap()
            .is_idempotent()
    );
    let r = ctx.block_on(a.complete(&t, &w, g2.fence)).unwrap();
    assert!(r.is_refused(), "a worker never walks back a terminal");
    let r = ctx.block_on(a.cancel_as(&id("nobody"), op)).unwrap();
    assert_eq!(refusal(&r), &Refusal::NotFound);
}

/// An operator's cancel of a held task asks its holder to stop: the holder
/// sees the request in its renewal's answer and keeps its lease, and the
/// task becomes CANCELLED when the holder gives it back or its lease ends.
/// A forced cancel ends it at once; a task nobody holds is cancelled at once.
pub fn cancel_is_cooperative<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let (w, x) = (id("w"), id("x"));
    let alice = Actor::Operator(id("alice"));
    // Given back after the request.
    let t = id("coop");
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(600_000))).unwrap());
    let r = ctx.block_on(a.cancel_as(&t, alice.clone())).unwrap();
    let rec = r.record().unwrap();
    assert_eq!(rec.state, State::Claimed, "{r:?}");
    // An operator asked (through a server, the one its token names).
    assert!(
        matches!(
            rec.cancel_requested.as_ref().unwrap().by,
            Actor::Operator(_)
        ),
        "{rec:?}"
    );
    let again = ctx.block_on(a.cancel_as(&t, alice.clone())).unwrap();
    assert!(again.is_idempotent(), "{again:?}");
    let r = ctx.block_on(a.renew(&t, &w, f, None)).unwrap();
    assert!(r.record().unwrap().cancel_requested.is_some(), "{r:?}");
    let r = ctx.block_on(a.claim(&t, &x, None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::Held { .. }), "{r:?}");
    let r = ctx.block_on(a.release(&t, &w, f)).unwrap();
    assert_eq!(r.record().unwrap().state, State::Cancelled, "{r:?}");
    let kinds: Vec<EventKind> = ctx.task_events(&t).iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::CancelRequested), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&EventKind::Cancelled), "{kinds:?}");
    // Its lease left to run out: cancelled when it ended, never granted again.
    let t = id("coop-lapsed");
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
    ctx.block_on(a.cancel_as(&t, alice.clone())).unwrap();
    ctx.expire(ttl);
    let r = ctx.block_on(a.claim(&t, &x, None)).unwrap();
    assert!(
        matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                state: State::Cancelled,
                ..
            }
        ),
        "{r:?}"
    );
    let r = ctx.block_on(a.renew(&t, &w, f, None)).unwrap();
    assert!(r.is_refused(), "{r:?}");
    assert_eq!(
        ctx.block_on(a.get(&t)).unwrap().unwrap().state,
        State::Cancelled
    );
    // Forced: at once, and the holder's report after it is refused.
    let t = id("coop-forced");
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(600_000))).unwrap());
    let r = ctx
        .block_on(a.cancel_with(&t, alice.clone(), true))
        .unwrap();
    assert_eq!(r.record().unwrap().state, State::Cancelled, "{r:?}");
    let r = ctx.block_on(a.complete(&t, &w, f)).unwrap();
    assert!(r.is_refused(), "{r:?}");
    // Nobody holds it: at once.
    let t = id("coop-idle");
    let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
    ctx.block_on(a.release(&t, &w, f)).unwrap();
    let r = ctx.block_on(a.cancel_as(&t, alice)).unwrap();
    assert_eq!(r.record().unwrap().state, State::Cancelled, "{r:?}");
}

/// Every event of the store, in order (all pages).
fn all_events<H: Harness>(ctx: &Ctx<H>, task: Option<&TaskId>) -> Vec<Event> {
    let a = ctx.auth();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = ctx
            .block_on(a.events(task, cursor.as_deref(), 1000))
            .unwrap();
        out.extend(page.items);
        match page.next {
            Some(n) => cursor = Some(n),
            None => return out,
        }
    }
}

/// Retention: tasks that ended before the window are pruned (their
/// bodies and events gone, a tombstone kept), in batches, through the
/// index (a second pass finds nothing); tasks live or ended within the
/// window are untouched. A pruned id is refused `pruned` to every request,
/// a dependent added after it sees its success, the fence counter and the
/// event sequence go on past every number given before, and only an
/// operator (or the system) may prune.
pub fn retention_prunes_ended_tasks_and_keeps_tombstones<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let w = id("w");
    let alice = Actor::Operator(id("alice"));
    let mut fences = Vec::new();
    // 70 ended tasks (more than one batch), three ways.
    for i in 0..70 {
        let t = id(&format!("old-{i:02}"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        fences.push(f);
        let r = match i % 3 {
            0 => ctx.block_on(a.complete(&t, &w, f)),
            1 => ctx.block_on(a.fail(&t, &w, f, Some(json!({"exit": 1})))),
            _ => ctx.block_on(a.cancel(&t, &w, f)),
        }
        .unwrap();
        assert!(r.record().is_some_and(|r| r.state.is_terminal()), "{r:?}");
    }
    let live = id("still-running");
    let live_fence = fence(&ctx.block_on(a.claim(&live, &w, Some(600_000))).unwrap());
    let before = all_events(ctx, None);
    let top_seq = before.iter().map(|e| e.seq).max().unwrap();
    let window = 2 * ctx.short_ttl_ms();
    ctx.advance_ms(window + ctx.expiry_margin_ms());
    // Ended within the window: kept.
    let recent = id("recent");
    let f = fence(&ctx.block_on(a.claim(&recent, &w, None)).unwrap());
    ctx.block_on(a.complete(&recent, &w, f)).unwrap();
    let r = ctx.block_on(a.prune(Actor::Worker(w.clone()), window, 1000));
    assert!(r.is_err(), "a worker prunes nothing: {r:?}");
    assert!(!all_events(ctx, Some(&id("old-00"))).is_empty());
    let pruned = ctx.block_on(a.prune(alice.clone(), window, 1000)).unwrap();
    assert_eq!(pruned, 70, "every task that ended before the window");
    assert_eq!(
        ctx.block_on(a.prune(alice.clone(), window, 1000)).unwrap(),
        0,
        "a second pass finds nothing"
    );
    for i in [0, 1, 2, 69] {
        let t = id(&format!("old-{i:02}"));
        let r = ctx
            .block_on(a.get(&t))
            .unwrap()
            .expect("the tombstone stays");
        assert!(r.pruned_at.is_some() && r.state.is_terminal(), "{r:?}");
        assert!(r.evidence.is_empty() && r.error.is_none() && r.node.is_none());
        assert_eq!(r.current_fence(), Some(fences[i]), "its fence stays");
        assert!(
            all_events(ctx, Some(&t)).is_empty(),
            "{t}: its events are gone"
        );
        let again = ctx.block_on(a.claim(&t, &w, None)).unwrap();
        assert!(
            matches!(refusal(&again), Refusal::Pruned { .. }),
            "a pruned id is never granted again: {again:?}"
        );
    }
    for t in [&live, &recent] {
        let r = ctx.block_on(a.get(t)).unwrap().unwrap();
        assert!(r.pruned_at.is_none(), "{r:?}");
        assert!(!all_events(ctx, Some(t)).is_empty());
    }
    // A dependent added after its pruned dependency sees the success.
    ctx.block_on(a.add(
        &id("after-old"),
        crate::graph::NodeSpec::new(&id("after-old"), None, 0, [id("old-00")]).unwrap(),
    ))
    .unwrap();
    let g = ctx.block_on(a.next(&w, &[], Some(600_000), None)).unwrap();
    assert_eq!(
        g.grant().map(|g| g.task.to_string()).as_deref(),
        Some("after-old"),
        "{g:?}"
    );
    // Fences and the event sequence go on past every number given out.
    let newest = g.grant().unwrap().fence;
    assert!(
        newest > live_fence && fences.iter().all(|f| newest > *f),
        "{newest} after {fences:?}"
    );
    let after = all_events(ctx, None);
    let newest_seq = after.iter().map(|e| e.seq).max().unwrap();
    assert!(newest_seq > top_seq, "{newest_seq} after {top_seq}");
    let seqs: Vec<u64> = after.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "one order: {seqs:?}");
}

/// Retention that forgets: tombstones made by a prune with
/// `forget_after` are removed by a pass whose cutoff passed their time
/// (not before, and only by an operator or the system), with their counts;
/// a tombstone made without it stays for ever. A forgotten id is free
/// again and granted under a fence past every one given before, and the
/// event sequence never goes back.
pub fn retention_forgets_tombstones_when_their_time_comes<H: Harness>(ctx: &mut Ctx<H>) {
    use crate::counts::{Counts, count_records};
    let a = ctx.auth();
    let w = id("w");
    let alice = Actor::Operator(id("alice"));
    let window = 2 * ctx.short_ttl_ms();
    let margin = ctx.expiry_margin_ms();
    let ended = |ctx: &mut Ctx<H>, t: &TaskId| {
        let a = ctx.auth();
        let f = fence(&ctx.block_on(a.claim(t, &w, None)).unwrap());
        ctx.block_on(a.complete(t, &w, f)).unwrap();
        f
    };
    // Counted as the store keeps it and as a recount of what it holds.
    let counted = |ctx: &mut Ctx<H>| {
        let a = ctx.auth();
        let records = ctx.stored_records();
        let kept = ctx.block_on(a.store().counts()).unwrap();
        let kept = kept.map(|k| Counts::of_stored(k).queues);
        let recount = Counts::of_stored(count_records(&records)).queues;
        if let Some(kept) = kept {
            assert_eq!(kept, recount, "kept counts");
        }
        records.len()
    };
    // A tombstone made without a time to go.
    let kept = id("kept-forever");
    let mut fences = vec![ended(ctx, &kept)];
    ctx.advance_ms(window + margin);
    let p = ctx
        .block_on(a.prune_and_forget(alice.clone(), window, None, 1000))
        .unwrap();
    assert_eq!((p.pruned, p.forgotten), (1, 0));
    // 70 tasks (more than one batch) pruned with one.
    let olds: Vec<TaskId> = (0..70).map(|i| id(&format!("gone-{i:02}"))).collect();
    for t in &olds {
        fences.push(ended(ctx, t));
    }
    let top_seq = all_events(ctx, None).iter().map(|e| e.seq).max().unwrap();
    ctx.advance_ms(window + margin);
    let forget = 3 * ctx.short_ttl_ms();
    let p = ctx
        .block_on(a.prune_and_forget(alice.clone(), window, Some(forget), 1000))
        .unwrap();
    assert_eq!(
        (p.pruned, p.forgotten),
        (70, 0),
        "pruned, none forgotten yet"
    );
    let r = ctx.block_on(a.get(&olds[0])).unwrap().expect("a tombstone");
    let (pruned_at, forget_at) = (r.pruned_at.unwrap(), r.forget_at.unwrap());
    assert!(forget_at > pruned_at, "{r:?}");
    assert_eq!(counted(ctx), 71);
    // Not before its time: a pass now forgets nothing.
    let p = ctx
        .block_on(a.prune_and_forget(alice.clone(), window, None, 1000))
        .unwrap();
    assert_eq!((p.pruned, p.forgotten), (0, 0), "not yet");
    ctx.advance_ms(forget + margin);
    // Only an operator's (or the system's) pass forgets.
    let r = ctx.block_on(a.prune_and_forget(Actor::Worker(w.clone()), window, None, 1000));
    assert!(r.is_err(), "a worker forgets nothing: {r:?}");
    assert!(ctx.block_on(a.get(&olds[0])).unwrap().is_some());
    // Its time came: any pass forgets it, with or without forget_after.
    let p = ctx
        .block_on(a.prune_and_forget(alice.clone(), window, None, 1000))
        .unwrap();
    assert_eq!((p.pruned, p.forgotten), (0, 70), "every marked tombstone");
    let p = ctx
        .block_on(a.prune_and_forget(alice.clone(), window, None, 1000))
        .unwrap();
    assert_eq!(
        (p.pruned, p.forgotten),
        (0, 0),
        "a second pass finds nothing"
    );
    assert_eq!(counted(ctx), 1, "only the unmarked tombstone is left");
    for t in [&olds[0], &olds[35], &olds[69]] {
        assert!(ctx.block_on(a.get(t)).unwrap().is_none(), "{t} forgotten");
    }
    let r = ctx.block_on(a.get(&kept)).unwrap().expect("kept for ever");
    assert!(r.pruned_at.is_some() && r.forget_at.is_none(), "{r:?}");
    assert!(matches!(
        refusal(&ctx.block_on(a.claim(&kept, &w, None)).unwrap()),
        Refusal::Pruned { .. }
    ));
    // A forgotten id is free again: granted anew, under a fence past every
    // fence given before, its events numbered after every earlier one.
    let g = ctx.block_on(a.claim(&olds[0], &w, None)).unwrap();
    let again = fence(&g);
    assert!(
        fences.iter().all(|f| again > *f),
        "{again} after {fences:?}"
    );
    let r = ctx.block_on(a.get(&olds[0])).unwrap().unwrap();
    assert_eq!((r.attempt, r.pruned_at), (1, None), "a new task: {r:?}");
    let seqs: Vec<u64> = all_events(ctx, Some(&olds[0]))
        .iter()
        .map(|e| e.seq)
        .collect();
    assert!(
        seqs.iter().all(|s| *s > top_seq),
        "{seqs:?} after {top_seq}"
    );
}
