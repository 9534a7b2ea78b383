"""The designs `silt costs` compares, and the two naive ones built on the product's hooks.

1. siltstream: one multi-partition object per flush; compaction reads each input file with
   two streams (2 GETs per file, however many partitions it holds);
2. per-partition seeks: the same objects, but compaction issues a ranged GET per
   (file, partition) per pass, as a seek-based cleaner on object storage would
   (`SeekInputs`, a `compactor.merge.InputOpener`);
3. per-partition objects: one object per partition per flush, as tiered storage does
   (`PerPartitionObjectsAgent`, through `Agent.split_flush`), compacted with two streams
   per (now single-partition) file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from agent import Agent
from compactor.merge import InputFile, InputOpener, open_streams
from fileformat import Readable, meta_entry_end
from metadata import MetadataStore
from objectstore import ObjectStore


class RegionReader:
    """A forward-only reader that issues one ranged GET per region it enters.

    Regions start at `starts` (sorted absolute positions); reading across a boundary costs a
    new request. Models a cleaner that seeks to each partition instead of streaming.
    """

    def __init__(self, store: ObjectStore, key: str, start: int, end: int,
                 starts: Sequence[int]) -> None:
        self._store = store
        self._key = key
        self._pos = start
        self._end = end
        self._starts = sorted(p for p in set(starts) if start < p < end)
        self._buf = b""

    def read(self, n: int = -1, /) -> bytes:
        if n < 0:
            n = self._end - self._pos + len(self._buf)
        out = []
        while n > 0:
            if not self._buf:
                if self._pos >= self._end:
                    break
                stop = next((p for p in self._starts if p > self._pos), self._end)
                self._buf = self._store.get_range(self._key, self._pos, stop)
                self._pos = stop
            piece, self._buf = self._buf[:n], self._buf[n:]
            out.append(piece)
            n -= len(piece)
        return b"".join(out)

    def close(self) -> None:
        self._buf = b""

    def __enter__(self) -> RegionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SeekInputs:
    """An `InputOpener` that reads each input partition by partition: one ranged GET per
    (file, partition) per pass. Where each chunk starts comes from the metadata store's
    segments, as a seek-based cleaner would take it from its index."""

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    def __call__(self, store: ObjectStore, f: InputFile,
                 stack: ExitStack) -> tuple[Readable, Readable]:
        segs = self._metadata.snapshot().file_segments.get(f.file_id, ())
        meta_starts = [meta_entry_end(s.hash_pos, s.hash_count)
                       for s in segs]
        data_starts = [s.data_pos for s in segs]
        sections = f.sections
        meta = stack.enter_context(RegionReader(store, f.object_key, sections.meta_offset,
                                                sections.meta_offset + sections.meta_length,
                                                meta_starts))
        data = stack.enter_context(RegionReader(store, f.object_key, sections.data_offset,
                                                sections.data_offset + sections.data_length,
                                                data_starts))
        return meta, data


class PerPartitionObjectsAgent(Agent):
    """An agent that writes one object per partition per flush, as tiered storage does."""

    def split_flush(self, partitions: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
        return [[tp] for tp in partitions]


def _two_streams(metadata: MetadataStore) -> InputOpener:
    return open_streams


@dataclass(frozen=True, slots=True)
class Design:
    """One design: the agent that writes the objects and how compaction opens its inputs."""

    agent: type[Agent]
    inputs: Callable[[MetadataStore], InputOpener]


DESIGNS: dict[str, Design] = {
    "siltstream": Design(Agent, _two_streams),
    "per-partition-seeks": Design(Agent, SeekInputs),
    "per-partition-objects": Design(PerPartitionObjectsAgent, _two_streams),
}
