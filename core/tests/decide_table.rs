//! The decision function, table-driven: one row per rule of SPEC §3-§6,
//! commits and refusals alike. Records are built by running decisions, so
//! every starting point is one the engine itself can reach.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use baton_core::conformance::fixtures::{hash, id, manifest};
use baton_core::{
    Actor, Decision, EventKind, Judged, Operation, Preconditions, Refusal, Request, State,
    TaskRecord, Timestamp, Verdict, decide, derive,
};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

const T0: Timestamp = Timestamp(1_767_225_600_000);
const TASK: &str = "t";
const MIN: u64 = 60_000;

fn at(ms: u64) -> Timestamp {
    T0.plus_ms(ms)
}

/// Runs one request at `now` on `rec`, judging liveness from the stored
/// expiry as the embedded stores do, and returns the decision with a fence.
fn step(rec: Option<&TaskRecord>, req: Request, now: Timestamp) -> Decision {
    step_pre(rec, req, Preconditions::none(), now)
}

fn step_pre(
    rec: Option<&TaskRecord>,
    req: Request,
    pre: Preconditions,
    now: Timestamp,
) -> Decision {
    let op = Operation {
        task: id(TASK),
        request: req,
        pre,
        now,
        clock: Default::default(),
    };
    let mut d = decide(&op, rec, Judged::of(rec, now));
    if d.mints_fence() {
        let top = rec.and_then(|r| r.current_fence()).unwrap_or(0);
        d.assign_fence(top + 10);
    }
    d
}

/// Applies a request that must commit, returning the new record.
fn then(rec: Option<TaskRecord>, req: Request, now: Timestamp) -> TaskRecord {
    let d = step(rec.as_ref(), req.clone(), now);
    match d.verdict {
        Verdict::Commit(c) => c.record,
        other => panic!("setup {req:?} did not commit: {other:?}"),
    }
}

fn w(name: &str) -> baton_core::Id {
    id(name)
}

fn claim(owner: &str, ttl: u64) -> Request {
    Request::Claim {
        owner: w(owner),
        ttl_ms: Some(ttl),
        lock_delay_ms: None,
    }
}

fn op() -> Actor {
    Actor::Operator(w("alice"))
}

// ---- starting points ----

fn bare_claimed() -> TaskRecord {
    then(None, claim("a", MIN), T0)
}
fn fence_of(r: &TaskRecord) -> u64 {
    r.current_fence().unwrap()
}
fn bare_released() -> TaskRecord {
    let r = bare_claimed();
    let f = fence_of(&r);
    then(
        Some(r),
        Request::Release {
            owner: w("a"),
            fence: f,
        },
        at(1),
    )
}
fn bare_succeeded() -> TaskRecord {
    let r = bare_claimed();
    let f = fence_of(&r);
    then(
        Some(r),
        Request::Complete {
            owner: w("a"),
            fence: f,
        },
        at(1),
    )
}
fn bare_failed() -> TaskRecord {
    let r = bare_claimed();
    let f = fence_of(&r);
    then(
        Some(r),
        Request::Fail {
            owner: w("a"),
            fence: f,
            error: Some(json!({"e": 1})),
        },
        at(1),
    )
}
fn bare_cancelled() -> TaskRecord {
    let r = bare_claimed();
    then(
        Some(r),
        Request::Cancel {
            by: op(),
            fence: None,
            force: true,
        },
        at(1),
    )
}
/// Claimed by `a`, whom an operator asked to stop.
fn bare_cancel_requested() -> TaskRecord {
    let r = bare_claimed();
    then(
        Some(r),
        Request::Cancel {
            by: op(),
            fence: None,
            force: false,
        },
        at(1),
    )
}
/// A graph task with a run-time limit of two minutes, claimed by `a` at 1
/// ms for one minute, and renewed at one minute for ten: its lease ends at
/// the limit.
fn bare_limited() -> TaskRecord {
    let t = id(TASK);
    let node = baton_core::NodeSpec::new(&t, None, 0, [])
        .unwrap()
        .with_timeout(Some(2 * MIN))
        .unwrap();
    let added = then(None, Request::Add { node }, T0);
    let claimed = then(Some(added), claim("a", MIN), at(1));
    let fence = fence_of(&claimed);
    let renewed = then(
        Some(claimed),
        Request::Renew {
            owner: w("a"),
            fence,
            ttl_ms: Some(10 * MIN),
        },
        at(MIN),
    );
    assert_eq!(
        renewed.lease.as_ref().unwrap().expires_at,
        at(1 + 2 * MIN),
        "the renewal stops at the limit"
    );
    renewed
}
/// A graph task that may be tried twice, claimed by `a` at 1 ms.
fn bare_retried_claimed() -> TaskRecord {
    let t = id(TASK);
    let node = baton_core::NodeSpec::new(&t, None, 0, [])
        .unwrap()
        .with_retry(Some(baton_core::graph::RetryPolicy::new(2, MIN)))
        .unwrap();
    let added = then(None, Request::Add { node }, T0);
    then(Some(added), claim("a", MIN), at(1))
}
/// A graph task added at T0 to start a minute later.
fn bare_put_off() -> TaskRecord {
    let t = id(TASK);
    let node = baton_core::NodeSpec::new(&t, None, 0, [])
        .unwrap()
        .with_start(Some(baton_core::graph::Start::AfterMs(MIN)))
        .unwrap();
    then(None, Request::Add { node }, T0)
}
fn m(steps: usize, evidence: &[&str], max_attempts: u32) -> baton_core::Manifest {
    manifest(TASK, steps, evidence, 60, max_attempts)
}
fn declared() -> TaskRecord {
    then(
        None,
        Request::Declare {
            manifest: m(2, &["log"], 1),
        },
        T0,
    )
}
fn registered() -> TaskRecord {
    then(
        Some(declared()),
        Request::Register { run_id: w("run") },
        at(1),
    )
}
fn task_claim(exec: &str) -> Request {
    Request::TaskClaim {
        run_id: w("run"),
        executor: w(exec),
        ttl_ms: None,
    }
}
fn claimed() -> TaskRecord {
    then(Some(registered()), task_claim("x"), at(2))
}
fn claimed_twice_allowed() -> TaskRecord {
    let r = then(
        None,
        Request::Declare {
            manifest: m(2, &["log"], 2),
        },
        T0,
    );
    let r = then(Some(r), Request::Register { run_id: w("run") }, at(1));
    then(Some(r), task_claim("x"), at(2))
}
fn running() -> TaskRecord {
    let r = claimed();
    let f = fence_of(&r);
    then(
        Some(r),
        Request::Start {
            run_id: w("run"),
            executor: w("x"),
            fence: f,
        },
        at(3),
    )
}
fn running_last_step() -> TaskRecord {
    let r = running();
    let f = fence_of(&r);
    then(Some(r), hb(f, 2), at(4))
}
fn hb(fence: u64, step: u32) -> Request {
    Request::Heartbeat {
        run_id: w("run"),
        executor: w("x"),
        fence,
        step,
        ttl_ms: None,
    }
}
/// The record as reads show it at `now`, judged by its own stored times.
fn judged_at(r: &TaskRecord, now: Timestamp) -> TaskRecord {
    derive(r, Judged::at(r, now), now)
}
fn not_started() -> TaskRecord {
    judged_at(&registered(), at(600_001))
}
fn declared_succeeded() -> TaskRecord {
    let r = running_last_step();
    let f = fence_of(&r);
    let ev = BTreeMap::from([("log".to_owned(), hash('a'))]);
    then(
        Some(r),
        Request::Succeed {
            run_id: w("run"),
            executor: w("x"),
            fence: f,
            evidence: ev,
        },
        at(5),
    )
}

// ---- the table ----

#[derive(Debug)]
enum Expect {
    Commit(State),
    Ack,
    Refuse(&'static str),
    Invalid(&'static str),
}

struct Row {
    name: &'static str,
    rec: Option<TaskRecord>,
    now: Timestamp,
    req: Request,
    expect: Expect,
    /// Whether a CONFLICT_REFUSED event is recorded.
    conflict: bool,
}

fn row(name: &'static str, rec: Option<TaskRecord>, req: Request, expect: Expect) -> Row {
    Row {
        name,
        rec,
        now: at(10),
        req,
        expect,
        conflict: false,
    }
}

impl Row {
    fn at(mut self, now: Timestamp) -> Self {
        self.now = now;
        self
    }
    fn conflict(mut self) -> Self {
        self.conflict = true;
        self
    }
}

/// The starting points and values every table's rows share.
struct Fx {
    bc: fn() -> TaskRecord,
    fb: u64,
    fc: u64,
    fr: u64,
    fl: u64,
    ev_ok: BTreeMap<String, String>,
    run: baton_core::Id,
    x: baton_core::Id,
}

fn fx() -> Fx {
    Fx {
        bc: bare_claimed,
        fb: fence_of(&bare_claimed()),
        fc: fence_of(&claimed()),
        fr: fence_of(&running()),
        fl: fence_of(&running_last_step()),
        ev_ok: BTreeMap::from([
            ("log".to_owned(), hash('a')),
            ("extra".to_owned(), hash('b')),
        ]),
        run: w("run"),
        x: w("x"),
    }
}

/// The lease requests (`decide/lease.rs`): claim, renew, release, recover,
/// complete and fail of bare tasks, cancel by the holder.
#[allow(unused_variables)]
fn lease_rows() -> Vec<Row> {
    use Expect::*;
    let Fx {
        bc,
        fb,
        fc,
        fr,
        fl,
        ev_ok,
        run,
        x,
    } = fx();
    vec![
        // claim
        row(
            "claim creates a bare task",
            None,
            claim("a", MIN),
            Commit(State::Claimed),
        ),
        row(
            "claim of a released bare task",
            Some(bare_released()),
            claim("b", MIN),
            Commit(State::Claimed),
        ),
        row(
            "claim held by another",
            Some(bc()),
            claim("b", MIN),
            Refuse("held"),
        ),
        row(
            "claim by the holder re-grants",
            Some(bc()),
            claim("a", MIN),
            Commit(State::Claimed),
        ),
        row(
            "claim after expiry takes over",
            Some(bc()),
            claim("b", MIN),
            Commit(State::Claimed),
        )
        .at(at(MIN + 1)),
        row(
            "claim of a succeeded task",
            Some(bare_succeeded()),
            claim("b", MIN),
            Refuse("completed"),
        ),
        row(
            "claim of a failed task",
            Some(bare_failed()),
            claim("b", MIN),
            Refuse("illegal_transition"),
        ),
        row(
            "claim of a declared task",
            Some(registered()),
            claim("b", MIN),
            Refuse("illegal_transition"),
        ),
        // renew
        row(
            "renew by the holder",
            Some(bc()),
            Request::Renew {
                owner: w("a"),
                fence: fb,
                ttl_ms: None,
            },
            Commit(State::Claimed),
        ),
        row(
            "renew with a stale fence",
            Some(bc()),
            Request::Renew {
                owner: w("a"),
                fence: fb - 1,
                ttl_ms: None,
            },
            Refuse("stale_fence"),
        )
        .conflict(),
        row(
            "renew by a foreign owner",
            Some(bc()),
            Request::Renew {
                owner: w("b"),
                fence: fb,
                ttl_ms: None,
            },
            Refuse("not_holder"),
        )
        .conflict(),
        row(
            "renew after expiry",
            Some(bc()),
            Request::Renew {
                owner: w("a"),
                fence: fb,
                ttl_ms: None,
            },
            Refuse("lease_expired"),
        )
        .at(at(MIN + 1))
        .conflict(),
        row(
            "renew within the run-time limit",
            Some(bare_limited()),
            Request::Renew {
                owner: w("a"),
                fence: fence_of(&bare_limited()),
                ttl_ms: Some(MIN),
            },
            Commit(State::Claimed),
        )
        .at(at(MIN + 2)),
        row(
            "renew at the run-time limit",
            Some(bare_limited()),
            Request::Renew {
                owner: w("a"),
                fence: fence_of(&bare_limited()),
                ttl_ms: Some(MIN),
            },
            Refuse("timed_out"),
        )
        .at(at(2 * MIN + 1))
        .conflict(),
        row(
            "fail with an attempt left: put off by the backoff",
            Some(bare_retried_claimed()),
            Request::Fail {
                owner: w("a"),
                fence: fence_of(&bare_retried_claimed()),
                error: Some(json!({"exit": 1})),
            },
            Commit(State::Registered),
        ),
        row(
            "claim before the start it was added with",
            Some(bare_put_off()),
            claim("b", MIN),
            Refuse("scheduled"),
        ),
        row(
            "claim once its start has come",
            Some(bare_put_off()),
            claim("b", MIN),
            Commit(State::Claimed),
        )
        .at(at(MIN)),
        row(
            "renew an unknown task",
            None,
            Request::Renew {
                owner: w("a"),
                fence: 1,
                ttl_ms: None,
            },
            Refuse("not_found"),
        ),
        row(
            "renew a declared lease above its heartbeat timeout",
            Some(claimed()),
            Request::Renew {
                owner: x.clone(),
                fence: fc,
                ttl_ms: Some(MIN + 1),
            },
            Invalid("ttl"),
        ),
        row(
            "renew after a release",
            Some(bare_released()),
            Request::Renew {
                owner: w("a"),
                fence: fb,
                ttl_ms: None,
            },
            Refuse("illegal_transition"),
        ),
        row(
            "renew after success",
            Some(bare_succeeded()),
            Request::Renew {
                owner: w("a"),
                fence: fb,
                ttl_ms: None,
            },
            Refuse("illegal_transition"),
        )
        .conflict(),
        // release
        row(
            "release by the holder",
            Some(bc()),
            Request::Release {
                owner: w("a"),
                fence: fb,
            },
            Commit(State::Registered),
        ),
        row(
            "release of a declared task",
            Some(running()),
            Request::Release {
                owner: x.clone(),
                fence: fr,
            },
            Commit(State::Registered),
        ),
        row(
            "release with a stale fence",
            Some(bc()),
            Request::Release {
                owner: w("a"),
                fence: 1,
            },
            Refuse("stale_fence"),
        )
        .conflict(),
        // recover
        row(
            "recover a live lease",
            Some(bc()),
            Request::Recover {
                owner: w("b"),
                ttl_ms: None,
            },
            Refuse("lease_live"),
        ),
        row(
            "recover an expired lease",
            Some(bc()),
            Request::Recover {
                owner: w("b"),
                ttl_ms: None,
            },
            Commit(State::Claimed),
        )
        .at(at(MIN + 1)),
        row(
            "recover an unknown task creates it",
            None,
            Request::Recover {
                owner: w("b"),
                ttl_ms: None,
            },
            Commit(State::Claimed),
        ),
        row(
            "recover a succeeded task",
            Some(bare_succeeded()),
            Request::Recover {
                owner: w("b"),
                ttl_ms: None,
            },
            Refuse("completed"),
        ),
        row(
            "recover a declared task that stalled for good",
            Some(claimed()),
            Request::Recover {
                owner: w("y"),
                ttl_ms: None,
            },
            Refuse("illegal_transition"),
        )
        .at(at(MIN + 10)),
        row(
            "recover an expired declared lease",
            Some(claimed_twice_allowed()),
            Request::Recover {
                owner: w("y"),
                ttl_ms: None,
            },
            Commit(State::Claimed),
        )
        .at(at(MIN + 10)),
        row(
            "recover a declared task never claimed",
            Some(registered()),
            Request::Recover {
                owner: w("y"),
                ttl_ms: None,
            },
            Refuse("illegal_transition"),
        ),
        // complete / fail (bare)
        row(
            "complete by the holder",
            Some(bc()),
            Request::Complete {
                owner: w("a"),
                fence: fb,
            },
            Commit(State::Succeeded),
        ),
        row(
            "complete repeated",
            Some(bare_succeeded()),
            Request::Complete {
                owner: w("a"),
                fence: fb,
            },
            Ack,
        ),
        row(
            "complete after fail",
            Some(bare_failed()),
            Request::Complete {
                owner: w("a"),
                fence: fb,
            },
            Refuse("illegal_transition"),
        )
        .conflict(),
        row(
            "complete with a stale fence after success",
            Some(bare_succeeded()),
            Request::Complete {
                owner: w("a"),
                fence: 1,
            },
            Refuse("stale_fence"),
        )
        .conflict(),
        row(
            "complete a declared task",
            Some(running()),
            Request::Complete {
                owner: x.clone(),
                fence: fr,
            },
            Refuse("illegal_transition"),
        ),
        row(
            "fail by the holder",
            Some(bc()),
            Request::Fail {
                owner: w("a"),
                fence: fb,
                error: None,
            },
            Commit(State::Failed),
        ),
        row(
            "fail repeated",
            Some(bare_failed()),
            Request::Fail {
                owner: w("a"),
                fence: fb,
                error: None,
            },
            Ack,
        ),
        row(
            "fail with an error that is not an object",
            Some(bc()),
            Request::Fail {
                owner: w("a"),
                fence: fb,
                error: Some(json!([1])),
            },
            Invalid("error"),
        ),
        row(
            "fail with an error over 16 KiB",
            Some(bc()),
            Request::Fail {
                owner: w("a"),
                fence: fb,
                error: Some(json!({"x": "y".repeat(17_000)})),
            },
            Invalid("error"),
        ),
        // cancel
        row(
            "cancel by the holder",
            Some(bc()),
            Request::Cancel {
                by: Actor::Worker(w("a")),
                fence: Some(fb),
                force: false,
            },
            Commit(State::Cancelled),
        ),
        row(
            "cancel by a late worker",
            Some(bc()),
            Request::Cancel {
                by: Actor::Worker(w("b")),
                fence: Some(fb - 1),
                force: false,
            },
            Refuse("stale_fence"),
        )
        .conflict(),
        row(
            "cancel by an operator asks the live holder to stop",
            Some(running()),
            Request::Cancel {
                by: op(),
                fence: None,
                force: false,
            },
            Commit(State::Running),
        ),
        row(
            "cancel by an operator, forced, ends a live lease at once",
            Some(running()),
            Request::Cancel {
                by: op(),
                fence: None,
                force: true,
            },
            Commit(State::Cancelled),
        ),
        row(
            "cancel by an operator of a task nobody holds",
            Some(bare_released()),
            Request::Cancel {
                by: op(),
                fence: None,
                force: false,
            },
            Commit(State::Cancelled),
        ),
        row(
            "cancel by an operator, asked again",
            Some(bare_cancel_requested()),
            Request::Cancel {
                by: op(),
                fence: None,
                force: false,
            },
            Ack,
        ),
        row(
            "renew while asked to stop",
            Some(bare_cancel_requested()),
            Request::Renew {
                owner: w("a"),
                fence: fb,
                ttl_ms: None,
            },
            Commit(State::Claimed),
        ),
        row(
            "release while asked to stop cancels",
            Some(bare_cancel_requested()),
            Request::Release {
                owner: w("a"),
                fence: fb,
            },
            Commit(State::Cancelled),
        ),
        row(
            "claim by another while the asked holder's lease is live",
            Some(bare_cancel_requested()),
            claim("b", MIN),
            Refuse("held"),
        ),
        row(
            "claim once the asked holder's lease ended: it was cancelled",
            Some(bare_cancel_requested()),
            claim("b", MIN),
            Refuse("illegal_transition"),
        )
        .at(at(MIN + 1)),
        row(
            "cancel by an operator, repeated",
            Some(bare_cancelled()),
            Request::Cancel {
                by: op(),
                fence: None,
                force: false,
            },
            Ack,
        ),
        row(
            "cancel without a fence by a worker",
            Some(bc()),
            Request::Cancel {
                by: Actor::Worker(w("a")),
                fence: None,
                force: false,
            },
            Refuse("operator_required"),
        ),
        row(
            "cancel a succeeded task",
            Some(bare_succeeded()),
            Request::Cancel {
                by: op(),
                fence: None,
                force: false,
            },
            Refuse("illegal_transition"),
        ),
    ]
}

/// The registry requests (`decide/registry.rs`): declare, register, task
/// claim, start, heartbeat, succeed, task fail, retry.
#[allow(unused_variables)]
fn registry_rows() -> Vec<Row> {
    use Expect::*;
    let Fx {
        bc,
        fb,
        fc,
        fr,
        fl,
        ev_ok,
        run,
        x,
    } = fx();
    vec![
        // declare
        row(
            "declare a new task",
            None,
            Request::Declare {
                manifest: m(2, &["log"], 1),
            },
            Commit(State::Declared),
        ),
        row(
            "declare the same manifest",
            Some(declared()),
            Request::Declare {
                manifest: m(2, &["log"], 1),
            },
            Ack,
        ),
        row(
            "declare another manifest",
            Some(declared()),
            Request::Declare {
                manifest: m(3, &["log"], 1),
            },
            Refuse("manifest_conflict"),
        ),
        row(
            "declare over a bare task",
            Some(bc()),
            Request::Declare {
                manifest: m(2, &["log"], 1),
            },
            Refuse("manifest_conflict"),
        ),
        row(
            "declare a new source_oid when NOT_STARTED",
            Some(not_started()),
            Request::Declare {
                manifest: {
                    let mut x = m(2, &["log"], 1);
                    x.source_oid = "new".into();
                    x
                },
            },
            Commit(State::NotStarted),
        )
        .at(at(600_002)),
        row(
            "declare a new source_oid before NOT_STARTED",
            Some(registered()),
            Request::Declare {
                manifest: {
                    let mut x = m(2, &["log"], 1);
                    x.source_oid = "new".into();
                    x
                },
            },
            Refuse("manifest_conflict"),
        ),
        row(
            "declare under another task id",
            None,
            Request::Declare {
                manifest: manifest("other", 1, &[], 60, 1),
            },
            Invalid("task_id"),
        ),
        // register
        row(
            "register a declared task",
            Some(declared()),
            Request::Register {
                run_id: run.clone(),
            },
            Commit(State::Registered),
        ),
        row(
            "register again with the same run",
            Some(registered()),
            Request::Register {
                run_id: run.clone(),
            },
            Ack,
        ),
        row(
            "register a claimed task",
            Some(claimed()),
            Request::Register {
                run_id: run.clone(),
            },
            Refuse("illegal_transition"),
        ),
        row(
            "register a bare task",
            Some(bc()),
            Request::Register {
                run_id: run.clone(),
            },
            Refuse("illegal_transition"),
        ),
        // task claim
        row(
            "task claim a registered task",
            Some(registered()),
            task_claim("x"),
            Commit(State::Claimed),
        ),
        row(
            "task claim with another run id",
            Some(registered()),
            Request::TaskClaim {
                run_id: w("other"),
                executor: x.clone(),
                ttl_ms: None,
            },
            Refuse("precondition_failed"),
        ),
        row(
            "task claim before register",
            Some(declared()),
            task_claim("x"),
            Refuse("illegal_transition"),
        ),
        row(
            "task claim held by another executor",
            Some(claimed()),
            task_claim("y"),
            Refuse("held"),
        ),
        row(
            "task claim above the heartbeat timeout",
            Some(registered()),
            Request::TaskClaim {
                run_id: run.clone(),
                executor: x.clone(),
                ttl_ms: Some(MIN + 1),
            },
            Invalid("ttl"),
        ),
        row(
            "task claim a succeeded task",
            Some(declared_succeeded()),
            task_claim("y"),
            Refuse("completed"),
        ),
        row(
            "task claim of a bare task",
            Some(bc()),
            task_claim("y"),
            Refuse("illegal_transition"),
        ),
        // start
        row(
            "start a claimed task",
            Some(claimed()),
            Request::Start {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fc,
            },
            Commit(State::Running),
        ),
        row(
            "start again",
            Some(running()),
            Request::Start {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fr,
            },
            Ack,
        ),
        row(
            "start with a stale fence",
            Some(claimed()),
            Request::Start {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fc - 1,
            },
            Refuse("stale_fence"),
        )
        .conflict(),
        row(
            "start a bare task",
            Some(bc()),
            Request::Start {
                run_id: run.clone(),
                executor: w("a"),
                fence: fb,
            },
            Refuse("illegal_transition"),
        ),
        // heartbeat
        row(
            "heartbeat moves a step on",
            Some(running()),
            hb(fr, 2),
            Commit(State::Running),
        ),
        row(
            "heartbeat on the same step",
            Some(running()),
            hb(fr, 1),
            Commit(State::Running),
        ),
        row(
            "heartbeat going back",
            Some(running_last_step()),
            hb(fl, 1),
            Invalid("step"),
        ),
        row(
            "heartbeat past the count",
            Some(running()),
            hb(fr, 3),
            Invalid("step"),
        ),
        row(
            "heartbeat step 0",
            Some(running()),
            hb(fr, 0),
            Invalid("step"),
        ),
        row(
            "heartbeat before start",
            Some(claimed()),
            hb(fc, 1),
            Refuse("illegal_transition"),
        ),
        row(
            "heartbeat after expiry",
            Some(running()),
            hb(fr, 2),
            Refuse("lease_expired"),
        )
        .at(at(MIN + 10))
        .conflict(),
        // succeed
        row(
            "succeed at the last step with evidence",
            Some(running_last_step()),
            Request::Succeed {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fl,
                evidence: ev_ok.clone(),
            },
            Commit(State::Succeeded),
        ),
        row(
            "succeed before the last step",
            Some(running()),
            Request::Succeed {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fr,
                evidence: ev_ok.clone(),
            },
            Refuse("steps_incomplete"),
        ),
        row(
            "succeed without required evidence",
            Some(running_last_step()),
            Request::Succeed {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fl,
                evidence: BTreeMap::new(),
            },
            Refuse("evidence_missing"),
        ),
        row(
            "succeed with a malformed hash",
            Some(running_last_step()),
            Request::Succeed {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fl,
                evidence: BTreeMap::from([("log".to_owned(), "sha256:zz".to_owned())]),
            },
            Invalid("evidence.log"),
        ),
        row(
            "succeed from CLAIMED",
            Some(claimed()),
            Request::Succeed {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fc,
                evidence: ev_ok.clone(),
            },
            Refuse("illegal_transition"),
        ),
        row(
            "succeed repeated",
            Some(declared_succeeded()),
            Request::Succeed {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fl,
                evidence: BTreeMap::new(),
            },
            Ack,
        ),
        // task fail
        row(
            "task fail from RUNNING",
            Some(running()),
            Request::TaskFail {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fr,
                error: json!({"e": 1}),
            },
            Commit(State::Failed),
        ),
        row(
            "task fail from CLAIMED",
            Some(claimed()),
            Request::TaskFail {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fc,
                error: json!({}),
            },
            Commit(State::Failed),
        ),
        row(
            "task fail after success",
            Some(declared_succeeded()),
            Request::TaskFail {
                run_id: run.clone(),
                executor: x.clone(),
                fence: fl,
                error: json!({}),
            },
            Refuse("illegal_transition"),
        )
        .conflict(),
        // retry
        row(
            "retry a NOT_STARTED task",
            Some(not_started()),
            Request::Retry { run_id: w("run-2") },
            Commit(State::Registered),
        )
        .at(at(600_002)),
        row(
            "retry a registered task",
            Some(registered()),
            Request::Retry { run_id: w("run-2") },
            Refuse("illegal_transition"),
        ),
    ]
}

/// Operator requests, the metadata merge, settle and the input rules
/// (`decide/operator.rs`, `decide/checks.rs`).
#[allow(unused_variables)]
fn operator_rows() -> Vec<Row> {
    use Expect::*;
    let Fx {
        bc,
        fb,
        fc,
        fr,
        fl,
        ev_ok,
        run,
        x,
    } = fx();
    vec![
        // redispatch
        row(
            "redispatch a failed task",
            Some(bare_failed()),
            Request::Redispatch {
                by: op(),
                iteration: 2,
            },
            Commit(State::Registered),
        ),
        row(
            "redispatch by a worker",
            Some(bare_failed()),
            Request::Redispatch {
                by: Actor::Worker(w("a")),
                iteration: 2,
            },
            Refuse("operator_required"),
        ),
        row(
            "redispatch without advancing",
            Some(bare_failed()),
            Request::Redispatch {
                by: op(),
                iteration: 1,
            },
            Refuse("iteration_not_advanced"),
        ),
        row(
            "redispatch a succeeded task",
            Some(bare_succeeded()),
            Request::Redispatch {
                by: op(),
                iteration: 2,
            },
            Refuse("completed"),
        ),
        row(
            "redispatch a running task",
            Some(running()),
            Request::Redispatch {
                by: op(),
                iteration: 2,
            },
            Refuse("illegal_transition"),
        ),
        row(
            "redispatch iteration 0",
            Some(bare_failed()),
            Request::Redispatch {
                by: op(),
                iteration: 0,
            },
            Invalid("iteration"),
        ),
        // finalize
        row(
            "finalize a running task",
            Some(running()),
            Request::Finalize {
                by: op(),
                error: None,
            },
            Commit(State::Failed),
        ),
        row(
            "finalize a failed task",
            Some(bare_failed()),
            Request::Finalize {
                by: op(),
                error: None,
            },
            Commit(State::Failed),
        ),
        row(
            "finalize a succeeded task",
            Some(bare_succeeded()),
            Request::Finalize {
                by: op(),
                error: None,
            },
            Refuse("completed"),
        ),
        row(
            "finalize by a worker",
            Some(running()),
            Request::Finalize {
                by: Actor::Worker(x.clone()),
                error: None,
            },
            Refuse("operator_required"),
        ),
        // annotate, settle, input rules
        row(
            "annotate merges metadata",
            Some(running()),
            Request::Annotate {
                actor: x.clone(),
                metadata: BTreeMap::from([("k".to_owned(), json!(1))]),
            },
            Commit(State::Running),
        ),
        row(
            "annotate cannot carry a state",
            Some(running()),
            Request::Annotate {
                actor: x.clone(),
                metadata: BTreeMap::from([("state".to_owned(), json!("SUCCEEDED"))]),
            },
            Invalid("metadata.state"),
        ),
        row("settle an expired lease", Some(bc()), Request::Settle, Ack).at(at(MIN + 1)),
        row(
            "settle an unknown task",
            None,
            Request::Settle,
            Refuse("not_found"),
        ),
        row(
            "a zero fence",
            Some(bc()),
            Request::Complete {
                owner: w("a"),
                fence: 0,
            },
            Invalid("fence"),
        ),
        row("a zero TTL", None, claim("a", 0), Invalid("ttl")),
        row(
            "a TTL over 7 days",
            None,
            claim("a", 8 * 24 * 3600 * 1000),
            Invalid("ttl"),
        ),
        row(
            "a lease that would end past 9999-12-31",
            None,
            claim("a", MIN),
            Invalid("ttl"),
        )
        .at(Timestamp(Timestamp::MAX.as_millis() - 1000)),
        row(
            "a re-claim whose lease would end past 9999-12-31",
            Some(bc()),
            claim("a", MIN),
            Invalid("ttl"),
        )
        .at(Timestamp(Timestamp::MAX.as_millis() - 1000)),
        row(
            "an unknown task",
            None,
            Request::Start {
                run_id: run.clone(),
                executor: x.clone(),
                fence: 5,
            },
            Refuse("not_found"),
        ),
    ]
}

fn checkpoint(owner: &str, fence: u64, step: &str, output: serde_json::Value) -> Request {
    Request::Checkpoint {
        owner: w(owner),
        fence,
        step: w(step),
        output,
        spawned: Vec::new(),
        wait: false,
    }
}

/// A claimed bare task with step `fetch` recorded.
fn bare_stepped() -> TaskRecord {
    let r = bare_claimed();
    let f = fence_of(&r);
    then(
        Some(r),
        checkpoint("a", f, "fetch", json!({"rows": 1})),
        at(1),
    )
}

/// Durable steps (`decide/steps.rs`): the holder's checks first, then a
/// step recorded once and never overwritten.
fn step_rows() -> Vec<Row> {
    use Expect::*;
    let fb = fence_of(&bare_claimed());
    vec![
        row(
            "a step by the holder is recorded",
            Some(bare_claimed()),
            checkpoint("a", fb, "fetch", json!({"rows": 1})),
            Commit(State::Claimed),
        ),
        row(
            "the same step with the same output is an acknowledgement",
            Some(bare_stepped()),
            checkpoint("a", fb, "fetch", json!({"rows": 1})),
            Ack,
        ),
        row(
            "the same step with another output is a conflict",
            Some(bare_stepped()),
            checkpoint("a", fb, "fetch", json!({"rows": 2})),
            Refuse("checkpoint_conflict"),
        ),
        row(
            "a step under a stale fence",
            Some(bare_stepped()),
            checkpoint("a", fb + 1, "load", json!(1)),
            Refuse("stale_fence"),
        )
        .conflict(),
        row(
            "a step by another owner",
            Some(bare_stepped()),
            checkpoint("b", fb, "load", json!(1)),
            Refuse("not_holder"),
        )
        .conflict(),
        row(
            "a step after the lease expired",
            Some(bare_stepped()),
            checkpoint("a", fb, "load", json!(1)),
            Refuse("lease_expired"),
        )
        .at(at(MIN + 5))
        .conflict(),
        row(
            "a step after the task succeeded",
            Some(bare_succeeded()),
            checkpoint("a", fb, "load", json!(1)),
            Refuse("illegal_transition"),
        )
        .conflict(),
        row(
            "a step that waits for tasks it names none of",
            Some(bare_stepped()),
            Request::Checkpoint {
                owner: w("a"),
                fence: fb,
                step: w("wait"),
                output: json!(null),
                spawned: Vec::new(),
                wait: true,
            },
            Invalid("wait"),
        ),
        row(
            "a step that spawns its own task",
            Some(bare_stepped()),
            Request::Checkpoint {
                owner: w("a"),
                fence: fb,
                step: w("self"),
                output: json!(null),
                spawned: vec![w(TASK)],
                wait: false,
            },
            Invalid("spawn"),
        ),
    ]
}

#[test]
fn step_requests() {
    check(step_rows());
}

/// Every row, for the checks that span concerns.
fn rows() -> Vec<Row> {
    let mut all = lease_rows();
    all.extend(registry_rows());
    all.extend(operator_rows());
    all.extend(step_rows());
    all
}

#[test]
fn lease_requests() {
    check(lease_rows());
}

#[test]
fn registry_requests() {
    check(registry_rows());
}

#[test]
fn operator_requests_and_input_rules() {
    check(operator_rows());
}

/// Each row's expectation, and what every decision must hold whatever the row.
fn check(rows: Vec<Row>) {
    let mut failures = Vec::new();
    for r in rows {
        let d = step(r.rec.as_ref(), r.req.clone(), r.now);
        let ok = match (&r.expect, &d.verdict) {
            (Expect::Commit(s), Verdict::Commit(c)) => c.record.state == *s,
            (Expect::Ack, Verdict::Ack) => true,
            (Expect::Refuse(reason), Verdict::Refuse { refusal, conflict }) => {
                refusal.reason() == *reason && conflict.is_some() == r.conflict
            }
            (Expect::Invalid(field), Verdict::Invalid(e)) => e.field.as_deref() == Some(*field),
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{}: expected {:?} (conflict {}), got {:?}",
                r.name, r.expect, r.conflict, d.verdict
            ));
        }
        // A refusal or an invalid request changes no record beyond what time settled.
        if matches!(
            d.verdict,
            Verdict::Refuse { .. } | Verdict::Invalid(_) | Verdict::Ack
        ) {
            assert_eq!(
                d.record_to_write(),
                d.settle.as_ref().map(|c| &c.record),
                "{}",
                r.name
            );
        }
        if let Verdict::Commit(c) = &d.verdict {
            let before = d.current.as_ref().map_or(0, |x| x.revision);
            assert_eq!(
                c.record.revision,
                before + 1,
                "{}: a commit is exactly one revision",
                r.name
            );
            assert!(!c.events.is_empty(), "{}: a commit leaves an event", r.name);
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The lease can be rebuilt from the events alone: every grant event,
/// a re-grant to the same owner included, carries its expiry.
#[test]
fn every_grant_event_carries_its_expiry() {
    let first = step(None, claim("a", MIN), T0);
    let regrant = step(Some(&bare_claimed()), claim("a", 2 * MIN), at(1000));
    let taken = step(Some(&bare_claimed()), claim("b", MIN), at(MIN + 1));
    for (name, d, expiry) in [
        ("first claim", first, at(MIN)),
        ("re-grant", regrant, at(1000 + 2 * MIN)),
        ("takeover", taken, at(2 * MIN + 1)),
    ] {
        let Verdict::Commit(c) = &d.verdict else {
            panic!("{name}: {:?}", d.verdict)
        };
        let e = c
            .events
            .iter()
            .find(|e| e.kind == EventKind::Claimed)
            .unwrap_or_else(|| panic!("{name}: no CLAIMED event"));
        assert_eq!(
            e.details["expires_at"],
            json!(expiry),
            "{name}: {:?}",
            e.details
        );
        assert_eq!(c.record.lease.as_ref().unwrap().expires_at, expiry);
    }
}

#[test]
fn every_refusal_reason_has_a_row() {
    let covered: BTreeSet<&str> = rows()
        .iter()
        .filter_map(|r| match r.expect {
            Expect::Refuse(reason) => Some(reason),
            _ => None,
        })
        .collect();
    let all = [
        "held",
        "stale_fence",
        "not_holder",
        "lease_expired",
        "timed_out",
        "scheduled",
        "lease_live",
        "completed",
        "illegal_transition",
        "precondition_failed",
        "operator_required",
        "evidence_missing",
        "steps_incomplete",
        "manifest_conflict",
        "iteration_not_advanced",
        "not_found",
        "checkpoint_conflict",
    ];
    for reason in all {
        assert!(covered.contains(reason), "no row refuses with {reason}");
    }
}

#[test]
fn expiry_stalls_the_attempt_until_max_attempts() {
    // max_attempts 2: the first stall returns the task, the second ends it.
    let r = then(
        None,
        Request::Declare {
            manifest: m(1, &[], 2),
        },
        T0,
    );
    let r = then(Some(r), Request::Register { run_id: w("run") }, at(1));
    let r = then(Some(r), task_claim("x"), at(2));
    let s = judged_at(&r, at(MIN + 2));
    assert_eq!(
        (s.state, s.stalls, s.revision),
        (State::Registered, 1, r.revision + 1)
    );
    let r = then(Some(r), task_claim("y"), at(MIN + 3));
    assert_eq!((r.state, r.attempt, r.stalls), (State::Claimed, 2, 1));
    let s = judged_at(&r, at(2 * MIN + 4));
    assert_eq!((s.state, s.stalls), (State::Stalled, 2));
    // The settlement's event is the STALLED one, by the system.
    let d = step(Some(&r), Request::Settle, at(2 * MIN + 4));
    let settle = d.settle.unwrap();
    assert_eq!(settle.events[0].kind, EventKind::Stalled);
    assert_eq!(settle.events[0].actor, Actor::System);
}

#[test]
fn start_deadline_counts_from_register_and_release() {
    let r = registered(); // registered at +1 ms, deadline 600 s
    assert_eq!(judged_at(&r, at(600_000)).state, State::Registered);
    assert_eq!(judged_at(&r, at(600_001)).state, State::NotStarted);
    let c = then(Some(r), task_claim("x"), at(500_000));
    let f = fence_of(&c);
    let rel = then(
        Some(c),
        Request::Release {
            owner: w("x"),
            fence: f,
        },
        at(550_000),
    );
    assert_eq!(
        judged_at(&rel, at(700_000)).state,
        State::Registered,
        "counts from the release"
    );
    assert_eq!(judged_at(&rel, at(1_150_000)).state, State::NotStarted);
}

#[test]
fn preconditions_are_proved() {
    let r = bare_claimed();
    let pre = |p: Preconditions| {
        step_pre(
            Some(&r),
            Request::Annotate {
                actor: w("a"),
                metadata: BTreeMap::new(),
            },
            p,
            at(5),
        )
    };
    let ok = pre(Preconditions {
        expected_state: Some(State::Claimed),
        expected_revision: Some(r.revision),
        ..Default::default()
    });
    assert!(matches!(ok.verdict, Verdict::Commit(_)));
    for p in [
        Preconditions {
            expected_state: Some(State::Running),
            ..Default::default()
        },
        Preconditions {
            expected_revision: Some(r.revision + 1),
            ..Default::default()
        },
        Preconditions {
            expected_attempt: Some(9),
            ..Default::default()
        },
        Preconditions {
            expected_fence: Some(1),
            ..Default::default()
        },
    ] {
        assert!(matches!(
            pre(p).verdict,
            Verdict::Refuse {
                refusal: Refusal::PreconditionFailed { .. },
                ..
            }
        ));
    }
}

#[test]
fn a_new_fence_is_filled_everywhere() {
    let op = Operation {
        task: id(TASK),
        request: task_claim("x"),
        pre: Preconditions::none(),
        now: at(2),
        clock: Default::default(),
    };
    let mut r = registered();
    r.manifest.as_mut().unwrap().notification_events = [EventKind::Claimed].into();
    let mut d = decide(&op, Some(&r), Judged::of(Some(&r), op.now));
    assert!(d.mints_fence());
    d.assign_fence(77);
    let Verdict::Commit(c) = &d.verdict else {
        panic!()
    };
    assert_eq!(c.record.current_fence(), Some(77));
    assert_eq!(c.events[0].fence, Some(77));
    assert_eq!(c.notifications[0].payload["fence"], json!(77));
}

#[test]
fn decisions_are_pure() {
    for r in rows() {
        let a = step(r.rec.as_ref(), r.req.clone(), r.now);
        let b = step(r.rec.as_ref(), r.req.clone(), r.now);
        assert_eq!(a, b, "{}", r.name);
    }
}

/// The decision names what happens to the lease; stores with engine leases
/// apply exactly that.
#[test]
fn every_request_names_its_lease_effect() {
    use baton_core::LeaseEffect::{Ended, Extended, Granted, Unchanged};
    let c = bare_claimed();
    let f = fence_of(&c);
    let r = running();
    let rf = fence_of(&r);
    let rows: Vec<(
        &str,
        Option<TaskRecord>,
        Request,
        Timestamp,
        baton_core::LeaseEffect,
    )> = vec![
        ("claim", None, claim("a", MIN), T0, Granted { ttl_ms: MIN }),
        (
            "re-grant to the holder",
            Some(c.clone()),
            claim("a", 2 * MIN),
            at(1000),
            Granted { ttl_ms: 2 * MIN },
        ),
        (
            "takeover after expiry",
            Some(c.clone()),
            claim("b", MIN),
            at(MIN + 1),
            Granted { ttl_ms: MIN },
        ),
        (
            "renew",
            Some(c.clone()),
            Request::Renew {
                owner: w("a"),
                fence: f,
                ttl_ms: Some(3 * MIN),
            },
            at(1000),
            Extended { ttl_ms: 3 * MIN },
        ),
        (
            "start keeps the lease",
            Some(claimed()),
            Request::Start {
                run_id: w("run"),
                executor: w("ci"),
                fence: fence_of(&claimed()),
            },
            at(2),
            Unchanged,
        ),
        (
            "heartbeat",
            Some(r.clone()),
            hb(rf, 1),
            at(10),
            Extended { ttl_ms: 60_000 },
        ),
        (
            "release",
            Some(c.clone()),
            Request::Release {
                owner: w("a"),
                fence: f,
            },
            at(1),
            Ended,
        ),
        (
            "complete",
            Some(c.clone()),
            Request::Complete {
                owner: w("a"),
                fence: f,
            },
            at(1),
            Ended,
        ),
        (
            "a lost race",
            Some(c.clone()),
            claim("b", MIN),
            at(1),
            Unchanged,
        ),
        (
            "an expiry written down",
            Some(c.clone()),
            Request::Settle,
            at(MIN + 1),
            Ended,
        ),
    ];
    for (name, rec, req, now, want) in rows {
        let d = step(rec.as_ref(), req, now);
        assert_eq!(d.lease, want, "{name}: {:?}", d.verdict);
    }
}

/// TTL granularity and minimum are the store's; the decision applies them
/// once, after defaults, so the reported expiry is the one the store keeps.
#[test]
fn lease_rules_round_up_then_raise_to_the_minimum() {
    let rules = baton_core::LeaseRules {
        granularity_ms: 1000,
        min_ms: 2000,
    };
    for (asked, kept) in [
        (Some(1), 2000),
        (Some(1500), 2000),
        (Some(2500), 3000),
        (Some(60_000), 60_000),
        (None, 30_000),
    ] {
        let op = Operation {
            task: id(TASK),
            request: Request::Claim {
                owner: w("a"),
                ttl_ms: asked,
                lock_delay_ms: None,
            },
            pre: Preconditions::none(),
            now: T0,
            clock: Default::default(),
        };
        let d = baton_core::decide_with(&op, None, Judged::default(), rules);
        let Verdict::Commit(c) = &d.verdict else {
            panic!("{asked:?}: {:?}", d.verdict)
        };
        assert_eq!(
            c.record.lease.as_ref().unwrap().expires_at,
            at(kept),
            "{asked:?}"
        );
        assert_eq!(d.lease, baton_core::LeaseEffect::Granted { ttl_ms: kept });
    }
    assert_eq!(baton_core::LeaseRules::default().effective(1), 1);
    // A declared task's default is its heartbeat timeout, rounded the same way.
    let rec = registered();
    let op = Operation {
        task: id(TASK),
        request: task_claim("ci"),
        pre: Preconditions::none(),
        now: at(5),
        clock: Default::default(),
    };
    let d = baton_core::decide_with(&op, Some(&rec), Judged::of(Some(&rec), op.now), rules);
    let Verdict::Commit(c) = &d.verdict else {
        panic!("{:?}", d.verdict)
    };
    assert_eq!(c.record.lease.as_ref().unwrap().expires_at, at(5 + 60_000));
}

/// Decides `req` at `now` with the facts a store's judge of time gives.
fn judged_step(rec: &TaskRecord, req: Request, judged: Judged, now: Timestamp) -> Decision {
    let op = Operation {
        task: id(TASK),
        request: req,
        pre: Preconditions::none(),
        now,
        clock: Default::default(),
    };
    decide(&op, Some(rec), judged)
}

/// A declared task (one step, three attempts, 60 s heartbeat, 600 s start
/// deadline) claimed at +2 ms by `x`.
fn claimed_three_attempts() -> TaskRecord {
    let r = then(
        None,
        Request::Declare {
            manifest: m(1, &[], 3),
        },
        T0,
    );
    let r = then(Some(r), Request::Register { run_id: w("run") }, at(1));
    then(Some(r), task_claim("x"), at(2))
}

#[test]
fn only_the_judge_of_time_passes_a_start_deadline() {
    const HOUR: u64 = 3_600_000;
    let r = registered(); // due at +600 001 ms by its own times
    let waiting = Judged::default();
    let passed = Judged {
        lease_holds: false,
        deadline_passed: true,
        lock_delay_holds: false,
    };
    // A caller an hour ahead cannot end the wait the judge says goes on...
    assert_eq!(
        derive(&r, waiting, at(600_001 + HOUR)).state,
        State::Registered
    );
    let d = judged_step(&r, Request::Settle, waiting, at(600_001 + HOUR));
    assert!(d.settle.is_none(), "{:?}", d.settle);
    // ...and a caller an hour behind cannot prolong one the judge says is over.
    let s = derive(&r, passed, T0);
    assert_eq!(s.state, State::NotStarted);
    assert_eq!(
        s.error.as_ref().and_then(|e| e.get("code")).cloned(),
        Some(json!("start_deadline_exceeded"))
    );
}

#[test]
fn only_the_judge_of_time_ends_a_lease() {
    const HOUR: u64 = 3_600_000;
    let c = claimed_three_attempts();
    let f = fence_of(&c);
    let renew = |owner: &str| Request::Renew {
        owner: w(owner),
        fence: f,
        ttl_ms: None,
    };
    let holds = Judged {
        lease_holds: true,
        deadline_passed: false,
        lock_delay_holds: false,
    };
    // Past the stored expiry by an hour, the lease the judge says holds is live.
    let d = judged_step(&c, renew("x"), holds, at(2 + 60_000 + HOUR));
    assert!(matches!(d.verdict, Verdict::Commit(_)), "{:?}", d.verdict);
    let d = judged_step(&c, task_claim("y"), holds, at(2 + 60_000 + HOUR));
    assert!(
        matches!(
            &d.verdict,
            Verdict::Refuse {
                refusal: Refusal::Held { .. },
                ..
            }
        ),
        "{:?}",
        d.verdict
    );
    // An hour before the stored expiry, the lease the judge says ran out is
    // expired: the holder hears lease_expired, and the attempt returns to
    // REGISTERED (one stall of three), not NOT_STARTED, since the judge says
    // the start deadline after the expiry has not passed.
    let gone = Judged::default();
    let early = Timestamp::from_millis(at(2).as_millis() - 3_600_000);
    let d = judged_step(&c, renew("x"), gone, early);
    let settled = d.settle.as_ref().expect("the expiry is written down");
    assert_eq!(
        (settled.record.state, settled.record.stalls),
        (State::Registered, 1)
    );
    assert!(settled.record.lease.as_ref().unwrap().expired);
    match &d.verdict {
        Verdict::Refuse {
            refusal: Refusal::LeaseExpired { fence, .. },
            ..
        } => assert_eq!(*fence, f),
        v => panic!("renew after the judge's expiry: {v:?}"),
    }
    // Once written down, a late renew from any clock still hears lease_expired.
    let later = settled.record.clone();
    for now in [early, at(2 + 60_000 + HOUR)] {
        let d = judged_step(&later, renew("x"), gone, now);
        assert!(
            matches!(
                &d.verdict,
                Verdict::Refuse {
                    refusal: Refusal::LeaseExpired { .. },
                    ..
                }
            ),
            "{now}: {:?}",
            d.verdict
        );
    }
    // A grant given back is not an expired one: a late renew is illegal.
    let rel = then(
        Some(c.clone()),
        Request::Release {
            owner: w("x"),
            fence: f,
        },
        at(3),
    );
    let d = judged_step(&rel, renew("x"), gone, at(2 + 60_000 + HOUR));
    assert!(
        matches!(
            &d.verdict,
            Verdict::Refuse {
                refusal: Refusal::IllegalTransition { .. },
                ..
            }
        ),
        "{:?}",
        d.verdict
    );
}

#[test]
fn a_decision_says_what_it_does_to_the_start_deadline() {
    use baton_core::TimerEffect::{Cleared, Set, Unchanged};
    let start = 600_000;
    let decl = step(
        None,
        Request::Declare {
            manifest: m(1, &[], 3),
        },
        T0,
    );
    assert_eq!(decl.deadline, Set { in_ms: start });
    let r = then(
        None,
        Request::Declare {
            manifest: m(1, &[], 3),
        },
        T0,
    );
    let reg = step(Some(&r), Request::Register { run_id: w("run") }, at(10));
    assert_eq!(reg.deadline, Set { in_ms: start });
    let r = then(Some(r), Request::Register { run_id: w("run") }, at(10));
    // A grant: its lease plus the start deadline, which an expiry counts from.
    let grant = step(Some(&r), task_claim("x"), at(20));
    assert_eq!(
        grant.deadline,
        Set {
            in_ms: 60_000 + start
        }
    );
    let c = then(Some(r), task_claim("x"), at(20));
    let f = fence_of(&c);
    let renew = step(
        Some(&c),
        Request::Renew {
            owner: w("x"),
            fence: f,
            ttl_ms: Some(5_000),
        },
        at(30),
    );
    assert_eq!(
        renew.deadline,
        Set {
            in_ms: 5_000 + start
        }
    );
    // The wait an expiry begins keeps the deadline the last grant set.
    let expiry = step(Some(&c), Request::Settle, at(20 + 60_000));
    assert!(expiry.settle.is_some());
    assert_eq!(expiry.deadline, Unchanged);
    // A release begins a wait of its own.
    let rel = step(
        Some(&c),
        Request::Release {
            owner: w("x"),
            fence: f,
        },
        at(40),
    );
    assert_eq!(rel.deadline, Set { in_ms: start });
    // An end drops it; a bare task never has one.
    let fail = step(
        Some(&c),
        Request::TaskFail {
            run_id: w("run"),
            executor: w("x"),
            fence: f,
            error: json!({"code": "boom"}),
        },
        at(40),
    );
    assert_eq!(fail.deadline, Cleared, "{:?}", fail.verdict);
    assert_eq!(step(None, claim("a", 1_000), T0).deadline, Unchanged);
}

/// What a server sends back keeps the verdict and its records, and drops
/// what the store wrote beside them; a decision survives JSON unchanged.
#[test]
fn an_answer_only_decision_keeps_the_verdict_and_records() {
    let granted = step(None, claim("a", 1000), at(0));
    let Verdict::Commit(c) = &granted.verdict else {
        panic!("{granted:?}")
    };
    assert!(!c.events.is_empty());
    let wire: Decision = serde_json::from_str(&serde_json::to_string(&granted).unwrap()).unwrap();
    assert_eq!(wire, granted);
    let slim = granted.clone().answer_only();
    let Verdict::Commit(s) = &slim.verdict else {
        panic!("{slim:?}")
    };
    assert_eq!(s.record, c.record);
    assert!(s.events.is_empty() && s.notifications.is_empty() && slim.follow_ups.is_empty());
    // A refusal keeps its reason, not its conflict event.
    let held = bare_claimed();
    let refused = step(Some(&held), claim("b", 1000), at(1));
    let slim = refused.clone().answer_only();
    assert!(
        matches!(
            &slim.verdict,
            Verdict::Refuse {
                refusal: Refusal::Held { .. },
                conflict: None
            }
        ),
        "{slim:?}"
    );
    // An acknowledgement keeps the current record: it is the answer.
    let done = bare_succeeded();
    let again = step(
        Some(&done),
        Request::Complete {
            owner: w("a"),
            fence: fence_of(&done),
        },
        at(1),
    );
    assert!(matches!(again.verdict, Verdict::Ack), "{again:?}");
    assert!(again.current.is_some());
    assert_eq!(again.clone().answer_only().current, again.current);
}

/// `next` counts a refused candidate as a race lost (and reads its index
/// again) only when another grant holds the task now: a live lease, to a
/// claim or to a recover. A lock delay, a finished task or a wrong fence
/// stand whoever asks, and `next` passes over them.
#[test]
fn only_a_live_grant_of_another_is_a_race_lost() {
    let refusal = |d: Decision| match d.verdict {
        Verdict::Refuse { refusal, .. } => refusal,
        other => panic!("not refused: {other:?}"),
    };
    let held = bare_claimed();
    let by_claim = refusal(step(Some(&held), claim("b", MIN), at(1)));
    assert!(matches!(by_claim, Refusal::Held { .. }), "{by_claim:?}");
    let by_recover = refusal(step(
        Some(&held),
        Request::Recover {
            owner: w("b"),
            ttl_ms: Some(MIN),
        },
        at(1),
    ));
    assert!(
        matches!(by_recover, Refusal::LeaseLive { .. }),
        "{by_recover:?}"
    );
    for r in [&by_claim, &by_recover] {
        assert!(r.held_by_another(), "{r:?} is another's live grant");
    }

    // The lease ran out unreleased under a lock delay of an hour.
    let delayed = then(
        None,
        Request::Claim {
            owner: w("a"),
            ttl_ms: Some(MIN),
            lock_delay_ms: Some(3_600_000),
        },
        T0,
    );
    let in_delay = refusal(step(Some(&delayed), claim("b", MIN), at(MIN + 1)));
    assert!(
        matches!(in_delay, Refusal::LockDelay { .. }),
        "{in_delay:?}"
    );
    let done = refusal(step(Some(&bare_succeeded()), claim("b", MIN), at(2)));
    assert!(matches!(done, Refusal::Completed), "{done:?}");
    let stale = refusal(step(
        Some(&held),
        Request::Complete {
            owner: w("a"),
            fence: fence_of(&held) + 1,
        },
        at(1),
    ));
    assert!(matches!(stale, Refusal::StaleFence { .. }), "{stale:?}");
    for r in [&in_delay, &done, &stale] {
        assert!(!r.held_by_another(), "{r:?} stands whoever asks");
    }
}

/// A prune with a time to forget: the tombstone is stored compact (about
/// half its whole JSON, nothing of the body) and reads back as itself; a
/// prune whose cutoff reaches its time forgets it, one before does not,
/// and a tombstone made without one is never forgotten.
#[test]
fn a_tombstone_is_stored_compact_and_forgotten_when_its_time_comes() {
    let prune = |before: Timestamp, forget_after_ms: Option<u64>| Request::Prune {
        by: op(),
        before,
        forget_after_ms,
    };
    let ended = bare_succeeded();
    let marked = then(Some(ended.clone()), prune(at(MIN), Some(10 * MIN)), at(MIN));
    assert_eq!(marked.pruned_at, Some(at(MIN)));
    assert_eq!(
        marked.forget_at,
        Some(at(11 * MIN)),
        "its cutoff plus the wait"
    );
    assert_eq!(
        marked.due_at(),
        marked.forget_at,
        "found through the due index"
    );
    let stored = marked.to_stored_json().unwrap();
    let whole = serde_json::to_string(&marked).unwrap();
    assert!(stored.len() * 3 <= whole.len() * 2, "{stored} vs {whole}");
    assert!(
        stored.contains("\"pruned_at\":1767225660000"),
        "times as numbers: {stored}"
    );
    for gone in [
        "manifest",
        "run_id",
        "evidence",
        "metadata",
        "error",
        "deadline_from",
    ] {
        assert!(!stored.contains(&format!("\"{gone}\"")), "{stored}");
    }
    let back: TaskRecord = serde_json::from_str(&stored).unwrap();
    assert_eq!(back, marked, "the compact form reads back as the tombstone");
    for bad in ["-5", "253402300800000", "1.5", "true"] {
        let broken = stored.replace(
            "\"created_at\":1767225600000",
            &format!("\"created_at\":{bad}"),
        );
        assert_ne!(broken, stored);
        let e = serde_json::from_str::<TaskRecord>(&broken).unwrap_err();
        assert!(
            e.to_string().contains("created_at") || e.is_data(),
            "{bad}: {e}"
        );
    }
    // Every other record is stored whole.
    assert_eq!(
        ended.to_stored_json().unwrap(),
        serde_json::to_string(&ended).unwrap()
    );
    // Not before its time; at it, forgotten (the record's next revision).
    let early = step(Some(&marked), prune(at(11 * MIN - 1), None), at(20 * MIN));
    assert!(
        matches!(early.verdict, Verdict::Ack) && !early.forgets(),
        "{early:?}"
    );
    let due = step(Some(&marked), prune(at(11 * MIN), None), at(20 * MIN));
    assert!(due.forgets() && !due.drops_history(), "{due:?}");
    assert_eq!(due.record_to_write().unwrap().revision, marked.revision + 1);
    assert_eq!(due.events().count(), 0);
    // A worker forgets nothing.
    let by_worker = step(
        Some(&marked),
        Request::Prune {
            by: Actor::Worker(w("a")),
            before: at(11 * MIN),
            forget_after_ms: None,
        },
        at(20 * MIN),
    );
    assert!(
        matches!(
            by_worker.verdict,
            Verdict::Refuse {
                refusal: Refusal::OperatorRequired { .. },
                ..
            }
        ),
        "{by_worker:?}"
    );
    // Made without a time: kept for ever, and out of the due index.
    let unmarked = then(Some(ended), prune(at(MIN), None), at(MIN));
    assert_eq!((unmarked.forget_at, unmarked.due_at()), (None, None));
    let never = step(
        Some(&unmarked),
        prune(at(1_000 * MIN), Some(0)),
        at(1_000 * MIN),
    );
    assert!(matches!(never.verdict, Verdict::Ack), "{never:?}");
}
