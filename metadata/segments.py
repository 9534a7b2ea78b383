"""Every conversion of a segment (`models.Segment`, the one definition of its fields): from
the object format's chunk index (agent commits, compaction outputs), to the index a ranged
read checks against, to `segments` rows and back.

Every Segment field is an attribute of `fileformat.ChunkIndex` under the same name
(tombstone_count a property there) and is copied by name. So a new field (say a producer
id) is one field in `models.Segment` plus one migration in schema.py, and the format
carries it under that name; nothing here changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import sqlalchemy as sa
from pyroaring import BitMap
from sqlalchemy.dialects import postgresql

from fileformat import ChunkIndex

from . import schema as s
from .engine import pg_arrays
from .errors import InvalidCommitError
from .models import ChunkMeta, OutputSegment, Segment, SegmentInfo, segment_columns

# A Segment's fields, in order, read off anything that has them (a ChunkIndex, a Segment).
_SEGMENT_FIELDS = tuple(f.name for f in dataclasses.fields(Segment))
_segment_of = attrgetter(*_SEGMENT_FIELDS)
# Those a ChunkIndex is constructed with (not its derived properties).
_INDEX_ARGS = tuple(f.name for f in dataclasses.fields(Segment)
                    if f.name in {g.name for g in dataclasses.fields(ChunkIndex)})
_index_args = attrgetter(*_INDEX_ARGS)
_RECORDED = tuple(name for name, _ in segment_columns())
_recorded = attrgetter(*_RECORDED)
_AT_LEAST = tuple((f.name, f.metadata["min"]) for f in dataclasses.fields(Segment)
                  if "min" in f.metadata)
_bounded = attrgetter(*(name for name, _ in _AT_LEAST))  # their values, in _AT_LEAST order
_HIGHEST_BOUND = max(low for _, low in _AT_LEAST)

# A segment row as a tuple (`segment_row`): the `segments` columns but the id, in table order.
_HEAD = ("file_id", "topic_id", "partition", "base_offset", "last_offset")
_TAIL = ("live", "created_at_ms", "cleaned_at_ms")
_PG = postgresql.dialect()  # type: ignore[no-untyped-call]
ROW_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (c.name, c.type.compile(dialect=_PG).lower()) for c in s.segments.c if c.name != "id")
if tuple(name for name, _ in ROW_COLUMNS) != (*_HEAD, *_RECORDED, *_TAIL):
    raise AssertionError(f"segments columns {ROW_COLUMNS} do not match segment_row")

_ROW_KINDS = tuple(kind for _, kind in ROW_COLUMNS)

_INFO_FIELDS = tuple(f.name for f in dataclasses.fields(SegmentInfo))
# What a SegmentInfo is read from, in its fields' order (`SegmentInfo(*row)`): a segment
# row's columns, its topic's name, its file's key and size.
# What a SegmentInfo is read from by name (`segment_info`): a segment row, its topic's name,
# its file's key and size.
INFO_COLUMNS = (*s.segments.c, s.topics.c.name.label("topic"), s.files.c.object_key,
                s.files.c.size.label("file_size"))
# What a snapshot reads of a live segment (`SNAPSHOT_COLUMNS`, `segments` columns only): the
# SegmentInfo fields from `partition` to `topic_id`, then created_at_ms. `live_segment_info`
# adds the rest: its topic's name, live, its file's key and size.
_SNAPSHOT_FIELDS = (*_INFO_FIELDS[1:_INFO_FIELDS.index("live")], "created_at_ms")
SNAPSHOT_COLUMNS = tuple(s.segments.c[name] for name in _SNAPSHOT_FIELDS)
_FILLED_IN = ("topic", *_SNAPSHOT_FIELDS[:-1], "live", "created_at_ms", "object_key",
              "file_size")
if _FILLED_IN != _INFO_FIELDS:
    raise AssertionError(f"SegmentInfo fields {_INFO_FIELDS} do not match live_segment_info")


def chunk_meta(c: ChunkIndex) -> ChunkMeta:
    """What an agent commit records of one chunk of a written object."""
    return ChunkMeta(*(*_segment_of(c), c.offset_span))  # inherited fields come first


def chunk_index(meta: ChunkMeta) -> ChunkIndex:
    """A chunk index `chunk_meta` reads `meta` off (its tombstone count as that many
    tombstones): the chunks of a `FileLayout` for a file described rather than written
    (tests, the planning benchmark)."""
    return ChunkIndex(**dict(zip(_INDEX_ARGS, _index_args(meta), strict=True)),
                      base_offset=0, offset_span=meta.offset_span, offsets=BitMap(),
                      tombstones=BitMap(range(meta.tombstone_count)))


def output_segment(c: ChunkIndex, base_offset: int, last_offset: int,
                   cleaned_at_ms: int | None) -> OutputSegment:
    """What a compaction commit records of one output chunk, placed at its offsets."""
    return OutputSegment(*(*_segment_of(c), base_offset, last_offset, cleaned_at_ms))


def expected_index(seg: SegmentInfo) -> ChunkIndex:
    """What the chunk's own index says, as recorded at commit: lets a ranged read check the
    batch framing CRC and counts without fetching the object's META section."""
    return ChunkIndex(**dict(zip(_INDEX_ARGS, _index_args(seg), strict=True)),
                      base_offset=seg.base_offset, offset_span=seg.offset_span,
                      offsets=BitMap(), tombstones=BitMap())


def index_mismatch(seg: Segment, index: ChunkIndex) -> list[str]:
    """The Segment fields on which a stored segment and its chunk's index in the object
    disagree (none: the row describes the chunk the object holds)."""
    return [name for name, ours, theirs in zip(_SEGMENT_FIELDS, _segment_of(seg),
                                               _segment_of(index), strict=True)
            if ours != theirs]


def check_segment(seg: Segment, where: str) -> None:
    """InvalidCommitError if a position or count of `seg` is below its bound (0).
    (An agent commit checks ~1,000 segments: one attrgetter call when every value is at
    or above every bound, the usual case.)"""
    if min(_bounded(seg)) >= _HIGHEST_BOUND:
        return
    for name, low in _AT_LEAST:
        if getattr(seg, name) < low:
            raise InvalidCommitError(f"{where}: negative position or count ({name})")


def segment_row(seg: Segment, file_id: int, topic_id: int, base_offset: int,
                last_offset: int, created_at_ms: int,
                cleaned_at_ms: int | None) -> tuple[Any, ...]:
    """A new live segment's row for `insert_segments` (columns in `ROW_COLUMNS` order)."""
    return (file_id, topic_id, seg.partition, base_offset, last_offset, *_recorded(seg),
            True, created_at_ms, cleaned_at_ms)


def insert_segments(conn: sa.Connection, pg: bool, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert segment rows (from `segment_row`) in one driver call.

    An agent commit inserts one row per partition (1,000 and more): SQLAlchemy's
    per-row parameter processing and psycopg's per-row pipelined executemany cost tens
    of milliseconds per commit, so this goes to the driver directly — SQLite's C
    executemany over tuples, PostgreSQL one INSERT … SELECT FROM unnest(column arrays).
    """
    if not rows:
        return
    cols = ", ".join(f'"{name}"' for name, _ in ROW_COLUMNS)
    if pg:
        arrays = ", ".join(f"%s::{kind}[]" for _, kind in ROW_COLUMNS)
        conn.exec_driver_sql(f"INSERT INTO segments ({cols}) SELECT * FROM unnest({arrays})",
                             pg_arrays(zip(*rows, strict=True), _ROW_KINDS))
    else:
        marks = ", ".join("?" for _ in ROW_COLUMNS)
        conn.exec_driver_sql(f"INSERT INTO segments ({cols}) VALUES ({marks})", list(rows))


def live_segment_info(row: Sequence[Any], topic: str, object_key: str,
                      file_size: int | None) -> SegmentInfo:
    """A SegmentInfo from a row of `SNAPSHOT_COLUMNS` (a plain tuple: a first snapshot
    builds one per live segment) and what it does not hold."""
    return SegmentInfo(*(topic, *row[:-1], True, row[-1], object_key, file_size))


def segment_infos(rows: Sequence[sa.Row[Any]]) -> list[SegmentInfo]:
    """`segment_info` of many rows of one result: their columns found by name once, then
    each row read by position (a fetch builds thousands)."""
    if not rows:
        return []
    names = rows[0]._fields
    at = [names.index(name) for name in _INFO_FIELDS]
    return [SegmentInfo(*[row[i] for i in at]) for row in rows]


def segment_info(row: sa.Row[Any]) -> SegmentInfo:
    """A SegmentInfo from a row holding (at least) `INFO_COLUMNS` by name. A plain dict, not
    the row's mapping: reads build thousands of these, and name lookups on a row mapping
    cost several times more."""
    d = dict(zip(row._fields, row, strict=True))
    return SegmentInfo(*[d[name] for name in _INFO_FIELDS])
