"""Exceptions: one class per error code of the protocol (docs/protocol.md, "Errors").

Every error the engine or a server answers is raised as a subclass of :class:`AmberError`
carrying the reply's ``code``, ``message``, ``field`` (the argument at fault, when there is
one) and the whole reply as ``reply``. An error means nothing changed in the store.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Optional, Type


class AmberError(Exception):
    """An error reply from amberdb. ``code`` is the protocol's error code."""

    code: str = "internal"

    def __init__(self, message: str, reply: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.reply: Dict[str, Any] = dict(reply or {})
        self.field: Optional[str] = self.reply.get("field")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"


class BadRequest(AmberError):
    """The request was not ``COMMAND [JSON object]`` (bad JSON, arguments not an object)."""

    code = "bad_request"


class UnknownCommand(AmberError):
    """No such command; ``did_you_mean`` lists close names."""

    code = "unknown_command"

    @property
    def did_you_mean(self) -> list:
        return list(self.reply.get("did_you_mean") or [])


class InvalidArgument(AmberError, ValueError):
    """An argument is missing, of the wrong type, unknown, or out of range (``field``)."""

    code = "invalid"


class LimitExceeded(AmberError, ValueError):
    """Over a documented limit: content length, tags, a page, a list, the memory limit."""

    code = "limit_exceeded"


class NotFound(AmberError, LookupError):
    """No such memory, user, agent, session or snapshot (or an archived id)."""

    code = "not_found"


class AlreadyExists(AmberError):
    """A duplicate memory (``memory_id`` is the one already stored) or entity."""

    code = "already_exists"

    @property
    def memory_id(self) -> Optional[int]:
        return self.reply.get("memory_id")


class Unauthorized(AmberError, PermissionError):
    """The server needs ``AUTH`` with a valid token first."""

    code = "unauthorized"


class Forbidden(AmberError, PermissionError):
    """A user-bound token naming another user, or asking for STATS."""

    code = "forbidden"


class LineTooLong(AmberError, ValueError):
    """A request line over the server's ``max_line_bytes``."""

    code = "line_too_long"


class TooManyConnections(AmberError, ConnectionError):
    """The server is over ``max_connections`` (it closes the connection)."""

    code = "too_many_connections"


class Timeout(AmberError, TimeoutError):
    """The server closed an idle or slow connection."""

    code = "timeout"


class Unavailable(AmberError):
    """The store refuses writes (after a failed fsync), embeddings failed, or it is stopping."""

    code = "unavailable"


class DiskFull(AmberError, OSError):
    """The disk is full: the write was not stored; the same request succeeds once space is freed."""

    code = "disk_full"


class Busy(AmberError):
    """The server is at capacity: the request was not run; retry after ``retry_after_ms``."""

    code = "busy"

    @property
    def retry_after_ms(self) -> Optional[int]:
        return self.reply.get("retry_after_ms")


class InternalError(AmberError):
    """An I/O error or a bug (logged by the engine)."""

    code = "internal"


_BY_CODE: Dict[str, Type[AmberError]] = {
    cls.code: cls
    for cls in (
        BadRequest, UnknownCommand, InvalidArgument, LimitExceeded, NotFound, AlreadyExists,
        Unauthorized, Forbidden, LineTooLong, TooManyConnections, Timeout, Unavailable,
        DiskFull, Busy, InternalError,
    )
}


# What the engine and the command line say, in this API's words.
_WORDS = [
    (re.compile(r"\(`--embedder hashing`, `HashingEmbedder`\)"), '(`embedder="hashing"`)'),
    (re.compile(r"--embedder (minilm|hashing)"), r'embedder="\1"'),
    (re.compile(r"`?Store::([a-z_]+)`?"), r"\1()"),
    (re.compile(r"(-?\d+)\.\.=(-?\d+)"), r"\1 to \2"),
    (re.compile(r"File exists \(os error 17\)"), "it exists already"),
    (re.compile(r" \(os error \d+\)"), ""),
]


def python_words(message: str) -> str:
    """A message from the engine said in this API's words: ``embedder="hashing"`` for the
    command line's flag, ``lineage()`` for the Rust method, ``1 to 50`` for Rust's range."""
    for pattern, words in _WORDS:
        message = pattern.sub(words, message)
    return message


def error_from_reply(reply: Dict[str, Any]) -> AmberError:
    """The exception for an error reply (an unknown code becomes :class:`AmberError`)."""
    code = str(reply.get("code", "internal"))
    message = python_words(str(reply.get("message") or reply.get("error") or code))
    cls = _BY_CODE.get(code)
    if cls is None:
        err = AmberError(message, reply)
        err.code = code
        return err
    return cls(message, reply)
