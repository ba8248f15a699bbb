"""Writes amberdb/client.pyi: the clients' methods as editors and type checkers should see
them. `Commands` (amberdb/_api.py) declares each command once with its typed result;
`Client` returns that result, `Pipeline` a `Pending` of it, `AsyncClient` an awaitable of it,
which annotations on one shared class cannot say. python/tests/test_stub.py checks the file
is current.

    target/python-test-venv/bin/python python/tools/client_stub.py > python/amberdb/client.pyi

(with the wheel installed: it reads the installed amberdb._api, annotations as written).
"""
import inspect
import sys

HEADER = '''"""Type stub of amberdb.client, written by python/tools/client_stub.py from amberdb/_api.py:
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
'''


def commands():
    from amberdb._api import Commands

    for name, fn in sorted(vars(Commands).items()):
        # all_memories pages: a generator on Client, an async one on AsyncClient (below).
        if name.startswith("_") or not callable(fn) or name == "all_memories":
            continue
        yield name, inspect.signature(fn), fn.__doc__


def parameters(sig):
    """The parameter list as written in _api.py (its annotations are strings: postponed)."""
    parts, keyword_only = [], False
    for p in sig.parameters.values():
        if p.kind == p.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
            keyword_only = True
        text = ("**" if p.kind == p.VAR_KEYWORD else "") + p.name
        if p.annotation is not p.empty:
            text += f": {p.annotation}"
        if p.default is not p.empty:
            text += " = ..."
        parts.append(text)
    return "(" + ", ".join(parts) + ")"


def method(name, sig, doc, prefix, wrap):
    ret = sig.return_annotation
    lines = [f"    {prefix}def {name}{parameters(sig)} -> {wrap.format(ret)}:"]
    if doc:
        text = inspect.cleandoc(doc).replace("\n", "\n        ")
        lines.append(f'        """{text}"""')
    else:
        lines.append("        ...")
    return "\n".join(lines)


def render():
    out = [HEADER]
    out.append('''class Client:
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
    def all_memories(self, *, user_id: Optional[str] = ..., page: int = ...) -> Iterator[Memory]: ...''')
    out.extend(method(n, s, d, "", "{}") for n, s, d in commands())
    out.append('''
class Pipeline:
    CHUNK: int
    def execute(self) -> List[Pending]: ...
    def __enter__(self) -> "Pipeline": ...
    def __exit__(self, exc_type: Any, *exc: Any) -> None: ...''')
    out.extend(method(n, s, None, "", "Pending") for n, s, _ in commands())
    out.append('''
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
    def all_memories(self, *, user_id: Optional[str] = ..., page: int = ...) -> AsyncIterator[Memory]: ...''')
    out.extend(method(n, s, None, "async ", "{}") for n, s, _ in commands())
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
