"""amberdb: persistent semantic memory for AI agents.

- :class:`Store`: the embedded database (the Rust library, in this process);
- :class:`Client`, :class:`AsyncClient`: a running ``amberdb serve`` over its line protocol;
- the ``amberdb`` command (``amberdb serve``, ``amberdb mcp``, ``amberdb import``, ...);
- errors: :class:`AmberError` and one subclass per protocol error code.

Everything calls the same Rust engine; docs/protocol.md describes every command.
"""
from ._amberdb import __version__
from ._errors import (
    AlreadyExists, AmberError, BadRequest, Busy, DiskFull, Forbidden, InternalError,
    InvalidArgument, LimitExceeded, LineTooLong, NotFound, Timeout, TooManyConnections,
    Unauthorized, Unavailable, UnknownCommand,
)
from ._store import Store, check
from ._types import (
    AddedMessages, Decision, Deleted, Entity, Exported, FeedbackResult, Hit, History, Imported,
    KnowledgeResult, Memory, SearchResult, SkippedTurn, StoreResult, Updated, Version,
)
from .client import AsyncClient, Client, Pending, Pipeline

__all__ = [
    "__version__", "Store", "check", "Client", "AsyncClient", "Pipeline", "Pending",
    "Memory", "Hit", "SearchResult", "StoreResult", "Decision", "Entity", "Updated", "Deleted",
    "FeedbackResult", "History", "Version", "KnowledgeResult", "AddedMessages", "SkippedTurn",
    "Exported", "Imported",
    "AmberError", "AlreadyExists", "BadRequest", "Busy", "DiskFull", "Forbidden",
    "InternalError", "InvalidArgument", "LimitExceeded", "LineTooLong", "NotFound", "Timeout",
    "TooManyConnections", "Unauthorized", "Unavailable", "UnknownCommand",
]
