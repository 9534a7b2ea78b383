"""A compaction job that pauses mid-merge until the test lets it go: the moment a SIGTERM
must either let the job finish or abandon it and release its lease."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from compactor import worker

POLL_S = 0.01


def pause_first_merge(reached: Path, release: Path) -> None:
    """Make this PROCESS's first merge stop at its first partition boundary (one partition
    merged, its lease held): it creates `reached`, then waits until `release` exists before
    the merge's heartbeat runs (which renews the lease, or abandons the job when the
    service's shutdown deadline has passed). Later merges run as usual."""
    original = getattr(worker, "merge")  # noqa: B009 - the name the worker calls

    def paused(*args: Any, heartbeat: Any, **kwargs: Any) -> Any:
        def beat() -> None:
            if not reached.exists():
                reached.write_text("paused")
                while not release.exists():
                    time.sleep(POLL_S)
            heartbeat()

        return original(*args, heartbeat=beat, **kwargs)

    setattr(worker, "merge", paused)  # noqa: B010 - patch the module the worker calls
