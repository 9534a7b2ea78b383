"""`format("silt")`: topics as DataFrames, batch and streaming.

Read (batch, and `readStream`: spark/stream.py): Spark's Kafka source schema
(`reading.read_schema`), reads planned per object (`reading.plan_reads`: one ranged GET per
run of wanted segments of an object, tasks of up to 64 MiB). With `latest_per_key=true`, one
input partition per topic-partition that keeps the latest record per key and drops
tombstoned keys (Kafka's compacted view).

Write (batch, and `writeStream`: spark/sink.py): each task checks every row by the agent's
produce rules (`agent.rules`) and builds ONE multi-partition object like an agent flush
(`objects.ObjectUpload`, registered pending); the driver's commit makes every task's object
visible in one metadata transaction (`commit_files`). A failed task abandons its own object;
an aborted job abandons the objects of the tasks that succeeded; nothing of a failed job is
ever visible (GC deletes the objects).

The options are parsed where Spark plans the read or write, on the driver: the store is
resolved there (`StoreSpec`: endpoint, region, addressing style) and travels to the tasks
with the reader or writer, so executors need only credentials (their own AWS chain or
`spark.executorEnv.*`) and access to the store and the metadata database.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, NullType, StringType, StructType

from agent.partitioner import DefaultPartitioner
from agent.reader import live_segments
from agent.rules import check_record, record_size
from clock import SYSTEM_CLOCK
from fileformat import ChunkBuilder, FileLayout, KeyHasher
from metadata import MetadataStore
from metadata.config import MetadataConfig
from metadata.errors import CommitUnknownError
from metadata.schema import FILE_LIVE
from objects import ObjectUpload, abandon_files, abandoning
from objects.keys import data_key
from objectstore import StoreSpec, open_store
from objectstore.config import StoreConfig
from settings import declared

from .reading import (
    ReadRecord,
    ReadTask,
    arrow_batches,
    coalesce,
    plan_reads,
    read_schema,
    read_task,
    refinder,
    wanted_from,
)

NAME = "silt"
OPT_TOPIC = "topic"
OPT_STORE = "store"
OPT_METADATA = "metadata"
OPT_PARTITIONS = "partitions"
OPT_START = "start_offset"
OPT_END = "end_offset"
OPT_LATEST = "latest_per_key"
OPT_HEADERS = "includeHeaders"


def _url(section: type[StoreConfig] | type[MetadataConfig]) -> str:
    """The section's `url` as the settings layer gives it without a file or flags: from its
    environment variable (`SILT_STORE`, `SILT_METADATA`; checked, with the same one-line
    error), else its default."""
    env = declared(section)["url"][1].env or ""
    raw = os.environ.get(env)
    if raw is None:
        return section().url
    return str(section.convert("url", raw, f"env {env}")[1])


def locations(options: Mapping[str, str]) -> tuple[StoreSpec, str]:
    """The store (resolved here, on the driver) and the metadata URL of a read or write:
    the options `store` and `metadata`, else the settings layer's (`SILT_STORE` /
    `SILT_METADATA`, else the embedded defaults)."""
    store = options.get(OPT_STORE) or _url(StoreConfig)
    return StoreSpec.resolve(store), options.get(OPT_METADATA) or _url(MetadataConfig)


def case_insensitive(options: Mapping[str, str]) -> Mapping[str, str]:
    """Options looked up without regard to case, as Spark passes them (a plain dict made
    from Spark's options holds lower-cased names)."""
    return CaseInsensitiveDict(options)


def include_headers(options: Mapping[str, str]) -> bool:
    """Whether reads have the `headers` column (Kafka's `includeHeaders`, default false)."""
    return case_insensitive(options).get(OPT_HEADERS, "false").lower() == "true"


@dataclass(frozen=True)
class Options:
    """Parsed batch options; store and metadata as `locations` gives them."""

    topic: str
    store: StoreSpec
    metadata: str
    partitions: tuple[int, ...] | None
    start: int
    end: int | None
    latest_per_key: bool
    include_headers: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        options = case_insensitive(options)
        topic = options.get(OPT_TOPIC)
        if not topic:
            raise ValueError("option 'topic' is required for format('silt')")
        parts = options.get(OPT_PARTITIONS)
        end = options.get(OPT_END)
        store, metadata = locations(options)
        return cls(
            topic=topic,
            store=store,
            metadata=metadata,
            partitions=tuple(int(p) for p in parts.split(",")) if parts else None,
            start=int(options.get(OPT_START, "0")),
            end=int(end) if end else None,
            latest_per_key=options.get(OPT_LATEST, "false").lower() == "true",
            include_headers=include_headers(options),
        )


class SiltDataSource(DataSource):
    """The `silt` Python data source: batch and streaming reads and writes."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return read_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SiltReader(Options.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("format('silt') supports mode('append') only: a log is appended to")
        return SiltWriter(Options.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import SiltStreamReader, StreamOptions

        return SiltStreamReader(StreamOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import SiltStreamWriter

        return SiltStreamWriter(self.options, schema)


def register(spark: Any) -> None:
    """Make `format("silt")` available in this session."""
    spark.dataSource.register(SiltDataSource)


class SiltReader(DataSourceReader):
    """Batch reads: the wanted segments planned per object (`reading.plan_reads`), or one
    input partition per topic-partition for latest_per_key."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        md = MetadataStore.open(self.opts.metadata)
        try:
            parts = md.partitions(self.opts.topic)
            out: list[InputPartition] = []
            wanted = []
            for p in parts:
                if self.opts.partitions is not None and p.partition not in self.opts.partitions:
                    continue
                start = max(self.opts.start, p.log_start_offset)
                mine = wanted_from(live_segments(md, self.opts.topic, p.partition, start),
                                   start, self.opts.end)
                if self.opts.latest_per_key and mine:
                    out.append(ReadTask(coalesce(mine)))
                wanted += mine
        finally:
            md.close()
        if not self.opts.latest_per_key:
            out = list(plan_reads(wanted))
        return out or [ReadTask([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReadTask)
        records = read_task(open_store(self.opts.store), partition,
                            refinder(self.opts.metadata, fail_on_data_loss=True))
        if self.opts.latest_per_key:
            records = _latest_per_key(records)
        yield from arrow_batches(records, self.opts.include_headers)


def _latest_per_key(records: Iterator[ReadRecord]) -> Iterator[ReadRecord]:
    """One partition's records reduced to the latest per key, in the latest's offset order;
    keys whose latest is a tombstone and records without a key left out."""
    latest: dict[bytes, ReadRecord] = {}
    for read in records:
        key = read[2].key
        if key is None:  # no key, nothing to be the latest of
            continue
        latest.pop(key, None)  # re-insert: dict order = offset order of the latest
        latest[key] = read
    yield from (r for r in latest.values() if r[2].value is not None)


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


def _headers(value: Any) -> tuple[tuple[str, bytes | None], ...]:
    """A headers column value: a map (name -> value) or, as Kafka's sink takes it, an array
    of (key, value) structs (repeated names kept)."""
    if not value:
        return ()
    pairs = value.items() if isinstance(value, dict) else (tuple(h) for h in value)
    return tuple((str(k), _as_bytes(v)) for k, v in pairs)


def check_write_schema(schema: StructType) -> None:
    """A write needs a `value` column; `key` is optional (null keys); both string or binary."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ValueError("format('silt') writes need a column 'value' (and optionally 'key',"
                         " 'partition', 'timestamp', 'headers')")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], StringType | BinaryType | NullType):
            raise ValueError(f"column {name!r} must be string or binary,"
                             f" not {types[name].simpleString()}")


def write_object(store: StoreSpec, metadata_url: str, topic: str,
                 rows: Iterator[Any]) -> FileCommit:
    """One task's rows as ONE multi-partition object, uploaded and registered pending (the
    object-write primitive, `objects.ObjectUpload`), every row checked by the produce rules
    first; a definite failure abandons it. Its commit is the driver's."""
    md = MetadataStore.open(metadata_url)
    try:
        info = md.get_topic(topic)
        hasher = KeyHasher(md.cluster_secret()) if info.config.compacted else None
        partitioner = DefaultPartitioner()
        builders: dict[int, ChunkBuilder] = {}
        now = SYSTEM_CLOCK.now_ms()
        for row in rows:
            d = row.asDict()
            key, value = _as_bytes(d.get("key")), _as_bytes(d.get("value"))
            p = d.get("partition")
            if p is None:
                p = partitioner.partition(key, info.partitions)
            headers = _headers(d.get("headers"))
            check_record(info, p, key, record_size(key, value, headers))
            b = builders.get(p)
            if b is None:
                b = builders[p] = ChunkBuilder(info.name, p, hasher=hasher)
            ts = d.get("timestamp")
            b.append(now if ts is None else _as_millis(ts), key, value, headers)
        if not builders:
            return FileCommit(-1, None)
        objects = open_store(store)
        upload = ObjectUpload(objects, md, data_key(), holds_compacted=hasher is not None)
        with abandoning(objects, md, [upload]):
            layout = upload.write(builders[p].finish() for p in sorted(builders))
        return FileCommit(upload.file_id, layout)
    finally:
        md.close()


def pending_files(messages: list[WriterCommitMessage | None]) -> list[tuple[int, FileLayout]]:
    """The (file id, layout) of every task that wrote an object."""
    return [(m.file_id, m.layout) for m in messages
            if isinstance(m, FileCommit) and m.layout is not None]


def abandon_written(metadata_url: str, messages: list[WriterCommitMessage | None]) -> None:
    """Step 5 of objects/upload.py for a job's objects (live ones stay)."""
    md = MetadataStore.open(metadata_url)
    try:
        abandon_files(md, [file_id for file_id, _ in pending_files(messages)])
    finally:
        md.close()


class SiltWriter(DataSourceWriter):
    """Each task writes one multi-partition object; the driver commits them all at once."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        check_write_schema(schema)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_object(self.opts.store, self.opts.metadata, self.opts.topic, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = pending_files(messages)
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
        abandon_written(self.opts.metadata, messages)
