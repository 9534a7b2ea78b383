"""Test-only entry point: `python -m tests.protocol.crashing_agent MARKER <silt args>` runs
`silt` in a process that SIGKILLs itself right after its first produce commit (the object
PUT and committed, the reply never sent), unless MARKER exists. Product code never reads it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli.main import main
from faults import kill_after_produce_commit

if __name__ == "__main__":
    kill_after_produce_commit(Path(sys.argv.pop(1)))
    main()
