"""`Authority.work`: the worker loop by batches. Up to `count` grants a
`next`, each kept renewed until its turn, `fn(grant)` for each, the batch
reported in one call; processes running it together never run a task
twice."""

import asyncio
import multiprocessing as mp
import os
import threading
import time

import pytest

import baton
from baton import aio


def test_a_worker_drains_a_queue_by_batches_and_reports_each_outcome(auth):
    auth.add_graph([{"task": f"t{i:02d}", "queue": "q"} for i in range(40)])
    ran = []

    def handle(grant):
        ran.append((grant.task, grant.fence))
        if grant.task == "t07":
            raise ValueError("bad input")

    done = auth.work("w", handle, "q", count=16)
    assert (done["completed"], done["failed"], done["refused"], done["lost"]) == (39, 1, 0, 0)
    assert done["batches"] == 3
    assert done["stopped"].reason == "drained"
    assert sorted(t for t, _ in ran) == [f"t{i:02d}" for i in range(40)]
    assert len({f for _, f in ran}) == 40, "a fence each"
    failed = auth.get("t07")
    assert failed.state == "FAILED" and failed.error == {"type": "ValueError", "message": "bad input"}
    assert all(auth.get(f"t{i:02d}").state == "SUCCEEDED" for i in range(40) if i != 7)
    # Nothing ready and no wait: it ends at once, saying why.
    auth.add("later", queue="other", not_before=3600)
    done = auth.work("w", handle, "other")
    assert done["batches"] == 0 and done["stopped"].reason == "none_ready"


def test_a_grant_waiting_its_turn_is_kept_and_one_lost_meanwhile_never_runs(auth):
    auth.add_graph([{"task": t, "queue": "q"} for t in ("a", "b", "c")])
    ran = []
    stolen = {}

    def handle(grant):
        ran.append(grant.task)
        if grant.task == "a":
            # The same owner claims b again: the batch's grant of b is
            # superseded, and its keeper's next renewal is refused.
            stolen["b"] = auth.claim("b", "w", ttl=60)
            assert stolen["b"]
            # Longer than the batch's 0.9 s leases: c lives only by renewals.
            time.sleep(1.5)

    done = auth.work("w", handle, "q", count=3, ttl=0.9)
    assert ran == ["a", "c"], "b was lost before its turn and never ran"
    assert (done["completed"], done["lost"], done["refused"]) == (2, 1, 0)
    assert auth.get("c").state == "SUCCEEDED", "renewed while a ran"
    holder = auth.holder("b")
    assert holder.live and holder.fence == stolen["b"].fence, "the newer grant of b stands"


def test_ctrl_c_gives_back_what_the_batch_has_not_finished(auth):
    auth.add_graph([{"task": t, "queue": "q"} for t in ("a", "b", "c")])

    def handle(grant):
        if grant.task == "b":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        auth.work("w", handle, "q", count=3, ttl=60)
    assert auth.get("a").state == "SUCCEEDED", "a finished before Ctrl-C: reported"
    again = auth.next("other", "q", count=3)
    assert sorted(g.task for g in again) == ["b", "c"], "given back, not held until their TTL"


def test_max_tasks_and_stop_end_the_loop(auth):
    auth.add_graph([{"task": f"t{i}", "queue": "q"} for i in range(10)])
    done = auth.work("w", lambda g: None, "q", count=4, max_tasks=6)
    assert done["completed"] == 6 and done["batches"] == 2 and done["stopped"] is None
    stop = threading.Event()
    done = auth.work("w", lambda g: stop.set(), "q", count=2, stop=stop)
    assert done["completed"] == 2 and done["batches"] == 1
    for bad in (0, -1, 1001):
        with pytest.raises(baton.InvalidInput) as e:
            auth.work("w", lambda g: None, "q", count=bad)
        assert e.value.field == "count"
    with pytest.raises(baton.InvalidInput) as e:
        auth.work("w", lambda g: None, "q", max_tasks=-1)
    assert e.value.field == "max_tasks"
    with pytest.raises(baton.InvalidInput) as e:
        auth.work("w", "not callable", "q")
    assert e.value.field == "fn"


def work_in(url, start, out):
    a = baton.authority_for(url)
    ran = []
    start.wait()
    done = a.work(f"p{os.getpid()}", lambda g: ran.append((g.task, g.fence)), "race", count=8, ttl=60)
    out.put((ran, done["completed"]))


def test_processes_working_together_run_each_task_once(sqlite_url):
    a = baton.authority_for(sqlite_url)
    a.add_graph([{"task": f"r{i:03d}", "queue": "race"} for i in range(200)])
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=work_in, args=(sqlite_url, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    ran = [t for r, _ in results for t, _ in r]
    assert sorted(ran) == [f"r{i:03d}" for i in range(200)], "each task run once"
    assert sum(completed for _, completed in results) == 200
    assert all(a.get(f"r{i:03d}").state == "SUCCEEDED" for i in range(200))


def test_async_work_awaits_a_coroutine_per_grant(sqlite_url):
    async def main():
        a = await aio.authority_for(sqlite_url)
        await a.add_graph([{"task": f"t{i}", "queue": "q"} for i in range(5)])
        seen = []

        async def handle(grant):
            await asyncio.sleep(0.01)
            seen.append(grant.task)

        done = await a.work("w", handle, "q", count=2)
        assert done["completed"] == 5 and done["batches"] == 3
        assert sorted(seen) == [f"t{i}" for i in range(5)]
        # Cancelled while it waits for work: the loop stops.
        waiting = asyncio.ensure_future(a.work("w", handle, "q", wait=30, keep_waiting=True))
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
