"""Type stub of amberdb.client, written by python/tools/client_stub.py from amberdb/_api.py:
do not edit."""
import asyncio
from typing import (
    Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
    Union,
)

from ._api import Time
from ._types import (
    AddedMessages, Deleted, Entity, Exported, FeedbackResult, History, Imported,
    KnowledgeResult, Memory, SearchResult, StoreResult, Updated,
)

DEFAULT_HOST: str
DEFAULT_PORT: int

class Pending:
    def result(self) -> Any: ...
    @property
    def error(self) -> Optional[BaseException]: ...

class Client:
    def __init__(self, host: str = ..., port: int = ..., *, token: Optional[str] = ...,
                 timeout: Optional[float] = ..., seeds: Optional[List[Any]] = ...,
                 failover_wait: float = ...) -> None: ...
    def auth(self, token: str) -> Optional[str]: ...
    def ping(self) -> bool: ...
    def written_seq(self, partition: int) -> Optional[int]: ...
    def pipeline(self) -> "Pipeline": ...
    def close(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, *exc: Any) -> None: ...
    def all_memories(self, *, user_id: Optional[str] = ..., page: int = ...) -> Iterator[Memory]: ...
    def add_knowledge(self, items: Iterable[str], *, user_id: Optional[str] = ...) -> KnowledgeResult:
        """Stores user-level facts through the write hooks, item by item (a fact stored twice
        is one): ``results[i]`` is item ``i``'s :class:`amberdb.StoreResult` or the error it
        failed with."""
    def add_messages(self, session_id: str, messages: Iterable[Any], *, user_id: Optional[str] = ..., skip_held: Optional[bool] = ...) -> AddedMessages:
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
    def backup(self, dest: str) -> Dict[str, Any]:
        """Copies the store, as it is at one commit, into ``dest`` (a new or empty directory,
        absolute) while reads and writes go on, and checks the copy."""
    def call(self, command: str, **args: Any) -> Dict[str, Any]:
        """Runs any protocol command by name (``"STORE_MEMORY"``, ``"SEARCH"``, ...) and returns
        its reply as a dict. ``call("HELP")`` lists the commands, ``call("HELP",
        command="SEARCH")`` one command's arguments."""
    def canonical_tags(self, *, user_id: Optional[str] = ...) -> List[str]:
        """The user's canonical tags: the forms new tags are normalized to."""
    def clear_old_memories(self, *, user_id: Optional[str] = ..., days_old: Optional[int] = ..., max_to_keep: Optional[int] = ...) -> Dict[str, Any]:
        """Deletes memories older than ``days_old`` beyond the newest ``max_to_keep``."""
    def compact_apply(self, preview_id: str, *, user_id: Optional[str] = ..., distance: Optional[float] = ...) -> Dict[str, Any]:
        """Merges the near-duplicate groups the preview listed, in one step (:meth:`compact_undo` splits one back)."""
    def compact_preview(self, *, user_id: Optional[str] = ..., distance: Optional[float] = ...) -> Dict[str, Any]:
        """Groups of near-duplicate memories a merge would fold (``preview_id`` applies it)."""
    def compact_undo(self, memory_id: int) -> Dict[str, Any]:
        """Splits a merged memory back into its sources."""
    def create_agent(self, agent_id: str, *, user_id: Optional[str] = ..., name: Optional[str] = ...) -> Entity:
        """Creates an agent of a user (``name`` defaults to the id)."""
    def create_session(self, session_id: str, *, user_id: Optional[str] = ..., agent_id: Optional[str] = ..., name: Optional[str] = ...) -> Entity:
        """Creates a session of a user, optionally of one of its agents (``add_messages`` creates one on its first turns too)."""
    def create_user(self, user_id: str, *, name: Optional[str] = ...) -> Entity:
        """Creates a user (``name`` defaults to the id); :class:`amberdb.AlreadyExists` if it exists."""
    def delete(self, memory_id: int) -> Deleted:
        """Deletes a memory (its text leaves the store's files within a maintenance cycle)."""
    def delete_agent(self, agent_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        """Deletes an agent and every record of it, in one commit."""
    def delete_item(self, key: str, *, user_id: Optional[str] = ...) -> bool:
        """Deletes the user's item of ``key``; ``False`` when there was none."""
    def delete_session(self, session_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        """Deletes a session and every turn of it, in one commit."""
    def delete_user(self, user_id: str) -> Dict[str, Any]:
        """Deletes a user and everything of it, in one commit."""
    def export(self, dest: str) -> Exported:
        """Writes everything into the new file ``dest`` (absolute; for a :class:`Client`, on
        the server's machine) while reads and writes go on: every user, agent and session,
        and every record, live and archived, with its id, lineage, validity, times and
        feedback, as one state of the store (JSON Lines, docs/semantics.md, "Export and
        import"). A file that exists is refused."""
    def feedback(self, memory_id: int, feedback: Union[str, bool]) -> FeedbackResult:
        """Marks a memory ``"helpful"`` or ``"harmful"`` (the protocol's words; ``True`` /
        ``False`` mean the same). Ranking and retention read it."""
    def get(self, memory_id: int) -> Memory:
        """The memory with this id (counts as an access); :class:`amberdb.NotFound` if none."""
    def get_agent(self, agent_id: str, *, user_id: Optional[str] = ...) -> Entity:
        """The user's agent; :class:`amberdb.NotFound` if there is none (also for another user's)."""
    def get_item(self, key: str, *, user_id: Optional[str] = ...) -> Optional[Memory]:
        """The user's item of ``key`` (``.value`` holds the object), or ``None``. Not an access:
        nothing is written."""
    def get_session(self, session_id: str, *, user_id: Optional[str] = ...) -> Entity:
        """The user's session; :class:`amberdb.NotFound` if there is none (also for another user's)."""
    def get_user(self, user_id: str) -> Entity:
        """The user; :class:`amberdb.NotFound` if there is none."""
    def history(self, memory_id: int) -> History:
        """Every version of the fact a memory holds, the latest valid first (each a
        :class:`amberdb.Version` with its ``status``)."""
    def import_file(self, source: str, partition: Optional[int] = ...) -> Imported:
        """Reads the file ``source`` (absolute; for a :class:`Client`, on the server's
        machine): an export (:meth:`export`, ``amberdb export``), JSON Lines of memories, or
        mem0's / agent-memory-server's JSON. An export's ids are kept when this store never
        gave them out (a new store): ``history``, ``lineage`` and the ids you kept read as
        they did; otherwise each record gets a new id, lineage follows, and ``renumbered``
        says which. A record already here is not stored twice. ``partition`` is for a
        cluster node (``amberdb cluster import`` sends it); one node refuses it."""
    def item_users(self) -> Dict[str, int]:
        """Every user that holds items, with how many."""
    def lineage(self, memory_id: int) -> List[Memory]:
        """The archived records a memory merged or replaced."""
    def list_agents(self, *, user_id: Optional[str] = ...) -> List[Entity]:
        """The user's agents, in id order."""
    def list_items(self, *, user_id: Optional[str] = ..., prefix: Optional[str] = ..., offset: Optional[int] = ..., limit: Optional[int] = ...) -> List[Memory]:
        """The user's items whose key starts with ``prefix``, in key order (``limit`` at most
        50, 10 by default)."""
    def list_sessions(self, *, user_id: Optional[str] = ...) -> List[Entity]:
        """The user's sessions, in id order."""
    def list_users(self) -> List[Entity]:
        """Every user, in id order."""
    def memory_stats(self, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        """vector-memory-mcp's statistics of one user's memories."""
    def mend_apply(self, preview_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        """Brings back what the preview listed, in one step (``restored``: pairs of the archived
        id and its new live copy)."""
    def mend_preview(self, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        """Archived memories older, looser dedup rules put away that this build's rules would
        keep live (``restore``, each with why), without writing; ``preview_id`` applies it."""
    def mend_undo(self, memory_id: int) -> Dict[str, Any]:
        """Archives one copy mend brought back again."""
    def purge(self) -> Dict[str, Any]:
        """Makes every memory deleted so far leave the store's files now."""
    def put_item(self, key: str, value: Mapping[str, Any], text: str, *, user_id: Optional[str] = ...) -> StoreResult:
        """Puts ``value`` (a JSON object, at most 256 KiB) under ``key`` for the user, found by
        the meaning of ``text``. A live item of the same key is replaced in the same commit
        (``replaced`` in the result); the key keeps its ``created_at``. No write hook
        (dedup, tags, category) touches an item."""
    def query(self, query: str, *, user_id: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., top_k: Optional[int] = ..., store_type: Optional[str] = ..., include_messages: Optional[bool] = ..., include_knowledge: Optional[bool] = ..., max_tokens: Optional[int] = ..., rerank: Optional[bool] = ..., rerank_candidates: Optional[int] = ...) -> Dict[str, Any]:
        """MemFuse's query over memories, messages and knowledge (its envelope as the reply);
        ``rerank`` as :meth:`search`'s."""
    def recent(self, *, user_id: Optional[str] = ..., limit: Optional[int] = ..., offset: Optional[int] = ..., kind: Optional[str] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., session_id: Optional[str] = ..., valid: Optional[bool] = ..., archived: Optional[str] = ...) -> List[Memory]:
        """A user's live memories, newest first: ``limit`` of them (10 by default, at most
        50) after the first ``offset``. Page through all of them with ``offset += limit``
        until a page is shorter than ``limit``, or use :meth:`all_memories`. Filters:
        ``kind``, ``category``, ``tags`` (any of them), ``session_id``, ``valid`` (``True``:
        what holds now; ``False``: what no longer or not yet holds) and ``archived``
        (``"live"``, the default; ``"archived"``; ``"all"``: an archived record's
        ``raw["archived"]`` is true)."""
    def search(self, query: str, *, limit: Optional[int] = ..., user_id: Optional[str] = ..., mode: Optional[str] = ..., strategy: Optional[str] = ..., threshold: Optional[float] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., kind: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., created_after: Optional[Time] = ..., created_before: Optional[Time] = ..., valid_after: Optional[Time] = ..., valid_before: Optional[Time] = ..., as_of: Optional[Time] = ..., offset: Optional[int] = ..., max_tokens: Optional[int] = ..., deduplicate: Optional[bool] = ..., count_access: Optional[bool] = ..., nprobe: Optional[int] = ..., recall: Optional[float] = ..., neighbours: Optional[int] = ..., rerank: Optional[bool] = ..., rerank_candidates: Optional[int] = ..., group: Optional[str] = ..., session_lend: Optional[float] = ..., date_boost: Optional[float] = ..., **more: Any) -> SearchResult:
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
    def snapshot_create(self, *, user_id: Optional[str] = ..., description: Optional[str] = ...) -> Dict[str, Any]:
        """Snapshots a user's tags and categories (what tag normalization may change)."""
    def snapshot_restore(self, snapshot_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        """Puts a user's tags and categories back as a snapshot held them."""
    def stats(self) -> Dict[str, Any]:
        """The store's counters (STATS)."""
    def store(self, content: str, *, category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., user_id: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., kind: Optional[str] = ..., role: Optional[str] = ..., valid_from: Optional[Time] = ..., valid_to: Optional[Time] = ..., skip_hooks: Optional[Sequence[str]] = ..., force_hooks: Optional[Sequence[str]] = ..., dedup_distance: Optional[float] = ..., merge: Optional[str] = ...) -> StoreResult:
        """Stores a memory (durable when this returns). The write hooks normalize its tags and
        category and dedup it: an exact duplicate is ``outcome="duplicate"`` with the
        ``memory_id`` of the memory that holds it (nothing stored, no exception); the same
        words restated are merged (``outcome="merged"``, and with ``merge="paraphrases"`` the
        fact guard's looser readings too); a new value of a fact supersedes the older one
        (``outcome="superseded"``)."""
    def tag_frequencies(self, *, user_id: Optional[str] = ...) -> Dict[str, int]:
        """How many live memories carry each tag."""
    def tag_normalize_apply(self, preview_id: str, snapshot_id: str, *, user_id: Optional[str] = ..., threshold: Optional[float] = ..., max_changes: Optional[int] = ...) -> Dict[str, Any]:
        """Applies a preview of tag renames; ``snapshot_id`` (from :meth:`snapshot_create`) is what :meth:`snapshot_restore` undoes it with."""
    def tag_normalize_preview(self, *, user_id: Optional[str] = ..., threshold: Optional[float] = ..., max_changes: Optional[int] = ...) -> Dict[str, Any]:
        """Tag renames that normalization would make (``preview_id`` applies exactly these), without writing."""
    def tag_weights(self, *, user_id: Optional[str] = ...) -> Dict[str, float]:
        """Each tag's weight in ranking (rarer tags weigh more)."""
    def tags(self, *, user_id: Optional[str] = ...) -> List[str]:
        """Every tag in use."""
    def update(self, memory_id: int, *, content: Optional[str] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., skip_hooks: Optional[Sequence[str]] = ..., force_hooks: Optional[Sequence[str]] = ..., dedup_distance: Optional[float] = ..., merge: Optional[str] = ...) -> Updated:
        """Changes a memory. New content makes a new record (``memory_id`` of the result)
        that supersedes the old one, which stays in its lineage."""

class Pipeline:
    CHUNK: int
    def execute(self) -> List[Pending]: ...
    def __enter__(self) -> "Pipeline": ...
    def __exit__(self, exc_type: Any, *exc: Any) -> None: ...
    def add_knowledge(self, items: Iterable[str], *, user_id: Optional[str] = ...) -> Pending:
        ...
    def add_messages(self, session_id: str, messages: Iterable[Any], *, user_id: Optional[str] = ..., skip_held: Optional[bool] = ...) -> Pending:
        ...
    def backup(self, dest: str) -> Pending:
        ...
    def call(self, command: str, **args: Any) -> Pending:
        ...
    def canonical_tags(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def clear_old_memories(self, *, user_id: Optional[str] = ..., days_old: Optional[int] = ..., max_to_keep: Optional[int] = ...) -> Pending:
        ...
    def compact_apply(self, preview_id: str, *, user_id: Optional[str] = ..., distance: Optional[float] = ...) -> Pending:
        ...
    def compact_preview(self, *, user_id: Optional[str] = ..., distance: Optional[float] = ...) -> Pending:
        ...
    def compact_undo(self, memory_id: int) -> Pending:
        ...
    def create_agent(self, agent_id: str, *, user_id: Optional[str] = ..., name: Optional[str] = ...) -> Pending:
        ...
    def create_session(self, session_id: str, *, user_id: Optional[str] = ..., agent_id: Optional[str] = ..., name: Optional[str] = ...) -> Pending:
        ...
    def create_user(self, user_id: str, *, name: Optional[str] = ...) -> Pending:
        ...
    def delete(self, memory_id: int) -> Pending:
        ...
    def delete_agent(self, agent_id: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def delete_item(self, key: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def delete_session(self, session_id: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def delete_user(self, user_id: str) -> Pending:
        ...
    def export(self, dest: str) -> Pending:
        ...
    def feedback(self, memory_id: int, feedback: Union[str, bool]) -> Pending:
        ...
    def get(self, memory_id: int) -> Pending:
        ...
    def get_agent(self, agent_id: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def get_item(self, key: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def get_session(self, session_id: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def get_user(self, user_id: str) -> Pending:
        ...
    def history(self, memory_id: int) -> Pending:
        ...
    def import_file(self, source: str, partition: Optional[int] = ...) -> Pending:
        ...
    def item_users(self) -> Pending:
        ...
    def lineage(self, memory_id: int) -> Pending:
        ...
    def list_agents(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def list_items(self, *, user_id: Optional[str] = ..., prefix: Optional[str] = ..., offset: Optional[int] = ..., limit: Optional[int] = ...) -> Pending:
        ...
    def list_sessions(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def list_users(self) -> Pending:
        ...
    def memory_stats(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def mend_apply(self, preview_id: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def mend_preview(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def mend_undo(self, memory_id: int) -> Pending:
        ...
    def purge(self) -> Pending:
        ...
    def put_item(self, key: str, value: Mapping[str, Any], text: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def query(self, query: str, *, user_id: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., top_k: Optional[int] = ..., store_type: Optional[str] = ..., include_messages: Optional[bool] = ..., include_knowledge: Optional[bool] = ..., max_tokens: Optional[int] = ..., rerank: Optional[bool] = ..., rerank_candidates: Optional[int] = ...) -> Pending:
        ...
    def recent(self, *, user_id: Optional[str] = ..., limit: Optional[int] = ..., offset: Optional[int] = ..., kind: Optional[str] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., session_id: Optional[str] = ..., valid: Optional[bool] = ..., archived: Optional[str] = ...) -> Pending:
        ...
    def search(self, query: str, *, limit: Optional[int] = ..., user_id: Optional[str] = ..., mode: Optional[str] = ..., strategy: Optional[str] = ..., threshold: Optional[float] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., kind: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., created_after: Optional[Time] = ..., created_before: Optional[Time] = ..., valid_after: Optional[Time] = ..., valid_before: Optional[Time] = ..., as_of: Optional[Time] = ..., offset: Optional[int] = ..., max_tokens: Optional[int] = ..., deduplicate: Optional[bool] = ..., count_access: Optional[bool] = ..., nprobe: Optional[int] = ..., recall: Optional[float] = ..., neighbours: Optional[int] = ..., rerank: Optional[bool] = ..., rerank_candidates: Optional[int] = ..., group: Optional[str] = ..., session_lend: Optional[float] = ..., date_boost: Optional[float] = ..., **more: Any) -> Pending:
        ...
    def snapshot_create(self, *, user_id: Optional[str] = ..., description: Optional[str] = ...) -> Pending:
        ...
    def snapshot_restore(self, snapshot_id: str, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def stats(self) -> Pending:
        ...
    def store(self, content: str, *, category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., user_id: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., kind: Optional[str] = ..., role: Optional[str] = ..., valid_from: Optional[Time] = ..., valid_to: Optional[Time] = ..., skip_hooks: Optional[Sequence[str]] = ..., force_hooks: Optional[Sequence[str]] = ..., dedup_distance: Optional[float] = ..., merge: Optional[str] = ...) -> Pending:
        ...
    def tag_frequencies(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def tag_normalize_apply(self, preview_id: str, snapshot_id: str, *, user_id: Optional[str] = ..., threshold: Optional[float] = ..., max_changes: Optional[int] = ...) -> Pending:
        ...
    def tag_normalize_preview(self, *, user_id: Optional[str] = ..., threshold: Optional[float] = ..., max_changes: Optional[int] = ...) -> Pending:
        ...
    def tag_weights(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def tags(self, *, user_id: Optional[str] = ...) -> Pending:
        ...
    def update(self, memory_id: int, *, content: Optional[str] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., skip_hooks: Optional[Sequence[str]] = ..., force_hooks: Optional[Sequence[str]] = ..., dedup_distance: Optional[float] = ..., merge: Optional[str] = ...) -> Pending:
        ...

class AsyncClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None: ...
    @classmethod
    async def connect(cls, host: str = ..., port: int = ..., *,
                      token: Optional[str] = ..., timeout: Optional[float] = ...,
                      seeds: Optional[List[Any]] = ...,
                      failover_wait: float = ...) -> "AsyncClient": ...
    async def auth(self, token: str) -> Optional[str]: ...
    async def ping(self) -> bool: ...
    def written_seq(self, partition: int) -> Optional[int]: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> "AsyncClient": ...
    async def __aexit__(self, *exc: Any) -> None: ...
    def all_memories(self, *, user_id: Optional[str] = ..., page: int = ...) -> AsyncIterator[Memory]: ...
    async def add_knowledge(self, items: Iterable[str], *, user_id: Optional[str] = ...) -> KnowledgeResult:
        ...
    async def add_messages(self, session_id: str, messages: Iterable[Any], *, user_id: Optional[str] = ..., skip_held: Optional[bool] = ...) -> AddedMessages:
        ...
    async def backup(self, dest: str) -> Dict[str, Any]:
        ...
    async def call(self, command: str, **args: Any) -> Dict[str, Any]:
        ...
    async def canonical_tags(self, *, user_id: Optional[str] = ...) -> List[str]:
        ...
    async def clear_old_memories(self, *, user_id: Optional[str] = ..., days_old: Optional[int] = ..., max_to_keep: Optional[int] = ...) -> Dict[str, Any]:
        ...
    async def compact_apply(self, preview_id: str, *, user_id: Optional[str] = ..., distance: Optional[float] = ...) -> Dict[str, Any]:
        ...
    async def compact_preview(self, *, user_id: Optional[str] = ..., distance: Optional[float] = ...) -> Dict[str, Any]:
        ...
    async def compact_undo(self, memory_id: int) -> Dict[str, Any]:
        ...
    async def create_agent(self, agent_id: str, *, user_id: Optional[str] = ..., name: Optional[str] = ...) -> Entity:
        ...
    async def create_session(self, session_id: str, *, user_id: Optional[str] = ..., agent_id: Optional[str] = ..., name: Optional[str] = ...) -> Entity:
        ...
    async def create_user(self, user_id: str, *, name: Optional[str] = ...) -> Entity:
        ...
    async def delete(self, memory_id: int) -> Deleted:
        ...
    async def delete_agent(self, agent_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def delete_item(self, key: str, *, user_id: Optional[str] = ...) -> bool:
        ...
    async def delete_session(self, session_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def delete_user(self, user_id: str) -> Dict[str, Any]:
        ...
    async def export(self, dest: str) -> Exported:
        ...
    async def feedback(self, memory_id: int, feedback: Union[str, bool]) -> FeedbackResult:
        ...
    async def get(self, memory_id: int) -> Memory:
        ...
    async def get_agent(self, agent_id: str, *, user_id: Optional[str] = ...) -> Entity:
        ...
    async def get_item(self, key: str, *, user_id: Optional[str] = ...) -> Optional[Memory]:
        ...
    async def get_session(self, session_id: str, *, user_id: Optional[str] = ...) -> Entity:
        ...
    async def get_user(self, user_id: str) -> Entity:
        ...
    async def history(self, memory_id: int) -> History:
        ...
    async def import_file(self, source: str, partition: Optional[int] = ...) -> Imported:
        ...
    async def item_users(self) -> Dict[str, int]:
        ...
    async def lineage(self, memory_id: int) -> List[Memory]:
        ...
    async def list_agents(self, *, user_id: Optional[str] = ...) -> List[Entity]:
        ...
    async def list_items(self, *, user_id: Optional[str] = ..., prefix: Optional[str] = ..., offset: Optional[int] = ..., limit: Optional[int] = ...) -> List[Memory]:
        ...
    async def list_sessions(self, *, user_id: Optional[str] = ...) -> List[Entity]:
        ...
    async def list_users(self) -> List[Entity]:
        ...
    async def memory_stats(self, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def mend_apply(self, preview_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def mend_preview(self, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def mend_undo(self, memory_id: int) -> Dict[str, Any]:
        ...
    async def purge(self) -> Dict[str, Any]:
        ...
    async def put_item(self, key: str, value: Mapping[str, Any], text: str, *, user_id: Optional[str] = ...) -> StoreResult:
        ...
    async def query(self, query: str, *, user_id: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., top_k: Optional[int] = ..., store_type: Optional[str] = ..., include_messages: Optional[bool] = ..., include_knowledge: Optional[bool] = ..., max_tokens: Optional[int] = ..., rerank: Optional[bool] = ..., rerank_candidates: Optional[int] = ...) -> Dict[str, Any]:
        ...
    async def recent(self, *, user_id: Optional[str] = ..., limit: Optional[int] = ..., offset: Optional[int] = ..., kind: Optional[str] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., session_id: Optional[str] = ..., valid: Optional[bool] = ..., archived: Optional[str] = ...) -> List[Memory]:
        ...
    async def search(self, query: str, *, limit: Optional[int] = ..., user_id: Optional[str] = ..., mode: Optional[str] = ..., strategy: Optional[str] = ..., threshold: Optional[float] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., kind: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., created_after: Optional[Time] = ..., created_before: Optional[Time] = ..., valid_after: Optional[Time] = ..., valid_before: Optional[Time] = ..., as_of: Optional[Time] = ..., offset: Optional[int] = ..., max_tokens: Optional[int] = ..., deduplicate: Optional[bool] = ..., count_access: Optional[bool] = ..., nprobe: Optional[int] = ..., recall: Optional[float] = ..., neighbours: Optional[int] = ..., rerank: Optional[bool] = ..., rerank_candidates: Optional[int] = ..., group: Optional[str] = ..., session_lend: Optional[float] = ..., date_boost: Optional[float] = ..., **more: Any) -> SearchResult:
        ...
    async def snapshot_create(self, *, user_id: Optional[str] = ..., description: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def snapshot_restore(self, snapshot_id: str, *, user_id: Optional[str] = ...) -> Dict[str, Any]:
        ...
    async def stats(self) -> Dict[str, Any]:
        ...
    async def store(self, content: str, *, category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., user_id: Optional[str] = ..., session_id: Optional[str] = ..., agent_id: Optional[str] = ..., kind: Optional[str] = ..., role: Optional[str] = ..., valid_from: Optional[Time] = ..., valid_to: Optional[Time] = ..., skip_hooks: Optional[Sequence[str]] = ..., force_hooks: Optional[Sequence[str]] = ..., dedup_distance: Optional[float] = ..., merge: Optional[str] = ...) -> StoreResult:
        ...
    async def tag_frequencies(self, *, user_id: Optional[str] = ...) -> Dict[str, int]:
        ...
    async def tag_normalize_apply(self, preview_id: str, snapshot_id: str, *, user_id: Optional[str] = ..., threshold: Optional[float] = ..., max_changes: Optional[int] = ...) -> Dict[str, Any]:
        ...
    async def tag_normalize_preview(self, *, user_id: Optional[str] = ..., threshold: Optional[float] = ..., max_changes: Optional[int] = ...) -> Dict[str, Any]:
        ...
    async def tag_weights(self, *, user_id: Optional[str] = ...) -> Dict[str, float]:
        ...
    async def tags(self, *, user_id: Optional[str] = ...) -> List[str]:
        ...
    async def update(self, memory_id: int, *, content: Optional[str] = ..., category: Optional[str] = ..., tags: Optional[Sequence[str]] = ..., skip_hooks: Optional[Sequence[str]] = ..., force_hooks: Optional[Sequence[str]] = ..., dedup_distance: Optional[float] = ..., merge: Optional[str] = ...) -> Updated:
        ...
