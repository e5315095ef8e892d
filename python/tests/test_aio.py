"""baton.aio: the authority's calls awaited on an event loop."""

import asyncio
import threading
import time

import pytest

import baton
import baton.aio


def run(coro):
    return asyncio.run(coro)


def test_every_method_of_the_authority_is_a_coroutine_here():
    sync = {n for n in dir(baton.Authority) if not n.startswith("_")}
    for name in sync - {"url", "lease"}:
        assert asyncio.iscoroutinefunction(getattr(baton.aio.Authority, name)), name
    assert not asyncio.iscoroutinefunction(baton.aio.Authority.lease)


def test_claims_reports_and_refusals_answer_as_the_blocking_ones(sqlite_url):
    async def main():
        a = await baton.aio.authority_for(sqlite_url)
        g = await a.claim("aio-1", "w1", ttl=30)
        assert isinstance(g, baton.Grant) and g.fence >= 1
        held = await a.claim("aio-1", "w2")
        assert not held and held.reason == "held"
        done = await a.complete("aio-1", "w1", g.fence)
        assert done.state == "SUCCEEDED"
        with pytest.raises(baton.InvalidInput) as e:
            await a.claim("", "w1")
        assert e.value.field == "task"
        assert a.sync.get("aio-1").state == "SUCCEEDED", "the same store"
        await a.close()

    run(main())


def test_the_loop_keeps_running_while_a_call_waits(sqlite_url):
    async def main():
        a = await baton.aio.authority_for(sqlite_url)
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.02)

        await a.add("held", queue="busy")
        assert await a.next("w0", "busy", ttl=60)
        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        r = await a.next("w1", "busy", wait=0.6)
        waited = time.monotonic() - started
        ticker.cancel()
        assert not r and waited >= 0.5
        assert ticks >= 10, f"the loop ran {ticks} times while next waited"
        # Many calls in flight at once, each answered.
        for i in range(8):
            await a.add(f"n-{i}", queue="many")
        grants = await asyncio.gather(*(a.next(f"w{i}", "many") for i in range(8)))
        assert sorted(g.task for g in grants) == sorted(f"n-{i}" for i in range(8))
        assert len({g.fence for g in grants}) == 8

    run(main())


def test_an_async_lease_claims_renews_and_reports(sqlite_url):
    async def main():
        async with await baton.aio.authority_for(sqlite_url) as a:
            async with a.lease("deploy", "w1", ttl=1.5) as lease:
                assert lease.fence >= 1
                await asyncio.sleep(1.8)
                assert not lease.lost.is_set(), "renewed in the background"
            assert (await a.get("deploy")).state == "SUCCEEDED"
            with pytest.raises(RuntimeError):
                async with a.lease("boom", "w1", ttl=5):
                    raise RuntimeError("failed inside")
            assert (await a.get("boom")).state == "FAILED"
            g = await a.claim("busy", "w2", ttl=30)
            threading.Timer(0.3, lambda: g.release()).start()
            async with a.lease("busy", "w1", ttl=5, wait=10) as lease:
                assert lease.fence > g.fence

    run(main())


def test_it_wraps_only_an_authority():
    with pytest.raises(TypeError):
        baton.aio.Authority("sqlite:x.db")
