"""The command surface shared by :class:`amberdb.Store` (in-process), :class:`amberdb.Client`
and :class:`amberdb.AsyncClient` (over the line protocol).

Every method is one protocol command (docs/protocol.md): it builds the command's arguments,
and a subclass's ``_run`` runs it and turns the reply into a typed result (or the error reply
into an exception from :mod:`amberdb._errors`). For :class:`amberdb.AsyncClient` the same
methods return awaitables. ``None`` means "not given": the command's default applies.
"""
from __future__ import annotations

from datetime import date, datetime
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from ._types import (
    AddedMessages, Deleted, Entity, Exported, FeedbackResult, History, Imported,
    KnowledgeResult, Memory, SearchResult, StoreResult, Updated,
)

#: A time argument: an aware ``datetime``, a ``date`` (midnight UTC), or an RFC 3339 string.
Time = Union[str, datetime, date]

#: Most characters of a search query (the protocol's limit): :class:`amberdb.langgraph.AmberStore`
#: cuts a longer one at a word boundary, as the model reads only its first 256 tokens.
MAX_QUERY_CHARS = 1_000


def _time(name: str, value: Any) -> Any:
    """A ``datetime`` or ``date`` as RFC 3339 text; anything else as it is."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(
                f"{name}: give a timezone-aware datetime (datetime.now(timezone.utc)), a date, "
                "or an RFC 3339 string; a naive datetime says no time zone")
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def _args(**values: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, tuple):
            value = list(value)
        out[name] = _time(name, value)
    return out


# Role names of the message shapes agent frameworks hold: ours and OpenAI's (`role`), and
# LangChain's message types (`type`: human, ai, system, tool, function; `chat` has a `role`).
_ROLES = {
    "user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
    "system": "system", "developer": "system", "tool": "tool", "function": "tool",
}


def _calls_text(calls: Any) -> str:
    """The tool calls of an assistant turn as text (``called name(arguments)``), from OpenAI's
    ``{"function": {"name", "arguments"}}`` or LangChain's ``{"name", "args"}``."""
    import json

    out = []
    for call in calls or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        name = function.get("name", "?")
        arguments = function.get("arguments", function.get("args", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        out.append(f"called {name}({arguments})")
    return "\n".join(out)


def _turn(message: Any, i: int) -> Dict[str, Any]:
    """One chat turn as ADD_MESSAGES takes it (``role``, ``content``, ``time``, ``id``), from
    a dict (ours, or OpenAI's chat message), a LangChain message, or a ``(role, content)``
    tuple (LangChain's shorthand). Text parts of a list content are joined; an assistant
    turn's tool calls are written out after its text; a part that is not text (an image) is
    refused, naming the turn: nothing is dropped silently. ``time`` (or, without it,
    ``created_at``) is when the turn was said; ``id`` is the message's own id."""
    source_id: Any = None
    if isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], str):
        (role, content), calls, time = message, None, None
    elif isinstance(message, Mapping):
        role, content = message.get("role", message.get("type")), message.get("content")
        calls, source_id = message.get("tool_calls"), message.get("id")
        time = message.get("time", message.get("created_at"))
    elif hasattr(message, "type") and hasattr(message, "content"):
        role = getattr(message, "role", None) if message.type == "chat" else message.type
        content, calls, time = message.content, getattr(message, "tool_calls", None), None
        source_id = getattr(message, "id", None)
        extra = getattr(message, "additional_kwargs", None) or {}
        time = extra.get("time", extra.get("created_at")) if isinstance(extra, Mapping) else None
    else:
        raise TypeError(
            f"messages[{i}]: give a dict with role and content, a LangChain message, or a "
            f"(role, content) tuple, not {type(message).__name__}")
    if isinstance(content, (list, tuple)):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(f"messages[{i}]: a content part of type {kind!r} is not text")
        content = "\n".join(texts)
    elif content is None:
        content = ""
    written_calls = _calls_text(calls)
    if written_calls:
        content = f"{content}\n{written_calls}" if content else written_calls
    turn = {"role": _ROLES.get(role, role) if isinstance(role, str) else role, "content": content}
    if time is not None:
        turn["time"] = _time(f"messages[{i}].time", time)
    if source_id is not None:
        turn["id"] = str(source_id)
    return turn


def _same(reply: Dict[str, Any]) -> Dict[str, Any]:
    return reply


def _memory(reply: Dict[str, Any]) -> Memory:
    return Memory.from_reply(reply["memory"])


def _memories(reply: Dict[str, Any]) -> List[Memory]:
    return [Memory.from_reply(m) for m in reply.get("memories", [])]


def _entity(kind: str) -> Callable[[Dict[str, Any]], Entity]:
    return lambda reply: Entity.from_reply(reply[kind])


def _entities(key: str) -> Callable[[Dict[str, Any]], List[Entity]]:
    return lambda reply: [Entity.from_reply(e) for e in reply.get(key, [])]


def _field(name: str) -> Callable[[Dict[str, Any]], Any]:
    return lambda reply: reply[name]


class Commands:
    """amberdb's commands as methods. Subclasses define ``_run(command, args, parse)``."""

    def _run(self, command: str, args: Dict[str, Any], parse: Callable[[Dict[str, Any]], Any]) -> Any:
        raise NotImplementedError

    # -- anything --------------------------------------------------------------------------
    def call(self, command: str, /, **args: Any) -> Dict[str, Any]:
        """Runs any protocol command by name (``"STORE_MEMORY"``, ``"SEARCH"``, ...) and returns
        its reply as a dict. ``call("HELP")`` lists the commands, ``call("HELP",
        command="SEARCH")`` one command's arguments."""
        return self._run(command, _args(**args), _same)

    # -- memories --------------------------------------------------------------------------
    def store(
        self,
        content: str,
        *,
        category: Optional[str] = None,
        tags: Optional[Sequence[str]] = None,
        user_id: Optional[str] = None,
        session_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        kind: Optional[str] = None,
        role: Optional[str] = None,
        valid_from: Optional[Time] = None,
        valid_to: Optional[Time] = None,
        skip_hooks: Optional[Sequence[str]] = None,
        force_hooks: Optional[Sequence[str]] = None,
        dedup_distance: Optional[float] = None,
        merge: Optional[str] = None,
    ) -> StoreResult:
        """Stores a memory (durable when this returns). The write hooks normalize its tags and
        category and dedup it: an exact duplicate is ``outcome="duplicate"`` with the
        ``memory_id`` of the memory that holds it (nothing stored, no exception); the same
        words restated are merged (``outcome="merged"``, and with ``merge="paraphrases"`` the
        fact guard's looser readings too); a new value of a fact supersedes the older one
        (``outcome="superseded"``)."""
        return self._run(
            "STORE_MEMORY",
            _args(content=content, category=category, tags=tags, user_id=user_id,
                  session_id=session_id, agent_id=agent_id, kind=kind, role=role,
                  valid_from=valid_from, valid_to=valid_to, skip_hooks=skip_hooks,
                  force_hooks=force_hooks, dedup_distance=dedup_distance, merge=merge),
            StoreResult.from_reply,
        )

    def search(
        self,
        query: str,
        *,
        limit: Optional[int] = None,
        user_id: Optional[str] = None,
        mode: Optional[str] = None,
        strategy: Optional[str] = None,
        threshold: Optional[float] = None,
        category: Optional[str] = None,
        tags: Optional[Sequence[str]] = None,
        kind: Optional[str] = None,
        session_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        created_after: Optional[Time] = None,
        created_before: Optional[Time] = None,
        valid_after: Optional[Time] = None,
        valid_before: Optional[Time] = None,
        as_of: Optional[Time] = None,
        offset: Optional[int] = None,
        max_tokens: Optional[int] = None,
        deduplicate: Optional[bool] = None,
        count_access: Optional[bool] = None,
        nprobe: Optional[int] = None,
        recall: Optional[float] = None,
        neighbours: Optional[int] = None,
        rerank: Optional[bool] = None,
        rerank_candidates: Optional[int] = None,
        group: Optional[str] = None,
        session_lend: Optional[float] = None,
        date_boost: Optional[float] = None,
        **more: Any,
    ) -> SearchResult:
        """Searches one user's memories by meaning and words (``mode``: ``hybrid`` by default,
        or ``vector``, ``keyword``, ``text``), filtered inside the scan; ``limit`` hits (10 by
        default), best first. ``valid_after`` / ``valid_before`` filter on when a memory is
        about (a chat turn's own ``time``), ``created_after`` / ``created_before`` on when it
        was stored. ``neighbours=1`` gives each hit in a session the turn before and the one
        after it (``Hit.context``). ``rerank=True`` rescores the first ``rerank_candidates``
        (20 by default) with the cross-encoder and orders the page by its score
        (``SearchResult.scored_by``; slower: docs/search.md, "Reranking"). ``group="session"``
        lists sessions: each hit is its session's best record, the others in
        ``Hit.session_turns``. ``session_lend`` (0.1 by default; 0 turns it off) lets a
        session's records lend each other score, ``date_boost`` (0.1 by default) raises records
        whose time falls in a date the query names ("last May", "on 13 October, 2023",
        relative to ``as_of``). A result that says the same as a higher one is folded into it:
        ``Hit.also``. ``more`` passes the rarer arguments (``fusion``, ``rrf_k``, ``fold``,
        ``vector_weight``, ...; docs/protocol.md)."""
        return self._run(
            "SEARCH_MEMORIES",
            _args(query=query, limit=limit, user_id=user_id, mode=mode, strategy=strategy,
                  threshold=threshold, category=category, tags=tags, kind=kind,
                  session_id=session_id, agent_id=agent_id, created_after=created_after,
                  created_before=created_before, valid_after=valid_after,
                  valid_before=valid_before, as_of=as_of, offset=offset,
                  max_tokens=max_tokens, deduplicate=deduplicate, count_access=count_access,
                  nprobe=nprobe, recall=recall, neighbours=neighbours, rerank=rerank,
                  rerank_candidates=rerank_candidates, group=group, session_lend=session_lend,
                  date_boost=date_boost, **more),
            SearchResult.from_reply,
        )

    def get(self, memory_id: int) -> Memory:
        """The memory with this id (counts as an access); :class:`amberdb.NotFound` if none."""
        return self._run("GET_BY_MEMORY_ID", _args(memory_id=memory_id), _memory)

    def update(
        self,
        memory_id: int,
        *,
        content: Optional[str] = None,
        category: Optional[str] = None,
        tags: Optional[Sequence[str]] = None,
        skip_hooks: Optional[Sequence[str]] = None,
        force_hooks: Optional[Sequence[str]] = None,
        dedup_distance: Optional[float] = None,
        merge: Optional[str] = None,
    ) -> Updated:
        """Changes a memory. New content makes a new record (``memory_id`` of the result)
        that supersedes the old one, which stays in its lineage."""
        return self._run(
            "UPDATE_MEMORY",
            _args(memory_id=memory_id, content=content, category=category, tags=tags,
                  skip_hooks=skip_hooks, force_hooks=force_hooks, dedup_distance=dedup_distance,
                  merge=merge),
            Updated.from_reply,
        )

    def delete(self, memory_id: int) -> Deleted:
        """Deletes a memory (its text leaves the store's files within a maintenance cycle)."""
        return self._run("DELETE_BY_MEMORY_ID", _args(memory_id=memory_id), Deleted.from_reply)

    def feedback(self, memory_id: int, feedback: Union[str, bool]) -> FeedbackResult:
        """Marks a memory ``"helpful"`` or ``"harmful"`` (the protocol's words; ``True`` /
        ``False`` mean the same). Ranking and retention read it."""
        if isinstance(feedback, bool):
            feedback = "helpful" if feedback else "harmful"
        elif not isinstance(feedback, str):
            raise TypeError(f"feedback: give \"helpful\", \"harmful\" or a bool, not {feedback!r}")
        return self._run(
            "FEEDBACK", _args(memory_id=memory_id, feedback=feedback), FeedbackResult.from_reply)

    def recent(
        self, *, user_id: Optional[str] = None, limit: Optional[int] = None,
        offset: Optional[int] = None, kind: Optional[str] = None,
        category: Optional[str] = None, tags: Optional[Sequence[str]] = None,
        session_id: Optional[str] = None, valid: Optional[bool] = None,
        archived: Optional[str] = None,
    ) -> List[Memory]:
        """A user's live memories, newest first: ``limit`` of them (10 by default, at most
        50) after the first ``offset``. Page through all of them with ``offset += limit``
        until a page is shorter than ``limit``, or use :meth:`all_memories`. Filters:
        ``kind``, ``category``, ``tags`` (any of them), ``session_id``, ``valid`` (``True``:
        what holds now; ``False``: what no longer or not yet holds) and ``archived``
        (``"live"``, the default; ``"archived"``; ``"all"``: an archived record's
        ``raw["archived"]`` is true)."""
        return self._run(
            "LIST_RECENT_MEMORIES",
            _args(user_id=user_id, limit=limit, offset=offset, kind=kind, category=category,
                  tags=tags, session_id=session_id, valid=valid, archived=archived),
            _memories)

    def lineage(self, memory_id: int) -> List[Memory]:
        """The archived records a memory merged or replaced."""
        return self._run(
            "LINEAGE", _args(memory_id=memory_id),
            lambda r: [Memory.from_reply(m) for m in r.get("lineage", [])],
        )

    def history(self, memory_id: int) -> History:
        """Every version of the fact a memory holds, the latest valid first (each a
        :class:`amberdb.Version` with its ``status``)."""
        return self._run("HISTORY", _args(memory_id=memory_id), History.from_reply)

    def memory_stats(self, *, user_id: Optional[str] = None) -> Dict[str, Any]:
        """vector-memory-mcp's statistics of one user's memories."""
        return self._run("GET_MEMORY_STATS", _args(user_id=user_id), _same)

    def clear_old_memories(
        self, *, user_id: Optional[str] = None, days_old: Optional[int] = None,
        max_to_keep: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Deletes memories older than ``days_old`` beyond the newest ``max_to_keep``."""
        return self._run(
            "CLEAR_OLD_MEMORIES", _args(user_id=user_id, days_old=days_old, max_to_keep=max_to_keep),
            _same,
        )

    # -- items: a JSON value under a key (docs/semantics.md, "Items") -------------------
    def put_item(
        self, key: str, value: Mapping[str, Any], text: str, *, user_id: Optional[str] = None,
    ) -> StoreResult:
        """Puts ``value`` (a JSON object, at most 256 KiB) under ``key`` for the user, found by
        the meaning of ``text``. A live item of the same key is replaced in the same commit
        (``replaced`` in the result); the key keeps its ``created_at``. No write hook
        (dedup, tags, category) touches an item."""
        return self._run(
            "PUT_ITEM", _args(user_id=user_id, key=key, value=dict(value), text=text),
            StoreResult.from_reply,
        )

    def get_item(self, key: str, *, user_id: Optional[str] = None) -> Optional[Memory]:
        """The user's item of ``key`` (``.value`` holds the object), or ``None``. Not an access:
        nothing is written."""
        return self._run(
            "GET_ITEM", _args(user_id=user_id, key=key),
            lambda r: Memory.from_reply(r["item"]) if r.get("found") else None,
        )

    def delete_item(self, key: str, *, user_id: Optional[str] = None) -> bool:
        """Deletes the user's item of ``key``; ``False`` when there was none."""
        return self._run("DELETE_ITEM", _args(user_id=user_id, key=key), _field("deleted"))

    def list_items(
        self, *, user_id: Optional[str] = None, prefix: Optional[str] = None,
        offset: Optional[int] = None, limit: Optional[int] = None,
    ) -> List[Memory]:
        """The user's items whose key starts with ``prefix``, in key order (``limit`` at most
        50, 10 by default)."""
        return self._run(
            "LIST_ITEMS", _args(user_id=user_id, prefix=prefix, offset=offset, limit=limit),
            lambda r: [Memory.from_reply(m) for m in r.get("items", [])],
        )

    def item_users(self) -> Dict[str, int]:
        """Every user that holds items, with how many."""
        return self._run(
            "LIST_ITEM_USERS", {}, lambda r: {u["user_id"]: u["items"] for u in r.get("users", [])},
        )

    # -- users, agents, sessions, and the query ---------------------------------------------
    def create_user(self, user_id: str, *, name: Optional[str] = None) -> Entity:
        """Creates a user (``name`` defaults to the id); :class:`amberdb.AlreadyExists` if it exists."""
        return self._run("CREATE_USER", _args(user_id=user_id, name=name), _entity("user"))

    def create_agent(self, agent_id: str, *, user_id: Optional[str] = None, name: Optional[str] = None) -> Entity:
        """Creates an agent of a user (``name`` defaults to the id)."""
        return self._run("CREATE_AGENT", _args(user_id=user_id, agent_id=agent_id, name=name), _entity("agent"))

    def create_session(
        self, session_id: str, *, user_id: Optional[str] = None, agent_id: Optional[str] = None,
        name: Optional[str] = None,
    ) -> Entity:
        """Creates a session of a user, optionally of one of its agents (``add_messages`` creates one on its first turns too)."""
        return self._run(
            "CREATE_SESSION", _args(user_id=user_id, session_id=session_id, agent_id=agent_id, name=name),
            _entity("session"),
        )

    def get_user(self, user_id: str) -> Entity:
        """The user; :class:`amberdb.NotFound` if there is none."""
        return self._run("GET_USER", _args(user_id=user_id), _entity("user"))

    def get_agent(self, agent_id: str, *, user_id: Optional[str] = None) -> Entity:
        """The user's agent; :class:`amberdb.NotFound` if there is none (also for another user's)."""
        return self._run("GET_AGENT", _args(user_id=user_id, agent_id=agent_id), _entity("agent"))

    def get_session(self, session_id: str, *, user_id: Optional[str] = None) -> Entity:
        """The user's session; :class:`amberdb.NotFound` if there is none (also for another user's)."""
        return self._run("GET_SESSION", _args(user_id=user_id, session_id=session_id), _entity("session"))

    def list_users(self) -> List[Entity]:
        """Every user, in id order."""
        return self._run("LIST_USERS", {}, _entities("users"))

    def list_agents(self, *, user_id: Optional[str] = None) -> List[Entity]:
        """The user's agents, in id order."""
        return self._run("LIST_AGENTS", _args(user_id=user_id), _entities("agents"))

    def list_sessions(self, *, user_id: Optional[str] = None) -> List[Entity]:
        """The user's sessions, in id order."""
        return self._run("LIST_SESSIONS", _args(user_id=user_id), _entities("sessions"))

    def delete_user(self, user_id: str) -> Dict[str, Any]:
        """Deletes a user and everything of it, in one commit."""
        return self._run("DELETE_USER", _args(user_id=user_id), _same)

    def delete_agent(self, agent_id: str, *, user_id: Optional[str] = None) -> Dict[str, Any]:
        """Deletes an agent and every record of it, in one commit."""
        return self._run("DELETE_AGENT", _args(user_id=user_id, agent_id=agent_id), _same)

    def delete_session(self, session_id: str, *, user_id: Optional[str] = None) -> Dict[str, Any]:
        """Deletes a session and every turn of it, in one commit."""
        return self._run("DELETE_SESSION", _args(user_id=user_id, session_id=session_id), _same)

    def add_messages(
        self, session_id: str, messages: Iterable[Any], *, user_id: Optional[str] = None,
        skip_held: Optional[bool] = None,
    ) -> AddedMessages:
        """Stores chat turns as one commit and returns the ids of those stored (a list, with
        ``skipped``: the turns the session already held); the session (and the user) is
        created with the first turns. A turn is ``{"role": ..., "content": ..., "time": ...,
        "id": ...}`` (``role`` user, assistant, system or tool; ``time`` or ``created_at``
        optional: when it was said, an aware ``datetime``, a ``date`` or RFC 3339 text, its
        ``valid_from``; ``id`` optional: the message's own id), a ``(role, content)`` tuple,
        an OpenAI chat message (roles ``developer`` and ``function`` too, ``content`` as text
        parts, an assistant's ``tool_calls`` written out as ``called name(arguments)``), or a
        LangChain message (``HumanMessage``, ``AIMessage`` with its tool calls,
        ``SystemMessage``, ``ToolMessage``; its ``id`` kept).

        ``add_messages(thread_id, state["messages"])`` works as it is, on every turn: a turn
        the session holds is not stored again (its id is held, or the list begins with the
        whole session and the turn is at a position it holds with the same role and content;
        docs/python.md, "Chat turns"). ``skip_held=False`` stores every turn given."""
        turns = [_turn(m, i) for i, m in enumerate(messages)]
        return self._run(
            "ADD_MESSAGES",
            _args(user_id=user_id, session_id=session_id, messages=turns, skip_held=skip_held),
            AddedMessages.from_reply,
        )

    def add_knowledge(self, items: Iterable[str], *, user_id: Optional[str] = None) -> KnowledgeResult:
        """Stores user-level facts through the write hooks, item by item (a fact stored twice
        is one): ``results[i]`` is item ``i``'s :class:`amberdb.StoreResult` or the error it
        failed with."""
        return self._run(
            "ADD_KNOWLEDGE", _args(user_id=user_id, items=list(items)), KnowledgeResult.from_reply)

    def query(
        self, query: str, *, user_id: Optional[str] = None, session_id: Optional[str] = None,
        agent_id: Optional[str] = None, top_k: Optional[int] = None, store_type: Optional[str] = None,
        include_messages: Optional[bool] = None, include_knowledge: Optional[bool] = None,
        max_tokens: Optional[int] = None, rerank: Optional[bool] = None,
        rerank_candidates: Optional[int] = None,
    ) -> Dict[str, Any]:
        """MemFuse's query over memories, messages and knowledge (its envelope as the reply);
        ``rerank`` as :meth:`search`'s."""
        return self._run(
            "QUERY",
            _args(query=query, user_id=user_id, session_id=session_id, agent_id=agent_id,
                  top_k=top_k, store_type=store_type, include_messages=include_messages,
                  include_knowledge=include_knowledge, max_tokens=max_tokens, rerank=rerank,
                  rerank_candidates=rerank_candidates),
            _same,
        )

    # -- tags and snapshots -----------------------------------------------------------------
    def tags(self, *, user_id: Optional[str] = None) -> List[str]:
        """Every tag in use."""
        return self._run("GET_UNIQUE_TAGS", _args(user_id=user_id), _field("tags"))

    def canonical_tags(self, *, user_id: Optional[str] = None) -> List[str]:
        """The user's canonical tags: the forms new tags are normalized to."""
        return self._run("GET_CANONICAL_TAGS", _args(user_id=user_id), _field("tags"))

    def tag_frequencies(self, *, user_id: Optional[str] = None) -> Dict[str, int]:
        """How many live memories carry each tag."""
        return self._run("GET_TAG_FREQUENCIES", _args(user_id=user_id), _field("frequencies"))

    def tag_weights(self, *, user_id: Optional[str] = None) -> Dict[str, float]:
        """Each tag's weight in ranking (rarer tags weigh more)."""
        return self._run("GET_TAG_WEIGHTS", _args(user_id=user_id), _field("weights"))

    def tag_normalize_preview(
        self, *, user_id: Optional[str] = None, threshold: Optional[float] = None,
        max_changes: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Tag renames that normalization would make (``preview_id`` applies exactly these), without writing."""
        return self._run(
            "TAG_NORMALIZE_PREVIEW", _args(user_id=user_id, threshold=threshold, max_changes=max_changes),
            _same,
        )

    def tag_normalize_apply(
        self, preview_id: str, snapshot_id: str, *, user_id: Optional[str] = None,
        threshold: Optional[float] = None, max_changes: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Applies a preview of tag renames; ``snapshot_id`` (from :meth:`snapshot_create`) is what :meth:`snapshot_restore` undoes it with."""
        return self._run(
            "TAG_NORMALIZE_APPLY",
            _args(user_id=user_id, preview_id=preview_id, snapshot_id=snapshot_id,
                  threshold=threshold, max_changes=max_changes),
            _same,
        )

    def snapshot_create(self, *, user_id: Optional[str] = None, description: Optional[str] = None) -> Dict[str, Any]:
        """Snapshots a user's tags and categories (what tag normalization may change)."""
        return self._run("SNAPSHOT_CREATE", _args(user_id=user_id, description=description), _same)

    def snapshot_restore(self, snapshot_id: str, *, user_id: Optional[str] = None) -> Dict[str, Any]:
        """Puts a user's tags and categories back as a snapshot held them."""
        return self._run("SNAPSHOT_RESTORE", _args(user_id=user_id, snapshot_id=snapshot_id), _same)

    # -- compaction and maintenance ---------------------------------------------------------
    def compact_preview(self, *, user_id: Optional[str] = None, distance: Optional[float] = None) -> Dict[str, Any]:
        """Groups of near-duplicate memories a merge would fold (``preview_id`` applies it)."""
        return self._run("COMPACT_PREVIEW", _args(user_id=user_id, distance=distance), _same)

    def compact_apply(
        self, preview_id: str, *, user_id: Optional[str] = None, distance: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Merges the near-duplicate groups the preview listed, in one step (:meth:`compact_undo` splits one back)."""
        return self._run(
            "COMPACT_APPLY", _args(user_id=user_id, distance=distance, preview_id=preview_id), _same
        )

    def compact_undo(self, memory_id: int) -> Dict[str, Any]:
        """Splits a merged memory back into its sources."""
        return self._run("COMPACT_UNDO", _args(memory_id=memory_id), _same)

    def mend_preview(self, *, user_id: Optional[str] = None) -> Dict[str, Any]:
        """Archived memories older, looser dedup rules put away that this build's rules would
        keep live (``restore``, each with why), without writing; ``preview_id`` applies it."""
        return self._run("MEND_PREVIEW", _args(user_id=user_id), _same)

    def mend_apply(self, preview_id: str, *, user_id: Optional[str] = None) -> Dict[str, Any]:
        """Brings back what the preview listed, in one step (``restored``: pairs of the archived
        id and its new live copy)."""
        return self._run("MEND_APPLY", _args(user_id=user_id, preview_id=preview_id), _same)

    def mend_undo(self, memory_id: int) -> Dict[str, Any]:
        """Archives one copy mend brought back again."""
        return self._run("MEND_UNDO", _args(memory_id=memory_id), _same)

    def stats(self) -> Dict[str, Any]:
        """The store's counters (STATS)."""
        return self._run("STATS", {}, _same)

    def purge(self) -> Dict[str, Any]:
        """Makes every memory deleted so far leave the store's files now."""
        return self._run("PURGE", {}, _field("purged"))

    def backup(self, dest: str) -> Dict[str, Any]:
        """Copies the store, as it is at one commit, into ``dest`` (a new or empty directory,
        absolute) while reads and writes go on, and checks the copy."""
        return self._run("BACKUP", _args(dest=dest), _field("backup"))

    def export(self, dest: str) -> Exported:
        """Writes everything into the new file ``dest`` (absolute; for a :class:`Client`, on
        the server's machine) while reads and writes go on: every user, agent and session,
        and every record, live and archived, with its id, lineage, validity, times and
        feedback, as one state of the store (JSON Lines, docs/semantics.md, "Export and
        import"). A file that exists is refused."""
        return self._run("EXPORT", _args(dest=dest), Exported.from_reply)

    def import_file(self, source: str, partition: Optional[int] = None) -> Imported:
        """Reads the file ``source`` (absolute; for a :class:`Client`, on the server's
        machine): an export (:meth:`export`, ``amberdb export``), JSON Lines of memories, or
        mem0's / agent-memory-server's JSON. An export's ids are kept when this store never
        gave them out (a new store): ``history``, ``lineage`` and the ids you kept read as
        they did; otherwise each record gets a new id, lineage follows, and ``renumbered``
        says which. A record already here is not stored twice. ``partition`` is for a
        cluster node (``amberdb cluster import`` sends it); one node refuses it."""
        return self._run("IMPORT", _args(source=source, partition=partition), Imported.from_reply)

    def all_memories(self, *, user_id: Optional[str] = None, page: int = 50) -> Iterable[Memory]:
        """Every live memory of a user, newest first, fetched ``page`` at a time with
        :meth:`recent` (a generator; memories stored meanwhile may be missed)."""
        offset = 0
        while True:
            got = self.recent(user_id=user_id, limit=page, offset=offset)
            yield from got
            if len(got) < page:
                return
            offset += page
