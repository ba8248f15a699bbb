"""``python -m amberdb ...`` is the ``amberdb`` command."""
import sys

from ._cli import main

sys.exit(main())
