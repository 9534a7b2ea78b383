"""`format("silt")`: read topics as DataFrames and append DataFrames to topics.

Read: one input partition per live segment (one ranged GET each), so reads are parallel;
with `latest_per_key=true`, one input partition per topic-partition that keeps the latest
record per key and drops tombstoned keys (Kafka's compacted view).

Write: each task checks every row by the agent's produce rules (`agent.rules`) and builds
ONE multi-partition object like an agent flush (`objects.ObjectUpload`, registered pending);
the driver's commit makes every task's object visible in one metadata transaction
(`commit_files`). A failed task abandons its own object; an aborted job abandons the objects
of the tasks that succeeded; nothing of a failed job is ever visible (GC deletes the
objects).

The options are parsed where Spark plans the read or write, on the driver: the store is
resolved there (`StoreSpec`: endpoint, region, addressing style) and travels to the tasks
with the reader or writer, so executors need only credentials (their own AWS chain or
`spark.executorEnv.*`) and access to the store and the metadata database.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, NullType, StringType, StructType

from agent.partitioner import DefaultPartitioner
from agent.reader import read_segment
from agent.rules import check_record, record_size
from clock import SYSTEM_CLOCK
from fileformat import ChunkBuilder, FileLayout, KeyHasher
from metadata import MetadataStore, SegmentInfo
from metadata.config import MetadataConfig
from metadata.errors import CommitUnknownError
from metadata.schema import FILE_LIVE
from objects import ObjectUpload, abandon_files, abandoning
from objects.keys import data_key
from objectstore import StoreSpec, open_store
from objectstore.config import StoreConfig
from settings import declared

NAME = "silt"
SCHEMA = ("topic string, partition int, offset long, timestamp long, key binary, "
          "value binary, headers map<string,binary>")
OPT_TOPIC = "topic"
OPT_STORE = "store"
OPT_METADATA = "metadata"
OPT_PARTITIONS = "partitions"
OPT_START = "start_offset"
OPT_END = "end_offset"
OPT_LATEST = "latest_per_key"


def _url(section: type[StoreConfig] | type[MetadataConfig]) -> str:
    """The section's `url` as the settings layer gives it without a file or flags: from its
    environment variable (`SILT_STORE`, `SILT_METADATA`; checked, with the same one-line
    error), else its default."""
    env = declared(section)["url"][1].env or ""
    raw = os.environ.get(env)
    if raw is None:
        return section().url
    return str(section.convert("url", raw, f"env {env}")[1])


@dataclass(frozen=True)
class Options:
    """Parsed data source options; store and metadata default to the settings layer's
    (`SILT_STORE` / `SILT_METADATA`, else the embedded defaults). The store is resolved
    where the options are parsed (the driver)."""

    topic: str
    store: StoreSpec
    metadata: str
    partitions: tuple[int, ...] | None
    start: int
    end: int | None
    latest_per_key: bool

    @classmethod
    def parse(cls, options: dict[str, str]) -> Options:
        topic = options.get(OPT_TOPIC)
        if not topic:
            raise ValueError("option 'topic' is required for format('silt')")
        parts = options.get(OPT_PARTITIONS)
        end = options.get(OPT_END)
        store, metadata = options.get(OPT_STORE), options.get(OPT_METADATA)
        store = store or _url(StoreConfig)
        metadata = metadata or _url(MetadataConfig)
        return cls(
            topic=topic,
            store=StoreSpec.resolve(store),
            metadata=metadata,
            partitions=tuple(int(p) for p in parts.split(",")) if parts else None,
            start=int(options.get(OPT_START, "0")),
            end=int(end) if end else None,
            latest_per_key=options.get(OPT_LATEST, "false").lower() == "true",
        )


class SegmentsPartition(InputPartition):
    """Segments read by one task, in offset order."""

    def __init__(self, segments: Sequence[SegmentInfo]) -> None:
        super().__init__(tuple(segments))
        self.segments = tuple(segments)


class SiltDataSource(DataSource):
    """The `silt` Python data source."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SiltReader(Options.parse(dict(self.options)))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("format('silt') supports mode('append') only: a log is appended to")
        return SiltWriter(Options.parse(dict(self.options)), schema)


def register(spark: Any) -> None:
    """Make `format("silt")` available in this session."""
    spark.dataSource.register(SiltDataSource)


class SiltReader(DataSourceReader):
    """Plans one input partition per segment (or per topic-partition for latest_per_key)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        md = MetadataStore.open(self.opts.metadata)
        try:
            parts = md.partitions(self.opts.topic)
            wanted = [p for p in parts
                      if self.opts.partitions is None or p.partition in self.opts.partitions]
            out: list[InputPartition] = []
            for p in wanted:
                start = max(self.opts.start, p.log_start_offset)
                segs = md.find_segments(self.opts.topic, p.partition, start)
                if self.opts.end is not None:
                    segs = [s for s in segs if s.base_offset < self.opts.end]
                if not segs:
                    continue
                if self.opts.latest_per_key:
                    out.append(SegmentsPartition(segs))
                else:
                    out.extend(SegmentsPartition([s]) for s in segs)
        finally:
            md.close()
        return out or [SegmentsPartition([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, SegmentsPartition)
        store = open_store(self.opts.store)
        rows = self._rows(store, partition.segments)
        if not self.opts.latest_per_key:
            yield from rows
            return
        latest: dict[bytes, tuple[Any, ...]] = {}
        for row in rows:
            if row[4] is None:  # no key, nothing to be the latest of
                continue
            latest.pop(row[4], None)  # re-insert: dict order = offset order of the latest
            latest[row[4]] = row
        yield from (row for row in latest.values() if row[5] is not None)

    def _rows(self, store: Any, segments: Sequence[SegmentInfo]) -> Iterator[tuple[Any, ...]]:
        lo, hi = self.opts.start, self.opts.end
        for seg in segments:
            for rec in read_segment(store, seg):
                if rec.offset < lo or (hi is not None and rec.offset >= hi):
                    continue
                yield (seg.topic, seg.partition, rec.offset, rec.timestamp, rec.key, rec.value,
                       {k: v for k, v in rec.headers})


@dataclass
class FileCommit(WriterCommitMessage):
    """One task's uploaded, still pending object (`layout` None: the task had no rows)."""

    file_id: int
    layout: FileLayout | None


def _as_millis(ts: Any) -> int:
    """A timestamp column value (epoch ms as a number, or a datetime) as epoch ms."""
    if isinstance(ts, datetime.datetime):
        return int(ts.timestamp() * 1000)
    return int(ts)


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


class SiltWriter(DataSourceWriter):
    """Each task writes one multi-partition object; the driver commits them all at once."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        types = {f.name: f.dataType for f in schema.fields}
        if not {"key", "value"} <= types.keys():
            raise ValueError("format('silt') writes need columns 'key' and 'value'"
                             " (and optionally 'partition', 'timestamp', 'headers')")
        for name in ("key", "value"):
            if not isinstance(types[name], StringType | BinaryType | NullType):
                raise ValueError(f"column {name!r} must be string or binary,"
                                 f" not {types[name].simpleString()}")

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        md = MetadataStore.open(self.opts.metadata)
        try:
            info = md.get_topic(self.opts.topic)
            hasher = KeyHasher(md.cluster_secret()) if info.config.compacted else None
            partitioner = DefaultPartitioner()
            builders: dict[int, ChunkBuilder] = {}
            now = SYSTEM_CLOCK.now_ms()
            for row in iterator:
                d = row.asDict()
                key, value = _as_bytes(d.get("key")), _as_bytes(d.get("value"))
                p = d.get("partition")
                if p is None:
                    p = partitioner.partition(key, info.partitions)
                headers = tuple((k, _as_bytes(v)) for k, v in (d.get("headers") or {}).items())
                check_record(info, p, key, record_size(key, value, headers))
                b = builders.get(p)
                if b is None:
                    b = builders[p] = ChunkBuilder(info.name, p, hasher=hasher)
                ts = d.get("timestamp")
                b.append(now if ts is None else _as_millis(ts), key, value, headers)
            if not builders:
                return FileCommit(-1, None)
            store = open_store(self.opts.store)
            upload = ObjectUpload(store, md, data_key(), holds_compacted=hasher is not None)
            with abandoning(store, md, [upload]):
                layout = upload.write(builders[p].finish() for p in sorted(builders))
            return FileCommit(upload.file_id, layout)
        finally:
            md.close()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [(m.file_id, m.layout) for m in messages
                 if isinstance(m, FileCommit) and m.layout is not None]
        if not files:
            return
        md = MetadataStore.open(self.opts.metadata)
        try:
            md.commit_files(files)
        except CommitUnknownError:
            # One transaction: one file's state tells whether all of them went live.
            if md.get_file(files[0][0]).state != FILE_LIVE:
                raise  # Spark then calls abort(): the pending files are abandoned
        finally:
            md.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        md = MetadataStore.open(self.opts.metadata)
        try:
            abandon_files(md, [m.file_id for m in messages
                               if isinstance(m, FileCommit) and m.layout is not None])
        finally:
            md.close()
