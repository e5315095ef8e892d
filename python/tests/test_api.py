"""The Rust API, call for call, over real stores: grants, records, reads."""

import datetime
import json
import time

import pytest

import baton
import conftest


def test_a_grant_is_a_frozen_value_with_an_aware_expiry(any_url):
    a = baton.authority_for(any_url)
    before = datetime.datetime.now(datetime.timezone.utc)
    g = a.claim("t", "w1", ttl=30)
    assert isinstance(g, baton.Grant) and g
    assert (g.task, g.owner, g.attempt, g.state) == ("t", "w1", 1, "CLAIMED")
    assert g.fence >= 1 and g.revision >= 1 and not g.idempotent
    assert g.expiry.tzinfo is not None
    assert datetime.timedelta(seconds=29) < g.expiry - before < datetime.timedelta(seconds=31)
    assert g.to_dict()["fence"] == g.fence
    with pytest.raises(AttributeError):
        g.fence = 99
    # The holder claiming again gets a new fence (its earlier one is now
    # stale) in the same attempt.
    again = a.claim("t", "w1", ttl=30)
    assert again.fence > g.fence and again.attempt == g.attempt
    assert a.complete("t", "w1", g.fence).reason == "stale_fence"
    a.close()


def test_the_lease_lifecycle(auth):
    g = auth.claim("job", "w1", ttl=10)
    r = auth.renew("job", "w1", g.fence, ttl=20)
    assert isinstance(r, baton.Grant) and r.fence == g.fence and r.expiry > g.expiry
    rel = auth.release("job", "w1", g.fence)
    assert isinstance(rel, baton.Record) and rel.state == "REGISTERED"
    g2 = auth.claim("job", "w2", ttl=10)
    assert g2.fence > g.fence and g2.attempt == 2
    # The first worker's fence is no longer accepted.
    late = auth.complete("job", "w1", g.fence)
    assert isinstance(late, baton.Refusal) and late.reason == "stale_fence"
    assert late.current_fence == g2.fence
    done = auth.complete("job", "w2", g2.fence)
    assert done.state == "SUCCEEDED" and auth.get("job").state == "SUCCEEDED"
    h = auth.holder("job")
    assert isinstance(h, baton.Holder) and h.owner == "w2" and h.fence == g2.fence and not h.live
    v = auth.verify("job", g2.fence)
    assert isinstance(v, baton.Verification) and not v and v.state == "SUCCEEDED"

    g3 = auth.claim("other", "w1")
    assert auth.verify("other", g3.fence).current
    assert not auth.verify("other", g3.fence + 100).current
    f = auth.fail("other", "w1", g3.fence, {"code": 7})
    assert f.state == "FAILED" and f.error == {"code": 7}
    assert auth.get("nobody") is None
    assert auth.holder("nobody").reason == "not_found"


def test_cancel_by_holder_and_by_operator(auth):
    g = auth.claim("c1", "w1")
    assert auth.cancel("c1", "w1", g.fence).state == "CANCELLED"
    g2 = auth.claim("c2", "w1")
    # A live holder is asked to stop; it gives the task back: CANCELLED.
    asked = auth.cancel("c2", operator="alice")
    assert asked.state == "CLAIMED"
    assert auth.release("c2", "w1", g2.fence).state == "CANCELLED"
    auth.claim("c3", "w1")
    assert auth.cancel("c3", operator="alice", force=True).state == "CANCELLED"
    with pytest.raises(baton.InvalidInput) as e:
        auth.cancel("c2", "w1", g.fence, operator="alice")
    assert e.value.field == "owner", "the rule is core's (baton_core::given), as the CLI reads it"


def test_a_cascading_cancel_reaches_every_dependent(auth):
    auth.add("root")
    auth.add("mid", after=["root"])
    auth.add("leaf", after=["mid"])
    auth.add("aside")
    g = auth.claim("root", "w1")
    answer, cascaded = auth.cancel("root", operator="alice", force=True, cascade=True)
    assert answer.state == "CANCELLED"
    assert [(t, r.state) for t, r in cascaded] == [("mid", "CANCELLED"), ("leaf", "CANCELLED")]
    assert auth.get("aside").state == "REGISTERED"
    assert not auth.complete("root", "w1", g.fence), "the forced cancel ended the grant"
    with pytest.raises(baton.InvalidInput) as e:
        auth.cancel("aside", "w1", 1, cascade=True)
    assert e.value.field == "cascade"


def test_declared_tasks_through_their_steps(auth):
    manifest = conftest.manifest("build", executor="exec-1", required_evidence=["log"])
    d = auth.declare(manifest)
    assert d.state == "DECLARED"
    assert auth.declare(manifest).idempotent
    assert auth.register("build", "run-1").state == "REGISTERED"
    g = auth.task_claim("build", "run-1", "exec-1", ttl=30)
    assert isinstance(g, baton.Grant) and g.owner == "exec-1"
    assert auth.start("build", "run-1", "exec-1", g.fence).state == "RUNNING"
    assert auth.heartbeat("build", "run-1", "exec-1", g.fence, 2).current_step == 2
    ok = auth.succeed("build", "run-1", "exec-1", g.fence, {"log": "sha256:" + "a" * 64})
    assert ok.state == "SUCCEEDED" and ok.evidence == {"log": "sha256:" + "a" * 64}
    assert auth.gate("nobody").reason == "not_found"
    gate = auth.gate("build")
    assert gate["passed"] and gate["state"] == "SUCCEEDED"


def test_retry_redispatch_and_finalize(auth):
    m = conftest.manifest("t", executor="e1", steps=["one"], start_deadline_seconds=1)
    auth.declare(json.dumps(m))
    auth.register("t", "r1")
    time.sleep(1.2)
    assert auth.get("t").state == "NOT_STARTED"
    assert auth.retry("t", "r2").state == "REGISTERED"
    g = auth.task_claim("t", "r2", "e1")
    auth.start("t", "r2", "e1", g.fence)
    assert auth.task_fail("t", "r2", "e1", g.fence, {"why": "disk"}).state == "FAILED"
    rec = auth.redispatch("t", "alice", 2)
    assert rec.iteration == 2 and rec.state not in ("FAILED", "SUCCEEDED")
    fin = auth.finalize("t", "alice", {"why": "obsolete"})
    assert fin.state in ("FAILED", "CANCELLED") and fin.error == {"why": "obsolete"}


def test_lists_events_and_the_outbox(auth):
    for i in range(5):
        auth.claim(f"t{i}", "w")
    auth.declare(conftest.manifest("noisy", notification_events=["DECLARED", "REGISTERED"]))
    auth.register("noisy", "r1")
    first = auth.list("CLAIMED", limit=2)
    assert [r.task for r in first] == ["t0", "t1"] and first.next == "t1"
    rest = auth.list("CLAIMED", after=first.next, limit=100)
    assert [r.task for r in rest] == ["t2", "t3", "t4"] and rest.next is None
    assert len(auth.list("CLAIMED")) == 5 and len(auth.list("SUCCEEDED")) == 0
    ev = auth.events("t0")
    assert ev.items[0]["kind"] == "CLAIMED" and ev.items[0]["task"] == "t0"
    all_events = auth.events(limit=3)
    assert len(all_events) == 3 and all_events.next is not None
    assert len(auth.events(after=all_events.next, limit=100)) == 4
    pending = auth.pending(limit=1000)
    assert [n["kind"] for n in pending] == ["DECLARED", "REGISTERED"], pending.items
    ids = [n["intent_id"] for n in pending]
    assert auth.ack(ids) == len(ids)
    assert auth.ack(ids) == 0
    assert len(auth.pending()) == 0
    assert auth.sweep(dry_run=True) == []


def test_list_by_queue_and_blocked_below_a_failure_at_any_depth(auth):
    auth.add("a", queue="ci")
    auth.add("b", queue="ci", after=["a"])
    auth.add("c", after=["b"])
    auth.add("other")
    assert [r.task for r in auth.list(queue="ci")] == ["a", "b"]
    g = auth.claim("a", "w")
    auth.fail("a", "w", g.fence)
    blocked = [n["task"] for n in auth.list("BLOCKED")]
    assert blocked == ["b", "c"]
    assert [r.task for r in auth.list("FAILED", queue="ci")] == ["a"]
    with pytest.raises(baton.InvalidInput) as e:
        auth.list("STUCK")
    assert e.value.field == "state" and "BLOCKED" in str(e.value)


def test_the_work_graph(auth):
    assert auth.add("fetch", queue="q", priority=5).state == "REGISTERED"
    auth.add("build", queue="q", after=["fetch"])
    assert auth.add("fetch", queue="q", priority=5).idempotent
    conflict = auth.add("fetch", queue="q", priority=1)
    assert conflict.reason == "manifest_conflict"
    g = auth.next("w1", ["q"], ttl=30)
    assert isinstance(g, baton.Grant) and g.task == "fetch"
    none = auth.next("w2", ["q"])
    assert none.reason == "none_ready"
    auth.complete("fetch", "w1", g.fence)
    g2 = auth.next("w2", ["q"], wait=1.0)
    assert g2.task == "build"
    auth.complete("build", "w2", g2.fence)
    assert auth.next("w2", ["q"], wait=5.0).reason == "drained"
    added = auth.add_graph([{"task": "a"}, {"task": "b", "after": ["a"]}])
    assert added == {"added": 2, "repeated": 0}
    assert auth.add_graph('[{"task": "a"}]') == {"added": 0, "repeated": 1}
    refused = auth.add_graph([{"task": "a", "priority": 9}])
    assert refused.reason == "manifest_conflict" and refused.task == "a"
    with pytest.raises(baton.InvalidInput):
        auth.add_graph([{"task": "x", "after": ["y"]}, {"task": "y", "after": ["x"]}])
    nodes = {n["task"] for n in auth.graph()}
    assert {"fetch", "build", "a", "b"} <= nodes
    # The graph's states list as the CLI lists them (core's Call, one rule).
    assert [n["task"] for n in auth.list("READY").items] == ["a"]
    assert [n["task"] for n in auth.list("blocked").items] == []
    assert {r.task for r in auth.list("SUCCEEDED").items} == {"fetch", "build"}


def test_declared_tasks_come_from_next_too(auth):
    auth.declare(conftest.manifest("d1", executor="exec", queue="dq"))
    auth.register("d1", "r1")
    g = auth.task_next("exec", ["dq"])
    assert isinstance(g, baton.Grant) and g.task == "d1" and g.owner == "exec"


def test_an_authority_is_a_context_manager_that_closes(sqlite_url):
    with baton.authority_for(sqlite_url) as a:
        assert a.claim("t", "w")
        assert a.url == sqlite_url
    with pytest.raises(baton.Unavailable):
        a.claim("t", "w")


def test_a_failed_attempt_is_tried_again_after_its_backoff(auth):
    auth.add("flaky", max_attempts=2, backoff=0.2)
    g = auth.claim("flaky", "w1")
    r = auth.fail("flaky", "w1", g.fence, {"exit": 3})
    assert r.state == "REGISTERED" and r.error == {"exit": 3}
    assert auth.claim("flaky", "w1").reason == "scheduled"
    time.sleep(0.35)
    g2 = auth.claim("flaky", "w1")
    assert g2.attempt == 2
    assert auth.fail("flaky", "w1", g2.fence).state == "FAILED"
    with pytest.raises(baton.InvalidInput) as e:
        auth.add("bad", max_attempts=0)
    assert e.value.field == "max_attempts"


def test_a_task_put_off_is_not_granted_before_its_start(auth):
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=0.3)
    auth.add("soon", queue="later", not_before=soon)
    auth.add("hour", queue="later", not_before="1h")
    auth.add("secs", queue="later", not_before=3600)
    refused = auth.claim("soon", "w1")
    assert refused.reason == "scheduled"
    assert auth.next("w1", ["later"]).reason == "none_ready"
    # The same add with another start: the first start stands.
    assert auth.add("hour", queue="later", not_before="1m").idempotent
    time.sleep(0.4)
    g = auth.next("w1", ["later"])
    assert g.task == "soon"
    with pytest.raises(baton.InvalidInput) as e:
        auth.add("naive", not_before=datetime.datetime.now())
    assert e.value.field == "not_before"
    # One bound for a start however it is written: year 9999.
    assert auth.add("far", not_before="400d").state == "REGISTERED"
    with pytest.raises(baton.InvalidInput) as e:
        auth.add("past-the-end", not_before="10000000d")
    assert e.value.field == "not_before"


def test_a_key_limit_holds_grants_back_and_names_the_holders(auth):
    with pytest.raises(baton.InvalidInput) as e:
        auth.add("bad", key="")
    assert e.value.field == "key"
    # A setting's write answers with the setting, as key_status shows it.
    set_ = auth.set_limit("repo", 1, "alice")
    assert set_["key"] == "repo" and set_["limit"] == 1 and not set_["idempotent"]
    for t in ("a", "b", "c"):
        auth.add(t, queue="kq", key="repo")
    g = auth.next("w1", ["kq"])
    assert g.task == "a"
    full = auth.claim("b", "w2")
    assert full.reason == "key_full"
    assert full.details["holders"] == [{"task": "a", "fence": g.fence}]
    assert full.details["limit"] == 1
    assert auth.next("w2", ["kq"]).reason == "none_ready", "waiting, not drained"
    status = auth.key_status("repo")
    assert status["limit"] == 1 and [h["task"] for h in status["holders"]] == ["a"]
    assert status["parked"] == ["b", "c"]
    auth.complete("a", "w1", g.fence)
    assert auth.next("w2", ["kq"]).task == "b", "the oldest waiting task first"
    assert [k["key"] for k in auth.keys()] == ["repo"]
    assert auth.set_limit("repo", None, "alice")["limit"] is None
    assert auth.next("w3", ["kq"]).task == "c", "no limit: the rest go"


def test_a_queue_policy_retries_what_is_added_to_the_queue(auth):
    assert auth.queue_policy("builds")["retry"] is None
    with pytest.raises(baton.InvalidInput) as e:
        auth.set_queue_policy("builds", "alice", max_attempts=0)
    assert e.value.field == "max_attempts"
    r = auth.set_queue_policy("builds", "alice", max_attempts=2, backoff=3600)
    assert r["queue"] == "builds" and r["retry"]["max_attempts"] == 2
    policy = auth.queue_policy("builds")["retry"]
    assert policy["max_attempts"] == 2 and policy["backoff_ms"] == 3_600_000
    auth.add("compile", queue="builds")
    g = auth.next("w1", ["builds"])
    failed = auth.fail("compile", "w1", g.fence, {"exit": 2})
    assert failed.state == "REGISTERED", "tried again after the queue's backoff"
    assert auth.next("w1", ["builds"]).reason == "none_ready", "not before its wait"
    assert auth.set_queue_policy("builds", "alice")["retry"] is None
    assert auth.queue_policy("builds")["retry"] is None


def test_a_paused_queue_is_passed_over_until_resumed(auth):
    auth.add("compile", queue="builds")
    auth.add("lint", queue="checks")
    r = auth.pause_queue("builds", "alice")
    assert r["queue"] == "builds" and r["paused_at"] and not r["idempotent"]
    assert auth.pause_queue("builds", "alice")["paused_at"] == r["paused_at"]
    assert auth.queue_policy("builds")["paused_at"] == r["paused_at"]
    refused = auth.next("w1", ["builds"])
    assert refused.reason == "none_ready" and refused.details["paused"] == 1
    assert auth.next("w1", ["builds", "checks"]).task == "lint"
    with pytest.raises(baton.InvalidInput) as e:
        auth.pause_queue("builds", "")
    assert e.value.field == "operator"
    assert auth.resume_queue("builds", "alice")["paused_at"] is None
    assert auth.next("w1", ["builds"]).task == "compile"


def test_a_queues_failed_tasks_are_retried_then_discarded(auth):
    for t in ["a", "b"]:
        auth.add(t, queue="etl")
        g = auth.next("w1", ["etl"])
        assert auth.fail(g.task, "w1", g.fence, {"exit": 1}).state == "FAILED"
    r = auth.retry_failed("etl", "alice", max=1)
    assert (r["retried"], r["more"], r["refusals"]) == (1, True, [])
    assert auth.retry_failed("etl", "alice")["retried"] == 1
    assert auth.retry_failed("etl", "alice")["retried"] == 0
    for _ in range(2):
        g = auth.next("w1", ["etl"])
        assert auth.fail(g.task, "w1", g.fence, None).iteration == 2
    assert auth.discard_failed("etl", "alice")["discarded"] == 2
    assert auth.get("a").to_dict()["pruned_at"] is not None


def test_a_schedule_makes_one_task_per_period(auth):
    r = auth.schedule("hourly", 3600, queue="cron", max_attempts=2)
    assert r["schedule"] == "schedule:hourly" and r["every_ms"] == 3_600_000
    assert r["next_run"] > r["since"] and not r["idempotent"]
    assert auth.schedule("hourly", 3600, queue="cron", max_attempts=2)["idempotent"]
    assert [s.task for s in auth.schedules()] == ["schedule:hourly"]
    made = auth.tick_schedules()
    assert len(made) == 1 and made[0][0].startswith("hourly@")
    assert auth.tick_schedules() == [], "one per period, however often it ticks"
    g = auth.next("w1", ["cron"])
    assert g.task == made[0][0]
    assert auth.claim("schedule:hourly", "w1").reason == "illegal_transition"
    with pytest.raises(baton.InvalidInput) as e:
        auth.schedule("fast", 0.5)
    assert e.value.field == "every"


def test_a_cron_schedule_makes_one_task_per_named_time(auth):
    r = auth.schedule("everysec", cron="* * * * * *", queue="cron")
    assert r["cron"] == "* * * * * *" and r["next_run"] is not None
    assert auth.schedule("everysec", cron="* * * * * *", queue="cron")["idempotent"]
    for kwargs, field in [
        ({"cron": "61 * * * *"}, "cron"),
        ({"every": 60, "cron": "0 2 * * *"}, "cron"),
        ({}, "every"),
    ]:
        with pytest.raises(baton.InvalidInput) as e:
            auth.schedule("bad", **kwargs)
        assert e.value.field == field, kwargs
    time.sleep(1.1)
    made = auth.tick_schedules()
    assert len(made) == 1 and made[0][0].startswith("everysec@"), made
    assert made[0][0].endswith(".000Z"), "a period starts on a named second"
    assert auth.next("w1", ["cron"]).task == made[0][0]


def test_next_takes_one_queue_or_a_list_and_names_the_field_otherwise(auth):
    auth.add("q-a", queue="alpha")
    auth.add("q-b", queue="beta")
    g = auth.next("w1", "alpha")
    assert g.task == "q-a", "a string is one queue, not its letters"
    assert auth.next("w1", ("beta",)).task == "q-b"
    assert auth.next("w1", ["alpha", "beta"]).reason == "none_ready", "both held"
    for bad in (7, {"alpha": 1}, ["alpha", 3]):
        with pytest.raises(baton.InvalidInput) as e:
            auth.next("w1", bad)
        assert e.value.field == "queues", bad
        assert "queue" in str(e.value)
    with pytest.raises(baton.InvalidInput) as e:
        auth.task_next("x1", 5)
    assert e.value.field == "queues"


def test_a_worker_waiting_for_work_gets_what_is_added_meanwhile(auth):
    import threading

    started = time.monotonic()
    assert auth.next("w1", "jobs", wait=30).reason == "drained"
    assert time.monotonic() - started < 5, "a plain wait answers a drained queue at once"

    def add_later():
        time.sleep(0.5)
        auth.add("job-1", queue="jobs")

    adder = threading.Thread(target=add_later)
    adder.start()
    g = auth.next("w1", "jobs", wait=30, keep_waiting=True)
    adder.join()
    assert g.task == "job-1", g
    assert time.monotonic() - started >= 0.5
    with pytest.raises(baton.InvalidInput) as e:
        auth.next("w1", "jobs", keep_waiting=True)
    assert e.value.field == "keep_waiting"


def test_a_grant_reports_for_itself(auth):
    g = auth.claim("g-1", "w1", ttl=30)
    renewed = g.renew(ttl=60)
    assert renewed.fence == g.fence and renewed.expiry > g.expiry
    assert renewed.complete().state == "SUCCEEDED"
    late = g.complete()
    assert late.idempotent, "the same grant's repeat is acknowledged"
    g2 = auth.claim("g-2", "w1")
    assert g2.fail({"exit": 2}).state == "FAILED"
    g3 = auth.claim("g-3", "w1")
    assert g3.release().state == "REGISTERED"
    again = auth.claim("g-3", "w2")
    assert again.fence > g3.fence
    refused = g3.complete()
    assert refused.reason == "stale_fence", "an old grant reports with its own (stale) fence"
    auth.add("g-4")
    assert auth.next("w1").complete().state == "SUCCEEDED"
    held = auth.holder("g-4")
    with pytest.raises(baton.InvalidInput) as e:
        held.grant.complete()
    assert e.value.field == "grant"


def test_a_lease_waits_for_a_holder_to_let_go(auth):
    import threading
    import time

    g = auth.claim("shared", "w1", ttl=30)
    with pytest.raises(baton.Refused):
        with auth.lease("shared", "w2", ttl=5):
            pass
    threading.Timer(0.5, lambda: g.release()).start()
    started = time.monotonic()
    with auth.lease("shared", "w2", ttl=5, wait=10) as lease:
        waited = time.monotonic() - started
        assert lease.fence > g.fence
    assert 0.4 < waited < 8, waited
    assert auth.get("shared").state == "SUCCEEDED"
    with pytest.raises(baton.InvalidInput) as e:
        auth.lease("x", "w", wait=3601)
    assert e.value.field == "wait"


def test_a_traceparent_given_at_add_is_on_each_grant(auth):
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    auth.add("traced", queue="tq", traceparent=tp)
    g = auth.next("w1", ["tq"])
    assert g.task == "traced" and g.traceparent == tp
    with pytest.raises(baton.InvalidInput) as e:
        auth.add("bad", traceparent="00-nope-01")
    assert e.value.field == "traceparent"
    assert auth.claim("plain", "w1").traceparent is None
