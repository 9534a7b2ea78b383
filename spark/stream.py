"""Structured Streaming: `spark.readStream.format("silt")`, a source with Spark's Kafka source
options and offsets, read straight from the object store (no agent in the path).

Offsets are Kafka's: per topic, per partition, the next offset to read, as JSON
(`{"clicks": {"0": 42, "1": 17}}`). The planning side runs on the driver, in the one Python
process Spark keeps for the source, so it keeps one metadata handle (incremental snapshots)
and the trigger clock across micro-batches:

- `initialOffset`: `startingTimestamp` > `startingOffsetsByTimestamp` > `startingOffsets`
  (earliest, latest, or JSON per partition with -2 earliest and -1 latest), as Kafka ranks
  them. Used only by a query's first batch; a restart resumes from Spark's checkpoint.
- `latestOffset(start, limit)`: the high watermarks of every subscribed partition from ONE
  metadata snapshot (partitions created since are picked up; topics too, with a pattern),
  limited by the read limit: Kafka's pro-rated `maxOffsetsPerTrigger`, the same by bytes
  for `maxBytesPerTrigger`, and `minOffsetsPerTrigger` held back until `maxTriggerDelay`
  has passed. `Trigger.AvailableNow` reads up to the offsets of its first call.
- `partitions(start, end)`: from that same snapshot (a fresh one when replaying a batch
  after a restart), the segments holding each partition's [start, end), planned per object
  (`reading.plan_reads`: one ranged GET per run of wanted segments of an object).
- `kafka.isolation.level=read_committed`: batches end at each partition's last stable
  offset, and the records of aborted transactions are left out (the metadata store's
  aborted-transaction index, read once per batch for all its partitions), as a
  read_committed Kafka consumer reads; control batches are never records.
- data loss, as Spark's Kafka source reports it: offsets removed by retention or
  DeleteRecords before they were read, a partition or topic gone, an offset gone backwards
  (a topic deleted and created again), a new partition not starting at 0. With
  `failOnDataLoss` (default true) the batch fails with DataLossError; without, it reads what
  is left. Records removed by compaction are no loss: a compacted topic is read through its
  gaps, as Kafka's consumer reads it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from clock import SYSTEM_CLOCK, Clock
from metadata import MetadataStore, PartitionInfo, SegmentInfo, Snapshot
from objectstore import StoreSpec, open_store

from .errors import DataLossError
from .reading import ReadTask, arrow_batches, plan_reads, read_task, refinder, wanted_from

log = logging.getLogger(__name__)

TP = tuple[str, int]
OffsetMap = dict[TP, int]
EARLIEST, LATEST = -2, -1  # in startingOffsets JSON, as Kafka's
HIDDEN_TOPIC = "/"  # a topic being created or deleted (metadata.schema)
DEFAULT_MAX_TRIGGER_DELAY = "15m"  # Kafka's
_TIME = re.compile(r"(-?[0-9]+)\s*([a-z]+)?")
_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "d": 86_400_000}


def time_ms(text: str) -> int:
    """A Spark time string (`15m`, `30s`, `500ms`, `2h`; no unit: ms) in milliseconds."""
    m = _TIME.fullmatch(text.strip().lower())
    if m is None or (m.group(2) or "ms") not in _UNIT_MS:
        raise ValueError(f"not a time: {text!r} (e.g. 500ms, 30s, 15m, 2h)")
    return int(int(m.group(1)) * _UNIT_MS[m.group(2) or "ms"])


def to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Offsets as Kafka's source writes them: {topic: {"partition": offset}}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(data: Mapping[str, Any]) -> OffsetMap:
    """Kafka-style offsets JSON (a dict) back into {(topic, partition): offset}."""
    out: OffsetMap = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ValueError(f"offsets of topic {topic!r} must be an object, not {parts!r}")
        for partition, offset in parts.items():
            out[(topic, int(partition))] = int(offset)
    return out


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise ValueError(f"option {name!r} must be true or false, not {raw!r}")
    return raw.lower() == "true"


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    value = int(raw)
    if value <= 0:
        raise ValueError(f"option {name!r} must be positive, not {raw!r}")
    return value


@dataclass(frozen=True)
class Starting:
    """Where a new query starts: `kind` earliest | latest | offsets | timestamps | timestamp."""

    kind: str
    offsets: OffsetMap = field(default_factory=dict)  # offsets, or timestamps per partition
    timestamp: int = -1  # the global startingTimestamp
    by_timestamp_strategy: str = "error"  # none matched: fail (error) or start at latest


@dataclass(frozen=True)
class StreamOptions:
    """A streaming read's options, parsed on the driver (Spark's Kafka source names)."""

    store: StoreSpec
    metadata: str
    topics: tuple[str, ...] | None  # topic / topics (subscribe)
    pattern: str | None  # topicPattern (subscribePattern): whole topic names
    starting: Starting
    max_offsets: int | None
    max_bytes: int | None
    min_offsets: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    read_committed: bool = False  # kafka.isolation.level=read_committed

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        from .datasource import case_insensitive, locations

        options = case_insensitive(options)
        given = {k: options[k] for k in ("topic", "topics", "subscribe", "topicPattern",
                                         "subscribePattern") if options.get(k)}
        if len(given) != 1:
            raise ValueError("format('silt') streams need exactly one of the options 'topic',"
                             " 'topics' (or 'subscribe': a comma-separated list) and"
                             " 'topicPattern' (or 'subscribePattern': a regex of whole"
                             f" topic names); given: {sorted(given) or 'none'}")
        (name, value), = given.items()
        pattern = value if name in ("topicPattern", "subscribePattern") else None
        if pattern is not None:
            re.compile(pattern)
        topics = None if pattern is not None else tuple(
            t.strip() for t in value.split(",") if t.strip())
        store, metadata = locations(options)
        min_offsets = _positive(options, "minOffsetsPerTrigger")
        return cls(
            store=store, metadata=metadata, topics=topics, pattern=pattern,
            starting=_starting(options),
            max_offsets=_positive(options, "maxOffsetsPerTrigger"),
            max_bytes=_positive(options, "maxBytesPerTrigger"),
            min_offsets=min_offsets,
            max_trigger_delay_ms=time_ms(options.get("maxTriggerDelay",
                                                     DEFAULT_MAX_TRIGGER_DELAY)),
            fail_on_data_loss=_flag(options, "failOnDataLoss", True),
            include_headers=_flag(options, "includeHeaders", False),
            read_committed=_isolation(options),
        )

    def subscribed(self, topic: str) -> bool:
        if topic.startswith(HIDDEN_TOPIC):
            return False
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return self.topics is not None and topic in self.topics


def _isolation(options: Mapping[str, str]) -> bool:
    """Whether `kafka.isolation.level` (the consumer setting Kafka's source passes on) is
    read_committed; read_uncommitted is the default, as Kafka's."""
    level = options.get("kafka.isolation.level", "read_uncommitted").lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise ValueError("option 'kafka.isolation.level' must be read_uncommitted or"
                         f" read_committed, not {level!r}")
    return level == "read_committed"


def _starting(options: Mapping[str, str]) -> Starting:
    strategy = options.get("startingOffsetsByTimestampStrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ValueError("option 'startingOffsetsByTimestampStrategy' must be error or latest,"
                         f" not {strategy!r}")
    if options.get("startingTimestamp"):
        return Starting("timestamp", timestamp=int(options["startingTimestamp"]),
                        by_timestamp_strategy=strategy)
    if options.get("startingOffsetsByTimestamp"):
        return Starting("timestamps", from_json(json.loads(options["startingOffsetsByTimestamp"])),
                        by_timestamp_strategy=strategy)
    raw = options.get("startingOffsets", "latest").strip()
    if raw.lower() in ("earliest", "latest"):
        return Starting(raw.lower())
    try:
        return Starting("offsets", from_json(json.loads(raw)))
    except (ValueError, TypeError) as exc:
        raise ValueError("option 'startingOffsets' must be earliest, latest or JSON such as"
                         f' {{"topic": {{"0": 23, "1": -2}}}}: {exc}') from exc


def rate_limit(limit: float, start: OffsetMap, end: OffsetMap, earliest: OffsetMap,
               weight: Mapping[TP, float] | None = None) -> OffsetMap:
    """Kafka's `rateLimit`: every partition reads the same fraction (limit / total) of what
    it has to read, measured in offsets or, given `weight`, in its bytes; at least one
    offset for any partition that has some; never past `end`. A partition missing from
    `start` (new) begins at `earliest`."""
    sizes = {tp: e - start.get(tp, earliest.get(tp, 0)) for tp, e in end.items()}
    sizes = {tp: n for tp, n in sizes.items() if n > 0}
    total = sum(weight.get(tp, 0.0) for tp in sizes) if weight is not None else sum(
        sizes.values())
    if total < 1 or total <= limit:
        return dict(end)
    out = dict(end)
    for tp, n in sizes.items():
        share = n * limit / total
        step = int(share) if share >= 1 else 1
        out[tp] = min(end[tp], start.get(tp, earliest.get(tp, 0)) + step)
    return out


class SiltStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The `silt` streaming source (see the module docstring). Planning state lives on the
    driver; `read` runs on executors with only the options."""

    def __init__(self, opts: StreamOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.opts = opts
        self._clock = clock
        self._md: MetadataStore | None = None
        self._snap: Snapshot | None = None
        self._segments: dict[TP, list[SegmentInfo]] | None = None
        self._planned: tuple[OffsetMap, Snapshot] | None = None  # latestOffset's answer
        self._latest: OffsetMap = {}
        self._last_trigger_ms = 0
        self._available_now = False
        self._target: OffsetMap | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the options only (no database handle, no snapshot)."""
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    # ---------------------------------------------------------------- driver: planning

    def _metadata(self) -> MetadataStore:
        if self._md is None:
            self._md = MetadataStore.open(self.opts.metadata)
        return self._md

    def _snapshot(self) -> Snapshot:
        """A new metadata snapshot (incremental after the first: only changed files)."""
        self._snap = self._metadata().snapshot()
        self._segments = None
        return self._snap

    def _subscribed(self, snap: Snapshot) -> dict[TP, PartitionInfo]:
        return {(p.topic, p.partition): p for p in snap.partitions
                if self.opts.subscribed(p.topic)}

    def _segments_of(self, snap: Snapshot, tp: TP) -> list[SegmentInfo]:
        """The snapshot's live segments of one partition, in offset order."""
        if self._segments is None or snap is not self._snap:
            by_tp: dict[TP, list[SegmentInfo]] = {}
            for held in snap.file_segments.values():
                for s in held:
                    if self.opts.subscribed(s.topic):
                        by_tp.setdefault((s.topic, s.partition), []).append(s)
            for found in by_tp.values():
                found.sort(key=lambda s: s.base_offset)
            self._segments = by_tp
            if snap is not self._snap:
                self._snap = snap
        return self._segments.get(tp, [])

    def _loss(self, message: str) -> None:
        """Kafka's reportDataLoss: DataLossError, or a warning when failOnDataLoss is false."""
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{message}. Some data may have been lost: the query fails"
                                " (failOnDataLoss=true); set failOnDataLoss to false to go"
                                " on with what is left")
        log.warning("%s. Some data may have been lost (failOnDataLoss=false: going on)",
                    message)

    def _end(self, p: PartitionInfo) -> int:
        """Where a partition's readable log ends: its last stable offset for read_committed
        (records after an open transaction's first wait for it to end), else the high
        watermark."""
        return p.last_stable_offset if self.opts.read_committed else p.next_offset

    def initialOffset(self) -> dict[str, Any]:
        snap = self._snapshot()
        parts = self._subscribed(snap)
        start = self.opts.starting
        if start.kind == "earliest":
            offsets = {tp: p.log_start_offset for tp, p in parts.items()}
        elif start.kind == "latest":
            offsets = {tp: self._end(p) for tp, p in parts.items()}
        elif start.kind == "offsets":
            offsets = self._specific(parts, start.offsets)
        else:
            offsets = self._by_time(parts, start)
        return to_json(offsets)

    def _specific(self, parts: Mapping[TP, PartitionInfo], given: OffsetMap) -> OffsetMap:
        """startingOffsets JSON: every subscribed partition named (as Kafka requires); -2
        earliest, -1 latest; an offset outside the log is data loss, then clamped."""
        if set(given) != set(parts):
            raise ValueError("startingOffsets with specific offsets must name every subscribed"
                             " partition (-2: earliest, -1: latest); given"
                             f" {sorted(given)}, subscribed {sorted(parts)}")
        out: OffsetMap = {}
        for tp, offset in given.items():
            p = parts[tp]
            if offset == EARLIEST:
                out[tp] = p.log_start_offset
            elif offset == LATEST:
                out[tp] = p.next_offset
            else:
                out[tp] = min(max(offset, p.log_start_offset), p.next_offset)
                if out[tp] != offset:
                    self._loss(f"startingOffsets for {tp[0]}/{tp[1]} was {offset}, outside"
                               f" the log [{p.log_start_offset}, {p.next_offset}]")
        return out

    def _by_time(self, parts: Mapping[TP, PartitionInfo], start: Starting) -> OffsetMap:
        """The first offset of each partition whose timestamp is >= the given one (Kafka's
        ListOffsets by timestamp); none such: an error, or the latest offset."""
        from agent.protocol.apis.list_offsets import offset_for_time
        from agent.protocol.cache import SegmentCache

        if start.kind == "timestamps" and not set(start.offsets) <= set(parts):
            raise ValueError("startingOffsetsByTimestamp names partitions not subscribed: "
                             f"{sorted(set(start.offsets) - set(parts))}")
        cache = SegmentCache(open_store(self.opts.store), 0)
        out: OffsetMap = {}
        for tp, p in parts.items():
            ts = start.timestamp if start.kind == "timestamp" else start.offsets.get(tp)
            if ts is None:  # not named: Kafka starts it at the latest offset
                out[tp] = p.next_offset
                continue
            found = offset_for_time(self._metadata(), cache, tp[0], tp[1],
                                    p.log_start_offset, ts)
            if found is None and start.by_timestamp_strategy == "error":
                raise ValueError(f"no offset of {tp[0]}/{tp[1]} has a timestamp >= {ts}"
                                 " (startingOffsetsByTimestampStrategy=latest starts such"
                                 " partitions at the latest offset)")
            out[tp] = p.next_offset if found is None else found[1]
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        """The options' limit (Spark hands it back to `latestOffset`, which applies every
        limit the options set; ReadAllAvailable from Spark overrides them all)."""
        o = self.opts
        if o.max_offsets is not None:
            return ReadMaxRows(o.max_offsets)
        if o.max_bytes is not None:
            return ReadMaxBytes(o.max_bytes)
        if o.min_offsets is not None:
            return ReadMinRows(o.min_offsets)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        snap = self._snapshot()
        parts = self._subscribed(snap)
        latest = {tp: self._end(p) for tp, p in parts.items()}
        if self._available_now:  # the target: what existed at the first call, no more
            if self._target is None:
                self._target = latest
            latest = {tp: min(o, latest.get(tp, o)) for tp, o in self._target.items()}
        self._latest = latest
        begin = from_json(start)
        earliest = {tp: p.log_start_offset for tp, p in parts.items()}
        end = latest if isinstance(limit, ReadAllAvailable) else self._limited(
            begin, latest, earliest, snap)
        self._planned = (end, snap)
        return to_json(end)

    def _limited(self, begin: OffsetMap, latest: OffsetMap, earliest: OffsetMap,
                 snap: Snapshot) -> OffsetMap:
        o = self.opts
        if o.min_offsets is not None and not self._available_now:
            now = self._clock.now_ms()
            if now - self._last_trigger_ms < o.max_trigger_delay_ms:
                new = sum(e - begin.get(tp, 0) for tp, e in latest.items())
                if new < o.min_offsets:
                    return begin  # too little yet: no batch (Kafka's delayBatch)
            self._last_trigger_ms = now
        end = latest
        if o.max_offsets is not None:
            end = rate_limit(o.max_offsets, begin, end, earliest)
        if o.max_bytes is not None:
            weight = {tp: self._bytes(snap, tp, begin.get(tp, earliest.get(tp, 0)), e)
                      for tp, e in end.items()}
            end = rate_limit(o.max_bytes, begin, end, earliest, weight)
        return end

    def _bytes(self, snap: Snapshot, tp: TP, lo: int, hi: int) -> float:
        """The stored bytes of offsets [lo, hi) of a partition (partial segments pro rata)."""
        total = 0.0
        for s in self._segments_of(snap, tp):
            a, b = max(lo, s.base_offset), min(hi, s.last_offset + 1)
            if a < b:
                total += s.data_len * (b - a) / (s.last_offset + 1 - s.base_offset)
        return total

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, until = from_json(start), from_json(end)
        if self._planned is not None and self._planned[0] == until:
            snap = self._planned[1]  # latestOffset's snapshot: one snapshot per batch
        else:
            snap = self._snapshot()  # a batch replayed after a restart
        parts = self._subscribed(snap)
        ranges: dict[TP, tuple[int, int]] = {}
        for tp, e in sorted(until.items()):
            p = parts.get(tp)
            name = f"{tp[0]}/{tp[1]}"
            if p is None:
                self._loss(f"partition {name} is gone")
                continue
            s = begin.get(tp)
            if s is None:  # a partition new since the last batch: from its start
                s = p.log_start_offset
                if s != 0:
                    self._loss(f"added partition {name} starts from {s} instead of 0")
            if e < s:
                self._loss(f"{name}'s offset went back from {s} to {e}")
                continue
            if s < p.log_start_offset:
                self._loss(f"offsets {s}..{p.log_start_offset - 1} of {name} were removed"
                           " (retention or DeleteRecords) before they were read")
                s = p.log_start_offset
            if s < e:
                ranges[tp] = (s, e)
        gone = sorted(set(begin) - set(until))
        if gone:
            self._loss(f"partitions {', '.join(f'{t}/{p}' for t, p in gone)} are gone")
        aborted = self._metadata().aborted_transactions(
            [(t, p, s, e) for (t, p), (s, e) in ranges.items()]
        ) if self.opts.read_committed else {}
        wanted = []
        for tp, (s, e) in ranges.items():
            wanted += wanted_from(self._segments_of(snap, tp), s, e, aborted.get(tp, ()))
        return list(plan_reads(wanted))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, as Kafka's source's do."""

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None

    # ---------------------------------------------------------------- executors: reading

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReadTask)
        store = open_store(self.opts.store)
        refind = refinder(self.opts.metadata, self.opts.fail_on_data_loss)
        yield from arrow_batches(read_task(store, partition, refind),
                                 self.opts.include_headers)
