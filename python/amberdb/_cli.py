"""The wheel's ``amberdb`` command: the same command line as the Rust binary
(``amberdb serve``, ``amberdb mcp``, ``amberdb import``, ...), run in this process. MiniLM is
fetched on first use."""
from __future__ import annotations

import os
import signal
import sys
from typing import List, Optional

from . import _amberdb


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # ctrl-c as for the Rust binary: `serve` catches it and stops cleanly (exit 0); any other
    # command ends at once. Python's own handler would only raise KeyboardInterrupt after the
    # command returned, turning a clean stop into a traceback and a death by SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # A first-use model fetch makes its venv with this interpreter (under uvx or pipx there may
    # be no python3 with pip on PATH).
    os.environ.setdefault("AMBERDB_PYTHON", sys.executable)
    return _amberdb.run_cli(["amberdb", *args])


if __name__ == "__main__":
    sys.exit(main())
