"""The agent: buffers records for many topic-partitions and writes ONE object per flush.

A flush happens when `linger_ms` has passed since the first buffered record or when
`flush_bytes` are buffered, whichever comes first. A produce future resolves to the
record's offset only after both the object PUT and the metadata commit succeeded.

Buffering a produce changes nothing outside the process. A record or batch refused (bad
framing or CRC, no records, a control batch not from the coordinator, a topic rule) raises
before it takes buffer.memory room or adds a chunk to the buffer; of one call's batches for
a partition, none is buffered if one is refused (`produce_batches`).

A flush writes each object through `objects.ObjectUpload` (objects/upload.py: what a
crash at each step leaves behind): register pending, stream the chunks, finish, then
`commit_produced`, which in one transaction assigns offsets and makes every chunk visible at
once, checking and advancing idempotent producers' sequence state with them. After it, the
records are visible even if the acks are lost: a retrying non-idempotent producer then
writes duplicates, as Kafka without idempotence does; an idempotent producer's resend (to
this agent or another) is answered with the original offsets. A chunk whose idempotent
batch turns out a duplicate or out of order at commit, or whose topic or partition was
deleted (by any agent) since it was buffered, is not inserted: its bytes stay unreferenced
in the object until compaction drops them, its records fail (UnknownTopicError /
UnknownPartitionError for a deleted one), the other chunks commit. If no chunk is inserted
the commit leaves the file `abandoned`.
On an error (not a crash) the pending file is marked `abandoned` and every future of the
flush fails with `FlushError`; if the commit's outcome is unknown the file is left as it
is and the futures fail with `FlushOutcomeUnknownError`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import telemetry
from clock import SYSTEM_CLOCK, Clock
from fileformat import ChunkBuilder, KeyHasher
from fileformat.batch import CONTROL_MASK, TIMESTAMP_TYPE_MASK, read_header, stamp_log_append_time
from fileformat.compression import MAX_DECOMPRESSED
from fileformat.control import read_marker
from fileformat.errors import ProducerFieldsError
from fileformat.objectfile import MAX_OFFSET_SPAN
from fileformat.validate import CheckedBatch, check_client_batch
from metadata import MetadataStore, ProducerBatch, RejectedChunk, TopicInfo
from metadata.errors import CommitUnknownError, UnknownPartitionError, UnknownTopicError
from metadata.files import CommitHook
from metadata.models import NO_SEQUENCE, SEQUENCE_WRAP, BatchKind
from metadata.producers import Duplicate
from objects import ObjectUpload, abandoning
from objects.keys import data_key
from objectstore import ObjectStore

from .config import AgentConfig
from .errors import (
    AgentClosedError,
    BufferFullError,
    FlushError,
    FlushOutcomeUnknownError,
    NotCachedError,
    RecordTooLargeError,
)
from .idempotence import Admit, InFlight, ProducerTracker
from .rules import check_partition, check_record, record_size

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | None]]
# FlushReports an agent keeps (`Agent.reports`); `Agent.totals` counts all of them.
REPORTS_KEPT = 1000
# A compressed batch may expand to this many times max.message.bytes (at least
# DECOMPRESSED_FLOOR, at most fileformat's MAX_DECOMPRESSED) before it is refused as a bomb:
# the decompressed records are walked before anything is buffered, so this bounds the memory
# one produce can make the agent touch.
DECOMPRESSION_RATIO = 64
DECOMPRESSED_FLOOR = 64 << 20


@dataclass(frozen=True, slots=True)
class PerBatch:
    """A partition whose chunk the commit rejected: the answer of each idempotent batch by
    its relative offset (an original offset or an error), `other` for every other record."""

    answers: dict[int, int | BaseException]
    other: BaseException


# What a flush resolves to: per partition, the chunk's base offset, the flush's error, or
# per-batch answers (a chunk rejected by the idempotence check).
FlushOutcome = dict[tuple[str, int], "int | BaseException | PerBatch"]


def _resolved(tp: tuple[str, int], outcome: int | BaseException) -> ProduceFuture:
    """A produce future answered already (a resend of a committed batch, or a refusal)."""
    done: Future[FlushOutcome] = Future()
    done.set_result({tp: outcome})
    return ProduceFuture(done, tp, 0)


class ProduceFuture:
    """The outcome of one produce: resolves to the record's offset.

    All records of one flush share a single `concurrent.futures.Future`, resolved once the
    flush is done to each partition's base offset (or error); this adds the partition and
    the record's relative offset. That keeps the per-record cost of `produce` to a small
    object, and a flush to one Future whatever the number of partitions.
    """

    __slots__ = ("_flush", "_rel", "_tp", "log_append_time")

    def __init__(self, flush: Future[FlushOutcome], tp: tuple[str, int], rel: int) -> None:
        self._flush = flush
        self._tp = tp
        self._rel = rel
        # The time a LogAppendTime topic's batch was stamped with (Produce answers it as
        # log_append_time_ms), -1 otherwise (CreateTime, and resends of committed batches).
        self.log_append_time = -1

    def outcome(self, timeout: float | None = None) -> int | BaseException:
        """The offset, or the error the record failed with (the flush Future itself never
        fails): one look at the flush's outcome, where `exception` then `result` take two."""
        outcome = self._flush.result(timeout)[self._tp]
        if isinstance(outcome, PerBatch):
            return outcome.answers.get(self._rel, outcome.other)
        if isinstance(outcome, BaseException):
            return outcome
        return outcome + self._rel

    def result(self, timeout: float | None = None) -> int:
        """The offset; raises the flush's error if it failed."""
        outcome = self.outcome(timeout)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def done(self) -> bool:
        return self._flush.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        outcome = self.outcome(timeout)
        return outcome if isinstance(outcome, BaseException) else None

    def add_done_callback(self, fn: Callable[[ProduceFuture], object]) -> None:
        self._flush.add_done_callback(lambda _: fn(self))

    @property
    def flush_future(self) -> Future[FlushOutcome]:
        """The future of the flush holding the record (shared by all its records)."""
        return self._flush


@dataclass(slots=True)
class _PartitionBuffer:
    builder: ChunkBuilder
    compacted: bool
    batches: list[ProducerBatch] = field(default_factory=list)  # producers', in offset order


@dataclass(slots=True)
class _Hold:
    """buffer.memory room held for one call's batches, not appended yet."""

    left: int


@dataclass(slots=True)
class _Buffer:
    partitions: dict[tuple[str, int], _PartitionBuffer] = field(default_factory=dict)
    nbytes: int = 0
    records: int = 0
    first_at: float = 0.0
    # Resolved once the whole buffer is flushed (every object committed or failed).
    done: Future[FlushOutcome] = field(default_factory=Future)
    # Extra statements for each of its objects' commit transactions (`Agent.on_commit`).
    hooks: list[CommitHook] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FlushReport:
    """One committed object of a flush (a flush writes one, or one per partition)."""

    object_key: str
    partitions: int
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class FlushTotals:
    """Running totals over every object an agent committed; failed objects are not counted.

    Immutable: the flusher thread replaces `Agent.totals` whole, so readers on other
    threads always see one consistent set of numbers.
    """

    flushes: int = 0  # flushes that committed at least one object
    objects: int = 0
    records: int = 0
    bytes: int = 0

    def plus(self, report: FlushReport) -> FlushTotals:
        """These totals with one more committed object."""
        return FlushTotals(self.flushes, self.objects + 1, self.records + report.records,
                           self.bytes + report.bytes)


class Agent:
    """Accepts records for any topic-partitions and writes one object per flush.

    Thread-safe: any number of threads may call `produce`. One background thread flushes.
    """

    def __init__(
        self,
        store: ObjectStore,
        metadata: MetadataStore,
        config: AgentConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._metadata = metadata
        self._config = config or AgentConfig()
        self._buffer_memory = self._config.buffer_memory  # read per record: one attribute
        self._flush_bytes = self._config.flush_bytes
        self._clock = clock
        self._hasher = KeyHasher(metadata.cluster_secret())
        # Per topic: (info, compacted, max.message.bytes, LogAppendTime); the configs are
        # unpacked once so the produce hot path does not parse cleanup.policy per record.
        self._rules: dict[str, tuple[TopicInfo, bool, int, bool]] = {}
        self._rules_at = clock.monotonic()  # when the flusher last dropped them
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._buffer = _Buffer()
        self._in_flight_bytes = 0  # buffered + being flushed + held: what buffer.memory bounds
        self._on_room: Callable[[], object] | None = None
        # Buffers sealed for flushing, in produce order; flushed one after the other so that
        # offsets keep the produce order within every partition.
        self._sealed: deque[_Buffer] = deque()
        self._sealed_count = 0  # buffers sealed so far
        self._flushed_count = 0  # buffers flushed (or failed) so far
        self._closed = False
        self._error: BaseException | None = None
        # The last REPORTS_KEPT objects written (a long-running agent must not grow without
        # bound) and the running totals over every object committed.
        self.reports: deque[FlushReport] = deque(maxlen=REPORTS_KEPT)
        self.totals = FlushTotals()
        self._producers = ProducerTracker(metadata.config.producer_id_expiration_ms,
                                          clock.now_ms)
        self._thread = threading.Thread(target=self._run, name="silt-agent-flusher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ produce

    def topic(self, name: str) -> TopicInfo:
        """The topic's metadata (cached up to `topic.refresh.ms`; see `forget_topics`)."""
        rules = self._rules.get(name)
        return (rules or self._load_rules(name))[0]

    def partition_topic(self, topic: str, partition: int) -> TopicInfo:
        """The topic's metadata once `partition` is in range, reloaded once if it looks past
        the end (partitions added through another agent since it was cached); raises
        UnknownTopicError, or PartitionOutOfRangeError if the partition is still out of range."""
        return self._check_partition(self.topic(topic), partition)

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
        timestamp: int | None = None,
    ) -> ProduceFuture:
        """Buffer one record; the future resolves to its offset once it is durable and visible.

        The hot path: one cached topic lookup, the checks, then under the lock one append to
        the partition's builder (the per-record cost is what bounds ingest; keep it flat).
        """
        rules = self._rules.get(topic)
        if rules is None:
            rules = self._load_rules(topic)
        info, compacted, max_bytes, stamped = rules
        if self._closed:
            raise AgentClosedError("agent is closed")
        size = record_size(key, value, headers)
        if not 0 <= partition < info.partitions or (key is None and compacted) or (
                size > max_bytes):  # a rule may fail: the rules themselves say which
            info = self._check_partition(info, partition)
            check_record(info, partition, key, size)
        # LogAppendTime: the time the agent accepts the record (its batch is stamped with the
        # latest of them, `ChunkBuilder(log_append_time=True)`), as Kafka's broker ignores
        # the producer's for readers.
        ts = self._clock.now_ms() if timestamp is None or stamped else timestamp
        tp = (topic, partition)
        with self._lock:  # the condition's lock (its __enter__ is a Python-level call)
            if self._in_flight_bytes + size > self._buffer_memory:
                self._wait_for_room(size, None)
            buf = self._buffer
            pb = buf.partitions.get(tp)
            if pb is None:  # left empty if the append fails: a flush skips it
                pb = buf.partitions[tp] = self._new_partition_buffer(info, partition)
            rel = pb.builder.append(ts, key, value, headers)
            # _account(size), inlined: this runs once per record
            if not buf.records:
                buf.first_at = self._clock.monotonic()
                self._cond.notify_all()  # the flusher starts the linger clock
            buf.records += 1
            buf.nbytes += size
            self._in_flight_bytes += size
            if buf.nbytes >= self._flush_bytes:
                self._seal()
            return ProduceFuture(buf.done, tp, rel)

    def forget_topics(self) -> None:
        """Drop the cached topics (after a topic was deleted, grew or changed configs): the
        next produce of each reloads it from the metadata store."""
        self._rules = {}

    def _refresh_topics(self) -> None:
        """Forget the cached topics once they are `topic.refresh.ms` old (flusher thread,
        before every flush and at least every 0.5 s when idle: no cost on the produce path),
        so other agents' admin changes are seen."""
        now = self._clock.monotonic()
        if (now - self._rules_at) * 1000 >= self._config.topic_refresh_ms:
            self._rules_at = now
            self.forget_topics()

    def _load_rules(self, topic: str) -> tuple[TopicInfo, bool, int, bool]:
        info = self._metadata.get_topic(topic)
        rules = (info, info.config.compacted, info.config.max_message_bytes,
                 info.config.log_append_time)
        self._rules[topic] = rules
        return rules

    def produce_batch(self, topic: str, partition: int, raw_batch: bytes, *,
                      coordinator: bool = False) -> ProduceFuture:
        """Buffer a ready-made Kafka RecordBatch v2 (stored byte for byte).

        The future resolves to the batch's first offset. A batch of an idempotent producer
        (producerId >= 0) is checked against the producer's state (agent/idempotence.py):
        a resend of a batch in flight shares its future, a resend of a committed batch
        resolves at once to its original offset, and a sequence gap or an old epoch fails
        the future with OutOfOrderSequenceError / InvalidProducerEpochError (metadata
        errors) without buffering anything. The commit checks again (module docstring).
        A transactional batch is checked the same way; the commit also opens its producer's
        transaction on the partition (metadata/transactions.py); an idempotent batch while
        its producer's transaction is open there fails with InvalidTxnStateError.
        A control batch (a COMMIT/ABORT marker, `fileformat.control.build_marker`) is taken
        only with `coordinator` (Kafka's AppendOrigin.COORDINATOR: the transaction
        coordinator's append; the wire never passes it): it carries no sequence, is never
        a duplicate, and at commit ends its producer's open transaction on the partition
        (an older epoch fails it with InvalidProducerEpochError).
        Raised at once, nothing buffered and no buffer.memory kept: RecordTooLargeError,
        PartitionOutOfRangeError (after one reload of the topic), FormatError: every check
        of `fileformat.validate.check_client_batch` (Kafka's produce validation: CRC,
        framing of every record, counts and offset deltas, producer fields, codecs, a
        bounded decompression; NullKeyRecordsError lists a compacted topic's null-key
        records; ControlBatchError for a control batch without `coordinator`, a
        CorruptDataError for one that is not a well-formed marker).
        """
        return self.produce_batches(topic, partition, [raw_batch],
                                    coordinator=coordinator)[0]

    def produce_batches(self, topic: str, partition: int, raw_batches: Sequence[bytes], *,
                        block_s: float | None = None,
                        coordinator: bool = False,
                        cached_only: bool = False) -> list[ProduceFuture]:
        """`produce_batch` for each batch, all checked before any is buffered, so a bad one
        stores none of them (what a Produce request's partition needs).

        buffer.memory room for all of them is held first, waiting up to `block_s` seconds
        (None: max.block.ms; 0: not at all) and then raising BufferFullError with nothing
        buffered. The Kafka server passes 0 and waits on the event loop instead
        (`set_room_listener`), so that no thread blocks on a full buffer.

        `cached_only` (one batch; the server's event loop, where nothing may block): raise
        NotCachedError, nothing buffered, where the append would read the metadata store.
        """
        rules = self._rules.get(topic)
        if cached_only and (rules is None or len(raw_batches) != 1
                            or partition >= rules[0].partitions):
            raise NotCachedError(f"{topic}/{partition} is not cached")
        # `partition_topic`, its cached case inlined (this runs once per produced batch)
        info, compacted, max_bytes, stamped = rules or self._load_rules(topic)
        if self._closed or not 0 <= partition < info.partitions:
            info = self._check_partition(info, partition)
            compacted, max_bytes = info.config.compacted, info.config.max_message_bytes
            stamped = info.config.log_append_time
        checked = [self._check_batch(info, raw, compacted, max_bytes, coordinator)
                   for raw in raw_batches]
        if stamped:
            raw_batches, checked = _stamped(raw_batches, checked, self._clock.now_ms())
        hold = _Hold(sum(map(len, raw_batches)))
        with self._lock:  # the condition's lock (its __enter__ is a Python-level call)
            if self._in_flight_bytes + hold.left > self._buffer_memory:  # else room now
                self._wait_for_room(hold.left, block_s)
            self._in_flight_bytes += hold.left
        try:
            return [self._produce_checked(info, partition, raw, batch, hold, cached_only)
                    for raw, batch in zip(raw_batches, checked, strict=True)]
        finally:  # room held for batches not buffered (resends, refusals) is given back
            if hold.left:
                with self._lock:
                    self._in_flight_bytes -= hold.left
                    self._cond.notify_all()
                self._room_freed()

    def set_room_listener(self, fn: Callable[[], object] | None) -> None:
        """Call `fn()` (from the flusher's or a producer's thread) whenever buffer.memory
        room is freed, so that a produce waiting for room elsewhere can try again."""
        self._on_room = fn

    @property
    def buffer_used(self) -> int:
        """Bytes of buffer.memory in use: buffered, being flushed, or held for an append."""
        return self._in_flight_bytes

    def _check_batch(self, info: TopicInfo, raw_batch: bytes, compacted: bool,
                     max_bytes: int, coordinator: bool = False) -> CheckedBatch:
        """The batch checked (for the chunk builder to take without checking again) once it
        passes the topic's rules (see `produce_batch`; `compacted` and `max_bytes` are the
        topic's cleanup.policy and max.message.bytes) and Kafka's produce validation
        (`check_client_batch`), so that appending it cannot fail. A compacted topic's batch
        is decoded here (the builder reuses the records for the key hashes). Control
        batches only from the `coordinator`, and only well-formed markers."""
        if len(raw_batch) > max_bytes:
            raise RecordTooLargeError(
                f"batch of {len(raw_batch)} bytes exceeds max.message.bytes="
                f"{max_bytes} of topic {info.name!r}"
            )
        limit = min(MAX_DECOMPRESSED, max(DECOMPRESSED_FLOOR, DECOMPRESSION_RATIO * max_bytes))
        checked = check_client_batch(raw_batch, compacted, null_keys=compacted, limit=limit,
                                     control=coordinator)
        header = checked[0]
        if header.attributes & CONTROL_MASK:  # the coordinator's marker (`is_control`, inline)
            if header.producer_id < 0 or not header.is_transactional:
                raise ProducerFieldsError("a control batch must be transactional and carry"
                                          " a producer id")
            read_marker(raw_batch, header)  # CorruptDataError unless a COMMIT/ABORT marker
        return checked

    def _produce_checked(self, info: TopicInfo, partition: int, raw_batch: bytes,
                         checked: CheckedBatch, hold: _Hold,
                         cached_only: bool = False) -> ProduceFuture:
        topic = info.name
        header = checked[0]
        if header.producer_id < 0:
            with self._lock:
                return self._append_batch(info, partition, raw_batch, checked, None, hold)
        key = (header.producer_id, topic, partition)
        if header.is_control:  # no sequence to check here: the commit checks its epoch
            kind = BatchKind.COMMIT if read_marker(raw_batch, header).commit else BatchKind.ABORT
            marker = ProducerBatch(header.producer_id, header.producer_epoch, NO_SEQUENCE,
                                   NO_SEQUENCE, 0, kind)
            with self._lock:
                return self._append_batch(info, partition, raw_batch, checked, (key, marker),
                                          hold)
        batch = ProducerBatch(header.producer_id, header.producer_epoch, header.base_sequence,
                              (header.base_sequence + header.last_offset_delta)
                              % SEQUENCE_WRAP, 0,
                              BatchKind.TRANSACTIONAL if header.is_transactional
                              else BatchKind.IDEMPOTENT)
        tp = (topic, partition)
        reloaded = False
        while True:
            with self._lock:  # check and append under one hold of the lock (room is held)
                decision = self._producers.check(key, batch, reloaded)
                if isinstance(decision, Admit):
                    return self._append_batch(info, partition, raw_batch, checked,
                                              (key, batch), hold)
                if isinstance(decision, InFlight):
                    done, rel = decision.handle
                    return ProduceFuture(done, tp, rel)
            if isinstance(decision, Duplicate):
                return _resolved(tp, decision.base_offset)
            if isinstance(decision, Exception):
                return _resolved(tp, decision)
            # Not known here, or refused on what this agent knew: read the committed state
            # (nothing of the call is buffered yet when `cached_only`: it has one batch).
            if cached_only:
                raise NotCachedError(f"producer {key[0]}'s state on {topic}/{partition}")
            state = self._metadata.producer_state(*key)
            with self._lock:
                self._producers.learn(key, state)
            reloaded = True

    def _append_batch(self, info: TopicInfo, partition: int, raw_batch: bytes,
                      checked: CheckedBatch,
                      idempotent: tuple[tuple[int, str, int], ProducerBatch] | None,
                      hold: _Hold) -> ProduceFuture:
        """Append a checked batch to the buffer (holding the condition), in room taken from
        `hold` (so the idempotent path never waits between its check and this). The room is
        taken, and a new partition's chunk added to the buffer, only once the batch is in."""
        tp = (info.name, partition)
        pb = self._buffer.partitions.get(tp)
        if pb is not None and (pb.builder.next_offset + checked[0].last_offset_delta + 1
                               > MAX_OFFSET_SPAN):
            self._seal()  # the chunk's offsets are used up: the batch starts the next buffer
            pb = None
        fresh = pb is None
        if pb is None:
            pb = self._new_partition_buffer(info, partition)
        first, _count = pb.builder.append_batch(raw_batch, checked)
        if fresh:
            self._buffer.partitions[tp] = pb
        hold.left -= len(raw_batch)
        done = self._buffer.done  # before _account, which may seal this buffer
        if idempotent is not None:
            key, batch = idempotent
            placed = replace(batch, offset_delta=first)
            pb.batches.append(placed)
            if not placed.is_marker:  # a marker is never a resend: nothing to answer
                self._producers.add(key, placed, (done, first))
        self._account(len(raw_batch), held=True)
        appended = ProduceFuture(done, tp, first)
        header = checked[0]
        if header.attributes & TIMESTAMP_TYPE_MASK:  # stamped here: clients' are refused
            appended.log_append_time = header.max_timestamp
        return appended

    def on_commit(self, produced: ProduceFuture, hook: CommitHook) -> bool:
        """Run `hook` in the metadata commit transaction of the flush that holds `produced`
        (each of its objects' commits, `metadata.files.CommitHook`: a transaction
        coordinator completes the transactions whose markers it holds). False if that
        flush has begun already (the hook will not run: the caller tries again later)."""
        with self._cond:
            for buf in (self._buffer, *self._sealed):
                if buf.done is produced.flush_future:
                    if all(h is not hook for h in buf.hooks):
                        buf.hooks.append(hook)
                    return True
        return False

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record buffered before this call has been flushed (or failed)."""
        with self._cond:
            self._seal()
            target = self._sealed_count
            if not self._cond.wait_for(lambda: self._flushed_count >= target, timeout):
                raise TimeoutError("agent flush did not finish in time")

    def close(self) -> None:
        """Flush what is buffered, then stop the flusher thread. Idempotent."""
        with self._cond:
            if self._closed:
                return
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _check_partition(self, info: TopicInfo, partition: int) -> TopicInfo:
        """The topic's info once `partition` is in range (reloaded if it looks past the end:
        partitions added through another agent); raises PartitionOutOfRangeError if not."""
        if self._closed:
            raise AgentClosedError("agent is closed")
        if partition >= info.partitions:  # grown since cached (CreatePartitions elsewhere)?
            info = self._load_rules(info.name)[0]
        check_partition(info, partition)
        return info

    def _new_partition_buffer(self, info: TopicInfo, partition: int) -> _PartitionBuffer:
        """A chunk for the partition (not in the buffer yet)."""
        builder = ChunkBuilder(
            info.name,
            partition,
            hasher=self._hasher if info.config.compacted else None,
            compression=self._config.compression,
            log_append_time=info.config.log_append_time,
        )
        return _PartitionBuffer(builder, info.config.compacted)

    def _wait_for_room(self, size: int, block_s: float | None) -> None:
        """Wait (holding the condition) until `size` more bytes fit in buffer.memory, up to
        `block_s` seconds (None: max.block.ms); BufferFullError if they don't by then."""
        limit = self._config.buffer_memory
        if size > limit:
            raise RecordTooLargeError(f"record of {size} bytes exceeds buffer.memory={limit}")
        if self._in_flight_bytes + size <= limit:  # room now: no deadline to compute
            return
        block_ms = self._config.max_block_ms if block_s is None else block_s * 1000
        deadline = self._clock.monotonic() + block_ms / 1000
        while self._in_flight_bytes + size > limit:
            if self._closed:
                raise AgentClosedError("agent is closed")
            self._cond.notify_all()  # make sure the flusher runs
            remaining = deadline - self._clock.monotonic()
            if (remaining <= 0 or not self._clock.wait(self._cond, remaining)) and (
                self._in_flight_bytes + size > limit
            ):
                    raise BufferFullError(
                        f"buffer.memory={limit} bytes stayed full for {block_ms:.0f} ms")

    def _room_freed(self) -> None:
        listener = self._on_room
        if listener is not None:
            listener()

    def _account(self, size: int, held: bool = False) -> None:
        """Count `size` appended bytes (in buffer.memory already if `held`)."""
        buf = self._buffer
        if buf.records == 0:
            buf.first_at = self._clock.monotonic()
            self._cond.notify_all()  # the flusher starts the linger clock
        buf.records += 1
        buf.nbytes += size
        if not held:
            self._in_flight_bytes += size
        if buf.nbytes >= self._config.flush_bytes:
            self._seal()

    def _seal(self) -> None:
        """Queue the current buffer for flushing (holding the condition)."""
        if self._buffer.records:
            self._sealed.append(self._buffer)
            self._sealed_count += 1
            self._buffer = _Buffer()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._refresh_topics()  # also between back-to-back flushes (busy agents)
                while not self._sealed:
                    if self._closed:
                        return
                    self._refresh_topics()
                    timeout = 0.5
                    if self._buffer.records:
                        age = self._clock.monotonic() - self._buffer.first_at
                        timeout = self._config.linger_ms / 1000 - age
                        if timeout <= 0:
                            self._seal()
                            break
                    self._clock.wait(self._cond, timeout)
                buf = self._sealed.popleft()
            try:
                self._flush(buf)
            except BaseException as exc:  # pragma: no cover - _flush fails futures itself
                log.exception("agent flush crashed: %s", exc)
            with self._cond:
                self._in_flight_bytes -= buf.nbytes
                self._flushed_count += 1
                self._cond.notify_all()
            self._room_freed()

    def split_flush(self, partitions: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
        """How one flush's partitions (sorted) are split into objects, each written and
        committed on its own, in order; every partition must be in exactly one group.

        siltstream writes ONE object per flush. A subclass may split it otherwise (to measure
        other designs); each partition's futures then report its own object's outcome.
        """
        return [partitions]

    def _flush(self, buf: _Buffer) -> None:
        # A chunk without records (opened for a record whose append failed) is left out.
        items = sorted((tp, pb) for tp, pb in buf.partitions.items() if pb.builder.record_count)
        outcome: FlushOutcome = {}
        objects_before = self.totals.objects
        try:
            for group in self.split_flush([tp for tp, _ in items]):
                part = [(tp, buf.partitions[tp]) for tp in group]
                # The whole flush in one object reports the buffer's count (a raw batch: 1).
                records = (buf.records if len(part) == len(items)
                           else sum(pb.builder.record_count for _, pb in part))
                self._flush_object(part, records, outcome, buf.hooks)
        except BaseException as exc:  # a bug, not a flush failure: fail what is left
            error = FlushError(f"flush crashed: {exc}")
            error.__cause__ = exc
            for tp, _ in items:
                outcome.setdefault(tp, error)
            raise
        finally:
            if self.totals.objects > objects_before:
                self.totals = replace(self.totals, flushes=self.totals.flushes + 1)
            self._settle(items, outcome)
            buf.done.set_result(outcome)

    def _flush_object(
        self, items: list[tuple[tuple[str, int], _PartitionBuffer]], records: int,
        outcome: FlushOutcome, hooks: Sequence[CommitHook] = (),
    ) -> None:
        """Write `items` as one object and commit it (objects/upload.py: the steps)."""
        started = time.perf_counter()
        key = data_key(self._clock)
        try:
            upload = ObjectUpload(self._store, self._metadata, key, level=0,
                                  holds_compacted=any(pb.compacted for _, pb in items))
        except Exception as exc:
            self._fail(items, FlushError(f"could not register object {key}: {exc}"), exc,
                       outcome)
            return
        try:
            with abandoning(self._store, self._metadata, [upload]):
                layout = upload.write(pb.builder.finish() for _, pb in items)
                outcomes = self._metadata.commit_produced(
                    upload.file_id, layout,
                    batches={tp: pb.batches for tp, pb in items if pb.batches}, hooks=hooks)
        except CommitUnknownError as exc:
            unknown = FlushOutcomeUnknownError(f"commit of {key} has unknown outcome: {exc}")
            self._fail(items, unknown, exc, outcome)
            return
        except Exception as exc:  # abandoned
            self._fail(items, FlushError(f"flush of {key} failed, nothing committed: {exc}"),
                       exc, outcome)
            return
        for tp, pb in items:
            result = outcomes[tp]
            if isinstance(result, RejectedChunk):
                outcome[tp] = PerBatch({b.offset_delta: a for b, a in
                                        zip(pb.batches, result.answers, strict=True)},
                                       result.other)
                if isinstance(result.other, UnknownTopicError | UnknownPartitionError):
                    self.forget_topics()  # deleted meanwhile (by any agent): reload the rest
            else:
                outcome[tp] = result
        if all(isinstance(r, RejectedChunk) for r in outcomes.values()):
            return  # nothing of the object is visible (the commit abandoned it)
        report = FlushReport(key, len(items), records, layout.size)
        self.reports.append(report)
        self.totals = self.totals.plus(report)
        by_topic: dict[str, tuple[int, int]] = {}
        for c in layout.chunks:  # the chunks the commit made visible
            if not isinstance(outcomes[(c.topic, c.partition)], RejectedChunk):
                n, b = by_topic.get(c.topic, (0, 0))
                by_topic[c.topic] = (n + c.record_count, b + c.data_len)
        telemetry.flushed(time.perf_counter() - started, layout.size, by_topic)

    def _settle(self, items: list[tuple[tuple[str, int], _PartitionBuffer]],
                outcome: FlushOutcome) -> None:
        """Tell the producer tracker how each idempotent batch of a flush ended (before the
        futures resolve, so a producer's next batch is judged on the settled state)."""
        with self._cond:
            for tp, pb in items:
                result = outcome[tp]
                for b in pb.batches:  # rejected or failed: not stored here
                    self._producers.settle((b.producer_id, *tp), b,
                                           result + b.offset_delta
                                           if isinstance(result, int) else None)

    @staticmethod
    def _fail(
        items: list[tuple[tuple[str, int], _PartitionBuffer]], error: Exception,
        cause: Exception, outcome: FlushOutcome,
    ) -> None:
        error.__cause__ = cause
        log.error("%s", error)
        telemetry.flush_failed(unknown=isinstance(error, FlushOutcomeUnknownError))
        for tp, _ in items:
            outcome[tp] = error


def _stamped(raw_batches: Sequence[bytes], checked: list[CheckedBatch], now_ms: int
             ) -> tuple[list[bytes], list[CheckedBatch]]:
    """The batches of a LogAppendTime topic as Kafka's broker appends them: stamped with the
    agent's clock when it accepts them (`stamp_log_append_time`), headers to match."""
    raws = [stamp_log_append_time(raw, now_ms) for raw in raw_batches]
    return raws, [(read_header(raw), records)
                  for raw, (_, records) in zip(raws, checked, strict=True)]
