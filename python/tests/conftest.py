"""Fixtures for the wheel's tests: run against the installed `amberdb` package and its
`amberdb` command (scripts/python-test builds the wheel and installs it in a fresh venv)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import amberdb


def amberdb_command() -> str:
    """The wheel's console script, next to this venv's python."""
    path = Path(sys.executable).parent / "amberdb"
    assert path.exists(), f"the wheel's amberdb command is not installed at {path}"
    return str(path)


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def hashing_store(store_dir):
    with amberdb.Store(store_dir, embedder="hashing") as db:
        yield db


class Server:
    """`amberdb serve` started from the wheel's command on a free port."""

    def __init__(self, data_dir: Path, *args: str, env=None, port: int = 0):
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [amberdb_command(), "serve", "--embedder", "hashing", "--port", str(port),
             "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "AMBERDB_LOG": "warn", **(env or {})},
        )
        line = self.proc.stdout.readline()
        match = re.match(r"listening on (\S+):(\d+)", line)
        if not match:
            self.proc.kill()
            raise AssertionError(f"no 'listening on' line: {line!r} {self.proc.stderr.read()}")
        self.host, self.port = match.group(1), int(match.group(2))
        # With --http, the next line says where HTTP is.
        self.http_port = None
        if "--http" in args:
            http = re.match(r"http on https?://\S+:(\d+)", self.proc.stdout.readline())
            self.http_port = int(http.group(1)) if http else None

    def stop(self, sig=signal.SIGTERM, timeout=30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "served")
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()


@pytest.fixture
def start_server(tmp_path):
    started = []

    def start(*args, env=None, data_dir=None, port=0):
        s = Server(data_dir or tmp_path / f"served{len(started)}", *args, env=env, port=port)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
