"""Clients for a running ``amberdb serve`` over its line protocol (docs/protocol.md):
:class:`Client` (blocking, with :meth:`Client.pipeline`) and :class:`AsyncClient` (asyncio,
where concurrent calls are pipelined on one connection). Standard library only.

Both have every method of :class:`amberdb.Store` with the same typed results and exceptions;
the server runs them with the same code as the embedded store.
"""
from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import select
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._api import Commands
from ._errors import AmberError, error_from_reply

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7733

#: The commands that change the store (class ``write`` in ``HELP``). Each carries a request
#: id the client makes (a UUID version 7, docs/protocol.md, "Request ids"), so a write sent
#: again after a dropped connection is answered with its first attempt's reply and never runs
#: twice.
WRITES = frozenset({
    "ADD_KNOWLEDGE", "ADD_MESSAGES", "BACKUP", "CLEAR_OLD_MEMORIES", "COMPACT_APPLY",
    "COMPACT_UNDO", "CREATE_AGENT", "CREATE_SESSION", "CREATE_USER", "DELETE_AGENT",
    "DELETE_BY_MEMORY_ID", "DELETE_ITEM", "DELETE_SESSION", "DELETE_USER", "EXPORT", "FEEDBACK",
    "IMPORT", "MAINTENANCE", "MEND_APPLY", "MEND_UNDO", "PURGE", "PUT_ITEM", "REEMBED",
    "SNAPSHOT_CREATE", "SNAPSHOT_RESTORE", "STORE_MEMORY", "TAG_NORMALIZE_APPLY",
    "UPDATE_MEMORY", "DELETE", "STORE", "UPDATE",
})

#: Commands a client sends again, once, on a fresh connection when the connection dropped
#: after the request may have reached the server (a restart, a dropped link): reads, and
#: every write (by its request id). A request that was never sent (the connection was found
#: closed first) is always sent again.
SAFE_TO_RETRY = frozenset({
    "PING", "HELP", "AUTH", "SEARCH", "SEARCH_MEMORIES", "GET_BY_MEMORY_ID", "GET",
    "LIST_RECENT_MEMORIES", "RECENT", "GET_MEMORY_STATS", "LINEAGE", "HISTORY", "GET_ITEM",
    "LIST_ITEMS", "LIST_ITEM_USERS", "GET_USER", "GET_AGENT", "GET_SESSION", "LIST_USERS",
    "LIST_AGENTS", "LIST_SESSIONS", "QUERY", "GET_UNIQUE_TAGS", "GET_CANONICAL_TAGS",
    "GET_TAG_FREQUENCIES", "GET_TAG_WEIGHTS", "TAG_NORMALIZE_PREVIEW", "COMPACT_PREVIEW",
    "MEND_PREVIEW", "STATS",
}) | WRITES


def request_id() -> str:
    """A new request id: a UUID version 7 (RFC 9562), its first 48 bits the time in
    milliseconds, the rest random."""
    value = (int(time.time() * 1000) & ((1 << 48) - 1)) << 80
    value |= int.from_bytes(os.urandom(10), "big") & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # the RFC 9562 variant
    return str(uuid.UUID(int=value))


def _with_request_id(command: str, args: Dict[str, Any]) -> Dict[str, Any]:
    if command.upper() in WRITES and "request_id" not in args:
        return {**args, "request_id": request_id()}
    return args

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


def _check_address(host: Any, port: Any) -> None:
    if not isinstance(host, str) or not host:
        raise TypeError(f"host: give a host name or address, not {host!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port: give a port in 1..=65535, not {port!r}")


def _check_timeout(timeout: Any) -> None:
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise ValueError(f"timeout: give seconds > 0, or None to wait forever, not {timeout!r}")


#: How long a call keeps trying while a cluster fails over (a dead owner, ``unavailable``
#: naming a partition while no node owns it), in seconds.
FAILOVER_WAIT = 15.0
#: The pause between retries during a failover, in seconds.
RETRY_PAUSE = 0.2
#: ``moved`` replies followed at once in one call; later ones wait ``RETRY_PAUSE`` each.
MAX_HOPS = 5


def _parse_address(address: Any) -> Tuple[str, int]:
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
    elif isinstance(address, str) and ":" in address:
        host, _, text = address.rpartition(":")
        try:
            port = int(text)
        except ValueError:
            raise ValueError(f"seeds: give 'host:port', not {address!r}") from None
    else:
        raise ValueError(f"seeds: give 'host:port' or (host, port), not {address!r}")
    _check_address(host, port)
    return host, port


def partition_of_user(user_id: str, partitions: int) -> int:
    """The cluster partition of ``user_id`` among ``partitions`` (docs/cluster.md: the first
    8 bytes of its sha256, little-endian, modulo the count)."""
    digest = hashlib.sha256(user_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % max(partitions, 1)


class _Routing:
    """What a client learns of the nodes it talks to (docs/cluster.md, "Routing"): the
    addresses it may try, the cluster's partition count (from ``moved`` replies), and the
    position of its last write to each partition (every write's reply says ``partition`` and
    ``seq``), which its reads ask for as ``min_seq``."""

    def __init__(self, addresses: List[Tuple[str, int]], failover_wait: float) -> None:
        self.addresses = addresses
        self.failover_wait = failover_wait
        self.partitions: Optional[int] = None
        self.written: Dict[int, int] = {}
        self.clustered = len(addresses) > 1

    @classmethod
    def checked(cls, host: Any, port: Any, seeds: Any, failover_wait: Any) -> "_Routing":
        """The routing of a client of ``host``:``port`` and ``seeds``, every argument checked."""
        _check_address(host, port)
        if isinstance(failover_wait, bool) or not isinstance(failover_wait, (int, float)) \
                or failover_wait < 0:
            raise ValueError(f"failover_wait: give seconds >= 0, not {failover_wait!r}")
        addresses = [(host, port)]
        for seed in seeds or []:
            parsed = _parse_address(seed)
            if parsed not in addresses:
                addresses.append(parsed)
        return cls(addresses, float(failover_wait))

    def partition(self, args: Dict[str, Any]) -> Optional[int]:
        memory_id = args.get("memory_id")
        if isinstance(memory_id, int) and not isinstance(memory_id, bool):
            return memory_id >> 40
        if self.partitions is None:
            return None
        user = args.get("user_id")
        return partition_of_user(user if isinstance(user, str) else "default", self.partitions)

    def with_min_seq(self, command: str, args: Dict[str, Any]) -> Dict[str, Any]:
        if command.upper() in WRITES or "min_seq" in args:
            return args
        p = self.partition(args)
        seq = self.written.get(p) if p is not None else None
        return {**args, "min_seq": seq} if seq is not None else args

    def note(self, command: str, reply: Dict[str, Any]) -> None:
        p, seq = reply.get("partition"), reply.get("seq")
        if command.upper() in WRITES and isinstance(p, int) and isinstance(seq, int):
            self.written[p] = max(self.written.get(p, 0), seq)

    def redirect(self, reply: Dict[str, Any]) -> Optional[Tuple[str, int]]:
        """The owner a ``moved`` reply names (learning the partition count), else None."""
        if reply.get("code") != "moved":
            return None
        self.clustered = True
        if isinstance(reply.get("partitions"), int):
            self.partitions = reply["partitions"]
        address = reply.get("address")
        try:
            target = _parse_address(address)
        except (TypeError, ValueError):
            return None
        if target not in self.addresses:
            self.addresses.append(target)
        return target

    @staticmethod
    def wait(reply: Dict[str, Any]) -> Optional[float]:
        """Seconds to wait before sending again a request a cluster could not run yet
        (``unavailable`` naming a partition, or ``moved`` to an owner not yet registered);
        None for any other error."""
        code = reply.get("code")
        if code == "moved" or (code == "unavailable" and "partition" in reply):
            ms = reply.get("retry_after_ms")
            seconds = ms / 1000 if isinstance(ms, (int, float)) else RETRY_PAUSE
            return min(max(seconds, 0.02), 1.0)
        return None

    def rotates(self, reply: Dict[str, Any]) -> bool:
        """Whether a refusal is sent again to the next address: ``unavailable`` naming a
        partition, from a node that may see the cluster through a cut-off NATS server (its
        leases stale), when there is another node to ask."""
        return (reply.get("code") == "unavailable" and "partition" in reply
                and len(self.addresses) > 1)

    def after(self, address: Tuple[str, int]) -> Tuple[str, int]:
        i = self.addresses.index(address) if address in self.addresses else -1
        return self.addresses[(i + 1) % len(self.addresses)]


class Client(Commands):
    """A blocking connection to a server. Thread-safe (one request at a time); use
    :meth:`pipeline` to send many requests without waiting for each reply.

    ``token`` is sent with ``AUTH`` when given (a server with tokens needs it). ``timeout``
    (seconds, 60 by default) bounds the connect and every reply: a call that waits longer
    raises :class:`TimeoutError`. A connection the server closed while the client was idle
    (a restart) is found before the next request is sent, and the call goes over a new one
    (authenticated again) as if nothing happened. A connection that drops after a request was
    sent fails the call, unless sending it again is safe (reads, and every write, which
    carries a request id: ``SAFE_TO_RETRY``), which is sent once more on a new connection. After a timeout the next call connects
    again.

    A cluster (docs/cluster.md, "Routing"): ``seeds`` are more ``"host:port"`` addresses,
    tried in order after ``host``:``port`` when connecting and when a node is lost. A write
    sent to a node that does not own its partition is answered ``moved``: the call goes on to
    the owner it names (and stays connected there). ``unavailable`` naming a partition (no
    node owns it while a dead owner's lease lapses) and a lost node are retried, at the next
    address, for up to ``failover_wait`` seconds (15 by default), writes with their request
    id. Every read
    carries the ``seq`` of this client's last write to its partition as ``min_seq``, so any
    node that answers has that write. A :meth:`pipeline` goes to one node and follows
    nothing."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        token: Optional[str] = None,
        timeout: Optional[float] = 60.0,
        seeds: Optional[List[Any]] = None,
        failover_wait: float = FAILOVER_WAIT,
    ) -> None:
        _check_timeout(timeout)
        self._routing = _Routing.checked(host, port, seeds, failover_wait)
        addresses = self._routing.addresses
        self._address = (host, port)
        self._token = token
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._reader: Any = None
        for i, address in enumerate(addresses):
            self._address = address
            try:
                self._connect()
                break
            except OSError:
                if i == len(addresses) - 1:
                    raise

    def _connect(self) -> None:
        sock = socket.create_connection(self._address, timeout=self._timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._reader = sock, sock.makefile("rb")
        if self._token is not None:
            try:
                (reply,) = self._exchange_connected([_line("AUTH", {"token": self._token})])
                _outcome(reply, lambda r: r.get("user_id"))
            except BaseException:
                self._drop()
                raise

    def _drop(self) -> None:
        """Closes a connection that can no longer be trusted (a timeout leaves a reply in
        flight); the next call connects again."""
        sock, reader, self._sock, self._reader = self._sock, self._reader, None, None
        try:
            if reader is not None:
                reader.close()
        finally:
            if sock is not None:
                sock.close()

    def _stale(self) -> bool:
        """Whether the idle connection was closed by the server (or holds bytes nobody asked
        for): then nothing may be sent on it."""
        assert self._sock is not None
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
            if not readable:
                return False
            self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return True
        except BlockingIOError:
            return False
        except OSError:
            return True

    def auth(self, token: str) -> Optional[str]:
        """Authenticates (again after a reconnect); returns the user the token is bound to."""
        user = self._run("AUTH", {"token": token}, lambda r: r.get("user_id"))
        self._token = token
        return user

    def ping(self) -> bool:
        """Whether the server answers (``PING``)."""
        return self._run("PING", {}, lambda r: r.get("reply") == "PONG")

    def written_seq(self, partition: int) -> Optional[int]:
        """The log position of this client's last acknowledged write to ``partition`` (a
        write's reply says both): a read elsewhere with it as ``min_seq`` sees that write."""
        return self._routing.written.get(partition)

    def _exchange_connected(self, lines: List[bytes]) -> List[Dict[str, Any]]:
        assert self._sock is not None and self._reader is not None
        try:
            self._sock.sendall(b"".join(lines))
            replies = []
            for _ in lines:
                raw = self._reader.readline()
                if not raw:
                    raise ConnectionError("the server closed the connection")
                replies.append(json.loads(raw))
            return replies
        except socket.timeout as e:
            self._drop()
            raise TimeoutError(
                f"no reply from {self._address[0]}:{self._address[1]} within {self._timeout} s; "
                "the next call connects again") from e
        except (OSError, ValueError):
            self._drop()
            raise

    def _exchange(self, lines: List[bytes], safe: bool = False) -> List[Dict[str, Any]]:
        with self._lock:
            if self._sock is not None and self._stale():
                self._drop()  # nothing was sent on it: the requests go on a new one
            if self._sock is None:
                self._connect()
            try:
                return self._exchange_connected(lines)
            except ConnectionError:
                if not safe:
                    raise
            self._connect()
            return self._exchange_connected(lines)

    def _run(self, command: str, args: Dict[str, Any], parse: Parse) -> Any:
        safe = command.upper() in SAFE_TO_RETRY
        routing = self._routing
        line = _line(command, routing.with_min_seq(command, _with_request_id(command, args)))
        deadline = time.monotonic() + routing.failover_wait
        hops = 0
        while True:
            try:
                (reply,) = self._exchange([line], safe)
            except TimeoutError:
                raise
            except OSError:
                # A node gone (killed, failing over): the next address, while it may help.
                if not (safe and routing.clustered) or time.monotonic() >= deadline:
                    raise
                with self._lock:
                    self._drop()
                    self._address = routing.after(self._address)
                time.sleep(RETRY_PAUSE)
                continue
            if not reply.get("ok") and time.monotonic() < deadline:
                target = routing.redirect(reply)
                if target is not None:
                    hops += 1
                    with self._lock:
                        if target != self._address:
                            self._drop()
                            self._address = target
                    if hops > MAX_HOPS:
                        time.sleep(RETRY_PAUSE)
                    continue
                pause = routing.wait(reply)
                if pause is not None:
                    time.sleep(pause)
                    if routing.rotates(reply):
                        with self._lock:
                            self._drop()
                            self._address = routing.after(self._address)
                    continue
            routing.note(command, reply)
            return _outcome(reply, parse)

    def pipeline(self) -> "Pipeline":
        """Queues calls and sends them together (one write, replies read after): each call
        returns a :class:`Pending` whose ``result()`` is its typed result. Runs on leaving the
        ``with`` block, or on :meth:`Pipeline.execute`. The server runs them in order, and
        the writes of one batch share one fsync."""
        return Pipeline(self)

    def close(self) -> None:
        """Closes the connection (a later call connects again)."""
        self._drop()

    def __enter__(self) -> "Client":
        """The client itself; leaving the ``with`` block closes it."""
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
        """The call's error once the pipeline ran, or ``None``."""
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
        line = _line(command, _with_request_id(command, args), f"p{next(self._tags)}")
        self._queued.append((line, parse, pending))
        return pending

    def all_memories(self, **_: Any) -> Any:
        """Not in a pipeline: it pages, each page waiting for the one before."""
        raise TypeError("all_memories pages one call after another: call it on the Client")

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
        """The pipeline itself; leaving the ``with`` block sends every call queued."""
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

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
        timeout: Optional[float] = 60.0,
    ) -> None:
        if not isinstance(reader, asyncio.StreamReader) or not isinstance(writer, asyncio.StreamWriter):
            raise TypeError(
                "AsyncClient is made by `await amberdb.AsyncClient.connect(host, port)`, "
                f"not AsyncClient({reader!r}, {writer!r})")
        _check_timeout(timeout)
        self._timeout = timeout
        # Where `connect` reached, and the token it sent: a dropped connection is made again
        # by the next call.
        self._address: Optional[Tuple[str, int]] = None
        self._token: Optional[str] = None
        self._reader = reader
        self._writer = writer
        self._pending: Dict[str, "asyncio.Future[Dict[str, Any]]"] = {}
        self._tags = itertools.count()
        self._closed: Optional[BaseException] = None
        self._shut = False  # closed by `close`: never connected again
        self._reconnecting = asyncio.Lock()
        self._routing = _Routing([], FAILOVER_WAIT)
        self._reading = asyncio.get_running_loop().create_task(self._read_replies(reader))

    @classmethod
    async def connect(
        cls, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, token: Optional[str] = None,
        timeout: Optional[float] = 60.0, seeds: Optional[List[Any]] = None,
        failover_wait: float = FAILOVER_WAIT,
    ) -> "AsyncClient":
        """Connects (within ``timeout`` seconds, 60 by default; ``None`` waits forever).
        Every call then waits at most ``timeout`` for its reply (:class:`TimeoutError`); a
        late reply is dropped, and the connection serves the next calls. ``seeds`` and
        ``failover_wait``: a cluster's other nodes, as :class:`Client` takes them (a
        ``moved`` reply moves the one connection to the owner it names; calls in flight on
        the old one are sent again)."""
        _check_timeout(timeout)
        routing = _Routing.checked(host, port, seeds, failover_wait)
        addresses = list(routing.addresses)
        for i, (h, p) in enumerate(addresses):
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(h, p, limit=64 << 20), timeout)
                host, port = h, p
                break
            except OSError:
                if i == len(addresses) - 1:
                    raise
        client = cls(reader, writer, timeout=timeout)
        client._routing = routing
        client._address = (host, port)
        if token is not None:
            try:
                await client.auth(token)
            except BaseException:
                await client.close()
                raise
        return client

    async def _reconnect(self) -> None:
        assert self._address is not None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(*self._address, limit=64 << 20), self._timeout)
        self._reader, self._writer, self._closed = reader, writer, None
        self._reading = asyncio.get_running_loop().create_task(self._read_replies(reader))
        if self._token is not None:
            await self.auth(self._token)

    async def auth(self, token: str) -> Optional[str]:
        """Authenticates (again after a reconnect); returns the user the token is bound to."""
        user = await self._run("AUTH", {"token": token}, lambda r: r.get("user_id"))
        self._token = token
        return user

    async def ping(self) -> bool:
        """Whether the server answers (``PING``)."""
        return await self._run("PING", {}, lambda r: r.get("reply") == "PONG")

    def written_seq(self, partition: int) -> Optional[int]:
        """The log position of this client's last acknowledged write to ``partition`` (a
        write's reply says both): a read elsewhere with it as ``min_seq`` sees that write."""
        return self._routing.written.get(partition)

    async def all_memories(self, *, user_id: Optional[str] = None, page: int = 50) -> Any:
        """Every live memory of a user, newest first, ``page`` at a time (an async
        generator: ``async for m in db.all_memories(...)``)."""
        offset = 0
        while True:
            got = await self.recent(user_id=user_id, limit=page, offset=offset)
            for memory in got:
                yield memory
            if len(got) < page:
                return
            offset += page

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        error: BaseException = ConnectionError("the server closed the connection")
        try:
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                reply = json.loads(raw)
                future = self._pending.pop(str(reply.get("tag")), None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except Exception as e:  # a broken connection fails every call waiting on it
            error = e
        if reader is not self._reader:
            return  # a connection replaced already: its calls were failed when it was
        self._closed = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

    async def _connected(self) -> None:
        """A live connection for the next request: one the server closed while the client
        was idle is replaced before anything is sent on it."""
        if self._closed is None and self._reader.at_eof():
            self._closed = ConnectionError("the server closed the connection")
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(self._closed)
            self._pending.clear()
        if self._closed is not None:
            if self._address is None or self._shut:
                raise ConnectionError("the connection is closed") from self._closed
            async with self._reconnecting:
                if self._closed is not None:
                    await self._reconnect()

    async def _run(self, command: str, args: Dict[str, Any], parse: Parse) -> Any:
        safe = command.upper() in SAFE_TO_RETRY
        routing = self._routing
        args = routing.with_min_seq(command, _with_request_id(command, args))
        deadline = time.monotonic() + routing.failover_wait
        hops, resent = 0, False
        while True:
            try:
                await self._connected()
                reply = await self._send(command, args)
            except TimeoutError:
                raise
            except OSError:
                if not safe or self._address is None or self._shut:
                    raise
                if not routing.clustered:
                    if resent:
                        raise
                    resent = True  # once, on a new connection to the same server
                    continue
                if time.monotonic() >= deadline:
                    raise
                # A node gone (killed, failing over): the next address.
                self._address = routing.after(self._address)
                await asyncio.sleep(RETRY_PAUSE)
                continue
            if not reply.get("ok") and time.monotonic() < deadline:
                target = routing.redirect(reply)
                if target is not None:
                    hops += 1
                    self._move_to(target)
                    if hops > MAX_HOPS:
                        await asyncio.sleep(RETRY_PAUSE)
                    continue
                pause = routing.wait(reply)
                if pause is not None:
                    await asyncio.sleep(pause)
                    if routing.rotates(reply):
                        self._move_to(routing.after(self._address))
                    continue
            routing.note(command, reply)
            return _outcome(reply, parse)

    def _move_to(self, target: Tuple[str, int]) -> None:
        """Points the connection at ``target`` (a ``moved`` reply's owner): the next call
        connects there; calls in flight on the old connection fail and are sent again."""
        if target == self._address:
            return
        self._address = target
        self._closed = ConnectionError(f"moved to {target[0]}:{target[1]}")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self._closed)
        self._pending.clear()
        self._writer.close()

    async def _send(self, command: str, args: Dict[str, Any]) -> Dict[str, Any]:
        """Sends one request on the connection and waits for its reply."""
        tag = f"a{next(self._tags)}"
        future = asyncio.get_running_loop().create_future()
        self._pending[tag] = future
        self._writer.write(_line(command, args, tag))
        try:
            await asyncio.wait_for(self._writer.drain(), self._timeout)
            reply = await asyncio.wait_for(future, self._timeout)
        except asyncio.TimeoutError as e:
            self._pending.pop(tag, None)
            raise TimeoutError(
                f"no reply to {command} within {self._timeout} s (a late reply is dropped)") from e
        return reply

    async def close(self) -> None:
        """Closes the connection for good (a later call raises :class:`ConnectionError`)."""
        self._shut = True
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except ConnectionError:
            pass
        await self._reading

    async def __aenter__(self) -> "AsyncClient":
        """The client itself; leaving the ``async with`` block closes it."""
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
