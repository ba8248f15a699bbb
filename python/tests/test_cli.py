"""The wheel's `amberdb` command: the Rust command line, every subcommand."""
import json
import subprocess
import sys

import amberdb
from conftest import amberdb_command


def run(*args, input=None):
    return subprocess.run([amberdb_command(), *args], capture_output=True, text=True,
                          input=input, timeout=300)


def test_help_version_and_bad_arguments():
    helped = run("--help")
    assert helped.returncode == 0
    for sub in ("serve", "mcp", "import", "export", "backup", "restore", "check", "compact",
                "reembed", "model"):
        assert sub in helped.stdout
    version = run("--version")
    assert version.returncode == 0 and amberdb.__version__ in version.stdout
    bad = run("serve", "--colour", "red")
    assert bad.returncode == 2 and "--colour" in bad.stderr
    unknown = run("frobnicate")
    assert unknown.returncode == 2
    as_module = subprocess.run([sys.executable, "-m", "amberdb", "--version"],
                               capture_output=True, text=True, timeout=60)
    assert as_module.returncode == 0 and amberdb.__version__ in as_module.stdout


def test_export_import_check_and_backup_from_the_command(tmp_path):
    src = tmp_path / "src"
    with amberdb.Store(src, embedder="hashing") as db:
        for i in range(30):
            db.store(f"exported note {i}", tags=["export"], category="learning")
    exported = run("export", "--embedder", "hashing", "--data-dir", str(src))
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sum(1 for line in lines if line.get("content", "").startswith("exported note")) == 30
    dst = tmp_path / "dst"
    imported = run("import", "--embedder", "hashing", "--data-dir", str(dst), "-",
                   input=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert "30 memories stored" in imported.stdout
    checked = run("check", "--data-dir", str(dst), "--json")
    assert checked.returncode == 0, checked.stdout
    assert json.loads(checked.stdout)["frames"] >= 1
    backup = run("backup", str(tmp_path / "bk"), "--embedder", "hashing", "--data-dir", str(src))
    assert backup.returncode == 0, backup.stderr
    with amberdb.Store(tmp_path / "bk", embedder="hashing") as db:
        assert db.memory_stats()["total_memories"] == 30
    # The round trip keeps each memory's id, times and counts (a new store: ids kept).
    def history(path):
        with amberdb.Store(path, embedder="hashing") as db:
            return sorted((m.id, m.content, m.created_at, m.updated_at, m.access_count)
                          for m in db.recent(limit=50))
    assert history(src) == history(dst)


def test_a_damaged_store_fails_check(tmp_path):
    src = tmp_path / "s"
    with amberdb.Store(src, embedder="hashing") as db:
        for i in range(3):
            db.store(f"a note to damage {i}")
    logs = sorted(p for p in src.iterdir() if p.name.startswith("wal-"))
    assert logs, list(src.iterdir())
    data = bytearray(logs[-1].read_bytes())
    data[len(data) // 4] ^= 0xFF  # inside the first frame: valid frames follow it
    logs[-1].write_bytes(bytes(data))
    assert run("check", "--data-dir", str(src)).returncode == 1
    assert amberdb.check(src)["clean"] is False
