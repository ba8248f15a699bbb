"""Typed results: the library's result shapes (docs/protocol.md, "Commands") as dataclasses.

Each keeps the whole reply in ``raw`` (not compared, not shown), so a field added to the
protocol later is reachable before this module names it. Times are timezone-aware
:class:`datetime.datetime` values in UTC.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 time from a reply (``2026-11-22T09:30:00Z``) as an aware datetime."""
    if value is None:
        return None
    if value.endswith("Z"):  # replies are UTC; fromisoformat takes "Z" only from Python 3.11
        return datetime.fromisoformat(value[:-1]).replace(tzinfo=timezone.utc)
    return datetime.fromisoformat(value).astimezone(timezone.utc)


_FIELDS: Dict[type, frozenset] = {}


def _build(cls: Type[T], reply: Dict[str, Any], **converted: Any) -> T:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    values = {k: v for k, v in reply.items() if k in names}
    values.update(converted)
    values["raw"] = reply
    return cls(**values)


_TIMES = ("created_at", "updated_at", "last_accessed_at", "valid_from", "valid_to")


@dataclass
class Memory:
    """One stored memory (a note, a chat message or a user-level fact)."""

    id: int
    content: str
    user_id: str = "default"
    kind: str = "memory"
    category: str = "other"
    tags: List[str] = field(default_factory=list)
    session_id: Optional[str] = None
    agent_id: Optional[str] = None
    role: Optional[str] = None
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    last_accessed_at: Optional[datetime] = None
    valid_from: Optional[datetime] = None
    valid_to: Optional[datetime] = None
    access_count: int = 0
    helpful_count: int = 0
    harmful_count: int = 0
    confidence: float = 0.0
    supersedes: List[int] = field(default_factory=list)
    content_hash: str = ""
    key: Optional[str] = None
    """An item's key (``kind == "item"``; :meth:`amberdb.Store.put_item`)."""
    value: Optional[Dict[str, Any]] = None
    """An item's value: the JSON object put under its key."""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Memory":
        return _build(cls, reply, **{t: parse_time(reply.get(t)) for t in _TIMES})


@dataclass
class Hit(Memory):
    """A search result: a memory and how it matched."""

    score: float = 0.0
    similarity: Optional[float] = None
    distance: Optional[float] = None
    keyword_score: Optional[float] = None
    source: Optional[str] = None
    folded: int = 0
    #: With ``neighbours=n``: the records right before and after it in its session, each a
    #: dict (``memory_id``, ``position`` -1 before / 1 after, ``role``, ``content``,
    #: ``valid_from``), in session order.
    context: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Hit":
        return _build(cls, reply, **{t: parse_time(reply.get(t)) for t in _TIMES})


@dataclass
class SearchResult:
    """The hits of one search, best first, and how the search ran. Iterable and sized."""

    hits: List[Hit]
    total: int = 0
    offset: int = 0
    limit: int = 0
    has_more: bool = False
    strategy: Optional[str] = None
    mode: Optional[str] = None
    fallback: Optional[str] = None
    tokens: Optional[int] = None
    over_budget: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "SearchResult":
        hits = [Hit.from_reply(h) for h in reply.get("results", [])]
        return _build(cls, reply, hits=hits)

    def __iter__(self):
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i: int) -> Hit:
        return self.hits[i]

    @property
    def ids(self) -> List[int]:
        """The hits' memory ids, best first."""
        return [h.id for h in self.hits]


@dataclass
class Decision:
    """What store-time dedup decided about one stored neighbour of a new memory."""

    memory_id: int
    relation: str
    reason: Any = None


@dataclass
class StoreResult:
    """A stored memory: its id and what the write hooks did (``outcome``: ``stored``,
    ``duplicate`` (nothing stored; ``memory_id`` holds the content already),
    ``merged``, ``superseded`` or ``history``)."""

    memory_id: int
    outcome: str
    category: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    supersedes: List[int] = field(default_factory=list)
    decisions: List[Decision] = field(default_factory=list)
    created_at: Optional[datetime] = None
    reason: Optional[str] = None
    replaced: Optional[int] = None
    """For an item: the id of the item of the same key this put replaced."""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "StoreResult":
        decisions = [
            Decision(d.get("memory_id"), d.get("relation"), d.get("reason"))
            for d in reply.get("decisions", [])
        ]
        return _build(cls, reply, decisions=decisions, created_at=parse_time(reply.get("created_at")))


@dataclass
class Entity:
    """A user, agent or session."""

    kind: str
    id: str
    user_id: Optional[str] = None
    name: Optional[str] = None
    agent_id: Optional[str] = None
    created_at: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Entity":
        return _build(cls, reply, created_at=parse_time(reply.get("created_at")))
