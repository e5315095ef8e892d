//! Declared tasks: the registry from declare to succeed, manifests, preconditions.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// declare, register, claim, start, heartbeat, succeed and the gate,
/// with every refusal along the way.
pub fn declared_lifecycle<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w, run) = (id("life"), id("ci-7"), id("run-1"));
    let m = manifest(t.as_str(), 3, &["build.log", "report"], 60, 1);
    let r = ctx.block_on(a.declare(m.clone())).unwrap();
    assert_eq!(r.record().unwrap().state, State::Declared);
    assert!(ctx.block_on(a.declare(m)).unwrap().is_idempotent());
    let r = ctx.block_on(a.claim(&t, &w, None)).unwrap();
    assert!(matches!(
        refusal(&r),
        Refusal::IllegalTransition {
            request: crate::RequestKind::Claim,
            ..
        }
    ));
    let r = ctx.block_on(a.task_claim(&t, &run, &w, None)).unwrap();
    assert!(matches!(
        refusal(&r),
        Refusal::IllegalTransition {
            state: State::Declared,
            ..
        }
    ));
    ctx.block_on(a.register(&t, &run)).unwrap();
    let r = ctx
        .block_on(a.task_claim(&t, &id("run-x"), &w, None))
        .unwrap();
    assert!(matches!(refusal(&r), Refusal::PreconditionFailed { which, .. } if which == "run_id"));
    let e = ctx
        .block_on(a.task_claim(&t, &run, &w, Some(61_000)))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("ttl"));
    let g = ctx
        .block_on(a.task_claim(&t, &run, &w, None))
        .unwrap()
        .grant()
        .unwrap();
    assert_eq!(
        g.expiry,
        g.claimed_at.plus_ms(60_000),
        "the TTL defaults to the heartbeat timeout"
    );
    let f = g.fence;
    let r = ctx
        .block_on(a.task_claim(&t, &run, &id("ci-8"), None))
        .unwrap();
    assert!(matches!(refusal(&r), Refusal::Held { .. }));
    let r = ctx.block_on(a.heartbeat(&t, &run, &w, f, 1, None)).unwrap();
    assert!(matches!(
        refusal(&r),
        Refusal::IllegalTransition {
            state: State::Claimed,
            ..
        }
    ));
    let r = ctx.block_on(a.start(&t, &run, &w, f)).unwrap();
    assert_eq!(
        (r.record().unwrap().state, r.record().unwrap().current_step),
        (State::Running, 1)
    );
    let r = ctx.block_on(a.heartbeat(&t, &run, &w, f, 2, None)).unwrap();
    assert_eq!(r.record().unwrap().current_step, 2);
    let e = ctx
        .block_on(a.heartbeat(&t, &run, &w, f, 1, None))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("step"), "a step never goes back");
    let e = ctx
        .block_on(a.heartbeat(&t, &run, &w, f, 4, None))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("step"), "nor past the count");
    let ev = BTreeMap::from([
        ("build.log".to_owned(), hash('1')),
        ("report".to_owned(), hash('2')),
    ]);
    let r = ctx
        .block_on(a.succeed(&t, &run, &w, f, ev.clone()))
        .unwrap();
    assert_eq!(
        refusal(&r),
        &Refusal::StepsIncomplete {
            current_step: 2,
            total_steps: 3
        }
    );
    ctx.block_on(a.heartbeat(&t, &run, &w, f, 3, None)).unwrap();
    let gate = ctx.block_on(a.gate(&t)).unwrap().unwrap();
    assert!(!gate.passed && gate.release_blocking);
    let partial = BTreeMap::from([("report".to_owned(), hash('2'))]);
    let r = ctx.block_on(a.succeed(&t, &run, &w, f, partial)).unwrap();
    assert_eq!(
        refusal(&r),
        &Refusal::EvidenceMissing {
            keys: vec!["build.log".to_owned()]
        }
    );
    let mut extra = ev.clone();
    extra.insert("coverage".to_owned(), hash('3'));
    let r = ctx
        .block_on(a.succeed(&t, &run, &w, f, extra.clone()))
        .unwrap();
    assert_eq!(r.record().unwrap().state, State::Succeeded);
    let gate = ctx.block_on(a.gate(&t)).unwrap().unwrap();
    assert!(gate.passed && !gate.release_blocking);
    assert_eq!(
        (gate.current_step, gate.total_steps, gate.evidence),
        (3, 3, extra)
    );
    let kinds: Vec<EventKind> = ctx.task_events(&t).iter().map(|e| e.kind).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        [
            Declared, Registered, Claimed, Started, Heartbeat, Heartbeat, Succeeded
        ]
    );
    // task fail from CLAIMED, on another task
    let t2 = id("life-fail");
    ctx.block_on(a.declare(manifest(t2.as_str(), 1, &[], 60, 1)))
        .unwrap();
    ctx.block_on(a.register(&t2, &run)).unwrap();
    let f2 = fence(&ctx.block_on(a.task_claim(&t2, &run, &w, None)).unwrap());
    let r = ctx
        .block_on(a.task_fail(&t2, &run, &w, f2, json!({"exit": 2})))
        .unwrap();
    assert_eq!(r.record().unwrap().state, State::Failed);
    assert_eq!(r.record().unwrap().error, Some(json!({"exit": 2})));
    let gate = ctx.block_on(a.gate(&t2)).unwrap().unwrap();
    assert!(!gate.passed);
    assert!(matches!(
        ctx.block_on(a.gate(&id("nobody"))).unwrap(),
        Err(Refusal::NotFound)
    ));
}

/// Declaring again: the same manifest is a no-op, another one conflicts,
/// except a new source_oid on a NOT_STARTED task.
pub fn manifest_supersede_and_conflict<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let t = id("sup");
    let deadline_s = ctx.short_ttl_ms().div_ceil(1000);
    let mut m = manifest(t.as_str(), 2, &[], 60, 1);
    m.start_deadline_seconds = deadline_s;
    ctx.block_on(a.declare(m.clone())).unwrap();
    let mut newer = m.clone();
    newer.source_oid = "ffff".to_owned();
    assert_eq!(
        refusal(&ctx.block_on(a.declare(newer.clone())).unwrap()),
        &Refusal::ManifestConflict
    );
    ctx.expire(deadline_s * 1000);
    let r = ctx.block_on(a.declare(newer.clone())).unwrap();
    assert_eq!(
        r.record().unwrap().manifest.as_ref().unwrap().source_oid,
        "ffff"
    );
    assert_eq!(r.record().unwrap().state, State::NotStarted);
    let ev = ctx.task_events(&t);
    assert_eq!(ev.last().unwrap().kind, EventKind::ManifestSuperseded);
    assert!(
        ev.iter().any(|e| e.kind == EventKind::NotStarted),
        "the deadline was persisted first"
    );
    let mut other = newer.clone();
    other.target_version = "9".to_owned();
    assert_eq!(
        refusal(&ctx.block_on(a.declare(other)).unwrap()),
        &Refusal::ManifestConflict
    );
    let w = id("w");
    ctx.block_on(a.claim(&id("bare-one"), &w, None)).unwrap();
    let m2 = manifest("bare-one", 1, &[], 60, 1);
    assert_eq!(
        refusal(&ctx.block_on(a.declare(m2)).unwrap()),
        &Refusal::ManifestConflict
    );
}

/// A named precondition must be proved by the record.
pub fn preconditions_must_be_proved<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w) = (id("pre"), id("w"));
    let meta = || BTreeMap::from([("k".to_owned(), json!(1))]);
    let pre = Preconditions {
        expected_revision: Some(1),
        ..Default::default()
    };
    let r = ctx
        .block_on(a.annotate(&t, &w, meta(), pre.clone()))
        .unwrap();
    assert!(
        matches!(refusal(&r), Refusal::PreconditionFailed { .. }),
        "an absent record proves nothing"
    );
    let g = ctx
        .block_on(a.claim(&t, &w, None))
        .unwrap()
        .grant()
        .unwrap();
    let pre_fence = Preconditions {
        expected_fence: Some(g.fence + 1),
        ..Default::default()
    };
    let r = ctx.block_on(a.annotate(&t, &w, meta(), pre_fence)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::PreconditionFailed { which, .. } if which == "expected_fence")
    );
    let ok = Preconditions {
        expected_state: Some(State::Claimed),
        expected_revision: Some(g.revision),
        expected_attempt: Some(g.attempt),
        expected_fence: Some(g.fence),
        within: None,
    };
    assert!(
        !ctx.block_on(a.annotate(&t, &w, meta(), ok.clone()))
            .unwrap()
            .is_refused()
    );
    let r = ctx.block_on(a.annotate(&t, &w, meta(), ok)).unwrap();
    assert!(
        matches!(refusal(&r), Refusal::PreconditionFailed { which, .. } if which == "expected_revision")
    );
    let bad = BTreeMap::from([("state".to_owned(), json!("SUCCEEDED"))]);
    let e = ctx
        .block_on(a.annotate(&t, &w, bad, Preconditions::none()))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("metadata.state"));
}
