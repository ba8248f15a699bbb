"""The native module (Rust, PyO3). Use the wrappers in :mod:`amberdb`, not this directly."""
from typing import List, Optional, Tuple

__version__: str

def run_cli(argv: List[str]) -> int: ...
def check(path: str) -> Tuple[int, str]: ...

class NativeStore:
    def __init__(
        self,
        path: str,
        embedder: Optional[str] = None,
        model_dir: Optional[str] = None,
        fetch_model: bool = True,
        memory_limit: Optional[int] = None,
        hooks: Optional[str] = None,
    ) -> None: ...
    def call(self, command: str, args: str) -> Tuple[bool, str]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
