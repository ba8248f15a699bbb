"""Clients for a running ``amberdb serve`` over its line protocol (docs/protocol.md):
:class:`Client` (blocking, with :meth:`Client.pipeline`) and :class:`AsyncClient` (asyncio,
where concurrent calls are pipelined on one connection). Standard library only.

Both have every method of :class:`amberdb.Store` with the same typed results and exceptions;
the server runs them with the same code as the embedded store.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._api import Commands
from ._errors import AmberError, error_from_reply

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7733

Parse = Callable[[Dict[str, Any]], Any]


def _line(command: str, args: Dict[str, Any], tag: Optional[str] = None) -> bytes:
    if not command or any(c.isspace() for c in command):
        raise ValueError(f"not a command name: {command!r}")
    head = f"@{tag} {command}" if tag else command
    return (head + " " + json.dumps(args, ensure_ascii=False) + "\n").encode("utf-8")


def _outcome(reply: Dict[str, Any], parse: Parse) -> Any:
    ok = reply.pop("ok", False)
    reply.pop("tag", None)
    if not ok:
        raise error_from_reply(reply)
    return parse(reply)


class Client(Commands):
    """A blocking connection to a server. Thread-safe (one request at a time); use
    :meth:`pipeline` to send many requests without waiting for each reply.

    ``token`` is sent with ``AUTH`` when given (a server with tokens needs it)."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        token: Optional[str] = None,
        timeout: Optional[float] = 60.0,
    ) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = self._sock.makefile("rb")
        self._lock = threading.Lock()
        if token is not None:
            try:
                self.auth(token)
            except BaseException:
                self.close()
                raise

    def auth(self, token: str) -> Optional[str]:
        """Authenticates; returns the user the token is bound to, if any."""
        return self._run("AUTH", {"token": token}, lambda r: r.get("user_id"))

    def ping(self) -> bool:
        return self._run("PING", {}, lambda r: r.get("reply") == "PONG")

    def _exchange(self, lines: List[bytes]) -> List[Dict[str, Any]]:
        with self._lock:
            self._sock.sendall(b"".join(lines))
            replies = []
            for _ in lines:
                raw = self._reader.readline()
                if not raw:
                    raise ConnectionError("the server closed the connection")
                replies.append(json.loads(raw))
            return replies

    def _run(self, command: str, args: Dict[str, Any], parse: Parse) -> Any:
        (reply,) = self._exchange([_line(command, args)])
        return _outcome(reply, parse)

    def pipeline(self) -> "Pipeline":
        """Queues calls and sends them together (one write, replies read after): each call
        returns a :class:`Pending` whose ``result()`` is its typed result. Runs on leaving the
        ``with`` block, or on :meth:`Pipeline.execute`. The server runs them in order, and
        the writes of one batch share one fsync."""
        return Pipeline(self)

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Pending:
    """The result of a pipelined call, once the pipeline ran."""

    __slots__ = ("_done", "_value", "_error")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: Optional[BaseException] = None

    def result(self) -> Any:
        """The call's typed result; raises its error (an :class:`AmberError`)."""
        if not self._done:
            raise RuntimeError("the pipeline has not run yet")
        if self._error is not None:
            raise self._error
        return self._value

    @property
    def error(self) -> Optional[BaseException]:
        return self._error


class Pipeline(Commands):
    """Calls queued on a :class:`Client` (see :meth:`Client.pipeline`)."""

    # Requests written before their replies are read: the server answers a batch of up to
    # 1,024; a smaller chunk keeps both sides' socket buffers from filling while we write.
    CHUNK = 256

    def __init__(self, client: Client) -> None:
        self._client = client
        self._queued: List[Tuple[bytes, Parse, Pending]] = []
        self._tags = itertools.count()

    def _run(self, command: str, args: Dict[str, Any], parse: Parse) -> Pending:
        pending = Pending()
        self._queued.append((_line(command, args, f"p{next(self._tags)}"), parse, pending))
        return pending

    def execute(self) -> List[Pending]:
        """Sends every queued call and reads the replies; returns the pendings in order."""
        queued, self._queued = self._queued, []
        for start in range(0, len(queued), self.CHUNK):
            chunk = queued[start:start + self.CHUNK]
            replies = self._client._exchange([line for line, _, _ in chunk])
            for (_, parse, pending), reply in zip(chunk, replies):
                try:
                    pending._value = _outcome(reply, parse)
                except AmberError as e:
                    pending._error = e
                pending._done = True
        return [p for _, _, p in queued]

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.execute()


class AsyncClient(Commands):
    """An asyncio connection to a server. Every method is a coroutine; calls made
    concurrently (``asyncio.gather``) are pipelined on the one connection, each matched to
    its reply by a tag::

        async with await amberdb.AsyncClient.connect("127.0.0.1", 7733) as db:
            stored = await db.store("a note")
            hits, recent = await asyncio.gather(db.search("note"), db.recent())
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._pending: Dict[str, "asyncio.Future[Dict[str, Any]]"] = {}
        self._tags = itertools.count()
        self._closed: Optional[BaseException] = None
        self._reading = asyncio.get_running_loop().create_task(self._read_replies())

    @classmethod
    async def connect(
        cls, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, token: Optional[str] = None,
    ) -> "AsyncClient":
        reader, writer = await asyncio.open_connection(host, port, limit=64 << 20)
        client = cls(reader, writer)
        if token is not None:
            try:
                await client.auth(token)
            except BaseException:
                await client.close()
                raise
        return client

    async def auth(self, token: str) -> Optional[str]:
        return await self._run("AUTH", {"token": token}, lambda r: r.get("user_id"))

    async def ping(self) -> bool:
        return await self._run("PING", {}, lambda r: r.get("reply") == "PONG")

    async def _read_replies(self) -> None:
        error: BaseException = ConnectionError("the server closed the connection")
        try:
            while True:
                raw = await self._reader.readline()
                if not raw:
                    break
                reply = json.loads(raw)
                future = self._pending.pop(str(reply.get("tag")), None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except Exception as e:  # a broken connection fails every call waiting on it
            error = e
        self._closed = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

    async def _run(self, command: str, args: Dict[str, Any], parse: Parse) -> Any:
        if self._closed is not None:
            raise ConnectionError("the connection is closed") from self._closed
        tag = f"a{next(self._tags)}"
        future = asyncio.get_running_loop().create_future()
        self._pending[tag] = future
        self._writer.write(_line(command, args, tag))
        await self._writer.drain()
        return _outcome(await future, parse)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except ConnectionError:
            pass
        await self._reading

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
