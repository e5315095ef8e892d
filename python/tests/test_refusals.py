"""Every refusal reason comes back as a value, never an exception."""

import re
import time
from pathlib import Path

import baton
import conftest

import pytest


def stub_reasons():
    """The reasons the type stubs promise (the `_Reason` Literal of baton.pyi)."""
    text = (Path(baton.__file__).parent / "__init__.pyi").read_text()
    block = re.search(r"_Reason = Literal\[(.*?)\]", text, re.S).group(1)
    return set(re.findall(r'"([a-z_]+)"', block))


def scenarios(a):
    """Makes each refusal happen once; yields (expected reason, refusal)."""
    g = a.claim("held", "w1")
    yield "held", a.claim("held", "w2")
    yield "stale_fence", a.complete("held", "w1", g.fence + 1000)
    yield "not_holder", a.complete("held", "w2", g.fence)
    yield "lease_live", a.recover("held", "w2")

    short = a.claim("short", "w1", ttl=0.05)
    time.sleep(0.15)
    yield "lease_expired", a.renew("short", "w1", short.fence)

    a.add("limited", timeout=0.1)
    limited = a.claim("limited", "w1", ttl=30)
    time.sleep(0.2)
    yield "timed_out", a.renew("limited", "w1", limited.fence)

    d = a.claim("delayed", "w1", ttl=0.05, lock_delay=30)
    time.sleep(0.15)
    yield "lock_delay", a.claim("delayed", "w2")

    done = a.claim("done", "w1")
    a.complete("done", "w1", done.fence)
    yield "completed", a.claim("done", "w2")

    yield "illegal_transition", a.register("held", "run-1")

    a.declare(conftest.manifest("decl", executor="e1", required_evidence=["log"]))
    a.register("decl", "run-1")
    yield "precondition_failed", a.task_claim("decl", "run-other", "e1")
    tg = a.task_claim("decl", "run-1", "e1")
    a.start("decl", "run-1", "e1", tg.fence)
    yield "steps_incomplete", a.succeed("decl", "run-1", "e1", tg.fence, {"log": "sha256:" + "0" * 64})
    a.heartbeat("decl", "run-1", "e1", tg.fence, 2)
    yield "evidence_missing", a.succeed("decl", "run-1", "e1", tg.fence)
    yield "manifest_conflict", a.declare(conftest.manifest("decl", executor="e1", steps=["other"]))
    a.declare(conftest.manifest("dd", executor="e1"))
    a.register("dd", "run-1")
    dg = a.task_claim("dd", "run-1", "e1")
    a.start("dd", "run-1", "e1", dg.fence)
    a.task_fail("dd", "run-1", "e1", dg.fence, {"why": "test"})
    yield "iteration_not_advanced", a.redispatch("dd", "alice", 1)
    yield "not_found", a.complete("nobody", "w1", 1)

    a.add("up", queue="g")
    a.add("down", queue="g", after=["up"])
    yield "not_ready", a.claim("down", "w1")
    up = a.claim("up", "w1")
    yield "none_ready", a.next("w2", ["g"])
    a.add("tomorrow", queue="later", not_before="1d")
    yield "scheduled", a.claim("tomorrow", "w1")
    a.fail("up", "w1", up.fence)
    yield "upstream_failed", a.claim("down", "w1")
    a.set_limit("one-at-a-time", 1, "alice")
    a.add("k1", queue="k", key="one-at-a-time")
    a.add("k2", queue="k", key="one-at-a-time")
    a.claim("k1", "w1")
    yield "key_full", a.claim("k2", "w2")
    g = a.claim("short-lived", "w1")
    a.complete("short-lived", "w1", g.fence)
    assert a.prune(0, "alice") >= 1
    yield "pruned", a.claim("short-lived", "w1")
    yield "drained", a.next("w2", ["empty-queue"])
    s = a.claim("stepped", "w1")
    a.checkpoint("stepped", "w1", s.fence, "fetch", {"rows": 1})
    yield "checkpoint_conflict", a.checkpoint("stepped", "w1", s.fence, "fetch", {"rows": 2})


def test_every_reason_surfaces_as_a_falsy_refusal(any_url):
    a = baton.authority_for(any_url)
    seen = set()
    for expected, r in scenarios(a):
        assert isinstance(r, baton.Refusal), (expected, r)
        assert r.reason == expected, (expected, r)
        assert not r and r.message
        assert r.to_dict()["refused"] == expected
        seen.add(expected)
    # Only an operator may redispatch, finalize or cancel another's grant,
    # and this API asks those as an operator: operator_required is the one
    # reason a caller here cannot be given (a server's worker token gets
    # NotPermitted instead: see test_server.py).
    assert seen == stub_reasons() - {"operator_required"}


def test_refusal_details_name_the_holder_and_fences(auth):
    g = auth.claim("t", "w1", ttl=30)
    held = auth.claim("t", "w2")
    assert (held.holder, held.fence) == ("w1", g.fence)
    assert held.expiry == g.expiry
    assert held.details["holder"] == "w1"
    stale = auth.renew("t", "w1", g.fence + 1)
    assert (stale.fence, stale.current_fence) == (g.fence + 1, g.fence)
    assert stale.holder is None and stale.expiry is None


def test_if_granted_reads_naturally(auth):
    won = []
    for owner in ("w1", "w2"):
        if grant := auth.claim("once", owner):
            won.append(grant.owner)
    assert won == ["w1"]


def test_a_tombstone_made_with_forget_after_goes_and_frees_its_id(any_url):
    a = baton.authority_for(any_url)
    g = a.claim("gone", "w1")
    a.complete("gone", "w1", g.fence)
    with pytest.raises(baton.InvalidInput) as e:
        a.prune(0, "alice", forget_after="soon")
    assert e.value.field == "forget_after"
    assert "pruned_at" not in a.get("gone").to_dict(), "a bad call changed nothing"
    assert a.prune(0, "alice", forget_after="1s") == 1
    tomb = a.get("gone").to_dict()
    assert tomb["pruned_at"] and tomb["forget_at"], tomb
    assert a.prune(0, "alice") == 0 and a.get("gone") is not None, "not yet"
    time.sleep(1.1)
    assert a.prune(0, "alice") == 0
    assert a.get("gone") is None, "forgotten"
    again = a.claim("gone", "w2")
    assert again and again.fence > g.fence
