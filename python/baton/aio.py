"""baton for asyncio: the same authority, its calls awaited.

    import baton.aio

    a = await baton.aio.authority_for("sqlite:baton.db")
    if grant := await a.claim("build-42", "worker-a", ttl=30):
        await a.complete("build-42", "worker-a", grant.fence)
    async with a.lease("deploy-7", "worker-a", ttl=30) as lease:
        ...

Every method of `baton.Authority` is here as a coroutine with the same
arguments and answers (a `Grant`, `Record` or falsy `Refusal`; errors
raise as they do there). Each call runs the blocking one on a worker
thread (`asyncio.to_thread`): the store works with the GIL released and
the event loop keeps running, so many calls may be in flight at once.
Cancelling an awaiting call stops the wait for its answer, not the call:
a write it carried may still be applied (as with any lost answer, read
before acting again). A `Grant`'s own `complete()` and friends block;
from a coroutine, await the authority's (`await a.complete(...)`).
"""

from __future__ import annotations

import asyncio
import functools
from types import TracebackType
from typing import Any, Callable, Optional, Type

from . import baton as _native

__all__ = ["Authority", "Lease", "authority_for"]


async def authority_for(url: str, *, token: Optional[str] = None) -> "Authority":
    """Opens the store at `url` (as `baton.authority_for`) off the event loop."""
    return Authority(await asyncio.to_thread(functools.partial(_native.authority_for, url, token=token)))


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
        return await asyncio.to_thread(self._inner.release)

    async def __aenter__(self) -> "Lease":
        await asyncio.to_thread(self._inner.__enter__)
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        return bool(await asyncio.to_thread(self._inner.__exit__, exc_type, exc, traceback))


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

    async def __aenter__(self) -> "Authority":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.close()
        return False


def _awaited(name: str) -> Callable[..., Any]:
    blocking = getattr(_native.Authority, name)

    @functools.wraps(blocking)
    async def call(self: Authority, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self._inner, name), *args, **kwargs)

    return call


for _name in dir(_native.Authority):
    if _name.startswith("_") or _name in ("lease", "url"):
        continue
    if callable(getattr(_native.Authority, _name)):
        setattr(Authority, _name, _awaited(_name))
del _name
