"""Every key siltstream writes in an object store, named here once.

- `data/<unique>.silt`: an agent flush, or one task of a Spark write (level 0);
- `compacted/L<level>-<unique>-<c|d>.silt`: a compaction output (`c`: a compacted topic's
  data, `d`: delete-policy data);
- `_silt/cluster.json`: the cluster marker (cli/cluster.py), not a data object.

`<unique>` is the writer's clock in ns (20 digits, so listings sort by age) and 12 random
hex digits. `silt doctor` looks for orphans under `DATA_PREFIXES` only.
"""

from __future__ import annotations

import uuid

from clock import SYSTEM_CLOCK, Clock

DATA_PREFIX = "data/"
COMPACTED_PREFIX = "compacted/"
# Where data objects are: every key `data_key` and `compacted_key` name starts with one.
DATA_PREFIXES = (DATA_PREFIX, COMPACTED_PREFIX)
# The object store's marker holding the cluster id (written and checked by cli/cluster.py):
# not a data object, so checks of objects against files leave it out.
MARKER_KEY = "_silt/cluster.json"


def _unique(clock: Clock) -> str:
    """Time-ordered (ns, 20 digits) and unique (random) part of a key."""
    return f"{clock.now_ms() * 1_000_000:020d}-{uuid.uuid4().hex[:12]}"


def data_key(clock: Clock = SYSTEM_CLOCK) -> str:
    """A new key for a level-0 object (an agent flush, a Spark task's object)."""
    return f"{DATA_PREFIX}{_unique(clock)}.silt"


def compacted_key(level: int, compacted: bool, clock: Clock = SYSTEM_CLOCK) -> str:
    """A new key for a compaction output at `level`, holding compacted-topic data or not."""
    return f"{COMPACTED_PREFIX}L{level}-{_unique(clock)}-{'c' if compacted else 'd'}.silt"
