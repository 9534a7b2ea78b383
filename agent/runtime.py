"""Process-wide tuning for a long-running produce path: the `silt` command applies it once at
start (before any agent runs); an application embedding `Agent` may call `tune_gc` itself.

Why: a flush makes thousands of container objects (chunk indexes, segment rows, bitmaps)
that live until the flush ends. At CPython's default young-generation threshold (700) they
are promoted and set off full collections, each walking every object of the process
(SQLAlchemy's, the modules'): about a fifth of ingest CPU (docs/benchmarks.md). Freezing
what start-up made takes those objects out of every later collection, and a larger young
generation lets a flush's objects die by reference count before a collection sees them.
"""

from __future__ import annotations

import gc

# (young, middle, old) collection thresholds; the first is what matters (see above).
GC_THRESHOLDS = (10_000, 10, 10)


def tune_gc() -> None:
    """Collect once, freeze every object alive now (never collected after: start-up state)
    and raise the young generation's threshold to `GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
