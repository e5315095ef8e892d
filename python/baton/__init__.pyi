"""baton: who may run a piece of work.

One authority grants a task to exactly one worker at a time, with a lease
and a fence token; anything reported about the task later is accepted only
under the current fence. Open one with `authority_for(url)`.

A request the store answered returns a value (`Grant`, `Record`, or a falsy
`Refusal`); only what could not be answered raises (`Unavailable`,
`Indeterminate`, `Corrupt`, `InvalidInput`, `NotPermitted`).
"""

import builtins
import datetime
import threading
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Union, final, overload

__all__ = [
    "Authority",
    "Corrupt",
    "DEFAULT_STORE",
    "Error",
    "Grant",
    "GuardRefused",
    "Holder",
    "Indeterminate",
    "InvalidInput",
    "Lease",
    "NotPermitted",
    "Page",
    "Record",
    "Refusal",
    "Refused",
    "Unavailable",
    "Unsupported",
    "UsedAfterFork",
    "Verification",
    "authority_for",
    "operations",
    "__version__",
    "aio",
    "guard",
]

__version__: str
DEFAULT_STORE: str

from . import aio as aio
from . import guard as guard

# Seconds (a number or a timedelta), or a duration as the CLI writes one ("30s", "1m30s").
_Seconds = Union[int, float, datetime.timedelta, str]
_Json = Any

_State = Literal[
    "DECLARED",
    "REGISTERED",
    "CLAIMED",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "NOT_STARTED",
    "STALLED",
]

_Reason = Literal[
    "held",
    "stale_fence",
    "not_holder",
    "lease_expired",
    "timed_out",
    "scheduled",
    "lock_delay",
    "lease_live",
    "completed",
    "illegal_transition",
    "precondition_failed",
    "operator_required",
    "evidence_missing",
    "steps_incomplete",
    "manifest_conflict",
    "checkpoint_conflict",
    "iteration_not_advanced",
    "not_found",
    "not_ready",
    "key_full",
    "pruned",
    "upstream_failed",
    "none_ready",
    "drained",
]

class Error(Exception):
    """Every error baton raises."""

    kind: str
    """The error's kind as the CLI's JSON names it (`unavailable`, `invalid`, ...)."""
    field: Optional[str]
    """For `InvalidInput`: the input field that broke a rule."""
    context: Optional[str]
    """The store the error came from, if known."""

class Unavailable(Error):
    """The store could not answer. Nothing was applied or granted: do not start work; retrying is safe."""

class Corrupt(Unavailable):
    """The store's contents cannot be trusted. Nothing was applied."""

class Unsupported(Unavailable):
    """The store or this build cannot do this. Nothing was applied."""

class Indeterminate(Error):
    """A write may or may not have landed: read before anything else."""

class InvalidInput(Error):
    """The input broke a rule; `field` names which. Nothing was applied."""

class NotPermitted(Error):
    """A server refused the caller's token, or a worker's token asked an operator's request."""

class UsedAfterFork(Error):
    """An authority or lease was used in a child of the process that opened it."""

class Refused(Error):
    """Raised only where no value can be returned (entering a lease, finishing one)."""

    refusal: "Refusal"

class GuardRefused(Error):
    """A guard in your storage refused the write: `code` is stale_fence (a
    later attempt already wrote `resource`), unsigned_fence or forged_fence."""

    code: str
    resource: Optional[str]
    fence: Optional[int]
    highest: Optional[int]

@final
class Grant:
    """A grant: who may run the task, until when, under which fence. Frozen."""

    @property
    def task(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def fence(self) -> int:
        """The fence token: send it with every later report about the task."""
    @property
    def expiry(self) -> datetime.datetime:
        """When the lease runs out unless renewed (aware, UTC)."""
    @property
    def claimed_at(self) -> datetime.datetime: ...
    @property
    def state(self) -> _State: ...
    @property
    def revision(self) -> int: ...
    @property
    def idempotent(self) -> bool:
        """True when this answered a repeat of a request already applied."""
    @property
    def token(self) -> Optional[str]:
        """The fence signed by the authority, when it signs fences."""
    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """The steps recorded for the task so far, in order (step, output, fence, at, spawned)."""
    @property
    def traceparent(self) -> Optional[str]:
        """The W3C trace context the task was added in, if any."""
    def guard(self, conn: Any, resource: str, key: Optional[Any] = None) -> Any:
        """A guard on `conn` (sqlite3 or psycopg) for writing `resource` under this grant's fence:
        a context manager, an async one on a psycopg AsyncConnection."""
    def to_dict(self) -> dict[str, Any]:
        """The grant as the CLI prints it."""
    def complete(self) -> Union[Record, Refusal]:
        """Reports success with this grant's fence (a bare task's grant)."""
    def fail(self, error: Optional[Dict[str, Any]] = None) -> Union[Record, Refusal]:
        """Reports failure with this grant's fence."""
    def release(self) -> Union[Record, Refusal]:
        """Gives the task back."""
    def renew(self, ttl: Optional[_Seconds] = None) -> Union[Grant, Refusal]:
        """Extends this lease by `ttl` seconds."""

@final
class Record:
    """A task as stored (derived: an expired lease shows as such). Frozen."""

    @property
    def task(self) -> str: ...
    @property
    def state(self) -> _State: ...
    @property
    def revision(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def iteration(self) -> int: ...
    @property
    def owner(self) -> Optional[str]:
        """The last grant's owner, if the task was ever granted."""
    @property
    def fence(self) -> Optional[int]:
        """The task's current fence, if it was ever granted."""
    @property
    def expiry(self) -> Optional[datetime.datetime]: ...
    @property
    def run_id(self) -> Optional[str]: ...
    @property
    def executor(self) -> Optional[str]: ...
    @property
    def current_step(self) -> int: ...
    @property
    def total_steps(self) -> int: ...
    @property
    def evidence(self) -> dict[str, str]: ...
    @property
    def error(self) -> Optional[_Json]: ...
    @property
    def metadata(self) -> dict[str, _Json]: ...
    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """The steps the task's attempts recorded, in order."""
    @property
    def created_at(self) -> datetime.datetime: ...
    @property
    def updated_at(self) -> datetime.datetime: ...
    @property
    def idempotent(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]:
        """The whole record as the CLI prints it."""

@final
class Refusal:
    """A typed "no". Falsy, so `if grant := a.claim(...):` reads "if granted". Frozen."""

    @property
    def reason(self) -> _Reason: ...
    @property
    def message(self) -> str: ...
    @property
    def details(self) -> dict[str, _Json]:
        """Every field the CLI prints with the refusal (times as RFC 3339 strings)."""
    @property
    def holder(self) -> Optional[str]:
        """The holder the reason names (held, lease_live, not_holder)."""
    @property
    def fence(self) -> Optional[int]:
        """The fence the reason is about: the holder's (held, lease_live), the caller's (stale_fence, lease_expired)."""
    @property
    def current_fence(self) -> Optional[int]:
        """The task's current fence (stale_fence)."""
    @property
    def expiry(self) -> Optional[datetime.datetime]:
        """When the live lease runs out (held, lease_live)."""
    @property
    def task(self) -> Optional[str]:
        """The node refused, where one request named many (add_graph)."""
    def __bool__(self) -> Literal[False]: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class Holder:
    """The last grant of a task and whether its lease is live now."""

    @property
    def grant(self) -> Grant: ...
    @property
    def live(self) -> bool: ...
    @property
    def owner(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def expiry(self) -> datetime.datetime: ...

@final
class Verification:
    """Whether work under a fence may be accepted now. Truthy only when `current`."""

    @property
    def current(self) -> bool: ...
    @property
    def live(self) -> bool: ...
    @property
    def state(self) -> _State: ...
    @property
    def current_fence(self) -> Optional[int]: ...
    def __bool__(self) -> bool: ...

@final
class Page:
    """One page of a listing; pass `next` as `after` for the following one (None: last page)."""

    @property
    def items(self) -> list[Any]: ...
    @property
    def next(self) -> Optional[str]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Any]: ...
    def __getitem__(self, i: int, /) -> Any: ...

@final
class Lease:
    """A lease kept for a `with` block: renewed in the background; completes
    on a clean exit, fails with the exception's type and message on an
    exception. Raises `Refused` on entry when the claim is refused, and on a
    clean exit when completing is refused (the lease was lost)."""

    @property
    def task(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def fence(self) -> int:
        """The grant's fence: send it with everything written under this lease."""
    @property
    def token(self) -> Optional[str]:
        """The fence signed by the authority, when it signs fences."""
    def guard(self, conn: Any, resource: str, key: Optional[Any] = None) -> Any:
        """A guard on `conn` (sqlite3 or psycopg) for writing `resource` under this lease's fence:
        a context manager, an async one on a psycopg AsyncConnection."""
    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """The steps recorded for the task so far, by earlier attempts and this one."""
    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The output recorded for step `name`, or `fn(*args, **kwargs)` recorded under this
        lease's fence and returned (as JSON gives it back). Raises Refused when the lease is lost."""
    def spawn(self, name: str, nodes: Any, *, output: Optional[_Json] = None, wait: bool = True) -> Any:
        """Adds `nodes` with step `name`'s record, in one commit, once; `wait`: this task depends on them."""
    @property
    def grant(self) -> Grant:
        """The grant as last renewed."""
    @property
    def expiry(self) -> datetime.datetime: ...
    @property
    def lost(self) -> threading.Event:
        """Set as soon as the work must stop (before the lease can run out)."""
    @property
    def cancelled(self) -> threading.Event:
        """Set when an operator asks the holder to stop; release() cancels the task."""
    @property
    def loss(self) -> Optional[str]:
        """Why the work must stop, once it must."""
    @property
    def renewals(self) -> int: ...
    @property
    def result(self) -> Union[Record, Refusal, None]:
        """How the final report (complete, fail or release) was answered."""
    @property
    def report_error(self) -> Optional[str]:
        """The error the final report met, if the store could not take it."""
    def release(self) -> Union[Record, Refusal]:
        """Stops renewing and gives the task back; the block's end then reports nothing."""
    def __enter__(self) -> "Lease": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

@final
class Authority:
    """The authority and registry over one store. Threads may share one; a
    child of fork must open its own. Every call releases the GIL."""

    @property
    def url(self) -> str: ...
    def close(self) -> None:
        """Closes the store; later calls raise Unavailable. On etcd it also
        revokes the leases the store kept for reuse (waiting up to 3 s)."""
    def __enter__(self) -> "Authority": ...
    def __exit__(self, *exc: object) -> bool: ...

    # the authority
    def claim(
        self, task: str, owner: str, ttl: Optional[_Seconds] = None, *, lock_delay: Optional[_Seconds] = None
    ) -> Union[Grant, Refusal]:
        """Claims a bare task (created if absent). ttl: seconds, default 30."""
    def renew(self, task: str, owner: str, fence: int, ttl: Optional[_Seconds] = None) -> Union[Grant, Refusal]: ...
    def release(self, task: str, owner: str, fence: int) -> Union[Record, Refusal]: ...
    def recover(self, task: str, owner: str, ttl: Optional[_Seconds] = None) -> Union[Grant, Refusal]: ...
    def complete(self, task: str, owner: str, fence: int) -> Union[Record, Refusal]: ...
    def fail(self, task: str, owner: str, fence: int, error: Optional[_Json] = None) -> Union[Record, Refusal]: ...
    def report(self, reports: Sequence[Union[Grant, Mapping[str, Any]]]) -> builtins.list[Union[Record, Refusal]]:
        """Many grants reported in one commit (dicts of task, owner, fence, outcome, error; a Grant is its complete)."""
    def checkpoint(
        self, task: str, owner: str, fence: int, step: str, output: _Json, *, spawn: Optional[Any] = None, wait: bool = False
    ) -> Union[Record, Refusal]:
        """The holder records a step's output under its fence; later grants carry it."""
    def cancel(
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
    def holder(self, task: str) -> Union[Holder, None, Refusal]: ...
    def verify(self, task: str, fence: int) -> Union[Verification, Refusal]: ...

    # the registry
    def declare(self, manifest: Union[Mapping[str, _Json], str]) -> Union[Record, Refusal]: ...
    def register(self, task: str, run_id: str) -> Union[Record, Refusal]: ...
    def task_claim(
        self, task: str, run_id: str, executor: str, ttl: Optional[_Seconds] = None
    ) -> Union[Grant, Refusal]: ...
    def start(self, task: str, run_id: str, executor: str, fence: int) -> Union[Record, Refusal]: ...
    def heartbeat(
        self, task: str, run_id: str, executor: str, fence: int, step: int, ttl: Optional[_Seconds] = None
    ) -> Union[Record, Refusal]: ...
    def succeed(
        self, task: str, run_id: str, executor: str, fence: int, evidence: Optional[Mapping[str, str]] = None
    ) -> Union[Record, Refusal]: ...
    def task_fail(self, task: str, run_id: str, executor: str, fence: int, error: _Json) -> Union[Record, Refusal]: ...
    def retry(self, task: str, run_id: str) -> Union[Record, Refusal]: ...
    def redispatch(self, task: str, operator: str, iteration: int) -> Union[Record, Refusal]: ...
    def finalize(self, task: str, operator: str, error: Optional[_Json] = None) -> Union[Record, Refusal]: ...

    # reads
    def get(self, task: str) -> Optional[Record]: ...
    def gate(self, task: str) -> Union[dict[str, Any], Refusal]: ...
    def list(
        self, state: Optional[str] = None, *, queue: Optional[str] = None, after: Optional[str] = None, limit: int = 100
    ) -> Page:
        """Records by derived state, in task-id order; READY or BLOCKED: the
        graph's claimable tasks in that state, as dicts."""
    def events(
        self, task: Optional[str] = None, *, after: Union[str, int, None] = None, limit: int = 100
    ) -> Page:
        """Events as dicts (the CLI's JSON), of one task or of the whole store."""
    def pending(self, *, after: Union[str, int, None] = None, limit: int = 100) -> Page:
        """Unacknowledged notifications as dicts."""
    def ack(self, intent_ids: Sequence[str]) -> int: ...
    def sweep(self, dry_run: bool = False) -> builtins.list[dict[str, Any]]: ...
    def prune(self, finished_before: _Seconds, operator: str, max: Optional[int] = None, forget_after: Optional[_Seconds] = None) -> int:
        """Retention: tasks that ended at least `finished_before` ago keep only a tombstone (how many were pruned);
        with `forget_after`, each tombstone made goes that much later (its id may then be granted again)."""

    # the work graph
    def add(
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
    def add_graph(self, graph: Union[Sequence[Mapping[str, _Json]], Mapping[str, _Json], str]) -> Union[dict[str, int], Refusal]: ...
    def schedule(
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
    def schedules(self) -> List[Record]: ...
    def set_limit(self, key: str, limit: Optional[int], operator: str) -> Union[dict[str, Any], Refusal]:
        """An operator sets a concurrency key's limit (None: no limit); the key as `key_status` shows it, with `idempotent`."""
    def key_status(self, key: str) -> dict[str, Any]:
        """A key's `limit`, live `holders` ({"task", "fence"}) and `parked` tasks."""
    def keys(self) -> List[dict[str, Any]]: ...
    def set_queue_policy(
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
    def queue_policy(self, queue: str) -> dict[str, Any]:
        """A queue's `retry` policy (a dict, or None) and `paused_at` (None while it runs)."""
    def pause_queue(self, queue: str, operator: str) -> Union[dict[str, Any], Refusal]:
        """An operator pauses a queue: `next` passes over its tasks until it is resumed; the queue as `queue_policy` shows it, with `idempotent`."""
    def retry_failed(self, queue: str, operator: str, max: Optional[int] = None) -> dict[str, Any]:
        """An operator retries every task of the queue that failed for good (FAILED, STALLED, NOT_STARTED), at most `max` (default 1000): `queue`, `retried`, `refusals` ([{"task", "refusal"}]), `more`."""
    def discard_failed(self, queue: str, operator: str, max: Optional[int] = None) -> dict[str, Any]:
        """An operator discards every task of the queue that failed for good (each forgotten now, its tombstone kept), at most `max` (default 1000): `queue`, `discarded`, `refusals`, `more`."""
    def resume_queue(self, queue: str, operator: str) -> Union[dict[str, Any], Refusal]:
        """An operator resumes a paused queue; the queue as `queue_policy` shows it, with `idempotent`."""
    def tick_schedules(self) -> List[tuple[str, Union[Record, Refusal]]]:
        """Make each live schedule's task for the current period (once, store-wide)."""
    @overload
    def next(
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
    def next(
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
    def work(
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
        stop: Optional[threading.Event] = None,
    ) -> dict[str, Any]:
        """The worker loop: up to `count` grants a `next` (one commit), each kept renewed until its turn;
        `fn(grant)` for each in turn; the batch reported in one call (completed, or failed with the
        exception's type and message). Ends when nothing is granted (`drained`, or `none_ready` without
        `wait`), after `max_tasks`, or once `stop` is set. Returns completed, failed, refused, lost,
        batches and stopped (the refusal that ended it)."""
    @overload
    def task_next(
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
    def task_next(
        self,
        executor: str,
        queues: Union[str, Sequence[str], None] = None,
        *,
        ttl: Optional[_Seconds] = None,
        wait: Optional[_Seconds] = None,
        keep_waiting: bool = False,
        count: int,
    ) -> Union[builtins.list[Grant], Refusal]: ...
    def graph(self) -> builtins.list[dict[str, Any]]: ...

    # a kept lease
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

def operations() -> List[Dict[str, Any]]:
    """The operations every front end offers (core's catalogue): name,
    summary, write, operator, cli, http, python (the Authority method) and
    inputs (name, wire, required, rule)."""

def authority_for(url: str, *, token: Optional[str] = None) -> Authority:
    """Opens the store a URL names, as the CLI does: sqlite:PATH, sled:PATH,
    etcd://HOSTS/PREFIX, postgres://..., http://HOST:PORT, memory:."""
