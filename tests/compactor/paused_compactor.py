"""Test-only entry point: `python -m tests.compactor.paused_compactor REACHED RELEASE <silt
args>` runs `silt` in a process whose first compaction job pauses after its first partition
(`faults.pause_first_merge`). Product code never reads it."""

from __future__ import annotations

import sys
from pathlib import Path

from cli.main import main
from faults import pause_first_merge

if __name__ == "__main__":
    pause_first_merge(Path(sys.argv.pop(1)), Path(sys.argv.pop(1)))
    main()
