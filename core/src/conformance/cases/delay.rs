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
