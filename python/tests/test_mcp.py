"""`amberdb mcp` from the wheel, driven by the official MCP Python SDK (the same script the
Rust suite runs against the binary: server/tests/python/mcp_client.py)."""
import os
import subprocess
import sys
from pathlib import Path

from conftest import amberdb_command

SCRIPT = Path(__file__).resolve().parents[2] / "server" / "tests" / "python" / "mcp_client.py"


def test_every_tool_through_the_sdk(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "stdio", amberdb_command(), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "AMBERDB_LOG": "warn"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every tool called; all checks passed" in done.stdout


def test_vector_memory_mcp_flags(tmp_path):
    # An MCP client configured for vector-memory-mcp switches by changing its command to
    # `amberdb mcp --working-dir DIR`: the store lands in DIR/memory/amberdb.
    init = ('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n')
    done = subprocess.run(
        [amberdb_command(), "mcp", "--embedder", "hashing", "--working-dir", str(tmp_path)],
        input=init, capture_output=True, text=True, timeout=120,
        env={**os.environ, "AMBERDB_LOG": "warn"},
    )
    assert done.returncode == 0, done.stderr
    assert '"serverInfo"' in done.stdout
    assert (tmp_path / "memory" / "amberdb").is_dir()
