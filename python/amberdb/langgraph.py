"""amberdb as LangGraph's long-term memory store: ``AmberStore`` is a ``BaseStore``.

LangGraph and LangMem keep long-term memory in a ``BaseStore`` (``put``/``get``/``search``/
``delete``/``list_namespaces`` over namespaces). ``AmberStore`` keeps it in an amberdb store,
durable and searched by meaning with amberdb's own embedder, so a LangMem user changes one
line::

    from amberdb.langgraph import AmberStore

    store = AmberStore.open("memories")           # was: InMemoryStore(index={...})
    graph = builder.compile(store=store)

How it maps (docs/python.md, "LangGraph"):

- a namespace ``("users", "alice")`` is the amberdb user ``"users.alice"`` (LangGraph forbids
  dots in labels, so the mapping is one-to-one), and an item is an amberdb item of that user
  (docs/semantics.md, "Items"): the value under its key, replaced whole by a put;
- the text an item is found by is taken from its value by the ``index`` fields, as LangGraph
  does (the whole value as JSON by default); several fields are joined by newlines; a put with
  ``index=False`` is found by its key;
- ``search`` with a query ranks by cosine similarity (``score``); with a namespace prefix it
  searches every namespace under it and merges by score; ``filter`` is applied to each hit's
  value (LangGraph's operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, nested
  objects) and the search pages on until it has ``limit`` hits or none are left; without a
  query, items come in namespace order, then key order;
- reads write nothing: ``get`` and ``search`` do not count accesses;
- a query over 1,000 characters (amberdb's limit) is cut at a word boundary, as a put cuts the
  text it embeds: the model reads the first 256 tokens of either.

Items do not expire (``supports_ttl`` is false: a ``ttl`` is refused). Needs ``langgraph``
(``pip install langgraph``); amberdb itself does not depend on it.
"""
from __future__ import annotations

import asyncio
import heapq
import threading
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

try:
    from langgraph.store.base import (
        BaseStore, GetOp, Item, ListNamespacesOp, MatchCondition, Op, PutOp, Result, SearchItem,
        SearchOp,
    )
    from langgraph.store.base.embed import get_text_at_path, tokenize_path
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "amberdb.langgraph needs LangGraph: pip install langgraph"
    ) from e

from ._api import MAX_QUERY_CHARS, Commands
from ._store import PathLike, Store
from ._types import Memory

__all__ = ["AmberStore"]

#: Most characters of an item's text (amberdb's content limit). The value itself is kept
#: whole; only the text it is found by is cut, and the model reads its first 256 tokens.
MAX_TEXT_CHARS = 10_000
#: Hits or items asked for per call while a search pages (amberdb's page limit).
PAGE = 50
#: How far a search pages (amberdb's offset limit).
MAX_OFFSET = 10_000


def cut_query(query: str) -> str:
    """``query`` within amberdb's query limit: cut at the last word boundary before it."""
    if len(query) <= MAX_QUERY_CHARS:
        return query
    cut = query[:MAX_QUERY_CHARS]
    space = cut.rfind(" ")
    return cut[:space] if space > MAX_QUERY_CHARS // 2 else cut


def namespace_user(namespace: Sequence[str]) -> str:
    """The amberdb user a namespace maps to."""
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(
                f"namespace label {label!r} in {tuple(namespace)!r}: labels are non-empty strings "
                "without '.' or NUL"
            )
    if not namespace:
        raise ValueError("a namespace has at least one label")
    return ".".join(namespace)


def user_namespace(user_id: str) -> Tuple[str, ...]:
    """The namespace an amberdb user stands for."""
    return tuple(user_id.split("."))


class AmberStore(BaseStore):
    """A LangGraph ``BaseStore`` over an amberdb :class:`amberdb.Store` (in this process) or
    :class:`amberdb.Client` (a running ``amberdb serve``).

    ``index`` takes LangGraph's index configuration; its ``fields`` choose the text each item
    is found by (default ``["$"]``, the whole value). amberdb embeds with the store's own
    embedder: ``embed`` and ``dims`` are not used (a warning says so when given).
    """

    supports_ttl = False

    def __init__(
        self, db: Commands, *, index: Optional[Dict[str, Any]] = None, _owned: bool = False,
    ) -> None:
        from .client import AsyncClient, Pipeline

        if isinstance(db, (AsyncClient, Pipeline)) or not isinstance(db, Commands):
            raise TypeError(
                f"AmberStore needs an amberdb.Store or a blocking amberdb.Client, not "
                f"{type(db).__name__} (its async methods run the blocking calls in a thread)")
        self.db = db
        self._owned = _owned
        # A Client has one connection: calls from several threads take turns. A Store is
        # thread-safe and releases the GIL, so its calls run side by side.
        self._lock: Optional[threading.Lock] = None if isinstance(db, Store) else threading.Lock()
        index = dict(index or {})
        ignored = sorted(k for k in ("embed", "dims") if k in index)
        if ignored:
            warnings.warn(
                f"AmberStore embeds with the amberdb store's own embedder; index {ignored} not used",
                stacklevel=2,
            )
        fields = index.get("fields") or ["$"]
        self.index_fields: List[Tuple[str, Any]] = [
            (f, "$" if f == "$" else tokenize_path(f)) for f in fields
        ]

    @classmethod
    def open(
        cls, path: PathLike, *, embedder: Optional[str] = None, index: Optional[Dict[str, Any]] = None,
        **store_options: Any,
    ) -> "AmberStore":
        """Opens (or creates) the amberdb store in ``path`` and serves it as a LangGraph
        store; :meth:`close` closes it. ``store_options`` go to :class:`amberdb.Store`.
        ``"host:port"`` (with no such directory) connects to a running ``amberdb serve``
        instead (``store_options``: :class:`amberdb.Client`'s ``token`` and ``timeout``)."""
        import os
        import re

        from .client import Client

        text = os.fspath(path)
        address = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})", text)
        if address and not os.path.isdir(text):
            if embedder is not None:
                raise ValueError("embedder: a server embeds with its own store's embedder")
            host = address.group(1).strip("[]")
            return cls(Client(host, int(address.group(2)), **store_options), index=index, _owned=True)
        return cls(Store(path, embedder=embedder, **store_options), index=index, _owned=True)

    def close(self) -> None:
        """Closes the amberdb store if :meth:`open` opened it."""
        if self._owned:
            self.db.close()  # type: ignore[attr-defined]

    def __enter__(self) -> "AmberStore":
        """The store itself; leaving the ``with`` block closes it (if :meth:`open` opened it)."""
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- BaseStore -------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> List[Result]:
        """Runs the operations in order: each put is durable when the next op runs."""
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> List[Result]:
        """:meth:`batch` in a worker thread (the engine releases the GIL)."""
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)

    # -- the operations --------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._lock is None:
            return getattr(self.db, method)(*args, **kwargs)
        with self._lock:
            return getattr(self.db, method)(*args, **kwargs)

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            memory = self._call("get_item", str(op.key), user_id=namespace_user(op.namespace))
            return None if memory is None else _item(memory, tuple(op.namespace))
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise ValueError(f"unknown operation {type(op).__name__}")

    def _put(self, op: PutOp) -> None:
        user = namespace_user(op.namespace)
        key = str(op.key)
        if op.value is None:
            self._call("delete_item", key, user_id=user)
            return None
        if getattr(op, "ttl", None) is not None:
            raise NotImplementedError("AmberStore does not expire items (supports_ttl is False)")
        self._call("put_item", key, op.value, self._text(key, op.value, op.index), user_id=user)
        return None

    def _text(self, key: str, value: Dict[str, Any], index: Any) -> str:
        if index is False:
            return key
        paths = self.index_fields if index is None else [(f, tokenize_path(f)) for f in index]
        texts: List[str] = []
        for _, path in paths:
            texts.extend(get_text_at_path(value, path))
        text = "\n".join(t for t in texts if t.strip())
        return text[:MAX_TEXT_CHARS] if text.strip() else key

    def _namespaces(self, prefix: Sequence[str]) -> List[str]:
        """The users under a namespace prefix (an empty prefix: every user with items)."""
        n = len(prefix)
        if n:
            namespace_user(prefix)
        users = self._call("item_users")
        return sorted(u for u in users if user_namespace(u)[:n] == tuple(prefix))

    def _search(self, op: SearchOp) -> List[SearchItem]:
        if op.limit < 1 or op.offset < 0:
            return []
        users = self._namespaces(op.namespace_prefix)
        wanted = op.offset + op.limit
        # Without a filter every hit counts, so no namespace needs more than `wanted`.
        page = PAGE if op.filter else min(PAGE, wanted)
        if op.query:
            streams = [self._ranked(op.query, u, page) for u in users]
            merged: Iterator[Tuple[float, SearchItem]] = heapq.merge(
                *streams, key=lambda pair: -pair[0]
            )
            found = (item for _, item in merged)
        else:
            found = (item for u in users for item in self._listed(u, page))
        out: List[SearchItem] = []
        for item in found:
            if op.filter and not _matches(item.value, op.filter):
                continue
            out.append(item)
            if len(out) == wanted:
                break
        return out[op.offset:]

    def _ranked(self, query: str, user: str, page: int) -> Iterator[Tuple[float, SearchItem]]:
        """One namespace's items by similarity to ``query``, best first, ``page`` at a time.
        A query over amberdb's 1,000 characters is cut at a word boundary, as ``put`` cuts an
        item's text: the model reads only the first 256 tokens of either."""
        query = cut_query(query)
        namespace = user_namespace(user)
        offset = 0
        while offset <= MAX_OFFSET - page:
            hits = self._call(
                "search", query, user_id=user, kind="item", strategy="similarity",
                limit=page, offset=offset, count_access=False,
            )
            for hit in hits.hits:
                score = hit.similarity if hit.similarity is not None else hit.score
                yield score, _item(hit, namespace, score=score)
            if not hits.has_more:
                return
            offset += page

    def _listed(self, user: str, page: int) -> Iterator[SearchItem]:
        """One namespace's items in key order, ``page`` at a time."""
        namespace = user_namespace(user)
        offset = 0
        while offset <= MAX_OFFSET:
            items = self._call("list_items", user_id=user, offset=offset, limit=page)
            for memory in items:
                yield _item(memory, namespace, score=None)
            if len(items) < page:
                return
            offset += page

    def _list_namespaces(self, op: ListNamespacesOp) -> List[Tuple[str, ...]]:
        namespaces = [user_namespace(u) for u in self._call("item_users")]
        for condition in op.match_conditions or ():
            namespaces = [ns for ns in namespaces if _namespace_matches(condition, ns)]
        if op.max_depth is not None:
            namespaces = list({ns[: op.max_depth] for ns in namespaces})
        return sorted(namespaces)[op.offset: op.offset + op.limit]


def _item(memory: Memory, namespace: Tuple[str, ...], score: Any = ...) -> Any:
    """A LangGraph ``Item`` (``SearchItem`` when a ``score`` is given) of an amberdb item."""
    assert memory.key is not None and memory.value is not None, "not an item"
    created, updated = memory.created_at, memory.updated_at
    if score is ...:
        return Item(value=memory.value, key=memory.key, namespace=namespace,
                    created_at=created, updated_at=updated)
    return SearchItem(namespace=namespace, key=memory.key, value=memory.value,
                      created_at=created, updated_at=updated, score=score)


def _namespace_matches(condition: MatchCondition, namespace: Tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path))
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)


def _matches(value: Any, condition: Any) -> bool:
    """LangGraph's filter semantics (those of its in-memory and Postgres stores)."""
    if isinstance(condition, dict):
        if any(k.startswith("$") for k in condition):
            return all(_operator(value, op, operand) for op, operand in condition.items())
        if not isinstance(value, dict):
            return False
        return all(_matches(value.get(k), v) for k, v in condition.items())
    if isinstance(condition, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(condition)
            and all(_matches(v, c) for v, c in zip(value, condition))
        )
    return value == condition


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return value == operand
    if op == "$ne":
        return value != operand
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(operand)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"unsupported filter operator {op!r}")
