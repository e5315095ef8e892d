"""Stubs of `baton.aio`: `baton.Authority`'s methods as coroutines."""

import builtins
import datetime
from types import TracebackType
from typing import Any, AsyncContextManager, Callable, Dict, List, Mapping, Optional, Sequence, Union, final, overload

from . import (
    Authority as _SyncAuthority,
    Grant,
    Holder,
    Lease as _SyncLease,
    Page,
    Record,
    Refusal,
    Verification,
    _Json,
    _Seconds,
    _State,
)

__all__ = ["Authority", "Lease", "authority_for", "guard"]

def guard(conn: Any, resource: str, fence: Any, *, key: Any = None) -> AsyncContextManager[int]:
    """`baton.guard.guard` for a psycopg AsyncConnection, under `async with`."""

async def authority_for(url: str, *, token: Optional[str] = None) -> "Authority":
    """Opens the store at `url` (as `baton.authority_for`) off the event loop."""

class Lease:
    """`Authority.lease` for `async with`; everything else is the kept lease's own."""

    def __init__(self, inner: _SyncLease) -> None: ...
    @property
    def sync(self) -> _SyncLease: ...
    def __getattr__(self, name: str) -> Any: ...
    async def release(self) -> Union[Record, Refusal]:
        """Stops renewing and gives the task back."""
    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The output recorded for step `name`, or `fn(*args, **kwargs)` (awaited when it is a
        coroutine function) recorded under this lease's fence and returned."""
    async def spawn(self, name: str, nodes: Any, *, output: Optional[_Json] = None, wait: bool = True) -> Any:
        """Adds `nodes` with step `name`'s record, in one commit, once."""
    async def __aenter__(self) -> "Lease": ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

class Authority:
    """`baton.Authority` for asyncio: each method a coroutine."""

    def __init__(self, inner: _SyncAuthority) -> None: ...
    @property
    def sync(self) -> _SyncAuthority: ...
    @property
    def url(self) -> str: ...
    def lease(
        self,
        task: str,
        owner: str,
        ttl: Optional[_Seconds] = None,
        *,
        renew_every: Optional[_Seconds] = None,
        grace: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
    ) -> Lease: ...
    async def __aenter__(self) -> "Authority": ...
    async def __aexit__(self, *exc: object) -> bool: ...
    async def close(self) -> None:
        """Closes the store; later calls raise Unavailable. On etcd it also
        revokes the leases the store kept for reuse (waiting up to 3 s)."""
    async def claim(
        self, task: str, owner: str, ttl: Optional[_Seconds] = None, *, lock_delay: Optional[_Seconds] = None
    ) -> Union[Grant, Refusal]:
        """Claims a bare task (created if absent). ttl: seconds, default 30."""
    async def renew(self, task: str, owner: str, fence: int, ttl: Optional[_Seconds] = None) -> Union[Grant, Refusal]: ...
    async def release(self, task: str, owner: str, fence: int) -> Union[Record, Refusal]: ...
    async def recover(self, task: str, owner: str, ttl: Optional[_Seconds] = None) -> Union[Grant, Refusal]: ...
    async def complete(self, task: str, owner: str, fence: int) -> Union[Record, Refusal]: ...
    async def fail(self, task: str, owner: str, fence: int, error: Optional[_Json] = None) -> Union[Record, Refusal]: ...
    async def report(self, reports: Sequence[Union[Grant, Mapping[str, Any]]]) -> builtins.list[Union[Record, Refusal]]: ...
    async def checkpoint(
        self, task: str, owner: str, fence: int, step: str, output: _Json, *, spawn: Optional[Any] = None, wait: bool = False
    ) -> Union[Record, Refusal]: ...
    async def cancel(
        self,
        task: str,
        owner: Optional[str] = None,
        fence: Optional[int] = None,
        *,
        operator: Optional[str] = None,
        force: bool = False,
        cascade: bool = False,
    ) -> Union[Record, Refusal, tuple[Union[Record, Refusal], List[tuple[str, Union[Record, Refusal]]]]]:
        """By the holder (owner and fence) or by an operator (operator=NAME):
        a live lease's holder is asked to stop, unless force=True. cascade=True
        (an operator's cancel) also cancels every dependent that has not ended,
        answering (answer, [(task, answer), ...])."""
    async def holder(self, task: str) -> Union[Holder, None, Refusal]: ...
    async def verify(self, task: str, fence: int) -> Union[Verification, Refusal]: ...
    async def declare(self, manifest: Union[Mapping[str, _Json], str]) -> Union[Record, Refusal]: ...
    async def register(self, task: str, run_id: str) -> Union[Record, Refusal]: ...
    async def task_claim(
        self, task: str, run_id: str, executor: str, ttl: Optional[_Seconds] = None
    ) -> Union[Grant, Refusal]: ...
    async def start(self, task: str, run_id: str, executor: str, fence: int) -> Union[Record, Refusal]: ...
    async def heartbeat(
        self, task: str, run_id: str, executor: str, fence: int, step: int, ttl: Optional[_Seconds] = None
    ) -> Union[Record, Refusal]: ...
    async def succeed(
        self, task: str, run_id: str, executor: str, fence: int, evidence: Optional[Mapping[str, str]] = None
    ) -> Union[Record, Refusal]: ...
    async def task_fail(self, task: str, run_id: str, executor: str, fence: int, error: _Json) -> Union[Record, Refusal]: ...
    async def retry(self, task: str, run_id: str) -> Union[Record, Refusal]: ...
    async def redispatch(self, task: str, operator: str, iteration: int) -> Union[Record, Refusal]: ...
    async def finalize(self, task: str, operator: str, error: Optional[_Json] = None) -> Union[Record, Refusal]: ...
    async def get(self, task: str) -> Optional[Record]: ...
    async def gate(self, task: str) -> Union[dict[str, Any], Refusal]: ...
    async def list(
        self, state: Optional[str] = None, *, queue: Optional[str] = None, after: Optional[str] = None, limit: int = 100
    ) -> Page:
        """Records by derived state, in task-id order."""
    async def events(
        self, task: Optional[str] = None, *, after: Union[str, int, None] = None, limit: int = 100
    ) -> Page:
        """Events as dicts (the CLI's JSON), of one task or of the whole store."""
    async def pending(self, *, after: Union[str, int, None] = None, limit: int = 100) -> Page:
        """Unacknowledged notifications as dicts."""
    async def ack(self, intent_ids: Sequence[str]) -> int: ...
    async def sweep(self, dry_run: bool = False) -> builtins.list[dict[str, Any]]: ...
    async def prune(self, finished_before: _Seconds, operator: str, max: Optional[int] = None, forget_after: Optional[_Seconds] = None) -> int:
        """Retention: tasks that ended at least `finished_before` ago keep only a tombstone (how many were pruned);
        with `forget_after`, each tombstone made goes that much later (its id may then be granted again)."""
    async def add(
        self,
        task: str,
        *,
        queue: Optional[str] = None,
        priority: int = 0,
        after: Optional[Sequence[str]] = None,
        timeout: Optional[_Seconds] = None,
        not_before: Union[datetime.datetime, str, _Seconds, None] = None,
        max_attempts: Optional[int] = None,
        backoff: Optional[_Seconds] = None,
        backoff_factor: Optional[float] = None,
        backoff_max: Optional[_Seconds] = None,
        key: Optional[str] = None,
        traceparent: Optional[str] = None,
    ) -> Union[Record, Refusal]:
        """A task in the work graph; `traceparent`: the W3C trace context it joins, on each grant; `timeout`: the most one attempt may run, renewed or not;
        `not_before`: not granted before it (an aware datetime, RFC 3339, "10m", or seconds);
        `key`: a concurrency key (at most its limit of live grants at once)."""
    async def add_graph(self, graph: Union[Sequence[Mapping[str, _Json]], Mapping[str, _Json], str]) -> Union[dict[str, int], Refusal]: ...
    async def schedule(
        self,
        name: str,
        every: Optional[_Seconds] = None,
        *,
        cron: Optional[str] = None,
        queue: Optional[str] = None,
        priority: int = 0,
        after: Optional[Sequence[str]] = None,
        timeout: Optional[_Seconds] = None,
        max_attempts: Optional[int] = None,
        backoff: Optional[_Seconds] = None,
        backoff_factor: Optional[float] = None,
        backoff_max: Optional[_Seconds] = None,
        key: Optional[str] = None,
    ) -> Union[dict[str, Any], Refusal]:
        """A recurring schedule: one task NAME@START per period, made once however many schedulers tick; the schedule (`schedule`, `every_ms` or `cron`, `queue`, `since`, `next_run`, `failure`, `idempotent`)."""
    async def schedules(self) -> List[Record]: ...
    async def set_limit(self, key: str, limit: Optional[int], operator: str) -> Union[dict[str, Any], Refusal]:
        """An operator sets a concurrency key's limit (None: no limit); the key as `key_status` shows it, with `idempotent`."""
    async def key_status(self, key: str) -> dict[str, Any]:
        """A key's `limit`, live `holders` ({"task", "fence"}) and `parked` tasks."""
    async def keys(self) -> List[dict[str, Any]]: ...
    async def set_queue_policy(
        self,
        queue: str,
        operator: str,
        *,
        max_attempts: Optional[int] = None,
        backoff: Optional[_Seconds] = None,
        backoff_factor: Optional[float] = None,
        backoff_max: Optional[_Seconds] = None,
    ) -> Union[dict[str, Any], Refusal]:
        """An operator sets a queue's retry policy (none of the retry arguments: removed); the queue as `queue_policy` shows it, with `idempotent`."""
    async def queue_policy(self, queue: str) -> dict[str, Any]:
        """A queue's `retry` policy (a dict, or None) and `paused_at` (None while it runs)."""
    async def pause_queue(self, queue: str, operator: str) -> Union[dict[str, Any], Refusal]:
        """An operator pauses a queue: `next` passes over its tasks until it is resumed; the queue as `queue_policy` shows it, with `idempotent`."""
    async def retry_failed(self, queue: str, operator: str, max: Optional[int] = None) -> dict[str, Any]:
        """An operator retries every task of the queue that failed for good (FAILED, STALLED, NOT_STARTED), at most `max` (default 1000): `queue`, `retried`, `refusals` ([{"task", "refusal"}]), `more`."""
    async def discard_failed(self, queue: str, operator: str, max: Optional[int] = None) -> dict[str, Any]:
        """An operator discards every task of the queue that failed for good (each forgotten now, its tombstone kept), at most `max` (default 1000): `queue`, `discarded`, `refusals`, `more`."""
    async def resume_queue(self, queue: str, operator: str) -> Union[dict[str, Any], Refusal]:
        """An operator resumes a paused queue; the queue as `queue_policy` shows it, with `idempotent`."""
    async def tick_schedules(self) -> List[tuple[str, Union[Record, Refusal]]]:
        """Make each live schedule's task for the current period (once, store-wide)."""
    @overload
    async def next(
        self,
        owner: str,
        queues: Union[str, Sequence[str], None] = None,
        *,
        ttl: Optional[_Seconds] = None,
        lock_delay: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
        keep_waiting: bool = False,
        count: None = None,
    ) -> Union[Grant, Refusal]:
        """The ready task of `queues` with the highest priority; `wait` seconds for one (Ctrl-C ends the wait); `keep_waiting`: through `drained` too, until work is added; `count=N`: a list of up to N grants made in one commit."""
    @overload
    async def next(
        self,
        owner: str,
        queues: Union[str, Sequence[str], None] = None,
        *,
        ttl: Optional[_Seconds] = None,
        lock_delay: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
        keep_waiting: bool = False,
        count: int,
    ) -> Union[builtins.list[Grant], Refusal]: ...
    async def work(
        self,
        owner: str,
        fn: Callable[[Grant], Any],
        queues: Union[str, Sequence[str], None] = None,
        *,
        count: int = 16,
        ttl: Optional[_Seconds] = None,
        lock_delay: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
        keep_waiting: bool = False,
        max_tasks: Optional[int] = None,
    ) -> dict[str, Any]:
        """`baton.Authority.work` off the event loop: `fn` may be a coroutine function (awaited on
        this loop); cancelling the call stops the loop after its current batch is reported."""
    @overload
    async def task_next(
        self,
        executor: str,
        queues: Union[str, Sequence[str], None] = None,
        *,
        ttl: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
        keep_waiting: bool = False,
        count: None = None,
    ) -> Union[Grant, Refusal]: ...
    @overload
    async def task_next(
        self,
        executor: str,
        queues: Union[str, Sequence[str], None] = None,
        *,
        ttl: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
        keep_waiting: bool = False,
        count: int,
    ) -> Union[builtins.list[Grant], Refusal]: ...
    async def graph(self) -> builtins.list[dict[str, Any]]: ...
