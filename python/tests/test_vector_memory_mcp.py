"""Switching from vector-memory-mcp: a store made as vector-memory-mcp makes it (its schema,
sqlite-vec's vec0 table with real vectors, through pysqlite3 as its users run it) is imported
by the wheel's `amberdb import`, and `amberdb mcp --working-dir` brings it along on its
first start."""
import json
import os
import random
import struct
import subprocess
from pathlib import Path

import pysqlite3.dbapi2 as sqlite3  # the sqlite3 that loads extensions, as vector-memory-mcp's users run
import sqlite_vec

import amberdb
from conftest import amberdb_command

# vector-memory-mcp 1.10.0's tables (../shared/reference/peers.md §1.1): the file the Rust
# import tests use, and its vec0 table, made by sqlite-vec.
SCHEMA = (Path(__file__).resolve().parents[2] / "server" / "tests" / "fixtures"
          / "vector_memory_mcp.sql").read_text() + """
CREATE VIRTUAL TABLE memory_vectors USING vec0(embedding float[384]);
"""

NOTES = [
    ("pytest -x stops the run at the first failing test", "tool-usage", ["python", "testing"],
     "2025-01-15T10:30:00.123456+00:00", "2025-02-01T08:00:00+00:00", 4),
    ("The deploy script needs AWS credentials in the environment", "architecture", ["deploy"],
     "2025-02-10T09:00:00+00:00", "2025-02-10T09:00:00+00:00", 0),
    ("Use git bisect to find the commit that introduced a regression", "debugging", [],
     "2025-03-05T16:45:00+00:00", "2025-04-01T12:00:00+00:00", 2),
]


def make_store(working_dir):
    db_path = working_dir / "memory" / "vector_memory.db"
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(str(db_path))
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.executescript(SCHEMA)
    rng = random.Random(7)
    print("seed 7")
    for i, (content, category, tags, created, updated, count) in enumerate(NOTES):
        cur = conn.execute(
            "INSERT INTO memory_metadata (content_hash, content, category, tags, created_at,"
            " updated_at, access_count) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (f"h{i}", content, category, json.dumps(tags), created, updated, count),
        )
        vec = [rng.gauss(0, 1) for _ in range(384)]
        conn.execute("INSERT INTO memory_vectors (rowid, embedding) VALUES (?, ?)",
                     (cur.lastrowid, struct.pack("384f", *vec)))
    conn.commit()
    conn.close()
    return db_path


def test_import_keeps_what_vector_memory_mcp_stored(tmp_path):
    db_path = make_store(tmp_path / "project")
    before = db_path.read_bytes()
    store = tmp_path / "store"
    done = subprocess.run(
        [amberdb_command(), "import", "--working-dir", str(tmp_path / "project"),
         "--data-dir", str(store)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "AMBERDB_LOG": "warn"},
    )
    assert done.returncode == 0, done.stderr
    assert "3 rows: 3 memories stored, 0 already there" in done.stdout
    assert db_path.read_bytes() == before, "the old store is read, never changed"
    with amberdb.Store(store) as db:  # MiniLM, as vector-memory-mcp used
        recent = db.recent()
        assert [m.content for m in recent] == [n[0] for n in reversed(NOTES)]
        by_content = {m.content: m for m in recent}
        for content, category, tags, created, updated, count in NOTES:
            m = by_content[content]
            assert m.category == category and m.tags == tags
            assert m.created_at == amberdb._types.parse_time(created)
            assert m.updated_at == amberdb._types.parse_time(updated)
            assert m.access_count == count
        # Embedded again by MiniLM: found by meaning.
        assert db.search("which commit broke the build?", limit=1)[0].content.startswith("Use git bisect")


def test_mcp_brings_the_old_store_along_on_its_first_start(tmp_path):
    work = tmp_path / "project"
    make_store(work)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "search_memories", "arguments": {"query": "halt tests after an error", "limit": 1}}}
    done = subprocess.run(
        [amberdb_command(), "mcp", "--working-dir", str(work)],
        input=json.dumps(call) + "\n", capture_output=True, text=True, timeout=600,
        env={**os.environ, "AMBERDB_LOG": "warn"},
    )
    assert done.returncode == 0, done.stderr
    assert "imported vector-memory-mcp's" in done.stderr
    reply = json.loads(done.stdout.splitlines()[0])
    hit = reply["result"]["structuredContent"]["results"][0]
    assert hit["content"].startswith("pytest -x") and hit["access_count"] >= 4
    record = json.loads((work / "memory" / "amberdb-import.json").read_text())
    assert record["stored"] == 3 and record["failed"] == []
