"""The clients' type stub (amberdb/client.pyi) is what python/tools/client_stub.py writes from
the command surface now: a command added to amberdb/_api.py reaches editors for all three
classes, the async one as a coroutine."""
import ast
import subprocess
import sys
from pathlib import Path

import amberdb.client

TOOL = Path(__file__).resolve().parents[1] / "tools" / "client_stub.py"


def test_the_client_stub_is_current_and_complete():
    installed = Path(amberdb.client.__file__).with_suffix(".pyi")
    assert installed.is_file(), "the wheel carries amberdb/client.pyi"
    written = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True,
                             check=True).stdout
    assert written == installed.read_text(), (
        "amberdb/client.pyi is stale: regenerate it with python/tools/client_stub.py")
    tree = ast.parse(written)
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    sync = {f.name for f in classes["Client"].body if isinstance(f, ast.FunctionDef)}
    async_ = {f.name for f in classes["AsyncClient"].body if isinstance(f, ast.AsyncFunctionDef)}
    assert {"store", "search", "get", "backup", "call"} <= sync
    assert sync - {"__init__", "__enter__", "__exit__", "pipeline", "all_memories",
                   "written_seq"} <= async_
    # Not a call: both read what the client holds.
    assert "written_seq" in {f.name for f in classes["AsyncClient"].body
                             if isinstance(f, ast.FunctionDef)}
