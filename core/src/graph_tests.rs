//! Unit tests of `graph.rs`.

use super::*;

fn id(s: &str) -> TaskId {
    Id::parse("task", s).unwrap()
}

fn node(t: &str, deps: &[&str]) -> NewNode {
    NewNode {
        task: id(t),
        spec: NodeSpec::new(&id(t), None, 0, deps.iter().map(|d| id(d))).unwrap(),
    }
}

/// A task put off past its ready time is kept in the held index by its
/// start (so `next` finds it with the grants that ran out once the
/// start has come, and never reads it before), not in the ready index;
/// one whose start had already come when it was ready is ready.
#[test]
fn a_factor_to_a_thousandth_grows_each_wait() {
    let t = id("t");
    let p = RetryPolicy::from_parts(Some(5), Some(1000), Some(1.5), Some(60_000))
        .unwrap()
        .unwrap();
    assert_eq!(p.factor.to_string(), "1.5");
    assert_eq!(
        serde_json::to_value(p.factor).unwrap(),
        serde_json::json!(1.5)
    );
    assert_eq!(
        serde_json::to_value(Factor::whole(2)).unwrap(),
        serde_json::json!(2)
    );
    let read: RetryPolicy = serde_json::from_value(
        serde_json::json!({"max_attempts": 5, "backoff_ms": 1000, "factor": 1.5}),
    )
    .unwrap();
    assert_eq!(read.factor, p.factor);
    // 1 s, 1.5 s, 2.25 s, 3.375 s: each give or take a quarter.
    for (attempt, base) in [(1u64, 1000u64), (2, 1500), (3, 2250), (4, 3375)] {
        let w = p.wait_ms(&t, attempt);
        assert!(
            (base - base / 4..=base + base / 4).contains(&w),
            "{attempt}: {w}"
        );
    }
    // A whole factor waits exactly as before, up to the cap.
    let q = RetryPolicy::new(50, 1000);
    let w = q.wait_ms(&t, 40);
    assert!(
        (2_700_000..=4_500_000).contains(&w),
        "capped at an hour: {w}"
    );
    for bad in [0.5, 10.5, f64::NAN, -1.0] {
        let e = RetryPolicy::from_parts(Some(2), None, Some(bad), None).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("backoff_factor"), "{bad}");
    }
}

#[test]
fn a_task_put_off_is_indexed_by_its_start() {
    let t = id("later");
    let at = |ms: i64| Timestamp(1_767_225_600_000 + ms);
    // A start has one bound however it is written: year 9999.
    // The add of `t` starting at `start`, decided at `at(0)`.
    let added = |start: Start| {
        let node = NodeSpec::new(&t, None, 0, [])
            .unwrap()
            .with_start(Some(start))
            .unwrap();
        let op = crate::request::Operation {
            task: t.clone(),
            request: crate::request::Request::Add { node },
            pre: crate::request::Preconditions::default(),
            now: at(0),
            clock: Default::default(),
        };
        crate::decide::decide(&op, None, crate::decide::Judged::default())
    };
    let days = |n: u64| n * 24 * 3600 * 1000;
    let to_the_end = u64::try_from(Timestamp::MAX.as_millis() - at(0).as_millis()).unwrap();
    for (start, ok) in [
        (Start::AfterMs(days(367)), true),
        (Start::At(Timestamp::MAX), true),
        (Start::AfterMs(to_the_end), true),
        (Start::AfterMs(to_the_end + 1), false),
    ] {
        match added(start).verdict {
            crate::decide::Verdict::Commit(_) => assert!(ok, "{start:?}"),
            crate::decide::Verdict::Invalid(e) => {
                assert!(!ok, "{start:?}: {e}");
                assert_eq!(e.field.as_deref(), Some("not_before"));
            }
            v => panic!("{v:?}"),
        }
    }
    assert_eq!(
        Start::parse("not_before", "367d").unwrap(),
        Start::AfterMs(days(367))
    );
    let d = added(Start::AfterMs(60_000));
    let crate::decide::Verdict::Commit(c) = d.verdict else {
        panic!("added: {:?}", d.verdict)
    };
    let mut r = c.record;
    assert_eq!(r.node.as_ref().and_then(|n| n.not_before), Some(at(60_000)));
    assert!(r.ready_entry().is_none());
    let key = r.held_key().expect("in the held index");
    let (start, end) = held_range(
        Lane::Bare,
        &Id::parse("queue", DEFAULT_QUEUE).unwrap(),
        at(59_999),
    );
    assert!(
        key.as_slice() >= start.as_slice() && key.as_slice() >= end.as_slice(),
        "not before its start"
    );
    let (_, end) = held_range(
        Lane::Bare,
        &Id::parse("queue", DEFAULT_QUEUE).unwrap(),
        at(60_000),
    );
    assert!(
        key.as_slice() < end.as_slice(),
        "found once its start has come"
    );
    if let Some(n) = r.node.as_mut() {
        n.not_before = Some(at(0));
    }
    assert!(r.ready_entry().is_some() && r.held_key().is_none());
    // Held, it is indexed by its lease as before.
    r.state = State::Claimed;
    assert!(
        r.ready_entry().is_none() && r.held_key().is_none(),
        "no lease, no key"
    );
}

#[test]
fn ranks_order_priorities_highest_first() {
    let ps = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
    for w in ps.windows(2) {
        assert!(priority_rank(w[0]) > priority_rank(w[1]), "{w:?}");
    }
    for p in ps {
        assert_eq!(rank_to_priority(priority_rank(p)), p);
    }
}

#[test]
fn a_plan_puts_dependencies_first() {
    let got = plan(
        vec![node("c", &["b"]), node("b", &["a"]), node("a", &[])],
        |_| false,
    )
    .unwrap();
    let order: Vec<&str> = got.iter().map(|n| n.task.as_str()).collect();
    assert_eq!(order, ["a", "b", "c"]);
}

#[test]
fn a_cycle_and_an_unknown_dependency_are_refused_by_name() {
    let e = plan(
        vec![node("a", &["c"]), node("b", &["a"]), node("c", &["b"])],
        |_| false,
    )
    .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("depends_on"));
    assert!(e.message.contains("cycle through a, b, c"), "{e}");
    let e = plan(vec![node("a", &["ghost"])], |_| false).unwrap_err();
    assert!(e.message.contains("a -> ghost"), "{e}");
    assert!(plan(vec![node("a", &["old"])], |t| t.as_str() == "old").is_ok());
}

#[test]
fn readiness_waits_blocks_and_fails_closed() {
    let deps = [id("a"), id("b")];
    let up = Upstream::of_states([
        (id("a"), Some(State::Succeeded)),
        (id("b"), Some(State::Running)),
    ]);
    assert_eq!(
        up.readiness(&deps),
        Readiness::Waiting { on: vec![id("b")] }
    );
    let up = Upstream::of_states([
        (id("a"), Some(State::Succeeded)),
        (id("b"), Some(State::Failed)),
    ]);
    assert!(matches!(up.readiness(&deps), Readiness::Blocked { .. }));
    assert!(matches!(
        Upstream::none().readiness(&deps),
        Readiness::Waiting { .. }
    ));
    assert_eq!(Upstream::none().readiness(&[]), Readiness::Ready);
}

fn checked_cron(expr: &str) -> Result<Schedule, Error> {
    let t = id("schedule:nightly");
    Schedule::cron(expr, NodeSpec::new(&t, None, 0, []).unwrap()).checked()
}

/// A cron schedule is checked when it is set: each bad expression is
/// refused naming `cron` and the rule, as is one with a period too.
#[test]
fn a_cron_schedule_is_checked_when_set() {
    for ok in [
        "0 2 * * *",
        "*/5 * * * * *",
        "30 9 * * MON-FRI",
        "0 0 1 JAN *",
    ] {
        assert!(checked_cron(ok).is_ok(), "{ok}");
    }
    let long = format!("0 2 * * {}1", "1,".repeat(70));
    for (bad, says) in [
        ("0 2 * *", "5 fields"),
        ("1 2 3 4 5 6 7", "5 fields"),
        ("61 * * * *", "not a cron expression"),
        ("0 0 31 2 *", "no time that ever comes"),
        (long.as_str(), "longer than"),
    ] {
        let e = checked_cron(bad).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("cron"), "{bad}: {e}");
        assert!(e.message.contains(says), "{bad}: {e}");
    }
    let mut both = checked_cron("0 2 * * *").unwrap();
    both.every_ms = 60_000;
    let e = both.checked().unwrap_err();
    assert_eq!(e.field.as_deref(), Some("cron"), "{e}");
}

/// A cron schedule's period starts at the last time it names, in UTC;
/// nothing is due before the first time after the schedule was set,
/// and every moment of one period names the same task.
#[test]
fn a_cron_schedules_period_starts_at_the_time_it_names() {
    let s = checked_cron("0 2 * * *").unwrap();
    let record = id("schedule:nightly");
    let at = |t: &str| Timestamp::parse_rfc3339(t).unwrap();
    let set = at("2026-12-06T03:00:00Z");
    assert!(s.due(&record, set, at("2026-12-06T23:59:59Z")).is_none());
    let (first, _) = s.due(&record, set, at("2026-12-07T02:00:00Z")).unwrap();
    assert_eq!(first.as_str(), "nightly@2026-12-07T02:00:00.000Z");
    let (same, _) = s.due(&record, set, at("2026-12-08T01:59:59Z")).unwrap();
    assert_eq!(same, first);
    let (next, _) = s.due(&record, set, at("2026-12-08T02:00:00.001Z")).unwrap();
    assert_eq!(next.as_str(), "nightly@2026-12-08T02:00:00.000Z");
}
