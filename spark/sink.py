"""Structured Streaming: `df.writeStream.format("silt")`, an exactly-once sink.

Each micro-batch's tasks write their rows as `format("silt")`'s batch writer does
(`datasource.write_object`: one multi-partition object per task through the object-write
primitive, registered pending). The driver's `commit(messages, batch_id)` then makes them
all visible in ONE metadata transaction that also records the batch id as the sink's last
(`MetadataStore.commit_sink_batch`, schema v12). Spark replays the last batch after a driver
failure (its offsets were logged, its commit was not); the replay's commit finds the batch
id recorded and commits nothing, and its objects are abandoned (GC deletes them). With a
replayable source (`readStream.format("silt")`, or any whose replays read the same rows),
every input row is in the topic exactly once.

A crash at each step (objects/upload.py has the object's own steps):
- before or during the tasks: pending objects nobody reads; GC deletes them. Spark replays.
- in the commit, before its COMMIT: as above; the replay commits.
- after the COMMIT, before Spark logs the batch done: the replay's commit is refused as a
  duplicate (its new objects abandoned): nothing twice.

The sink is named by the option `queryId`: any name unique to the query and kept across its
restarts (the checkpoint's path will do), under which the sink's last batch is recorded. It
is required because Spark hands a Python sink neither its query id nor its checkpoint
location; two queries under one name would drop each other's batches.
Rows: `value` (required), `key`, `partition` (optional: else Kafka's
partitioner), `headers` (an array of key/value structs as Kafka's sink takes it, or a map),
`timestamp` (optional); the produce rules apply (compacted topics refuse null keys).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from metadata import MetadataStore
from metadata.errors import CommitUnknownError
from metadata.schema import FILE_LIVE
from objects import abandon_files

from .datasource import (
    OPT_TOPIC,
    abandon_written,
    case_insensitive,
    check_write_schema,
    locations,
    pending_files,
    write_object,
)

OPT_QUERY_ID = "queryId"


def sink_id(options: Mapping[str, str]) -> str:
    """The sink's name, stable across restarts: the option `queryId`."""
    name = case_insensitive(options).get(OPT_QUERY_ID)
    if not name:
        raise ValueError("writeStream.format('silt') needs option 'queryId': a name unique to"
                         " this query and kept across its restarts (e.g. its checkpoint"
                         " path), under which the sink records the batches it committed")
    return name


class SiltStreamWriter(DataSourceStreamWriter):
    """The `silt` streaming sink (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        options = case_insensitive(options)
        topic = options.get(OPT_TOPIC)
        if not topic:
            raise ValueError("option 'topic' is required for writeStream.format('silt')")
        check_write_schema(schema)
        self.topic = topic
        self.store, self.metadata = locations(options)
        self.sink = sink_id(options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_object(self.store, self.metadata, self.topic, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = pending_files(messages)
        md = MetadataStore.open(self.metadata)
        try:
            try:
                done = md.commit_sink_batch(self.sink, batchId, files)
            except CommitUnknownError:
                # The read-back could not tell: the batch is committed if its files are live.
                if files and md.get_file(files[0][0]).state == FILE_LIVE:
                    return
                raise
            if done is None:  # committed before this replay: its objects go to GC
                abandon_files(md, [file_id for file_id, _ in files])
        finally:
            md.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abandon_written(self.metadata, messages)
