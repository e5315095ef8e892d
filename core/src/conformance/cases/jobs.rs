//! The job features on the work graph: retries with backoff, schedules,
//! concurrency keys, queue policies, and the records that hold settings.

use super::graph::*;
use crate::conformance::fixtures::*;
use crate::conformance::*;
use crate::workgraph::GraphState;

/// A task with a retry policy: a failed attempt puts it off by the
/// policy's wait (RETRY_SCHEDULED, the failure's error kept), during which
/// neither a claim nor `next` gets it; then it is granted as a new attempt;
/// the waits grow; the last attempt's failure is final. The holder's repeat
/// of a failure that was retried is an acknowledgement.
pub fn a_failed_attempt_is_retried_after_its_backoff<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let policy = crate::graph::RetryPolicy {
        max_attempts: 3,
        backoff_ms: ttl,
        factor: crate::graph::Factor::whole(2),
        max_backoff_ms: 10 * ttl,
    };
    let t = id("flaky");
    let w = id("w");
    let spec = spec("flaky", None, 0, &[])
        .with_retry(Some(policy))
        .unwrap();
    ctx.block_on(a.add(&t, spec)).unwrap();
    for attempt in 1..=3u64 {
        let g = ctx
            .block_on(a.next(&w, &[], Some(10 * ttl), None))
            .unwrap()
            .grant()
            .unwrap_or_else(|| panic!("attempt {attempt} not granted"));
        assert_eq!(g.attempt, attempt);
        let error = json!({"try": attempt});
        let r = ctx
            .block_on(a.fail(&t, &w, g.fence, Some(error.clone())))
            .unwrap();
        let rec = r.record().unwrap().clone();
        if attempt == 3 {
            assert_eq!(
                rec.state,
                State::Failed,
                "the last attempt's failure is final"
            );
            break;
        }
        assert_eq!(rec.state, State::Registered, "{r:?}");
        assert_eq!(rec.error, Some(error));
        let again = ctx.block_on(a.fail(&t, &w, g.fence, None)).unwrap();
        assert!(again.is_idempotent(), "a repeat of the report: {again:?}");
        let r = ctx.block_on(a.claim(&t, &id("v"), Some(ttl))).unwrap();
        assert!(matches!(refusal(&r), Refusal::Scheduled { .. }), "{r:?}");
        let r = ctx.block_on(a.next(&w, &[], Some(ttl), None)).unwrap();
        assert!(matches!(refusal(&r), Refusal::NoneReady { .. }), "{r:?}");
        // The wait grows by the factor, give or take a quarter.
        let wait = ttl * 2u64.pow(u32::try_from(attempt - 1).unwrap());
        ctx.advance_ms(wait + wait / 4 + ctx.expiry_margin_ms());
    }
    let events = ctx.block_on(a.events(Some(&t), None, 100)).unwrap().items;
    let retried = events
        .iter()
        .filter(|e| e.kind == EventKind::RetryScheduled)
        .count();
    assert_eq!(retried, 2, "{events:?}");
}

/// Four schedulers tick at once: the tasks they made between them.
fn four_schedulers_tick<H: Harness>(ctx: &Ctx<H>, a: &crate::Authority<H::Store>) -> Vec<TaskId> {
    let (t1, t2, t3, t4) = ctx.block_on(async {
        tokio::join!(
            a.tick_schedules(),
            a.tick_schedules(),
            a.tick_schedules(),
            a.tick_schedules()
        )
    });
    [t1, t2, t3, t4]
        .into_iter()
        .flat_map(|r| r.unwrap().into_iter().map(|(t, _)| t))
        .collect()
}

/// A recurring schedule enqueues exactly one task per period however many
/// schedulers tick at once (the store decides the add of the period's one
/// id); its record is never granted; an operator's cancel stops it.
pub fn a_schedule_enqueues_one_task_per_period_however_many_tick<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let every = 3 * ctx.short_ttl_ms();
    let q = id("nightly-q");
    let template = spec("nightly", Some("nightly-q"), 0, &[]);
    let r = ctx
        .block_on(a.schedule("nightly", every, template.clone()))
        .unwrap();
    assert_eq!(
        r.record().map(|r| r.state),
        Some(State::Registered),
        "{r:?}"
    );
    assert!(
        ctx.block_on(a.schedule("nightly", every, template.clone()))
            .unwrap()
            .is_idempotent()
    );
    let r = ctx
        .block_on(a.claim(&id("schedule:nightly"), &id("w"), None))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::IllegalTransition { .. }),
        "a schedule is never granted: {r:?}"
    );
    let made = |ctx: &mut Ctx<H>| -> usize { four_schedulers_tick(ctx, &a).len() };
    assert_eq!(made(ctx), 1, "one task for the first period");
    assert_eq!(made(ctx), 0, "none more in the same period");
    ctx.advance_ms(every);
    assert_eq!(made(ctx), 1, "one for the next period");
    let graph = ctx
        .block_on(a.list_graph(GraphState::Ready, Some(&q), 100))
        .unwrap();
    let names: Vec<&str> = graph.iter().map(|n| n.task.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("nightly@")), "{names:?}");
    let r = ctx
        .block_on(a.cancel_as(&id("schedule:nightly"), Actor::Operator(id("alice"))))
        .unwrap();
    assert_eq!(r.record().map(|r| r.state), Some(State::Cancelled), "{r:?}");
    ctx.advance_ms(every);
    assert_eq!(made(ctx), 0, "a cancelled schedule makes nothing");
}

/// A concurrency key's limit holds however grants race: eight `next`s at
/// once grant two tasks of a key limited to two (and the unkeyed task
/// beside them); the rest of the key's tasks are parked (each once, out of
/// the ready index) and refused `key_full` by name, with the holders; a
/// holder's end, a holder's expired lease and a higher limit each let one
/// more through, never more than the limit.
pub fn a_key_limit_holds_however_grants_race<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let long = 600_000;
    let key = id("repo");
    let q = [id("kq")];
    let keyed = |t: &str| {
        let mut s = spec(t, Some("kq"), 5, &[]);
        s.key = Some(key.clone());
        s
    };
    let alice = Actor::Operator(id("alice"));
    let r = ctx
        .block_on(a.set_limit(&key, Some(2), Actor::Worker(id("w"))))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::OperatorRequired { .. }),
        "a worker sets no limit: {r:?}"
    );
    let r = ctx
        .block_on(a.set_limit(&key, Some(2), alice.clone()))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let r = ctx.block_on(a.add(&id("key:other"), spec("key:other", None, 0, &[])));
    assert!(
        r.is_err() || r.as_ref().is_ok_and(|r| r.refusal().is_some()),
        "no task stands in for a key's record: {r:?}"
    );
    for i in 0..6 {
        let t = format!("k{i}");
        ctx.block_on(a.add(&id(&t), keyed(&t))).unwrap();
    }
    ctx.block_on(a.add(&id("free"), spec("free", Some("kq"), 0, &[])))
        .unwrap();
    // Eight takers at once, each on its own thread.
    let replies: Vec<Reply> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (ctx, q) = (&*ctx, &q);
                s.spawn(move || {
                    let a = ctx.auth();
                    ctx.block_on(a.next(&id(&format!("w{i}")), q, Some(long), None))
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let grants: Vec<crate::model::Grant> = replies.iter().filter_map(Reply::grant).collect();
    let mut keyed_grants: Vec<crate::model::Grant> = grants
        .iter()
        .filter(|g| g.task.as_str() != "free")
        .cloned()
        .collect();
    assert!(
        keyed_grants.len() <= 2,
        "never more than two of the key: {grants:?}"
    );
    for r in &replies {
        if let Some(f) = r.refusal() {
            assert!(
                matches!(f, Refusal::NoneReady { .. }),
                "the key's tasks wait, the queue is not drained: {f:?}"
            );
        }
    }
    // More `next`s: the unkeyed task if the race did not take it (it is
    // never held back by the key), then none_ready with the key's four
    // waiting, parked by whichever scan reached them.
    let mut free_granted = grants.iter().filter(|g| g.task.as_str() == "free").count();
    let census = loop {
        let r = ctx
            .block_on(a.next(&id("w9"), &q, Some(long), None))
            .unwrap();
        match r.grant() {
            Some(g) if g.task.as_str() == "free" => free_granted += 1,
            Some(g) => keyed_grants.push(g),
            None => match refusal(&r) {
                Refusal::NoneReady { census } => break *census,
                other => panic!("expected none_ready with four waiting: {other:?}"),
            },
        }
    };
    assert_eq!(free_granted, 1, "the unkeyed task, once");
    assert_eq!(
        keyed_grants.len(),
        2,
        "two of the key at once: {keyed_grants:?}"
    );
    assert_eq!(census.queued, 4, "{census:?}");
    let status = ctx.block_on(a.key_status(&key)).unwrap().unwrap();
    assert_eq!(status.limit, Some(2));
    assert_eq!(status.holders.len(), 2, "{status:?}");
    assert_eq!(status.parked.len(), 4, "{status:?}");
    let waiting = status.parked[0].clone();
    let r = ctx
        .block_on(a.claim(&waiting, &id("w9"), Some(long)))
        .unwrap();
    match refusal(&r) {
        Refusal::KeyFull {
            key: k,
            limit,
            holders,
        } => {
            assert_eq!((k, *limit), (&key, 2));
            let mut named: Vec<&str> = holders.iter().map(|h| h.task.as_str()).collect();
            let mut held: Vec<&str> = keyed_grants.iter().map(|g| g.task.as_str()).collect();
            named.sort();
            held.sort();
            assert_eq!(named, held, "the refusal names the holders");
        }
        other => panic!("expected key_full: {other:?}"),
    }
    for p in &status.parked {
        let events = ctx.block_on(a.events(Some(p), None, 100)).unwrap().items;
        let parked = events
            .iter()
            .filter(|e| e.kind == EventKind::Parked)
            .count();
        assert_eq!(
            parked, 1,
            "{p} parked once, then passed over unread: {events:?}"
        );
    }
    // A holder's end lets one more through.
    let g = &keyed_grants[0];
    let r = ctx
        .block_on(a.complete(&g.task, &g.owner, g.fence))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let third = ctx
        .block_on(a.next(&id("w10"), &q, Some(ttl), None))
        .unwrap();
    let third = third
        .grant()
        .unwrap_or_else(|| panic!("a slot freed: {third:?}"));
    let r = ctx
        .block_on(a.next(&id("w11"), &q, Some(long), None))
        .unwrap();
    assert!(r.refusal().is_some(), "still two at once: {r:?}");
    // A holder whose lease runs out frees its slot too.
    ctx.advance_ms(ttl + ctx.expiry_margin_ms());
    let r = ctx
        .block_on(a.next(&id("w12"), &q, Some(long), None))
        .unwrap();
    let fourth = r
        .grant()
        .unwrap_or_else(|| panic!("the expired holder's slot: {r:?}"));
    assert!(fourth.task.as_str().starts_with('k'), "{fourth:?}");
    let status = ctx.block_on(a.key_status(&key)).unwrap().unwrap();
    assert_eq!(status.holders.len(), 2, "{status:?} after {third:?}");
    // A higher limit lets one more through at once.
    ctx.block_on(a.set_limit(&key, Some(3), alice)).unwrap();
    let r = ctx
        .block_on(a.next(&id("w13"), &q, Some(long), None))
        .unwrap();
    assert!(r.grant().is_some(), "the third slot: {r:?}");
    let status = ctx.block_on(a.key_status(&key)).unwrap().unwrap();
    assert_eq!(status.holders.len(), 3, "{status:?}");
}

/// A declared task whose manifest has a retry policy: the executor's
/// `task fail` before the last attempt puts the task off by its backoff
/// (REGISTERED, RETRY_SCHEDULED, the error kept, the repeat acknowledged,
/// a claim meanwhile refused `scheduled`), then the same run claims it
/// again as a new attempt; the last attempt's failure is final.
pub fn a_declared_task_is_retried_after_its_backoff<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let t = id("declared-flaky");
    let (run, ex) = (id("run-1"), id("ci"));
    let m = Manifest::from_value(&json!({
        "task_id": "declared-flaky", "executor": "ci", "source_branch": "main",
        "source_oid": "0a1b2c", "target_version": "1.0", "steps": ["build"],
        "start_deadline_seconds": 600, "heartbeat_timeout_seconds": 180, "max_attempts": 3,
        "retry": {"max_attempts": 2, "backoff": format!("{ttl}ms"), "factor": 1},
    }))
    .unwrap();
    assert_eq!(m.retry.map(|p| p.max_attempts), Some(2));
    ctx.block_on(a.declare(m)).unwrap();
    ctx.block_on(a.register(&t, &run)).unwrap();
    let g = ctx
        .block_on(a.task_claim(&t, &run, &ex, Some(10 * ttl)))
        .unwrap()
        .grant()
        .expect("the first attempt");
    let r = ctx
        .block_on(a.task_fail(&t, &run, &ex, g.fence, json!({"exit": 1})))
        .unwrap();
    let rec = r.record().unwrap().clone();
    assert_eq!(rec.state, State::Registered, "tried again: {r:?}");
    assert_eq!(rec.error, Some(json!({"exit": 1})));
    let again = ctx
        .block_on(a.task_fail(&t, &run, &ex, g.fence, json!({"exit": 1})))
        .unwrap();
    assert!(again.is_idempotent(), "a repeat of the report: {again:?}");
    let r = ctx
        .block_on(a.task_claim(&t, &run, &ex, Some(10 * ttl)))
        .unwrap();
    assert!(matches!(refusal(&r), Refusal::Scheduled { .. }), "{r:?}");
    ctx.advance_ms(ttl + ttl / 4 + ctx.expiry_margin_ms());
    let g2 = ctx
        .block_on(a.task_claim(&t, &run, &ex, Some(10 * ttl)))
        .unwrap()
        .grant()
        .expect("the second attempt, after the backoff");
    assert_eq!(g2.attempt, 2);
    assert!(g2.fence > g.fence);
    let r = ctx
        .block_on(a.task_fail(&t, &run, &ex, g2.fence, json!({"exit": 2})))
        .unwrap();
    assert_eq!(
        r.record().map(|r| r.state),
        Some(State::Failed),
        "the last attempt's failure is final: {r:?}"
    );
    let events = ctx.block_on(a.events(Some(&t), None, 100)).unwrap().items;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == EventKind::RetryScheduled)
            .count(),
        1,
        "{events:?}"
    );
}

/// A queue's retry policy: an operator's to set; a task added to the
/// queue without a policy of its own takes it (one with its own keeps
/// its own, one added before keeps none); a stalled attempt is retried
/// after the wait like a failed one (STALLED, then RETRY_SCHEDULED, and
/// `next` does not grant it early); the last attempt's stall is final.
pub fn a_queue_policy_retries_failed_and_stalled_attempts<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let backoff = 3 * ttl;
    let policy = crate::graph::RetryPolicy {
        max_attempts: 3,
        backoff_ms: backoff,
        factor: crate::graph::Factor::whole(1),
        max_backoff_ms: backoff,
    };
    let queue = id("pq");
    let q = [queue.clone()];
    let w = id("w");
    let in_queue = |t: &str| spec(t, Some("pq"), 0, &[]);
    ctx.block_on(a.add(&id("before"), in_queue("before")))
        .unwrap();
    let r = ctx
        .block_on(a.set_queue_policy(&queue, Some(policy), Actor::Worker(w.clone())))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::OperatorRequired { .. }),
        "a worker sets no queue policy: {r:?}"
    );
    let alice = Actor::Operator(id("alice"));
    let r = ctx
        .block_on(a.set_queue_policy(&queue, Some(policy), alice.clone()))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let again = ctx
        .block_on(a.set_queue_policy(&queue, Some(policy), alice.clone()))
        .unwrap();
    assert!(again.is_idempotent(), "the same policy again: {again:?}");
    assert_eq!(
        ctx.block_on(a.queue_policy(&queue)).unwrap(),
        Some(crate::graph::QueuePolicy {
            retry: Some(policy),
            paused_at: None,
        })
    );
    let r = ctx.block_on(a.add(&id("queue:pq2"), spec("queue:pq2", None, 0, &[])));
    assert!(
        r.is_err() || r.as_ref().is_ok_and(|r| r.refusal().is_some()),
        "no task stands in for a queue's record: {r:?}"
    );
    // A task added before the policy keeps none: its failure is final.
    let g = ctx
        .block_on(a.next(&w, &q, Some(600_000), None))
        .unwrap()
        .grant()
        .expect("the task added before");
    assert_eq!(g.task.as_str(), "before");
    let r = ctx.block_on(a.fail(&g.task, &w, g.fence, None)).unwrap();
    assert_eq!(r.record().unwrap().state, State::Failed, "{r:?}");
    // A task with its own policy keeps its own (one attempt: final).
    let own = in_queue("own")
        .with_retry(Some(crate::graph::RetryPolicy::new(1, 1000)))
        .unwrap();
    ctx.block_on(a.add(&id("own"), own)).unwrap();
    let g = ctx
        .block_on(a.next(&w, &q, Some(600_000), None))
        .unwrap()
        .grant()
        .expect("own");
    let r = ctx.block_on(a.fail(&g.task, &w, g.fence, None)).unwrap();
    assert_eq!(r.record().unwrap().state, State::Failed, "{r:?}");
    // The queue's policy: attempt 1 stalls, attempt 2 fails, attempt 3
    // stalls for good.
    let t = id("flaky");
    ctx.block_on(a.add(&t, in_queue("flaky"))).unwrap();
    let g = ctx
        .block_on(a.next(&w, &q, Some(ttl), None))
        .unwrap()
        .grant()
        .expect("attempt 1");
    assert_eq!((g.task.as_str(), g.attempt), ("flaky", 1));
    ctx.expire(ttl);
    let r = ctx.block_on(a.next(&w, &q, Some(ttl), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::NoneReady { .. }),
        "a stalled attempt waits out its backoff: {r:?}"
    );
    let rec = ctx.block_on(a.get(&t)).unwrap().unwrap();
    assert_eq!(rec.state, State::Registered);
    assert_eq!(
        rec.error.as_ref().and_then(|e| e.get("code")).cloned(),
        Some(json!("lease_expired")),
        "{rec:?}"
    );
    let r = ctx.block_on(a.claim(&t, &id("v"), Some(ttl))).unwrap();
    assert!(matches!(refusal(&r), Refusal::Scheduled { .. }), "{r:?}");
    ctx.advance_ms(backoff + backoff / 4 + ctx.expiry_margin_ms());
    let g = ctx
        .block_on(a.next(&w, &q, Some(600_000), None))
        .unwrap()
        .grant()
        .expect("attempt 2 after the wait");
    assert_eq!((g.task.as_str(), g.attempt), ("flaky", 2));
    let r = ctx
        .block_on(a.fail(&t, &w, g.fence, Some(json!({"boom": true}))))
        .unwrap();
    assert_eq!(r.record().unwrap().state, State::Registered, "{r:?}");
    ctx.advance_ms(backoff + backoff / 4 + ctx.expiry_margin_ms());
    let g = ctx
        .block_on(a.next(&w, &q, Some(ttl), None))
        .unwrap()
        .grant()
        .expect("attempt 3 after the wait");
    assert_eq!(g.attempt, 3);
    ctx.expire(ttl);
    let rec = ctx.block_on(a.get(&t)).unwrap().unwrap();
    assert_eq!(
        rec.state,
        State::Stalled,
        "the last attempt's stall is final"
    );
    let r = ctx.block_on(a.next(&w, &q, Some(ttl), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::Drained { .. }),
        "nothing left to run: {r:?}"
    );
    let events = ctx.block_on(a.events(Some(&t), None, 100)).unwrap().items;
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    let count = |k: EventKind| kinds.iter().filter(|x| **x == k).count();
    assert_eq!(count(EventKind::RetryScheduled), 2, "{kinds:?}");
    assert_eq!(count(EventKind::Stalled), 2, "{kinds:?}");
    // Cleared: a task added now has no policy.
    let r = ctx
        .block_on(a.set_queue_policy(&queue, None, alice))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    ctx.block_on(a.add(&id("after"), in_queue("after")))
        .unwrap();
    let g = ctx
        .block_on(a.next(&w, &q, Some(600_000), None))
        .unwrap()
        .grant()
        .expect("after");
    assert_eq!(g.task.as_str(), "after");
    let r = ctx.block_on(a.fail(&g.task, &w, g.fence, None)).unwrap();
    assert_eq!(r.record().unwrap().state, State::Failed, "{r:?}");
}

/// Lists of tasks leave out the records that hold settings (a key's limit,
/// a queue's policy, a schedule): none is a task anyone runs, and an
/// operator counting REGISTERED tasks must not count them. Each is still
/// read by its id, and paging past them loses no task.
pub fn lists_of_tasks_leave_out_the_records_that_hold_settings<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let alice = Actor::Operator(id("alice"));
    let r = ctx
        .block_on(a.set_limit(&id("repo"), Some(2), alice.clone()))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let policy = crate::graph::RetryPolicy::new(3, 1000);
    let r = ctx
        .block_on(a.set_queue_policy(&id("lq"), Some(policy), alice))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let r = ctx
        .block_on(a.schedule("hourly", 3_600_000, spec("hourly", Some("lq"), 0, &[])))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    // Tasks on either side of the settings' ids in id order.
    for t in ["a-task", "r-task", "z-task"] {
        ctx.block_on(a.add(&id(t), spec(t, Some("lq"), 0, &[])))
            .unwrap();
    }
    let ids = |items: &[crate::TaskRecord]| -> Vec<String> {
        items.iter().map(|r| r.task.as_str().to_owned()).collect()
    };
    let all = ctx.block_on(a.list(None, None, 100)).unwrap();
    assert_eq!(ids(&all.items), ["a-task", "r-task", "z-task"], "{all:?}");
    assert!(all.next.is_none());
    let registered = ctx
        .block_on(a.list(Some(State::Registered), None, 100))
        .unwrap();
    assert_eq!(ids(&registered.items), ["a-task", "r-task", "z-task"]);
    // One a page: the pages skip the settings and end after the last task.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = ctx.block_on(a.list(None, after.as_deref(), 1)).unwrap();
        seen.extend(ids(&page.items));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ["a-task", "r-task", "z-task"]);
    // Read by id, and by their own reads, they are all there.
    for setting in ["key:repo", "queue:lq", "schedule:hourly"] {
        let r = ctx.block_on(a.get(&id(setting))).unwrap();
        assert!(
            r.as_ref().is_some_and(crate::TaskRecord::holds_setting),
            "{setting}: {r:?}"
        );
    }
    assert_eq!(ctx.block_on(a.keys()).unwrap().len(), 1);
    assert_eq!(ctx.block_on(a.schedules()).unwrap().len(), 1);
}

/// A cron schedule makes one task per time its expression names (UTC),
/// however many schedulers tick at once: every add is of a distinct
/// period's id `NAME@START`, START a time the expression names, and each
/// tick after a named time has passed makes that period's task. A bad
/// expression is refused naming `cron`, and writes nothing.
pub fn a_cron_schedule_enqueues_one_task_per_named_time<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let q = id("cron-q");
    let expr = "*/2 * * * * *";
    let template = spec("even", Some("cron-q"), 0, &[]);
    let e = ctx
        .block_on(a.schedule_cron("bad", "61 * * * *", template.clone()))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("cron"), "{e}");
    assert!(ctx.block_on(a.get(&id("schedule:bad"))).unwrap().is_none());
    let r = ctx
        .block_on(a.schedule_cron("even", expr, template.clone()))
        .unwrap();
    let set = r.record().expect("the schedule's record");
    assert_eq!(
        set.schedule.as_ref().and_then(|s| s.cron.as_deref()),
        Some(expr)
    );
    assert!(
        ctx.block_on(a.schedule_cron("even", expr, template.clone()))
            .unwrap()
            .is_idempotent()
    );
    let other = ctx
        .block_on(a.schedule_cron("even", "*/4 * * * * *", template))
        .unwrap();
    assert!(
        matches!(refusal(&other), Refusal::ManifestConflict),
        "{other:?}"
    );
    let tick = |ctx: &mut Ctx<H>| -> Vec<TaskId> { four_schedulers_tick(ctx, &a) };
    let mut made = Vec::new();
    for _ in 0..3 {
        // Past at least one even second: a new period.
        ctx.advance_ms(2000);
        let first = tick(ctx);
        assert!(!first.is_empty(), "no task for a time that passed");
        made.extend(first);
        made.extend(tick(ctx));
    }
    let mut distinct = made.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(made.len(), distinct.len(), "a period added twice: {made:?}");
    assert!(made.len() >= 3, "{made:?}");
    for t in &distinct {
        let start = t
            .as_str()
            .strip_prefix("even@")
            .and_then(|s| crate::Timestamp::parse_rfc3339(s).ok())
            .unwrap_or_else(|| panic!("{t} is not even@START"));
        assert_eq!(start.as_millis() % 2000, 0, "{t} is not an even second");
        assert!(start >= set.created_at, "{t} before the schedule was set");
    }
    let graph = ctx
        .block_on(a.list_graph(GraphState::Ready, Some(&q), 100))
        .unwrap();
    let mut names: Vec<TaskId> = graph.iter().map(|n| n.task.clone()).collect();
    names.sort();
    assert_eq!(names, distinct);
}

/// One schedule that cannot make its period's task stops no other: the
/// failure is kept on its record until a tick makes its task again. A
/// template that names a missing task, a name too long for its periods'
/// ids and a task id that squats the `schedule:` prefix are refused when
/// asked for.
pub fn a_failing_schedule_stops_no_other_and_says_why<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let every = 3 * ctx.short_ttl_ms();
    let ghost = ctx
        .block_on(a.schedule("0000", every, spec("x", Some("q"), 0, &["ghost"])))
        .unwrap_err();
    assert_eq!(ghost.kind, crate::error::ErrorKind::Invalid, "{ghost}");
    assert_eq!(ghost.field.as_deref(), Some("depends_on"), "{ghost}");
    let long = "n".repeat(240);
    let e = ctx
        .block_on(a.schedule(&long, every, spec("x", Some("q"), 0, &[])))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("name"), "{e}");
    let e = ctx
        .block_on(a.add(&id("schedule:squat"), spec("squat", None, 0, &[])))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("task"), "{e}");
    // Two schedules; the first one's period is taken by a task someone
    // else added under its id with another definition.
    let first = ctx
        .block_on(a.schedule("0000", every, spec("x", Some("q"), 0, &[])))
        .unwrap();
    ctx.block_on(a.schedule("zzzz", every, spec("x", Some("q"), 0, &[])))
        .unwrap();
    let start = first.record().unwrap().created_at;
    let squat = id(&format!("0000@{start}"));
    ctx.block_on(a.add(&squat, spec("other", Some("elsewhere"), 5, &[])))
        .unwrap();
    let made = ctx.block_on(a.tick_schedules()).unwrap();
    let names: Vec<&str> = made.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].starts_with("zzzz@"),
        "the later schedule made its task: {names:?}"
    );
    let failed = |ctx: &mut Ctx<H>| {
        ctx.block_on(a.schedules())
            .unwrap()
            .into_iter()
            .find(|r| r.task.as_str() == "schedule:0000")
            .unwrap()
            .schedule_failure
    };
    let f = failed(ctx).expect("the failure is kept on the schedule's record");
    assert_eq!(f.task, squat);
    assert!(f.error.contains("refused"), "{f:?}");
    // Ticking again writes nothing new (the same failure).
    let before = ctx.block_on(a.get(&id("schedule:0000"))).unwrap().unwrap();
    ctx.block_on(a.tick_schedules()).unwrap();
    let after = ctx.block_on(a.get(&id("schedule:0000"))).unwrap().unwrap();
    assert_eq!(
        before.revision, after.revision,
        "the same failure again is not written"
    );
    // The next period's task is made, and the failure is gone.
    ctx.advance_ms(every);
    let made = ctx.block_on(a.tick_schedules()).unwrap();
    assert_eq!(made.len(), 2, "{made:?}");
    assert_eq!(failed(ctx), None);
}

/// Records that hold settings take no task request (an operator's cancel
/// stops a schedule, and nothing else reaches them), and retention never
/// prunes them.
pub fn records_that_hold_settings_take_no_task_request<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let op = Actor::Operator(id("alice"));
    ctx.block_on(a.set_limit(&id("k"), Some(1), op.clone()))
        .unwrap();
    ctx.block_on(a.set_queue_policy(&id("q"), None, op.clone()))
        .unwrap();
    for rec in ["key:k", "queue:q"] {
        for r in [
            ctx.block_on(a.cancel_as(&id(rec), op.clone())).unwrap(),
            ctx.block_on(a.finalize(&id(rec), op.clone(), None))
                .unwrap(),
            ctx.block_on(a.redispatch(&id(rec), op.clone(), 1)).unwrap(),
        ] {
            assert!(
                matches!(refusal(&r), Refusal::IllegalTransition { .. }),
                "{rec}: {r:?}"
            );
        }
        let e = ctx
            .block_on(a.add(&id(rec), spec(rec, None, 0, &[])))
            .map(|r| r.refusal().cloned());
        assert!(
            matches!(
                e,
                Ok(Some(
                    Refusal::IllegalTransition { .. } | Refusal::ManifestConflict
                ))
            ),
            "{rec}: {e:?}"
        );
    }
    // A schedule is stopped by an operator's cancel; stopped, it is kept.
    ctx.block_on(a.schedule("s", 3 * ctx.short_ttl_ms(), spec("x", None, 0, &[])))
        .unwrap();
    let r = ctx
        .block_on(a.cancel_as(&id("schedule:s"), op.clone()))
        .unwrap();
    assert_eq!(r.record().map(|r| r.state), Some(State::Cancelled), "{r:?}");
    ctx.advance_ms(10);
    let pruned = ctx.block_on(a.prune(op.clone(), 0, 1000)).unwrap();
    assert_eq!(pruned, 0, "no setting is pruned");
    for rec in ["key:k", "queue:q", "schedule:s"] {
        let r = ctx.block_on(a.get(&id(rec))).unwrap().unwrap();
        assert_eq!(r.pruned_at, None, "{rec} was pruned");
    }
    // The key still limits.
    let st = ctx.block_on(a.key_status(&id("k"))).unwrap().unwrap();
    assert_eq!(st.limit, Some(1));
    // A worker's prune is refused, whether or not anything is due.
    let e = ctx
        .block_on(a.prune(Actor::Worker(id("w")), 0, 1000))
        .unwrap_err();
    assert_eq!(e.kind, crate::error::ErrorKind::NotPermitted, "{e}");
}

/// A paused queue: `next` passes over its ready tasks and its expired
/// leases (saying how many of the queues asked are paused), and grants
/// from the other queues it is asked for; a claim naming a task still
/// takes it; a worker pauses nothing; pausing again changes nothing and
/// keeps when it was paused, as does a change of the retry policy; once
/// resumed, `next` takes the queue's tasks again.
pub fn a_paused_queue_is_passed_over_until_resumed<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let (paused, other) = (id("held-back"), id("runs-on"));
    let w = id("w");
    let alice = Actor::Operator(id("alice"));
    for t in ["early", "ready", "named"] {
        ctx.block_on(a.add(&id(t), spec(t, Some("held-back"), 0, &[])))
            .unwrap();
    }
    ctx.block_on(a.add(&id("elsewhere"), spec("elsewhere", Some("runs-on"), 0, &[])))
        .unwrap();
    // Granted before the pause; its lease runs out while paused.
    let early = ctx
        .block_on(a.claim(&id("early"), &w, Some(ttl)))
        .unwrap()
        .grant()
        .expect("early");
    let r = ctx
        .block_on(a.pause_queue(&paused, true, Actor::Worker(w.clone())))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::OperatorRequired { .. }),
        "a worker pauses no queue: {r:?}"
    );
    let r = ctx
        .block_on(a.pause_queue(&paused, true, alice.clone()))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    let at = ctx
        .block_on(a.queue_policy(&paused))
        .unwrap()
        .and_then(|p| p.paused_at)
        .expect("paused");
    ctx.expire(ttl);
    let r = ctx
        .block_on(a.next(&w, std::slice::from_ref(&paused), Some(ttl), None))
        .unwrap();
    match refusal(&r) {
        Refusal::NoneReady { census } => {
            assert_eq!(census.paused, 1, "{census:?}");
            assert!(census.ready >= 2, "its tasks stay ready: {census:?}");
        }
        other => panic!("a paused queue grants nothing: {other:?}"),
    }
    let both = [paused.clone(), other.clone()];
    let g = ctx
        .block_on(a.next(&w, &both, Some(ttl), None))
        .unwrap()
        .grant()
        .expect("the queue that runs");
    assert_eq!(g.task.as_str(), "elsewhere");
    let r = ctx.block_on(a.next(&w, &both, Some(ttl), None)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::NoneReady { .. }),
        "nothing else outside the paused queue: {r:?}"
    );
    let named = ctx
        .block_on(a.claim(&id("named"), &w, Some(10 * ttl)))
        .unwrap();
    assert!(named.grant().is_some(), "a named claim takes it: {named:?}");
    // Again, and a new retry policy: still paused since the first.
    let again = ctx
        .block_on(a.pause_queue(&paused, true, alice.clone()))
        .unwrap();
    assert!(again.is_idempotent(), "{again:?}");
    ctx.block_on(a.set_queue_policy(
        &paused,
        Some(crate::graph::RetryPolicy::new(2, 1000)),
        alice.clone(),
    ))
    .unwrap();
    let policy = ctx.block_on(a.queue_policy(&paused)).unwrap().unwrap();
    assert_eq!(policy.paused_at, Some(at), "{policy:?}");
    assert!(policy.retry.is_some());
    let r = ctx
        .block_on(a.next(&w, std::slice::from_ref(&paused), Some(ttl), None))
        .unwrap();
    assert!(matches!(refusal(&r), Refusal::NoneReady { .. }), "{r:?}");
    // Resumed: its tasks are granted again, the expired one among them.
    let r = ctx
        .block_on(a.pause_queue(&paused, false, alice.clone()))
        .unwrap();
    assert!(matches!(r, Reply::Committed(_)), "{r:?}");
    assert_eq!(
        ctx.block_on(a.queue_policy(&paused))
            .unwrap()
            .and_then(|p| p.paused_at),
        None
    );
    let mut granted = Vec::new();
    for _ in 0..2 {
        let g = ctx
            .block_on(a.next(&w, std::slice::from_ref(&paused), Some(10 * ttl), None))
            .unwrap()
            .grant()
            .expect("resumed");
        granted.push((g.task.as_str().to_owned(), g.fence));
    }
    granted.sort();
    assert_eq!(granted[0].0, "early");
    assert!(granted[0].1 > early.fence, "a new attempt: {granted:?}");
    assert_eq!(granted[1].0, "ready");
}

/// An operator's act on every failed task of a queue: a worker's is
/// refused before anything changes; a retry takes the queue's failed
/// tasks (never another queue's, never a task that succeeded or waits), each as its next iteration, up to its `max` and saying more
/// are left; a discard forgets them now, each keeping its tombstone.
pub fn a_queues_failed_tasks_are_retried_or_discarded_in_bulk<H: Harness>(ctx: &mut Ctx<H>) {
    use crate::authority::Bulk;
    let a = ctx.auth();
    let (dlq, w) = (id("dlq"), id("w"));
    let alice = Actor::Operator(id("alice"));
    for (t, q) in [
        ("f1", "dlq"),
        ("f2", "dlq"),
        ("f3", "dlq"),
        ("ok", "dlq"),
        ("e1", "elsewhere"),
    ] {
        ctx.block_on(a.add(&id(t), spec(t, Some(q), 0, &[])))
            .unwrap();
    }
    for t in ["f1", "f2", "f3", "e1", "ok"] {
        let g = ctx
            .block_on(a.claim(&id(t), &w, Some(600_000)))
            .unwrap()
            .grant()
            .unwrap_or_else(|| panic!("{t}"));
        let r = if t == "ok" {
            ctx.block_on(a.complete(&id(t), &w, g.fence))
        } else {
            ctx.block_on(a.fail(&id(t), &w, g.fence, None))
        };
        assert!(matches!(r.unwrap(), Reply::Committed(_)));
    }
    ctx.block_on(a.add(&id("waits"), spec("waits", Some("dlq"), 0, &[])))
        .unwrap();
    let state = |t: &str| ctx.block_on(a.get(&id(t))).unwrap().unwrap();
    let e = ctx
        .block_on(a.bulk_failed(&dlq, Bulk::Retry, Actor::Worker(w.clone()), 100))
        .unwrap_err();
    assert_eq!(e.kind, crate::ErrorKind::NotPermitted, "{e}");
    assert_eq!(
        state("f1").state,
        State::Failed,
        "a worker's changed nothing"
    );
    let first = ctx
        .block_on(a.bulk_failed(&dlq, Bulk::Retry, alice.clone(), 1))
        .unwrap();
    assert_eq!((first.done, first.more), (1, true), "{first:?}");
    let rest = ctx
        .block_on(a.bulk_failed(&dlq, Bulk::Retry, alice.clone(), 100))
        .unwrap();
    assert_eq!((rest.done, rest.more), (2, false), "{rest:?}");
    assert!(rest.refused.is_empty(), "{rest:?}");
    for t in ["f1", "f2", "f3"] {
        let r = state(t);
        assert_eq!((r.state, r.iteration), (State::Registered, 2), "{t}: {r:?}");
    }
    assert_eq!(state("e1").state, State::Failed, "another queue's stays");
    assert_eq!(state("ok").state, State::Succeeded);
    // They fail again: discarded, each a tombstone now.
    for t in ["f1", "f2", "f3"] {
        let g = ctx
            .block_on(a.claim(&id(t), &w, Some(600_000)))
            .unwrap()
            .grant()
            .unwrap_or_else(|| panic!("{t} again"));
        ctx.block_on(a.fail(&id(t), &w, g.fence, None)).unwrap();
    }
    let gone = ctx
        .block_on(a.bulk_failed(&dlq, Bulk::Discard, alice.clone(), 100))
        .unwrap();
    assert_eq!((gone.done, gone.more), (3, false), "{gone:?}");
    for t in ["f1", "f2", "f3"] {
        let r = state(t);
        assert!(
            r.pruned_at.is_some() && r.state == State::Failed,
            "{t}: {r:?}"
        );
    }
    assert_eq!(state("e1").pruned_at, None);
    assert_eq!(state("waits").state, State::Registered);
    let again = ctx
        .block_on(a.bulk_failed(&dlq, Bulk::Discard, alice, 100))
        .unwrap();
    assert_eq!((again.done, again.more), (0, false), "{again:?}");
}
