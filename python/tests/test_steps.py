"""Durable steps: each step's output recorded under the holder's fence, so a
crashed attempt's successor skips what it did; a superseded attempt records
nothing; spawned tasks added once, with the step."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import baton
from baton import aio

WORKER = textwrap.dedent(
    """
    import os, signal, sys, baton
    url, log, die_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a = baton.authority_for(url)

    def work(i):
        with open(log, "a") as f:
            f.write(f"{i}\\n")
        if i == die_at:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-step: not recorded
        return {"step": i, "pid": os.getpid()}

    with a.lease("job", f"w{os.getpid()}", ttl=1, wait=10) as lease:
        for i in range(1, 6):
            out = lease.step(f"s{i}", work, i)
            assert out["step"] == i, out
    print("done", flush=True)
    """
)


def test_a_killed_worker_is_resumed_at_its_step_and_no_finished_step_runs_again(tmp_path, sqlite_url):
    log = tmp_path / "ran.log"
    first = subprocess.run([sys.executable, "-c", WORKER, sqlite_url, str(log), "3"], capture_output=True, text=True)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = subprocess.run(
        [sys.executable, "-c", WORKER, sqlite_url, str(log), "0"], capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 0, second.stderr
    ran = [int(x) for x in log.read_text().split()]
    # Steps 1 and 2 ran once; step 3, in flight when the worker died, twice.
    assert ran == [1, 2, 3, 3, 4, 5]
    a = baton.authority_for(sqlite_url)
    r = a.get("job")
    assert r.state == "SUCCEEDED"
    assert [c["step"] for c in r.checkpoints] == ["s1", "s2", "s3", "s4", "s5"]
    fences = {c["step"]: c["fence"] for c in r.checkpoints}
    assert fences["s1"] == fences["s2"] < fences["s3"] == fences["s5"]
    # The outputs are the first attempt's for the steps it finished.
    pids = {c["step"]: c["output"]["pid"] for c in r.checkpoints}
    assert pids["s1"] == pids["s2"] != pids["s3"]


def test_a_superseded_attempt_records_nothing_and_a_recorded_step_is_never_rewritten(auth):
    g1 = auth.claim("t", "w1", ttl=0.3)
    assert auth.checkpoint("t", "w1", g1.fence, "fetch", {"rows": 1})
    same = auth.checkpoint("t", "w1", g1.fence, "fetch", {"rows": 1})
    assert same and same.idempotent
    other = auth.checkpoint("t", "w1", g1.fence, "fetch", {"rows": 2})
    assert not other and other.reason == "checkpoint_conflict"
    time.sleep(0.4)
    g2 = auth.claim("t", "w2", ttl=30)
    assert [c["output"] for c in g2.checkpoints] == [{"rows": 1}]
    late = auth.checkpoint("t", "w1", g1.fence, "load", [1, 2])
    assert not late and late.reason == "stale_fence"
    assert [c["step"] for c in auth.get("t").checkpoints] == ["fetch"]
    # Bad input names its field and changes nothing.
    with pytest.raises(baton.InvalidInput) as e:
        auth.checkpoint("t", "w2", g2.fence, "big", "x" * 70_000)
    assert e.value.field == "output"
    with pytest.raises(baton.InvalidInput) as e:
        auth.checkpoint("t", "w2", g2.fence, "bad\nname", 1)
    assert e.value.field == "step"
    with pytest.raises(baton.InvalidInput) as e:
        auth.checkpoint("t", "w2", g2.fence, "s", object())
    assert e.value.field == "output"
    # A value naming a file is a value: nothing is read.
    assert auth.checkpoint("t", "w2", g2.fence, "path", "@/etc/passwd")
    assert auth.get("t").checkpoints[-1]["output"] == "@/etc/passwd"


def test_a_lease_step_returns_what_was_recorded_and_a_lost_lease_runs_nothing(auth):
    calls = []

    def fetch(n, *, scale):
        calls.append(n)
        return (n * scale, "rows")

    with auth.lease("job", "w1", ttl=30) as lease:
        assert lease.step("fetch", fetch, 2, scale=10) == [20, "rows"]
        assert lease.step("fetch", fetch, 3, scale=10) == [20, "rows"]
        assert calls == [2]
        assert [c["step"] for c in lease.checkpoints] == ["fetch"]
        with pytest.raises(baton.InvalidInput):
            lease.step("odd", lambda: object())
        assert [c["step"] for c in lease.checkpoints] == ["fetch"]
        lease.release()
    # Granted again: the step comes back without running.
    with pytest.raises(baton.Refused, match="completing job was refused"):
        with auth.lease("job", "w2", ttl=1.5) as lease:
            assert lease.step("fetch", fetch, 9, scale=1) == [20, "rows"]
            assert calls == [2]
            # An operator's forced cancel ends the task under this lease:
            # the next step's record is refused.
            auth.cancel("job", operator="ops", force=True)
            with pytest.raises(baton.Refused):
                lease.step("load", fetch, 1, scale=1)
            # Once the keeper knows the lease is lost, a step runs nothing.
            assert lease.lost.wait(15)
            with pytest.raises(baton.Refused, match="did not run"):
                lease.step("load", fetch, 7, scale=1)
            assert 7 not in calls
    assert auth.get("job").state == "CANCELLED"
    assert [c["step"] for c in auth.get("job").checkpoints] == ["fetch"]


def test_spawned_tasks_are_added_once_with_their_step_and_the_parent_waits(auth):
    auth.add("parent")
    kids = [{"task": "kid-a"}, {"task": "kid-b", "after": ["kid-a"]}]
    with auth.lease("parent", "w1", ttl=30) as lease:
        assert lease.spawn("fan-out", kids, output={"n": 2}) == {"n": 2}
        assert lease.spawn("fan-out", kids, output={"n": 99}) == {"n": 2}
        # One of these ids is another task: nothing is added or recorded.
        auth.add("taken", queue="elsewhere")
        with pytest.raises(baton.Refused) as e:
            lease.spawn("more", [{"task": "fresh"}, {"task": "taken"}])
        assert "taken" in str(e.value)
        assert auth.get("fresh") is None
        lease.release()
    assert sorted(n["task"] for n in auth.graph()) == ["kid-a", "kid-b", "parent", "taken"]
    order = []
    while (g := auth.next("w2", ttl=30)):
        order.append(g.task)
        if g.task == "parent":
            assert [c["spawned"] for c in g.checkpoints] == [["kid-a", "kid-b"]]
        assert g.complete()
    assert order[:2] == ["kid-a", "kid-b"] and order[-1] == "parent", order


def test_async_steps_await_coroutines_and_skip_recorded_ones(sqlite_url):
    async def main():
        a = await aio.authority_for(sqlite_url)
        ran = []

        async def fetch(n):
            await asyncio.sleep(0)
            ran.append(n)
            return {"n": n}

        async with a.lease("job", "w1", ttl=30) as lease:
            assert await lease.step("fetch", fetch, 1) == {"n": 1}
            assert await lease.step("fetch", fetch, 2) == {"n": 1}
            assert await lease.step("sync", lambda: [1]) == [1]
            await lease.release()
        async with a.lease("job", "w2", ttl=30) as lease:
            assert await lease.step("fetch", fetch, 3) == {"n": 1}
        assert ran == [1]
        r = await a.checkpoint("other", "w", 1, "s", 1)
        assert not r and r.reason == "not_found"
        await a.close()

    asyncio.run(main())
