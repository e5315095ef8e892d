"""baton for asyncio: the same authority, its calls awaited.

    import baton.aio

    a = await baton.aio.authority_for("sqlite:baton.db")
    if grant := await a.claim("build-42", "worker-a", ttl=30):
        await a.complete("build-42", "worker-a", grant.fence)
    async with a.lease("deploy-7", "worker-a", ttl=30) as lease:
        ...

Every method of `baton.Authority` is here as a coroutine with the same
arguments and answers (a `Grant`, `Record` or falsy `Refusal`; errors
raise as they do there). Each call runs the blocking one on a thread of
this module's own pool: the store works with the GIL released and the
event loop keeps running, and as many calls are in flight as are awaited
(asyncio's default executor stops at the CPU count plus four threads, so
twelve `next(wait=1)` on two cores took two seconds).

Cancelling an awaiting call (`asyncio.wait_for`, a task's `cancel()`)
stops the wait for its answer, not the call: a write it carried may
still be applied (as with any lost answer, read before acting again).
A grant nobody will hold is given back: a `claim`, `recover`,
`task_claim`, `next` or `task_next` cancelled before its answer came is
released when it comes (unless it repeated a grant the caller already
held), and a `lease` whose `async with` entry was cancelled is released
once entered, so no task stays held by no one until its TTL runs out.
A `Grant`'s own `complete()` and friends block; from a coroutine, await
the authority's (`await a.complete(...)`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from types import TracebackType
from typing import Any, Callable, Optional, Type

from . import baton as _native

__all__ = ["Authority", "Lease", "authority_for", "guard"]

# Threads are made as calls need them and idle ones are reused; the bound
# is far past what one process awaits at once.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1024, thread_name_prefix="baton-aio")

# The calls that may grant a task: a cancelled one's grant is given back.
_GRANTING = frozenset({"claim", "recover", "task_claim", "next", "task_next"})


async def _run(fn: Callable[..., Any], *args: Any, give_back: Optional[Callable[[Any], None]] = None, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on the pool, awaited. Cancelled before it
    ended, `give_back` gets its answer once it ends (never on the loop)."""
    done = _POOL.submit(fn, *args, **kwargs)
    try:
        return await asyncio.wrap_future(done)
    except asyncio.CancelledError:
        if give_back is not None:
            done.add_done_callback(functools.partial(_given_back, give_back))
        raise


def _never() -> Any:
    raise AssertionError("a lost lease's step runs nothing")


def _same(value: Any) -> Any:
    return value


def _given_back(give_back: Callable[[Any], None], done: "concurrent.futures.Future[Any]") -> None:
    if done.cancelled() or done.exception() is not None:
        return  # never ran, or answered with an error: nothing granted
    try:
        _POOL.submit(give_back, done.result())
    except RuntimeError:
        # The pool is shutting down (the interpreter exits): on this
        # thread, the call's own.
        give_back(done.result())


def _release_grant(authority: _native.Authority, answer: Any) -> None:
    """A grant whose caller stopped waiting for it, released through the
    authority (a declared task's `Grant` reports only through its run, but
    its executor may give the lease back); a repeat of a grant the caller
    held already is left to it."""
    for grant in answer if isinstance(answer, list) else [answer]:
        if isinstance(grant, _native.Grant) and not grant.idempotent:
            try:
                authority.release(grant.task, grant.owner, grant.fence)
            except _native.Error:
                pass  # the store gone: the lease runs out on its own


def guard(conn: Any, resource: str, fence: Any, *, key: Any = None) -> Any:
    """`baton.guard.guard` for a psycopg `AsyncConnection`: `async with
    baton.aio.guard(conn, "invoice:42", grant): ...` admits the fence (a
    Grant's or Lease's token when signed) in a transaction on `conn`,
    commits on a clean exit, and raises `baton.GuardRefused` before the
    block when a later attempt already wrote."""
    from .guard import aguard

    return aguard(conn, resource, fence, key=key)


async def authority_for(url: str, *, token: Optional[str] = None) -> "Authority":
    """Opens the store at `url` (as `baton.authority_for`) off the event loop."""
    return Authority(await _run(_native.authority_for, url, token=token))


class Lease:
    """`Authority.lease` for `async with`: the claim on entry and the final
    report on exit run off the event loop; renewing runs in the background
    as it does for `with`. Everything else is the kept lease's own."""

    def __init__(self, inner: _native.Lease) -> None:
        self._inner = inner

    @property
    def sync(self) -> _native.Lease:
        """The blocking lease underneath."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def release(self) -> Any:
        """Stops renewing and gives the task back."""
        return await _run(self._inner.release)

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The output recorded for step `name`, or `fn(*args, **kwargs)`
        (awaited when it returns an awaitable) recorded under this lease's
        fence and returned as JSON gives it back. Raises `baton.Refused`
        (and runs nothing) when the lease is lost."""
        for c in self._inner.checkpoints:
            if c["step"] == name:
                return c["output"]
        if self._inner.lost.is_set():
            # The native step refuses a lost lease before running anything.
            return await _run(self._inner.step, name, _never)
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return await _run(self._inner.step, name, functools.partial(_same, result))

    async def spawn(self, name: str, nodes: Any, *, output: Any = None, wait: bool = True) -> Any:
        """Adds `nodes` with step `name`'s record, in one commit, once;
        `wait`: this task depends on them."""
        return await _run(self._inner.spawn, name, nodes, output=output, wait=wait)

    async def __aenter__(self) -> "Lease":
        # Entered after its caller stopped waiting: nobody runs the block,
        # so the lease stops renewing and gives the task back.
        await _run(self._inner.__enter__, give_back=lambda _: self._release_quietly())
        return self

    def _release_quietly(self) -> None:
        try:
            self._inner.release()
        except _native.Error:
            pass

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        return bool(await _run(self._inner.__exit__, exc_type, exc, traceback))


class Authority:
    """`baton.Authority` for asyncio: each method a coroutine (see the module)."""

    def __init__(self, inner: _native.Authority) -> None:
        if not isinstance(inner, _native.Authority):
            raise TypeError(f"Authority wraps a baton.Authority (got {type(inner).__name__})")
        self._inner = inner

    @property
    def sync(self) -> _native.Authority:
        """The blocking authority underneath (the same store)."""
        return self._inner

    @property
    def url(self) -> str:
        return self._inner.url

    def lease(
        self,
        task: str,
        owner: str,
        ttl: Optional[float] = None,
        *,
        renew_every: Optional[float] = None,
        grace: Optional[float] = None,
        wait: Optional[float] = None,
    ) -> Lease:
        """A lease kept for an `async with` block (`baton.Authority.lease`'s
        arguments; nothing is claimed until the block is entered)."""
        return Lease(
            self._inner.lease(task, owner, ttl, renew_every=renew_every, grace=grace, wait=wait)
        )

    async def work(self, owner: str, fn: Callable[..., Any], queues: Any = None, **kwargs: Any) -> Any:
        """`baton.Authority.work` off the event loop: `fn` may be a
        coroutine function (each call awaited on this loop while the
        worker's thread waits for it). Cancelling the call stops the loop
        once its current batch is reported."""
        if "stop" in kwargs:
            raise TypeError("work() here stops by cancellation, not stop=")
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        each = fn
        if inspect.iscoroutinefunction(fn):

            def each(grant: Any) -> Any:
                return asyncio.run_coroutine_threadsafe(fn(grant), loop).result()

        done = _POOL.submit(self._inner.work, owner, each, queues, stop=stop, **kwargs)
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def __aenter__(self) -> "Authority":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.close()
        return False


def _awaited(name: str) -> Callable[..., Any]:
    blocking = getattr(_native.Authority, name)

    grants = name in _GRANTING

    @functools.wraps(blocking)
    async def call(self: Authority, *args: Any, **kwargs: Any) -> Any:
        give_back = functools.partial(_release_grant, self._inner) if grants else None
        return await _run(getattr(self._inner, name), *args, give_back=give_back, **kwargs)

    return call


for _name in dir(_native.Authority):
    if _name.startswith("_") or _name in ("lease", "url", "work"):
        continue
    if callable(getattr(_native.Authority, _name)):
        setattr(Authority, _name, _awaited(_name))
del _name
