"""baton: who may run a piece of work. Leases and fence tokens over
SQLite, sled, etcd, Postgres or a baton server; `baton.aio` for asyncio."""

from .baton import *  # noqa: F401,F403 (the native module's public names)
from .baton import __version__ as __version__
from . import aio as aio
from . import guard as guard

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
