"""Named steps of the write paths where a process can be made to SIGKILL itself.

`arm("compact.uploaded")` (or `SILT_KILLPOINT=compact.uploaded` and `arm_from_env()`, or
`python -m faults.killpoints silt ...`, a `silt` command with the env var honoured) patches
the one method that step is next to, in this process only, so that the Nth time the step is
reached (`step@N`, default 1) the process dies by SIGKILL: nothing flushed, answered,
released or cleaned up, exactly as the kernel's OOM killer or a pulled plug leaves it.

A step's role prefix says which process it belongs in (an agent has no compaction, a
compactor flushes no produce): `produce.registered` and `compact.registered` patch the same
method (`register_pending_file`), in whichever process is armed. The steps, in write order:

    produce.registered  after the flush's pending file row
    produce.uploading   after the first chunk went to the upload (object incomplete)
    produce.uploaded    object complete, before the commit transaction
    produce.committed   after the commit, before any ack
    compact.leased      after the job's lease
    compact.registered  after an output's pending file row
    compact.merging     after a chunk went to an output upload (object incomplete)
    compact.uploaded    outputs complete, before commit_compaction
    compact.committed   after commit_compaction, before GC
    gc.marked           after retired files were marked deleting, before the deletes
    gc.deleted          after the objects were deleted, before they are marked deleted
    gc.done             after they were marked deleted, before pruning history
    txn.prepared        after a transaction's state is stored (@N: the Nth store; EndTxn's
                        PrepareCommit/PrepareAbort is the one after InitProducerId's and
                        each AddPartitionsToTxn/AddOffsetsToTxn that changed it)
    txn.markers         after EndTxn's markers are buffered, before their flush commits
    txn.committed       after the flush's commit completed the transaction (markers,
                        Complete* state, group offsets), before EndTxn is answered
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.transactions.coordinator import TransactionCoordinator
from agent.transactions.markers import AgentMarkers
from fileformat.filewriter import FileWriter
from metadata import MetadataStore

ENV = "SILT_KILLPOINT"


@dataclass(frozen=True, slots=True)
class Step:
    """Where a step is: `method` of `owner`, `before` or after its call."""

    owner: type
    method: str
    before: bool = False


STEPS: dict[str, Step] = {
    "produce.registered": Step(MetadataStore, "register_pending_file"),
    "produce.uploading": Step(FileWriter, "add"),
    "produce.uploaded": Step(MetadataStore, "commit_produced", before=True),
    "produce.committed": Step(MetadataStore, "commit_produced"),
    "compact.leased": Step(MetadataStore, "lease_job"),
    "compact.registered": Step(MetadataStore, "register_pending_file"),
    "compact.merging": Step(FileWriter, "add"),
    "compact.uploaded": Step(MetadataStore, "commit_compaction", before=True),
    "compact.committed": Step(MetadataStore, "commit_compaction"),
    "gc.marked": Step(MetadataStore, "mark_deleting"),
    "gc.deleted": Step(MetadataStore, "mark_deleted", before=True),
    "gc.done": Step(MetadataStore, "mark_deleted"),
    "txn.prepared": Step(MetadataStore, "store_transaction"),
    "txn.markers": Step(AgentMarkers, "_append"),
    "txn.committed": Step(TransactionCoordinator, "completed", before=True),
}


def steps(role: str) -> list[str]:
    """The steps of one role (`produce`, `compact`, `gc`, `txn`), in write order."""
    return [name for name in STEPS if name.split(".")[0] == role]


def parse(spec: str) -> tuple[str, int]:
    """`step` or `step@N` -> (step, N); ValueError naming the known steps otherwise."""
    name, _, nth = spec.partition("@")
    if name not in STEPS:
        raise ValueError(f"unknown kill point {name!r}; known: {', '.join(STEPS)}")
    count = int(nth) if nth else 1
    if count < 1:
        raise ValueError(f"kill point {spec!r}: N must be >= 1")
    return name, count


def die() -> None:
    """SIGKILL this process now."""
    os.kill(os.getpid(), signal.SIGKILL)


def arm(spec: str, *, on_kill: Callable[[], None] = die) -> Callable[[], None]:
    """Patch this process so that it dies (`on_kill`) the Nth time it reaches the step
    (`parse`); returns the function that takes the patch out again."""
    name, nth = parse(spec)
    step = STEPS[name]
    original = getattr(step.owner, step.method)
    reached = [0]

    def check() -> None:
        reached[0] += 1
        if reached[0] == nth:
            on_kill()

    @functools.wraps(original)
    def patched(*args: Any, **kwargs: Any) -> Any:
        if step.before:
            check()
            return original(*args, **kwargs)
        result = original(*args, **kwargs)
        check()
        return result

    setattr(step.owner, step.method, patched)
    return lambda: setattr(step.owner, step.method, original)


def arm_from_env() -> str | None:
    """Arm the kill point named by SILT_KILLPOINT, if set; returns it."""
    spec = os.environ.get(ENV)
    if spec:
        arm(spec)
    return spec or None


def main() -> None:
    """`python -m faults.killpoints silt ARGS...`: the `silt` command, SILT_KILLPOINT armed."""
    arm_from_env()
    from cli.main import main as silt

    sys.argv = sys.argv[1:] if sys.argv[1:2] == ["silt"] else ["silt", *sys.argv[1:]]
    silt()


if __name__ == "__main__":
    main()
