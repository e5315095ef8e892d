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


def test_twelve_waits_on_two_cores_wait_at_once(sqlite_url):
    # asyncio's default executor stops at the CPU count plus four threads:
    # on two cores, six of twelve one-second waits waited for the others.
    async def main():
        a = await baton.aio.authority_for(sqlite_url)
        await a.add("held", queue="busy")
        assert await a.next("w0", "busy", ttl=60)
        started = time.monotonic()
        answers = await asyncio.gather(*(a.next(f"w{i}", "busy", wait=1) for i in range(1, 13)))
        took = time.monotonic() - started
        assert all(r.reason == "none_ready" for r in answers), answers
        assert took < 1.8, f"twelve one-second waits took {took:.2f} s: they did not wait at once"
        await a.close()

    run(main())


def test_a_next_cancelled_mid_wait_leaves_no_task_held(sqlite_url):
    # The cancelled call goes on in its thread, and is granted the task
    # added after the cancel: that grant is given back, not held for its
    # TTL by no one.
    async def main():
        a = await baton.aio.authority_for(sqlite_url)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(a.next("gone", "late", ttl=60, wait=5, keep_waiting=True), 0.3)
        await a.add("job", queue="late")

        def kinds():
            return [(e["kind"], e.get("actor", {}).get("id")) for e in a.sync.events("job")]

        deadline = time.monotonic() + 5
        while ("RELEASED", "gone") not in kinds() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert ("CLAIMED", "gone") in kinds(), f"the cancelled wait was never granted: {kinds()}"
        assert ("RELEASED", "gone") in kinds(), f"the cancelled wait's grant is still held: {kinds()}"
        r = await a.next("w2", "late", ttl=60)
        assert r and r.task == "job", r
        await a.close()

    run(main())


def test_a_declared_task_next_cancelled_mid_wait_leaves_it_unheld(sqlite_url):
    # A declared task's grant reports only through its run; its executor's
    # lease is still given back when nobody waits for it any more.
    async def main():
        import conftest

        a = await baton.aio.authority_for(sqlite_url)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(a.task_next("exec", ["dq"], ttl=60, wait=5, keep_waiting=True), 0.3)
        await a.declare(conftest.manifest("d1", executor="exec", queue="dq"))
        await a.register("d1", "r1")

        def kinds():
            return [e["kind"] for e in a.sync.events("d1")]

        deadline = time.monotonic() + 5
        while "RELEASED" not in kinds() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert "CLAIMED" in kinds(), f"the cancelled wait was never granted: {kinds()}"
        assert "RELEASED" in kinds(), f"the cancelled wait's grant is still held: {kinds()}"
        h = await a.holder("d1")
        assert not h.live, h
        await a.close()

    run(main())


def test_a_lease_entry_cancelled_mid_wait_gives_the_task_back(sqlite_url):
    async def main():
        a = await baton.aio.authority_for(sqlite_url)
        first = await a.claim("shared", "w1", ttl=60)
        assert first
        lease = a.lease("shared", "w2", ttl=60, wait=5)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lease.__aenter__(), 0.3)
        # The first holder gives it back: the abandoned entry takes it,
        # and must give it back too.
        await a.release("shared", "w1", first.fence)

        def kinds():
            return [(e["kind"], e.get("actor", {}).get("id")) for e in a.sync.events("shared")]

        deadline = time.monotonic() + 8
        while ("RELEASED", "w2") not in kinds() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert ("CLAIMED", "w2") in kinds(), f"the abandoned entry never took the task: {kinds()}"
        assert ("RELEASED", "w2") in kinds(), f"the abandoned lease still holds the task: {kinds()}"
        assert await a.claim("shared", "w3", ttl=60)
        await a.close()

    run(main())


def test_durations_are_written_as_the_cli_writes_them(sqlite_url):
    a = baton.authority_for(sqlite_url)
    g = a.claim("dur", "w1", ttl="1m30s")
    assert g, g
    assert (g.expiry - g.claimed_at).total_seconds() == 90
    with pytest.raises(baton.InvalidInput) as e:
        a.claim("dur2", "w1", ttl="soon")
    assert e.value.field == "ttl"
    with pytest.raises(baton.InvalidInput) as e:
        a.claim("dur3", "w1", ttl="8d")
    assert e.value.field == "ttl", "a string is held to the same bounds as a number"
    a.close()
