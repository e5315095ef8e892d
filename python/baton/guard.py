"""Fences carried into your own storage: a write made with an earlier
attempt's fence is refused where it lands.

A holder paused past its lease (a GC pause, SIGSTOP, a laptop lid) wakes up
after another attempt began. baton refuses its reports; a guard refuses its
writes. Each guard keeps, beside your data, the highest fence admitted per
resource (a name you choose: ``"invoice:42"``) and admits a write only with
a fence at least that high, in the transaction that writes::

    with grant.guard(db, "invoice:42"):          # or lease.guard(db, ...)
        db.execute("UPDATE invoices SET paid = true WHERE id = 42")

    with baton.guard.guard(db, "invoice:42", os.environ["BATON_FENCE_TOKEN"]):
        ...

``db`` is a ``sqlite3`` connection (the guard's table made by
``install(db)`` or ``baton guard install sqlite:PATH``) or a psycopg 3
connection to a Postgres database where ``baton guard install
postgres://...`` made schema ``baton_guard``. The block runs in one
transaction: committed on a clean exit, rolled back on an exception. A
lower fence than one admitted raises ``baton.GuardRefused`` (``code``
``stale_fence``) before the block runs: stop, a later attempt owns the
work. An equal fence passes (one attempt writes many times).

The fence presented is an int, or a signed token (``bf1...``, a grant's
``token``, ``BATON_FENCE_TOKEN`` under ``baton run``). With ``key`` (a key
file) a SQLite guard admits only tokens it signed; a Postgres guard checks
the keys installed in the database (``baton guard install --key``).

``WSGIMiddleware`` and ``ASGIMiddleware`` guard an HTTP service: a request
carries ``Baton-Fence`` and ``Baton-Resource`` and reaches your app only if
admitted, holding the resource's lock until the app has answered.

The rule is core's (the guard's decision in Rust); this module moves the
mark in and out of your connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import threading
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

from . import baton as _native

__all__ = [
    "ASGIMiddleware",
    "WSGIMiddleware",
    "from_env",
    "guard",
    "install",
]

Fence = Union[int, str]


def _presented(fence: Any) -> Fence:
    """A fence, a token, or a ``Grant``/``Lease`` (its token when signed)."""
    if isinstance(fence, (int, str)):
        return fence
    if hasattr(fence, "fence"):
        token = getattr(fence, "token", None)
        return token if token else int(fence.fence)
    raise _native.InvalidInput(
        f"invalid fence: an int, a token str, or a Grant or Lease (got {type(fence).__name__})"
    )

_INSTALL, _SELECT, _UPSERT = _native._sqlite_guard_sql()

# Postgres: SQLSTATEs the guard's functions raise.
_STALE, _UNSIGNED, _FORGED, _INVALID = "BG001", "BG002", "BG003", "BG004"
# undefined_function, invalid_schema_name, undefined_table
_NOT_INSTALLED = {"42883", "3F000", "42P01"}


def from_env() -> Fence:
    """What ``baton run``'s child presents: ``BATON_FENCE_TOKEN`` when the
    authority signs fences, else ``BATON_FENCE``."""
    token = os.environ.get("BATON_FENCE_TOKEN", "").strip()
    if token:
        return token
    fence = os.environ.get("BATON_FENCE", "").strip()
    if not fence:
        raise _native.InvalidInput(
            "invalid fence: give one, or run under `baton run` (BATON_FENCE_TOKEN or BATON_FENCE unset)"
        )
    return _native._fence_of(fence)


def install(conn: sqlite3.Connection) -> None:
    """Creates the SQLite guard's table in ``conn``'s database (idempotent)."""
    conn.execute(_INSTALL)
    conn.commit()


def _refused(code: str, message: str, resource: Optional[str] = None,
             fence: Optional[int] = None, highest: Optional[int] = None) -> Exception:
    e = _native.GuardRefused(message)
    e.code, e.resource, e.fence, e.highest = code, resource, fence, highest
    return e


def _not_installed(what: str) -> Exception:
    return _native.Unavailable(f"guard_not_installed: {what}")


# -- SQLite -----------------------------------------------------------------

def _admit_sqlite(conn: sqlite3.Connection, resource: str, fence: Fence, key: Any) -> int:
    try:
        row = conn.execute(_SELECT, (resource,)).fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            raise _not_installed(
                "no table baton_guard_fences in this database (baton.guard.install(db), or `baton guard install sqlite:PATH`)"
            ) from None
        raise _native.Unavailable(f"sqlite: {e}") from e
    admitted, moves = _native._fence_admit(resource, row[0] if row else None, fence, key)
    if moves:
        conn.execute(_UPSERT, (resource, admitted))
    return admitted


@contextlib.contextmanager
def _sqlite_guard(conn: sqlite3.Connection, resource: str, fence: Fence, key: Any) -> Iterator[int]:
    if conn.in_transaction:
        raise _native.InvalidInput(
            "invalid transaction: the guard begins the transaction that writes (commit or roll back the open one first)"
        )
    # IMMEDIATE: no other writer between reading the mark and writing.
    conn.execute("BEGIN IMMEDIATE")
    try:
        admitted = _admit_sqlite(conn, resource, fence, key)
        yield admitted
    except BaseException:
        conn.rollback()
        raise
    else:
        conn.commit()


# -- Postgres (psycopg 3) -----------------------------------------------------

def _is_psycopg(conn: Any) -> bool:
    return type(conn).__module__.split(".")[0] == "psycopg"


def _pg_statement(resource: str, fence: Fence, key: Any) -> Tuple[str, Tuple[Any, ...]]:
    if key is not None:
        raise _native.InvalidInput(
            "invalid key: a Postgres guard verifies with the keys installed in the database (`baton guard install --key`)"
        )
    number, token = _native._fence_or_token(fence)
    if token is not None:
        return "SELECT baton_guard.admit_token(%s, %s)", (resource, token)
    return "SELECT baton_guard.admit(%s, %s)", (resource, number)


def _pg_error(e: Exception, resource: str, fence: Fence) -> Exception:
    code = getattr(e, "sqlstate", None)
    diag = getattr(e, "diag", None)
    message = getattr(diag, "message_primary", None) or str(e)
    number = fence if isinstance(fence, int) else None
    if code == _STALE:
        detail = getattr(diag, "message_detail", None)
        highest = int(detail) if detail and detail.isdigit() else None
        return _refused("stale_fence", message, resource, number, highest)
    if code == _UNSIGNED:
        return _refused("unsigned_fence", message, resource, number)
    if code == _FORGED:
        return _refused("forged_fence", message, resource)
    if code == _INVALID:
        return _native.InvalidInput(message)
    if code in _NOT_INSTALLED:
        return _not_installed(
            "no schema baton_guard with its admit functions in this database (`baton guard install postgres://...`)"
        )
    return e


@contextlib.contextmanager
def _mapped(resource: str, fence: Fence) -> Iterator[None]:
    """The guard's SQLSTATEs as baton's exceptions; anything else as it was."""
    try:
        yield
    except Exception as e:
        mapped = _pg_error(e, resource, fence)
        if mapped is e:
            raise
        raise mapped from None


@contextlib.contextmanager
def _pg_guard(conn: Any, resource: str, fence: Fence, key: Any) -> Iterator[int]:
    sql, args = _pg_statement(resource, fence, key)
    with conn.transaction():
        with _mapped(resource, fence):
            admitted = conn.execute(sql, args).fetchone()[0]
        yield admitted


def guard(conn: Any, resource: str, fence: Fence, *, key: Any = None) -> Any:
    """A context manager: the block runs in one transaction on ``conn``,
    after ``fence`` is admitted for ``resource``; it gives the fence
    admitted. Raises ``GuardRefused`` before the block when a later attempt
    already wrote (``stale_fence``), or the fence is unsigned or forged
    where signed fences are required; ``Unavailable`` when the guard is
    not installed; ``InvalidInput`` for bad input. Nothing is written then.
    ``fence`` may be a ``Grant`` or ``Lease`` (its token when signed). On a
    psycopg ``AsyncConnection`` it is an async context manager
    (``async with grant.guard(aconn, "invoice:42"): ...``)."""
    fence = _presented(fence)
    if isinstance(conn, sqlite3.Connection):
        return _sqlite_guard(conn, resource, fence, key)
    if _is_psycopg(conn) and type(conn).__name__.startswith("Async"):
        return aguard(conn, resource, fence, key=key)
    if _is_psycopg(conn) and hasattr(conn, "transaction"):
        return _pg_guard(conn, resource, fence, key)
    raise _native.InvalidInput(
        f"invalid conn: a sqlite3 or psycopg connection (got {type(conn).__name__})"
    )


@contextlib.asynccontextmanager
async def aguard(conn: Any, resource: str, fence: Fence, *, key: Any = None) -> Any:
    """``guard`` for a psycopg ``AsyncConnection`` (``baton.aio.guard``)."""
    fence = _presented(fence)
    sql, args = _pg_statement(resource, fence, key)
    async with conn.transaction():
        with _mapped(resource, fence):
            cur = await conn.execute(sql, args)
            admitted = (await cur.fetchone())[0]
        yield admitted


# -- HTTP ---------------------------------------------------------------------

_STATUS = {
    "stale_fence": "409 Conflict",
    "unsigned_fence": "403 Forbidden",
    "forged_fence": "403 Forbidden",
    "fence_required": "428 Precondition Required",
    "invalid_input": "400 Bad Request",
    "unavailable": "503 Service Unavailable",
}


class _Marks:
    """The highest fence per resource: in memory (one process), or in a
    SQLite file whose write transaction is held while the app answers, so
    processes sharing it run guarded requests one at a time."""

    def __init__(self, path: Optional[str], key: Any) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.key = key
        self.memory: Dict[str, int] = {}
        self.guard = threading.Lock()
        self.locks = _Locks(threading.Lock)
        if self.path is not None:
            with contextlib.closing(sqlite3.connect(self.path)) as c:
                install(c)

    def enter(self, resource: str, fence: str) -> Optional[sqlite3.Connection]:
        """Admits; with a file, returns its connection, transaction open."""
        if self.path is None:
            with self.guard:
                admitted, _ = _native._fence_admit(resource, self.memory.get(resource), fence, self.key)
                self.memory[resource] = admitted
            return None
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            _admit_sqlite(conn, resource, fence, self.key)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def finish(conn: Optional[sqlite3.Connection]) -> None:
        if conn is not None:
            try:
                conn.execute("COMMIT")
            finally:
                conn.close()


def _answer(e: BaseException) -> Tuple[str, bytes]:
    if isinstance(e, _native.GuardRefused):
        code = getattr(e, "code", "stale_fence")
    elif isinstance(e, _native.InvalidInput):
        code = "fence_required" if "required" in str(e) else "invalid_input"
    else:
        code = "unavailable"
    body = json.dumps({"code": code, "message": str(e)}).encode()
    return _STATUS[code], body


class _Locks:
    """A lock per resource, made by ``make``; a resource's entry goes once
    the map is large and no request holds or awaits it, so resources seen
    once leave nothing behind."""

    KEPT = 1024

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.guard = threading.Lock()
        self.entries: Dict[str, list] = {}

    def take(self, resource: str) -> list:
        """The resource's ``[lock, users]``, counted as used until ``give``."""
        with self.guard:
            entry = self.entries.get(resource)
            if entry is None:
                if len(self.entries) >= self.KEPT:
                    self.entries = {k: e for k, e in self.entries.items() if e[1] > 0}
                entry = self.entries[resource] = [self.make(), 0]
            entry[1] += 1
            return entry

    def give(self, entry: list) -> None:
        with self.guard:
            entry[1] -= 1


def _read(fence: Optional[str], resource: Optional[str]) -> Tuple[str, str]:
    if not fence:
        raise _native.InvalidInput("invalid fence: required: send the attempt's fence or token in Baton-Fence")
    if not resource:
        raise _native.InvalidInput("invalid resource: name what is written in Baton-Resource")
    return resource, fence


class WSGIMiddleware:
    """Guards a WSGI app: ``app = WSGIMiddleware(app, marks="marks.db")``.
    ``resource(environ)`` names a request's resource (default: the
    ``Baton-Resource`` header); ``marks`` a SQLite file (default: memory);
    ``key`` a key file (only signed fences)."""

    def __init__(self, app: Callable[..., Any], *, marks: Any = None, key: Any = None,
                 resource: Optional[Callable[[Dict[str, Any]], Optional[str]]] = None) -> None:
        self.app = app
        self.marks = _Marks(marks, key)
        self.resource = resource

    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        try:
            named = self.resource(environ) if self.resource else environ.get("HTTP_BATON_RESOURCE")
            resource, fence = _read(environ.get("HTTP_BATON_FENCE"), named)
            # Unsigned, forged or malformed: refused before it takes a lock.
            _native._fence_of(fence, self.marks.key)
        except BaseException as e:  # a bad request is an answer, never a crash
            return self._refuse(e, start_response)
        entry = self.marks.locks.take(resource)
        lock = entry[0]
        lock.acquire()

        def let_go() -> None:
            lock.release()
            self.marks.locks.give(entry)

        try:
            conn = self.marks.enter(resource, fence)
        except Exception as e:
            let_go()
            return self._refuse(e, start_response)
        try:
            result = self.app(environ, start_response)
        except BaseException:
            if conn is not None:
                conn.close()  # rolled back: the mark stays where it was
            let_go()
            raise

        def release() -> None:
            try:
                self.marks.finish(conn)
            finally:
                let_go()

        return _Held(result, release)

    @staticmethod
    def _refuse(e: BaseException, start_response: Callable[..., Any]) -> Any:
        status, body = _answer(e)
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]


class _Held:
    """The app's response; the resource stays held until it is closed."""

    def __init__(self, result: Any, release: Callable[[], Any]) -> None:
        self.result = result
        self.release: Optional[Callable[[], Any]] = release

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.result)

    def close(self) -> None:
        try:
            close = getattr(self.result, "close", None)
            if close is not None:
                close()
        finally:
            release, self.release = self.release, None
            if release is not None:
                release()


class ASGIMiddleware:
    """Guards an ASGI app (HTTP requests; other scopes pass through), as
    ``WSGIMiddleware`` does: ``resource(scope)`` names the resource."""

    def __init__(self, app: Callable[..., Any], *, marks: Any = None, key: Any = None,
                 resource: Optional[Callable[[Dict[str, Any]], Optional[str]]] = None) -> None:
        self.app = app
        self.marks = _Marks(marks, key)
        self.resource = resource
        self.locks = _Locks(asyncio.Lock)

    async def __call__(self, scope: Dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            named = self.resource(scope) if self.resource else headers.get("baton-resource")
            resource, fence = _read(headers.get("baton-fence"), named)
            # Unsigned, forged or malformed: refused before it takes a lock.
            _native._fence_of(fence, self.marks.key)
        except Exception as e:
            await self._refuse(e, send)
            return
        entry = self.locks.take(resource)
        try:
            async with entry[0]:
                try:
                    conn = await asyncio.to_thread(self.marks.enter, resource, fence)
                except Exception as e:
                    await self._refuse(e, send)
                    return
                try:
                    await self.app(scope, receive, send)
                except BaseException:
                    if conn is not None:
                        conn.close()
                    raise
                await asyncio.to_thread(self.marks.finish, conn)
        finally:
            self.locks.give(entry)

    @staticmethod
    async def _refuse(e: BaseException, send: Callable[..., Any]) -> None:
        status, body = _answer(e)
        await send({
            "type": "http.response.start",
            "status": int(status.split()[0]),
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": body})
