"""`next(count=N)`: up to N grants in one commit, in the order N `next`s
would make them; racing processes never share a task."""

import asyncio
import collections
import multiprocessing as mp
import os

import pytest

import baton
from baton import aio


def test_a_batch_is_the_grants_n_nexts_would_make(auth):
    for i in range(6):
        auth.add(f"t{i}", priority=i)
    first = auth.next("w", count=4)
    assert isinstance(first, list) and [g.task for g in first] == ["t5", "t4", "t3", "t2"]
    fences = [g.fence for g in first]
    assert fences == sorted(fences) and len(set(fences)) == 4
    assert all(g.complete() for g in first)
    one = auth.next("w", count=1)
    assert isinstance(one, list) and [g.task for g in one] == ["t1"]
    rest = auth.next("w", count=4)
    assert [g.task for g in rest] == ["t0"]
    none = auth.next("w", count=4)
    assert not none and none.reason == "none_ready"
    with pytest.raises(baton.InvalidInput) as e:
        auth.next("w", count=0)
    assert e.value.field == "count"
    with pytest.raises(baton.InvalidInput) as e:
        auth.next("w", count=1001)
    assert e.value.field == "count"
    with pytest.raises(baton.InvalidInput) as e:
        auth.next("w", count=-1)
    assert e.value.field == "count"


def take(url, start, out):
    a = baton.authority_for(url)
    start.wait()
    won = []
    while True:
        got = a.next(f"p{os.getpid()}", "race", ttl=60, count=5)
        if not got:
            break
        for g in got:
            won.append((g.task, g.fence))
            assert g.complete()
    out.put(won)


def test_processes_taking_batches_never_share_a_task(sqlite_url):
    a = baton.authority_for(sqlite_url)
    a.add_graph([{"task": f"r{i:03d}", "queue": "race"} for i in range(200)])
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=take, args=(sqlite_url, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    grants = collections.Counter(t for won in results for t, _ in won)
    assert len(grants) == 200 and set(grants.values()) == {1}
    fences = [f for won in results for _, f in won]
    assert len(set(fences)) == 200


def test_async_next_takes_a_batch(sqlite_url):
    async def main():
        a = await aio.authority_for(sqlite_url)
        for i in range(3):
            await a.add(f"a{i}")
        got = await a.next("w", count=5)
        assert sorted(g.task for g in got) == ["a0", "a1", "a2"]
        await a.close()

    asyncio.run(main())


def test_reports_of_many_grants_in_one_call(auth):
    for i in range(4):
        auth.add(f"r{i}")
    grants = auth.next("w", count=4)
    stale = grants[3]
    auth.release(stale.task, "w", stale.fence)
    again = auth.claim(stale.task, "v", ttl=30)
    answers = auth.report(
        grants[:2]
        + [
            {"task": grants[2].task, "owner": "w", "fence": grants[2].fence, "outcome": "fail", "error": {"why": "disk"}},
            {"task": stale.task, "owner": "w", "fence": stale.fence, "outcome": "complete"},
        ]
    )
    assert [a.state if a else a.reason for a in answers] == ["SUCCEEDED", "SUCCEEDED", "FAILED", "stale_fence"]
    assert auth.get(stale.task).fence == again.fence
    with pytest.raises(baton.InvalidInput) as e:
        auth.report([{"task": "r0", "owner": "w", "fence": 1, "outcome": "win"}])
    assert e.value.field == "reports[0].outcome"
    with pytest.raises(baton.InvalidInput) as e:
        auth.report([])
    assert e.value.field == "reports"
