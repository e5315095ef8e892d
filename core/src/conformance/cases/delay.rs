//! Lock delay: a lease that expired without a release holds its task for
//! the grant's lock delay, judged by the store's clock; a clean release
//! skips it.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// A bare task claimed with a lock delay: after an unreleased expiry no one
/// (not even the old holder) is granted it until the delay has passed.
pub fn lock_delay_holds_an_expired_task<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    // Still holding once `expire` is past the lease's end by its margin.
    let delay = ctx.short_ttl_ms().max(ctx.expiry_margin_ms() + 1000);
    let (t, w, next) = (id("delayed"), id("w"), id("next"));
    let g = ctx
        .block_on(a.claim_with_lock_delay(&t, &w, Some(ttl), delay))
        .unwrap()
        .grant()
        .unwrap();
    // Renewals keep the delay counting from the lease's end.
    let g = ctx
        .block_on(a.renew(&t, &w, g.fence, Some(ttl)))
        .unwrap()
        .grant()
        .unwrap();
    ctx.expire(ttl);
    for who in [&next, &w] {
        let r = ctx.block_on(a.claim(&t, who, Some(ttl))).unwrap();
        assert!(
            matches!(refusal(&r), Refusal::LockDelay { fence, .. } if *fence == g.fence),
            "{who}: {r:?}"
        );
    }
    let r = ctx.block_on(a.recover(&t, &next, Some(ttl))).unwrap();
    assert!(matches!(refusal(&r), Refusal::LockDelay { .. }), "{r:?}");
    // The expiry itself is written down with the refusals: one stall.
    let rec = ctx.block_on(a.get(&t)).unwrap().unwrap();
    assert_eq!((rec.state, rec.stalls), (State::Registered, 1));
    ctx.advance_ms(delay);
    let later = ctx
        .block_on(a.claim(&t, &next, Some(ttl)))
        .unwrap()
        .grant()
        .expect("granted once the lock delay has passed");
    assert!(later.fence > g.fence);
    // Without a lock delay of its own, the next grant's expiry holds nothing.
    ctx.expire(ttl);
    assert!(
        ctx.block_on(a.claim(&t, &w, Some(ttl)))
            .unwrap()
            .grant()
            .is_some()
    );
}

/// A clean release skips the lock delay, and so does an end.
pub fn a_clean_release_skips_the_lock_delay<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let delay = 60_000;
    let (t, w, next) = (id("released"), id("w"), id("next"));
    let g = ctx
        .block_on(a.claim_with_lock_delay(&t, &w, Some(ttl), delay))
        .unwrap()
        .grant()
        .unwrap();
    ctx.block_on(a.release(&t, &w, g.fence)).unwrap();
    let again = ctx
        .block_on(a.claim(&t, &next, Some(ttl)))
        .unwrap()
        .grant()
        .expect("a released task is granted at once");
    // Even once the released grant's expiry has passed.
    ctx.block_on(a.release(&t, &next, again.fence)).unwrap();
    ctx.expire(ttl);
    assert!(
        ctx.block_on(a.claim(&t, &w, Some(ttl)))
            .unwrap()
            .grant()
            .is_some()
    );
}

/// A declared task's manifest sets the lock delay of every grant.
pub fn a_manifest_lock_delay_holds_a_declared_task<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl_s = ctx.short_ttl_ms().div_ceil(1000);
    let (t, run) = (id("declared-delay"), id("run"));
    let mut m = manifest(t.as_str(), 1, &[], ttl_s, 3);
    // Still holding once `expire` is past the lease's end by its margin.
    let delay_s = ttl_s.max((ctx.expiry_margin_ms() + 1000).div_ceil(1000));
    m.lock_delay_seconds = delay_s;
    ctx.block_on(a.declare(m)).unwrap();
    ctx.block_on(a.register(&t, &run)).unwrap();
    let g = ctx
        .block_on(a.task_claim(&t, &run, &id("x"), None))
        .unwrap()
        .grant()
        .unwrap();
    ctx.expire(ttl_s * 1000);
    let r = ctx
        .block_on(a.task_claim(&t, &run, &id("y"), None))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::LockDelay { fence, .. } if *fence == g.fence),
        "{r:?}"
    );
    ctx.advance_ms(delay_s * 1000);
    let g2 = ctx
        .block_on(a.task_claim(&t, &run, &id("y"), None))
        .unwrap()
        .grant()
        .expect("granted after the lock delay");
    assert_eq!(g2.attempt, 2);
}

/// A run-time limit (the task's `timeout`) ends an attempt at the limit
/// however often its holder renews: the lease is never granted or renewed
/// past it, a renewal after it is refused `timed_out`, the attempt counts
/// as a stall with a TIMED_OUT event, and the next grant is a new attempt
/// with a limit of its own.
pub fn a_run_time_limit_ends_an_attempt_its_holder_renews<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let ttl = ctx.short_ttl_ms();
    let limit = 2 * ttl;
    let (t, w, v) = (id("limited"), id("w"), id("v"));
    let spec = crate::graph::NodeSpec::new(&t, None, 0, [])
        .unwrap()
        .with_timeout(Some(limit))
        .unwrap();
    ctx.block_on(a.add(&t, spec)).unwrap();
    // A lease asked for far longer than the limit ends at the limit.
    let g = ctx
        .block_on(a.claim(&t, &w, Some(10 * limit)))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(g.expiry, g.claimed_at.plus_ms(limit), "{g:?}");
    ctx.advance_ms(ttl);
    let renewed = ctx
        .block_on(a.renew(&t, &w, g.fence, Some(10 * limit)))
        .unwrap()
        .grant()
        .expect("renewed within the limit");
    assert_eq!(renewed.expiry, g.expiry, "a renewal never passes the limit");
    // The holder's own claim again keeps the attempt, and so its limit.
    let again = ctx
        .block_on(a.claim(&t, &w, Some(10 * limit)))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!((again.attempt, again.expiry), (g.attempt, g.expiry));
    ctx.expire(ttl);
    let r = ctx
        .block_on(a.renew(&t, &w, again.fence, Some(ttl)))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::TimedOut { fence, .. } if *fence == again.fence),
        "{r:?}"
    );
    let v_ = ctx.block_on(a.verify(&t, again.fence)).unwrap().unwrap();
    assert!(!v_.current && !v_.live, "{v_:?}");
    let rec = ctx.block_on(a.get(&t)).unwrap().unwrap();
    assert_eq!((rec.state, rec.stalls), (State::Registered, 1));
    let events = ctx.block_on(a.events(Some(&t), None, 100)).unwrap().items;
    assert!(
        events.iter().any(|e| e.kind == EventKind::TimedOut),
        "{:?}",
        events.iter().map(|e| e.kind).collect::<Vec<_>>()
    );
    assert!(!events.iter().any(|e| e.kind == EventKind::Stalled));
    // Someone else takes it: a new attempt, limited afresh.
    let next = ctx
        .block_on(a.claim(&t, &v, Some(10 * limit)))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(next.attempt, g.attempt + 1);
    assert!(next.fence > again.fence);
    assert_eq!(next.expiry, next.claimed_at.plus_ms(limit));
}
