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
    #: The results folded into this one (each a dict: ``memory_id``, ``score``), best first:
    #: they say the same thing, and are one :meth:`get` away.
    also: List[Dict[str, Any]] = field(default_factory=list)
    #: In a reranked search, the strategy's score before the reranker's (``score``).
    first_score: Optional[float] = None
    #: With ``neighbours=n``: the records right before and after it in its session, each a
    #: dict (``memory_id``, ``position`` -1 before / 1 after, ``role``, ``content``,
    #: ``valid_from``), in session order.
    context: List[Dict[str, Any]] = field(default_factory=list)
    #: With ``group="session"``: the session's other results (each a dict: ``memory_id``,
    #: ``score``), best first.
    session_turns: List[Dict[str, Any]] = field(default_factory=list)

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
    #: Which score orders the page: ``"strategy"`` or ``"reranker"``.
    scored_by: Optional[str] = None
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
    category_reason: Optional[str] = None
    """How the category was decided: ``exact`` (one of the nine, as given), ``dictionary``
    (a word it stands for: ``auth`` is ``security``), the model's reading, or ``fallback``:
    the text given is none of them, and the memory's category is ``other``."""
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


@dataclass
class Updated:
    """An updated memory: ``memory_id`` is the live one now (a new id when the content changed,
    which ``supersedes`` the old one), with its tags and category after the update."""

    memory_id: int
    supersedes: List[int] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    category: Optional[str] = None
    message: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Updated":
        return _build(cls, reply)


@dataclass
class Deleted:
    """A deleted memory (its text leaves the store's files within a maintenance cycle)."""

    memory_id: int
    message: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Deleted":
        return _build(cls, reply)


@dataclass
class FeedbackResult:
    """A memory's feedback counts and confidence after one more feedback."""

    memory_id: int
    helpful_count: int = 0
    harmful_count: int = 0
    confidence: float = 0.0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "FeedbackResult":
        return _build(cls, reply)


@dataclass
class Version(Memory):
    """One version of a fact: the record and its ``status`` (``current``, ``replaced`` by a
    newer value, or ``merged``: an earlier saying or an edited text)."""

    status: str = "current"

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Version":
        return _build(cls, reply, **{t: parse_time(reply.get(t)) for t in _TIMES})


@dataclass
class History:
    """Every version of the fact a memory holds, the latest valid first; iterable and sized."""

    memory_id: int
    versions: List[Version] = field(default_factory=list)
    count: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "History":
        versions = [Version.from_reply(v) for v in reply.get("versions", [])]
        return _build(cls, reply, versions=versions)

    def __iter__(self):
        return iter(self.versions)

    def __len__(self) -> int:
        return len(self.versions)


@dataclass
class KnowledgeResult:
    """What :meth:`amberdb.Store.add_knowledge` did, item by item: ``results[i]`` is the
    :class:`StoreResult` of item ``i``, or the :class:`amberdb.AmberError` it failed with."""

    results: List[Any] = field(default_factory=list)
    count: int = 0
    stored: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "KnowledgeResult":
        from ._errors import error_from_reply

        results = [
            StoreResult.from_reply(r) if r.get("success", True) and "memory_id" in r
            else error_from_reply(r)
            for r in reply.get("results", [])
        ]
        return _build(cls, reply, results=results)


@dataclass
class SkippedTurn:
    """A turn given to :meth:`amberdb.Store.add_messages` that the session already held:
    its ``position`` in the list, the ``memory_id`` that holds it, and ``by`` (``"id"``: a
    turn of the session carries its message id; ``"position"``: the list began with the whole
    session, and this turn is at a position it holds with the same role and content)."""

    position: int
    memory_id: int
    by: str


class AddedMessages(List[int]):
    """The ids of the turns :meth:`amberdb.Store.add_messages` stored (a list, in the order
    given), with ``skipped``: the turns the session already held, not stored again."""

    skipped: List[SkippedTurn]
    raw: Dict[str, Any]

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "AddedMessages":
        out = cls(reply.get("memory_ids", []))
        out.skipped = [SkippedTurn(s["position"], s["memory_id"], s["by"])
                       for s in reply.get("skipped", [])]
        out.raw = reply
        return out


@dataclass
class Exported:
    """An export written (:meth:`amberdb.Store.export`): where, and what it holds."""

    dest: str
    version: int = 2
    entities: int = 0
    live: int = 0
    archived: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Exported":
        return _build(cls, reply["export"])


@dataclass
class Imported:
    """What an import did (:meth:`amberdb.Store.import_file`): the file's ``format``
    (``export``, ``json lines``, ``mem0``, ``agent-memory-server``), records ``stored``
    (``archived`` of them archived), ``duplicates`` already here, whether ``ids_kept``, and
    ``renumbered``: ``(id in the file, id here)`` pairs; ``failed``: ``(line, why)`` pairs."""

    format: str
    lines: int = 0
    stored: int = 0
    archived: int = 0
    duplicates: int = 0
    entities: int = 0
    entities_existing: int = 0
    ids_kept: Optional[bool] = None
    renumbered: List[Any] = field(default_factory=list)
    failed: List[Any] = field(default_factory=list)
    relations_skipped: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: Dict[str, Any]) -> "Imported":
        done = reply["import"]
        return _build(cls, done, renumbered=[tuple(p) for p in done.get("renumbered", [])],
                      failed=[tuple(p) for p in done.get("failed", [])])
