"""Stubs of `baton.guard`: fences carried into your own storage."""

import sqlite3
from typing import Any, AsyncContextManager, Callable, Dict, Optional, Union

__all__ = ["ASGIMiddleware", "WSGIMiddleware", "from_env", "guard", "install"]

Fence = Union[int, str]

def from_env() -> Fence:
    """`baton run`'s child's fence: BATON_FENCE_TOKEN, else BATON_FENCE."""

def install(conn: sqlite3.Connection) -> None:
    """Creates the SQLite guard's table in `conn`'s database."""

def guard(conn: Any, resource: str, fence: Any, *, key: Any = None) -> Any:
    """The block runs in one transaction on `conn` after `fence` is admitted for `resource`
    (a context manager; an async one on a psycopg AsyncConnection)."""

def aguard(conn: Any, resource: str, fence: Any, *, key: Any = None) -> AsyncContextManager[int]:
    """`guard` for a psycopg AsyncConnection."""

class WSGIMiddleware:
    """Guards a WSGI app by the Baton-Fence and Baton-Resource headers."""

    def __init__(
        self,
        app: Callable[..., Any],
        *,
        marks: Any = None,
        key: Any = None,
        resource: Optional[Callable[[Dict[str, Any]], Optional[str]]] = None,
    ) -> None: ...
    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Any: ...

class ASGIMiddleware:
    """Guards an ASGI app's HTTP requests as WSGIMiddleware does."""

    def __init__(
        self,
        app: Callable[..., Any],
        *,
        marks: Any = None,
        key: Any = None,
        resource: Optional[Callable[[Dict[str, Any]], Optional[str]]] = None,
    ) -> None: ...
    async def __call__(self, scope: Dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None: ...
