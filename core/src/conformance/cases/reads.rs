//! Reads: they never write, they show derived state, and sweep persists it.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// holder, verify, get, list, gate, events and the outbox read nothing
/// into the store: not even the derived expiry of a lease.
pub fn reads_never_write<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let (t, w) = (id("read-only"), id("w"));
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
    let d = id("read-only-declared");
    ctx.block_on(a.declare(manifest(d.as_str(), 1, &[], 60, 1)))
        .unwrap();
    ctx.expire(ttl);
    let events_before = ctx.all_events();
    let pending_before = ctx.block_on(a.pending(None, 1000)).unwrap().items;
    let stored_before = ctx
        .block_on(a.store().read(&t, a.now()))
        .unwrap()
        .unwrap()
        .record;
    for _ in 0..3 {
        let h = ctx.block_on(a.holder(&t)).unwrap().unwrap().unwrap();
        assert!(!h.live, "an expired lease shows as such");
        assert_eq!(
            ctx.block_on(a.get(&t)).unwrap().unwrap().state,
            State::Registered
        );
        assert!(!ctx.block_on(a.verify(&t, f)).unwrap().unwrap().current);
        ctx.block_on(a.list(Some(State::Registered), None, 100))
            .unwrap();
        ctx.block_on(a.list(None, None, 100)).unwrap();
        ctx.block_on(a.gate(&d)).unwrap().unwrap();
        ctx.block_on(a.events(Some(&t), None, 100)).unwrap();
        ctx.block_on(a.pending(None, 100)).unwrap();
        ctx.block_on(a.sweep(true)).unwrap();
    }
    assert_eq!(ctx.all_events(), events_before);
    assert_eq!(
        ctx.block_on(a.pending(None, 1000)).unwrap().items,
        pending_before
    );
    let stored_after = ctx
        .block_on(a.store().read(&t, a.now()))
        .unwrap()
        .unwrap()
        .record;
    assert_eq!(stored_after, stored_before);
    assert_eq!(
        stored_after.state,
        State::Claimed,
        "the stored record still says CLAIMED"
    );
}

/// list filters on derived state and pages by task id.
pub fn list_by_derived_state<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let w = id("w");
    for i in 0..30 {
        let t = id(&format!("l-{i:02}"));
        let long = i % 3 != 0;
        let f = fence(
            &ctx.block_on(a.claim(&t, &w, Some(if long { 600_000 } else { ttl })))
                .unwrap(),
        );
        if i % 5 == 1 {
            ctx.block_on(a.complete(&t, &w, f)).unwrap();
        }
    }
    ctx.expire(ttl);
    let all = |state: Option<State>, page: usize| -> Vec<String> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let p = ctx.block_on(a.list(state, after.as_deref(), page)).unwrap();
            assert!(p.items.len() <= page);
            out.extend(p.items.iter().map(|r| {
                if let Some(s) = state {
                    assert_eq!(r.state, s);
                }
                r.task.to_string()
            }));
            match p.next {
                Some(n) => after = Some(n),
                None => return out,
            }
        }
    };
    let expired: Vec<String> = (0..30)
        .filter(|i| i % 3 == 0 && i % 5 != 1)
        .map(|i| format!("l-{i:02}"))
        .collect();
    let done: Vec<String> = (0..30)
        .filter(|i| i % 5 == 1)
        .map(|i| format!("l-{i:02}"))
        .collect();
    let held: Vec<String> = (0..30)
        .filter(|i| i % 3 != 0 && i % 5 != 1)
        .map(|i| format!("l-{i:02}"))
        .collect();
    assert_eq!(all(Some(State::Registered), 4), expired);
    assert_eq!(all(Some(State::Succeeded), 4), done);
    assert_eq!(all(Some(State::Claimed), 4), held);
    assert_eq!(all(Some(State::Claimed), 1000), held);
    assert_eq!(all(None, 7).len(), 30);
    assert!(all(Some(State::Running), 10).is_empty());
}

/// sweep persists what time decided, with its events and notifications,
/// and then has nothing left to do.
pub fn sweep_persists_derived_changes<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let deadline_s = ttl.div_ceil(1000);
    for i in 0..3 {
        let t = format!("sw-{i}");
        let mut m = manifest(&t, 1, &[], 60, 1);
        m.start_deadline_seconds = deadline_s;
        m.notification_events = [EventKind::NotStarted].into();
        ctx.block_on(a.declare(m)).unwrap();
    }
    let w = id("w");
    ctx.block_on(a.claim(&id("sw-bare"), &w, Some(ttl)))
        .unwrap();
    ctx.expire(deadline_s * 1000);
    let planned = ctx.block_on(a.sweep(true)).unwrap();
    assert_eq!(planned.len(), 4);
    assert!(
        ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty(),
        "a dry run writes nothing"
    );
    let swept = ctx.block_on(a.sweep(false)).unwrap();
    assert_eq!(swept, planned);
    let stored = ctx
        .block_on(a.store().read(&id("sw-0"), a.now()))
        .unwrap()
        .unwrap()
        .record;
    assert_eq!(stored.state, State::NotStarted);
    let pending = ctx.block_on(a.pending(None, 100)).unwrap().items;
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|n| n.kind == EventKind::NotStarted));
    assert!(ctx.block_on(a.sweep(false)).unwrap().is_empty());
}

/// verify is true only for the fence of a live lease of a task that is not terminal.
pub fn verify_answers<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let (t, w) = (id("v"), id("w"));
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
    let v = ctx.block_on(a.verify(&t, f)).unwrap().unwrap();
    assert!(v.current && v.live);
    assert_eq!((v.state, v.current_fence), (State::Claimed, Some(f)));
    assert!(
        !ctx.block_on(a.verify(&t, f + 1000))
            .unwrap()
            .unwrap()
            .current
    );
    ctx.expire(ttl);
    let v = ctx.block_on(a.verify(&t, f)).unwrap().unwrap();
    assert!(!v.current && !v.live);
    let t2 = id("v2");
    let f2 = fence(&ctx.block_on(a.claim(&t2, &w, None)).unwrap());
    ctx.block_on(a.complete(&t2, &w, f2)).unwrap();
    let v = ctx.block_on(a.verify(&t2, f2)).unwrap().unwrap();
    assert!(!v.current);
    assert_eq!(v.state, State::Succeeded);
    assert!(matches!(
        ctx.block_on(a.verify(&id("none"), 1)).unwrap(),
        Err(Refusal::NotFound)
    ));
    assert!(matches!(
        ctx.block_on(a.holder(&id("none"))).unwrap(),
        Err(Refusal::NotFound)
    ));
}

/// The counts a store keeps with its commits equal a count of its
/// records after every kind of write (a grant, an end, a graph add, a
/// setting, an expiry swept, a prune), and the counts by derived state
/// equal the lists by derived state, a lease that ran out unswept
/// included. Settings are not counted; tombstones are, as lists show them.
pub fn counts_kept_with_commits_equal_a_recount<H: Harness>(ctx: &mut Ctx<H>) {
    use crate::counts::{Count, Counts, count_records};
    let a = ctx.auth();
    let check = |ctx: &mut Ctx<H>, when: &str| {
        let a = ctx.auth();
        let records = ctx.stored_records();
        let kept: Option<Vec<Count>> = ctx.block_on(a.store().counts()).unwrap();
        let kept = kept.unwrap_or_else(|| panic!("{when}: the store keeps no counts"));
        assert_eq!(
            Counts::of_stored(kept).queues,
            Counts::of_stored(count_records(&records)).queues,
            "{when}: kept counts"
        );
        // The counts and the lists are each derived at their own `now`: on
        // an engine's clock a short lease may run out between them, so a
        // mismatch is read again (each expiry happens once).
        for tries_left in (0..3).rev() {
            let counts = ctx.block_on(a.counts()).unwrap();
            assert!(!counts.truncated, "{when}");
            let mismatch = counts.totals().into_iter().find_map(|(state, n)| {
                let listed = ctx.block_on(a.list(Some(state), None, 10_000)).unwrap();
                (n != listed.items.len() as u64).then_some((state, n, listed.items.len()))
            });
            match mismatch {
                None => return counts,
                Some(m) if tries_left == 0 => panic!("{when}: counted vs listed {m:?}"),
                Some(_) => {}
            }
        }
        unreachable!("the last try returns or panics")
    };
    let w = id("w");
    let alice = Actor::Operator(id("alice"));
    let ttl = ctx.short_ttl_ms();
    check(ctx, "empty");
    ctx.block_on(a.claim(&id("held"), &w, Some(ttl))).unwrap();
    let done = id("done");
    let g = fence(&ctx.block_on(a.claim(&done, &w, None)).unwrap());
    ctx.block_on(a.complete(&done, &w, g)).unwrap();
    ctx.block_on(a.declare(manifest("declared", 1, &[], 60, 1)))
        .unwrap();
    let spec = |t: &str, after: &[&str]| {
        crate::graph::NodeSpec::new(&id(t), Some(id("q1")), 0, after.iter().map(|d| id(d))).unwrap()
    };
    ctx.block_on(a.add(&id("first"), spec("first", &[])))
        .unwrap();
    ctx.block_on(a.add(&id("second"), spec("second", &["first"])))
        .unwrap();
    ctx.block_on(a.set_limit(&id("repo"), Some(2), alice.clone()))
        .unwrap();
    let counts = check(ctx, "written");
    assert_eq!(counts.queues["q1"][&State::Registered], 2, "{counts:?}");
    // The bare claim is held, or (a slow store: its lease is short)
    // already derives to waiting again.
    let bare = &counts.queues[""];
    let held = [State::Claimed, State::Registered]
        .iter()
        .filter_map(|s| bare.get(s))
        .sum::<u64>();
    assert_eq!(held, 1, "{counts:?}");
    // A graph grant moves a task of q1; its lease and the bare one run out.
    let r = ctx
        .block_on(a.next(&w, &[id("q1")], Some(ttl), None))
        .unwrap();
    assert!(r.grant().is_some(), "{r:?}");
    check(ctx, "granted");
    ctx.expire(ttl);
    let counts = check(ctx, "expired, unswept");
    assert!(
        counts.due.iter().any(|r| r.task.as_str() == "held"),
        "the expired lease is among the due records: {counts:?}"
    );
    assert!(
        !counts.queues[""].contains_key(&State::Claimed),
        "{counts:?}"
    );
    ctx.block_on(a.sweep(false)).unwrap();
    let counts = check(ctx, "swept");
    assert!(counts.due.is_empty(), "{counts:?}");
    // A prune turns the ended task into a tombstone, counted where it was.
    let window = 2 * ctx.short_ttl_ms();
    ctx.advance_ms(window + ctx.expiry_margin_ms());
    let pruned = ctx.block_on(a.prune(alice, window, 1000)).unwrap();
    assert!(pruned >= 1, "{pruned}");
    let counts = check(ctx, "pruned");
    assert_eq!(
        counts.totals().iter().map(|(_, n)| n).sum::<u64>(),
        ctx.block_on(a.list(None, None, 10_000))
            .unwrap()
            .items
            .len() as u64
    );
}
