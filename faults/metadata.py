"""A metadata store whose compaction commit crashes once, and the opener that makes one;
an opener that fails in every Spark task; a process that dies right after its first
produce commit.

Used by the Spark retry tests: the first task attempt crashes just before or just after
`commit_compaction`; Spark retries the task and the retry must finish (or report) the job
without committing it twice. "Once" holds across executor processes through a marker file.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metadata import MetadataStore
from metadata.models import CompactionCommit

from .errors import InjectedCrash

BEFORE_COMMIT = "before_commit"
AFTER_COMMIT = "after_commit"


@dataclass(frozen=True, slots=True)
class CrashOnce:
    """Opens a `CrashOnceMetadata` (a `spark.compaction.MetadataOpener`; picklable).

    The first commit that finds no file at `marker` creates it, writing `when`, and raises
    `InjectedCrash` just before (BEFORE_COMMIT) or just after (AFTER_COMMIT) committing.
    """

    when: str
    marker: Path

    def __post_init__(self) -> None:
        if self.when not in (BEFORE_COMMIT, AFTER_COMMIT):
            raise ValueError(f"crash point must be {BEFORE_COMMIT} or {AFTER_COMMIT},"
                             f" not {self.when!r}")

    def __call__(self, url: str) -> MetadataStore:
        md = CrashOnceMetadata.open(url)
        assert isinstance(md, CrashOnceMetadata)
        md.crash = self
        return md


@dataclass(frozen=True, slots=True)
class UnreachableInTasks:
    """A metadata opener (picklable) that opens the store on the Spark driver and raises
    ConnectionRefusedError in every Spark task: a database the executors cannot reach."""

    def __call__(self, url: str) -> MetadataStore:
        from pyspark import TaskContext

        if TaskContext.get() is not None:
            raise ConnectionRefusedError(f"metadata {url}: unreachable from this executor"
                                         " (injected)")
        return MetadataStore.open(url)


class CrashOnceMetadata(MetadataStore):
    """A metadata store whose compaction commit crashes once (see `CrashOnce`)."""

    crash: CrashOnce | None = None

    def commit_compaction(self, *args: Any, **kwargs: Any) -> CompactionCommit:
        crash = self.crash
        if crash is None or crash.marker.exists():
            return super().commit_compaction(*args, **kwargs)
        crash.marker.write_text(crash.when)
        if crash.when == BEFORE_COMMIT:
            raise InjectedCrash("injected crash after the merge, before the commit")
        super().commit_compaction(*args, **kwargs)
        raise InjectedCrash("injected crash after the commit")


def kill_after_produce_commit(marker: Path) -> None:
    """Make this PROCESS die (SIGKILL, nothing flushed or answered) right after its first
    `commit_produced` returns, if `marker` does not exist yet (it is created first).

    For a test-only entry point that runs `silt agent`: the agent's flush has PUT the object
    and committed it, and the produce reply is never sent, which is the moment an idempotent
    producer's resend to another agent must be answered with the original offsets.
    """
    original = MetadataStore.commit_produced

    def commit_then_die(self: MetadataStore, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if not marker.exists():
            marker.write_text(AFTER_COMMIT)
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(MetadataStore, "commit_produced", commit_then_die)  # noqa: B010 - patch the class
