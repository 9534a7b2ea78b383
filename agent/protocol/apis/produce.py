"""Produce (key 0): record batches appended through the agent, kept as bytes end to end.

Each partition's records field must hold exactly one batch, not zstd before v7 (Kafka's
ProduceRequest.validateRecords: else INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE); the
batch is validated as Kafka validates a produce
(`fileformat.validate.check_client_batch`: CRC, every record's framing, counts, offset deltas,
producer fields, a bounded decompression) and stored byte for byte by
`Agent.produce_batches` (baseOffset patched there), which checks all of a partition's
batches before buffering any, so a bad one stores none of that partition and holds no
memory. Refusals answer Kafka's codes: CORRUPT_MESSAGE (CRC, batch framing, undecodable
compression), INVALID_RECORD (record framing, counts, offset deltas, producer fields, old
magic, control batches), and per record (KIP-467, v8+: record_errors with each bad record's
index, and error_message) INVALID_RECORD for a compacted topic's null keys and
INVALID_TIMESTAMP for a producer's LogAppendTime. A
partition past the agent's cached count reloads the topic once (CreatePartitions through
another agent) before UNKNOWN_TOPIC_OR_PARTITION; a topic deleted before the flush commits
fails only its own partitions, with UNKNOWN_TOPIC_OR_PARTITION. Idempotent producers'
batches are checked by the agent and again at commit: a resend is answered with its original
offset, a gap with OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch with INVALID_PRODUCER_EPOCH.
The response is written only after the agent's flush has PUT the object and committed it
(acks=1 and acks=-1 alike); acks=0 gets no response. Transactional batches: a request
without a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition,
as KafkaApis answers it; with one, each partition is verified first (KIP-890 part 1, the
transaction coordinator's `verify`: the batch's producer id and epoch are the transactional
id's, and the partition was added to its ongoing transaction), refused as ReplicaManager
answers a Produce before v12: INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH (fenced),
INVALID_TXN_STATE (not added), NOT_ENOUGH_REPLICAS (retriable: the transaction is
completing, or the coordinator could not be asked); batches of two producers in one request
INVALID_PRODUCER_ID_MAPPING. A request without transactional batches pays one byte read per
batch for this.

Backpressure: when buffer.memory has no room for a partition's batches, that partition
waits, up to the request's timeout_ms, for the agent to free room (an asyncio event set by
its flusher: no thread blocks, so other connections' fetches and produces go on), then
answers REQUEST_TIMED_OUT with nothing of it buffered. Memory never exceeds buffer.memory.
The connection's next requests wait behind it (requests of one connection are admitted in
order, which idempotent producers' sequences need).

Authorization: a topic the client may not WRITE answers TOPIC_AUTHORIZATION_FAILED for each
of its partitions, before anything else is checked of it, and nothing of it is stored.

A crash before the commit loses unacked records only; after it, records are visible even if
the response never leaves (a non-idempotent producer's retry then writes them again).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import NamedTuple, cast

from kio.schema.errors import ErrorCode
from kio.schema.produce import v3, v4, v5, v6, v7, v8, v9, v10, v11, v12
from kio.static.protocol import RequestHeader

from acl import Operation, ResourceType
from agent.errors import BufferFullError, NotCachedError
from agent.producer import FlushOutcome, ProduceFuture
from agent.quotas import PRODUCE as PRODUCE_QUOTA
from fileformat import Compression
from fileformat.batch import (
    ATTRIBUTES_POS,
    CODEC_MASK,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    TRANSACTIONAL_MASK,
    read_header,
    split_batches,
)
from fileformat.errors import BatchCountError, RecordErrorsError, UnsupportedCodecError

from ..codec import Builder, Encoded, Reply, write_array_length, write_topic_head, write_uvarint
from ..context import ServerContext, wait_at_most
from ..errors import PRODUCE, error_code

Request = (v3.ProduceRequest | v4.ProduceRequest | v5.ProduceRequest | v6.ProduceRequest
           | v7.ProduceRequest | v8.ProduceRequest | v9.ProduceRequest | v10.ProduceRequest
           | v11.ProduceRequest | v12.ProduceRequest)
"""kio's ProduceRequest of each version served (3-12)."""
Partition = (v3.request.PartitionProduceData | v4.request.PartitionProduceData
             | v5.request.PartitionProduceData | v6.request.PartitionProduceData
             | v7.request.PartitionProduceData | v8.request.PartitionProduceData
             | v9.request.PartitionProduceData | v10.request.PartitionProduceData
             | v11.request.PartitionProduceData | v12.request.PartitionProduceData)


# `_admit`'s answer when buffer.memory has no room now: try again when room is freed.
class _Full(enum.Enum):
    FULL = enum.auto()


FULL = _Full.FULL
# The attributes' low byte (big-endian int16): the codec (bits 0-2) and the transactional
# bit. Produce carries zstd from v7 (KIP-110).
_TRANSACTIONAL_BYTE = _CODEC_BYTE = ATTRIBUTES_POS + 1
ZSTD_FROM = 7


class Refusal(NamedTuple):
    """A partition refused with Kafka's per-record detail (KIP-467, ProduceResponse v8+):
    the error, (batch index, message) per bad record (indexes rising), the message."""

    code: ErrorCode
    record_errors: tuple[tuple[int, str], ...]
    message: str | None


def refusal(exc: BaseException) -> ErrorCode | Refusal:
    """The error code of a produce failure (`errors.CODES`; store failures as `PRODUCE`
    answers them, which clients retry), with the bad records' indexes and the message when
    `exc` names them (Kafka's RecordValidationException: its message and record errors)."""
    if isinstance(exc, RecordErrorsError):
        shown = ", ".join(f"{i}: {m}" for i, m in exc.record_errors[:3])
        return Refusal(error_code(exc, PRODUCE), exc.record_errors,
                       f"One or more records have been rejected due to "
                       f"{len(exc.record_errors)} record errors in total, and only showing "
                       f"the first three errors at most: [{shown}]")
    return error_code(exc, PRODUCE)


def check_request_records(batches: list[bytes], version: int) -> None:
    """Kafka's ProduceRequest.validateRecords, in its order: exactly one batch per partition
    (none, or a second: INVALID_RECORD), magic 2 (INVALID_RECORD, left to the batch checks),
    no zstd before v7 (UNSUPPORTED_COMPRESSION_TYPE)."""
    if not batches:
        raise BatchCountError(f"Produce v{version} must carry one record batch per partition")
    first = batches[0]
    if (version < ZSTD_FROM and len(first) > _CODEC_BYTE and first[MAGIC_POS] == MAGIC
            and first[_CODEC_BYTE] & CODEC_MASK == Compression.ZSTD):
        raise UnsupportedCodecError(f"Produce v{version} may not use zstd (v{ZSTD_FROM}+)")
    if len(batches) > 1:
        raise BatchCountError(f"Produce v{version} carries exactly one record batch per"
                              f" partition, got {len(batches)}")


def _admit(ctx: ServerContext, topic: str, partition: int, records: bytes | None,
           version: int, cached_only: bool = False) -> Admission | None:
    """Buffer one partition's batches in the agent, or FULL without waiting. Blocking only
    on metadata reads (in the pool), or, `cached_only` (on the event loop), never: None
    where the agent would have to read the metadata store first."""
    agent = ctx.agent
    try:
        batches = split_batches(records or b"")
        check_request_records(batches, version)
        # Reloads the cached topic once if the partition looks past its end (added through
        # another agent); out of range after that: UNKNOWN_TOPIC_OR_PARTITION.
        return agent.produce_batches(topic, partition, batches, block_s=0,
                                     cached_only=cached_only)
    except NotCachedError:
        return None
    except BufferFullError:
        return FULL
    except Exception as exc:
        return refusal(exc)


class Appended(NamedTuple):
    """A partition's batch appended: its base offset and, on a LogAppendTime topic, the time
    it was stamped with (log_append_time_ms; -1: CreateTime, or a resend)."""

    base_offset: int
    log_append_time: int = -1


Admission = list[ProduceFuture] | ErrorCode | Refusal | _Full
"""A partition's batches buffered (their futures), refused, or FULL (try again)."""
Outcome = Appended | ErrorCode | Refusal
"""A partition's answer: appended, or an error (with record errors: Refusal)."""
Admitted = list[tuple[str, list[tuple[int, "list[ProduceFuture] | ErrorCode | Refusal"]]]]


# A request up to this many record bytes is admitted on the event loop when the agent has
# what it needs cached (the topic, the producer's state): a thread hop costs more than the
# checks of a small batch. Larger ones go to the pool, as do partitions needing a read.
INLINE_BYTES = 256 * 1024


def _admit_some(ctx: ServerContext, parts: list[tuple[str, Partition]], version: int
                ) -> list[Admission]:
    return [_admit(ctx, topic, p.index, p.records, version) or FULL for topic, p in parts]


async def _try_rest(ctx: ServerContext, parts: list[tuple[str, Partition]], version: int,
                    tried: list[Admission | None]) -> list[Admission]:
    """`_admit_some` in the pool for the partitions the loop could not take from the
    agent's caches (None in `tried`)."""
    rest = [i for i, outcome in enumerate(tried) if outcome is None]
    for i, outcome in zip(rest, await ctx.run(_admit_some, ctx, [parts[i] for i in rest],
                                              version), strict=True):
        tried[i] = outcome
    return [FULL if outcome is None else outcome for outcome in tried]


async def _admit_all(ctx: ServerContext, request: Request, version: int,
                     writable: set[str], refused: dict[tuple[str, int], ErrorCode],
                     nbytes: int) -> Admitted:
    """Every partition's futures or error code, partitions finding buffer.memory full
    retried whenever room is freed until the request's timeout (then REQUEST_TIMED_OUT).
    Topics not in `writable` (no WRITE on them) answer TOPIC_AUTHORIZATION_FAILED and are
    not looked at, as KafkaApis answers them before it checks that they exist; then the
    `refused` partitions (transactional batches not verified) keep their error. Nothing of
    either is buffered. `nbytes`: the request's record bytes (`_record_bytes`).

    Plain loops rather than comprehensions: each comprehension is a function call, and
    this runs once per Produce request."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.timeout.total_seconds(), 0.0)
    parts: list[tuple[str, Partition]] = []
    outcomes: list[Admission] = []
    waiting: list[int] = []
    for t in request.topic_data:
        allowed = t.name in writable
        for p in t.partition_data:
            if not allowed:
                outcomes.append(ErrorCode.topic_authorization_failed)
                continue
            code = refused.get((t.name, p.index)) if refused else None
            if code is None:
                waiting.append(len(outcomes))
                parts.append((t.name, p))
            outcomes.append(FULL if code is None else code)
    inline = nbytes <= INLINE_BYTES
    while waiting:
        if inline:  # on the loop where the agent has what it needs cached, in the pool if not
            tried: list[Admission | None] = []
            for topic, p in parts:
                tried.append(_admit(ctx, topic, p.index, p.records, version, cached_only=True))
            room = None  # taken below if needed: nothing frees room during this attempt
            if None in tried:
                room = ctx.room_freed()  # before the pool's attempt
                tried = list(await _try_rest(ctx, parts, version, tried))
        else:
            room = ctx.room_freed()  # before trying: room freed during the attempt wakes us
            tried = list(await ctx.run(_admit_some, ctx, parts, version))
        full: list[int] = []
        for i, outcome in zip(waiting, tried, strict=True):
            outcomes[i] = FULL if outcome is None else outcome  # (the pool answers no None)
            if outcomes[i] is FULL:
                full.append(i)
        if not full:
            break
        if room is None:  # after a synchronous attempt: room freed meanwhile is announced
            room = ctx.room_freed()  # on the loop, after it, so this event is set then
        waiting, parts = full, [part for i, part in zip(waiting, parts, strict=True)
                                if outcomes[i] is FULL]
        remaining = deadline - loop.time()
        if remaining <= 0 or ctx.stopping:
            break
        await wait_at_most(room, remaining)
    answers: Admitted = []
    i = 0
    for t in request.topic_data:
        row: list[tuple[int, list[ProduceFuture] | ErrorCode | Refusal]] = []
        for p in t.partition_data:
            outcome = outcomes[i]
            i += 1
            row.append((p.index, ErrorCode.request_timed_out if outcome is FULL else outcome))
        answers.append((t.name, row))
    return answers


def _when_flushed(ctx: ServerContext, admitted: Admitted,
                  answer: Callable[[], Encoded] | None) -> asyncio.Future[Encoded | None]:
    """Resolves on the loop, to `answer()` (None: no answer), once every future of the
    request is done, and then wakes the long-polling fetches (acks=0 included). One loop
    wake-up per flush, not one per request or partition: a flush resolves thousands of
    futures at once, on the flusher thread, and each cross-thread wake-up is a syscall
    under the interpreter lock, so the requests it completes are handed over together
    (`ServerContext.call_threadsafe`). One callback per flush the request's batches are in
    (usually one), and no task: the reply is written when the future resolves."""
    done: asyncio.Future[Encoded | None] = asyncio.get_running_loop().create_future()
    flushes: list[Future[FlushOutcome]] = []
    for _, parts in admitted:  # loops, not a comprehension: this runs once per request
        for _, o in parts:
            if isinstance(o, list):
                for f in o:
                    flush = f.flush_future
                    if flush not in flushes:  # Futures compare by identity
                        flushes.append(flush)
    if not flushes:
        _resolve(ctx, done, answer)
        return done
    flushed = _Flushed(ctx, done, answer, len(flushes))
    for flush in flushes:
        flush.add_done_callback(flushed)
    return done


class _Flushed:
    """A request's callback on the flushes holding its batches: once the last is done,
    `_resolve` on the loop, and the request let go. A flush's Future keeps its callbacks
    after calling them, and the request holds its produce futures, which hold the flush's:
    a callback still holding the request would tie every request of the flush into one
    reference cycle, left to the garbage collector (~11 objects a request; at 2,000 small
    requests a second, ~6 % of the agent's CPU in collections and a 50-60 ms pause each)."""

    __slots__ = ("answer", "ctx", "done", "lock", "remaining")

    def __init__(self, ctx: ServerContext, done: asyncio.Future[Encoded | None],
                 answer: Callable[[], Encoded] | None, flushes: int) -> None:
        self.ctx: ServerContext | None = ctx
        self.done: asyncio.Future[Encoded | None] | None = done
        self.answer = answer
        self.remaining = flushes
        self.lock = threading.Lock() if flushes > 1 else None

    def __call__(self, _: object) -> None:
        if self.lock is not None:  # the flushes may complete on different threads
            with self.lock:
                self.remaining -= 1
                if self.remaining:
                    return
        ctx, done, answer = self.ctx, self.done, self.answer
        if ctx is None or done is None:
            return
        self.ctx, self.done, self.answer = None, None, None
        ctx.call_threadsafe(_resolve, ctx, done, answer)


def _resolve(ctx: ServerContext, done: asyncio.Future[Encoded | None],
             answer: Callable[[], Encoded] | None) -> None:
    ctx.notify_commit()
    if done.done():  # dropped: the connection's replies are no longer written
        return
    try:
        done.set_result(None if answer is None else answer())
    except Exception as exc:  # the sender raises it, as it would a handler's failure
        done.set_exception(exc)


def _outcome(futures: list[ProduceFuture] | ErrorCode | Refusal) -> Outcome:
    """A partition's base offset and append time (its first batch's), or the error of its
    first failed batch; its futures are done."""
    if isinstance(futures, ErrorCode | Refusal):
        return futures
    outcomes = [fut.outcome() for fut in futures]
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            return refusal(outcome)
    return Appended(cast(int, outcomes[0]), futures[0].log_append_time)


def _transactional(request: Request) -> dict[tuple[str, int], tuple[int, int]]:
    """The partitions holding a transactional batch, with its producer id and epoch: one
    byte read per batch (framing is left to each partition's own checks, which answer a
    malformed one)."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for t in request.topic_data:
        for p in t.partition_data:
            records = p.records or b""
            pos, end = 0, len(records)
            while pos + _TRANSACTIONAL_BYTE < end:
                if records[pos + _TRANSACTIONAL_BYTE] & TRANSACTIONAL_MASK:
                    if pos + HEADER_SIZE <= end:
                        header = read_header(records, pos)
                        out[(t.name, p.index)] = (header.producer_id, header.producer_epoch)
                    break
                size = _INT32.unpack_from(records, pos + LENGTH_POS)[0]
                if size <= 0:
                    break
                pos += size + LOG_OVERHEAD
    return out


# The coordinator's verification answers as ReplicaManager gives them to a Produce
# (AddPartitionsToTxnManager): a retriable failure NOT_ENOUGH_REPLICAS, which old clients
# retry; before v12 (defaultError) TRANSACTION_ABORTABLE is INVALID_TXN_STATE, from v12
# (genericError, clients that know it) it stays.
ABORTABLE_FROM = 12
_VERIFIED = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_abortable: ErrorCode.invalid_txn_state,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
}


async def _unverified(ctx: ServerContext, request: Request, version: int,
                      producers: dict[tuple[str, int], tuple[int, int]]
                      ) -> dict[tuple[str, int], ErrorCode] | None:
    """The partitions whose transactional batches (`producers`: `_transactional`) may not
    be stored, with their errors (none: {}); None when the request must be refused whole."""
    txn_id = request.transactional_id
    if txn_id is None or not ctx.authz.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                              txn_id):  # KafkaApis, before anything else
        return None
    if len(set(producers.values())) > 1:  # ReplicaManager's InvalidPidMappingException
        return dict.fromkeys(producers, ErrorCode.invalid_producer_id_mapping)
    pid, epoch = next(iter(producers.values()))
    answer = await ctx.txns.verify(txn_id, pid, epoch, list(producers))
    return {tp: e if e is ErrorCode.transaction_abortable and version >= ABORTABLE_FROM
            else _VERIFIED.get(e, e) for tp, e in answer.items() if e is not ErrorCode.none}


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Reply:
    producers = _transactional(request)
    refused = await _unverified(ctx, request, b.version, producers) if producers else {}
    if refused is None:  # KafkaApis' answer to a transactional batch without the id
        return _response(b, [(t.name, [(p.index, ErrorCode.transactional_id_authorization_failed)
                                       for p in t.partition_data])
                             for t in request.topic_data])
    writable = ctx.authz.allowed(Operation.WRITE, ResourceType.TOPIC,
                                 [t.name for t in request.topic_data])
    nbytes = _record_bytes(request)
    admitted = await _admit_all(ctx, request, b.version, writable, refused, nbytes)
    # Client quotas (agent/quotas.py): the records' bytes against producer_byte_rate; past
    # it the reply says how long to wait and the connection is muted that long.
    throttle_ms = ctx.throttle(PRODUCE_QUOTA, header.client_id, nbytes)
    # Fetches wake at its commit, acks=0 included (which is answered by nothing).
    flushed = _when_flushed(ctx, admitted, None if request.acks == 0 else functools.partial(
        _completed, b, admitted, throttle_ms))
    return None if request.acks == 0 else flushed


def _record_bytes(request: Request) -> int:
    """The bytes of every partition's records field."""
    return sum([len(p.records or b"") for t in request.topic_data for p in t.partition_data])


def _completed(b: Builder, admitted: Admitted, throttle_ms: int) -> Encoded:
    """The response once every admitted future is done."""
    return _response(b, [(topic, [(index, _outcome(o)) for index, o in parts])
                         for topic, parts in admitted], throttle_ms)


# ProduceResponse v3-v12 in wire bytes, written here (the hot path) rather than through kio;
# tests/protocol/test_produce_response.py checks it equals kio's encoding for every version.
# Per topic: name; per partition: index, error_code, base_offset, log_append_time_ms (-1:
# CreateTime), log_start_offset (v5+, -1: not reported), record_errors and error_message
# (v8+, empty and null unless a Refusal gives them); then throttle_time_ms. v9+ is
# flexible: compact arrays and strings (length + 1 as an unsigned varint) and an empty
# tagged-field section closing each struct.
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log_start_offset
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_NO_RECORD_ERRORS_LEGACY = _INT32.pack(0) + struct.pack(">h", -1)  # empty array, null string
_NO_RECORD_ERRORS_COMPACT = b"\x01\x00"  # compact: empty array (0 + 1), null string (0)
_NO_TAGS = b"\x00"
FLEXIBLE_FROM = 9


def _string(out: bytearray, text: str | None, flexible: bool) -> None:
    """A nullable string: int16 length (-1 null), or compact (length + 1, 0 null)."""
    data = None if text is None else text.encode()
    if flexible:
        write_uvarint(out, 0 if data is None else len(data) + 1)
    else:
        out += _INT16.pack(-1 if data is None else len(data))
    out += data or b""


def _record_errors(refused: Refusal, flexible: bool) -> bytes:
    """A Refusal's record_errors array and error_message (v8+)."""
    out = bytearray()
    write_array_length(out, len(refused.record_errors), flexible)
    for index, message in refused.record_errors:
        out += _INT32.pack(index)
        _string(out, message, flexible)
        if flexible:
            out += _NO_TAGS
    _string(out, refused.message, flexible)
    return bytes(out)


def _response(b: Builder, results: list[tuple[str, list[tuple[int, Outcome]]]],
              throttle_ms: int = 0) -> Encoded:
    version = b.version
    flexible = version >= FLEXIBLE_FROM
    record_errors = (b"" if version < 8 else
                     _NO_RECORD_ERRORS_COMPACT if flexible else _NO_RECORD_ERRORS_LEGACY)
    after_partition = record_errors + (_NO_TAGS if flexible else b"")
    out = bytearray()
    write_array_length(out, len(results), flexible)
    for topic, parts in results:
        write_topic_head(out, topic, len(parts), flexible)
        for index, o in parts:
            code, base, stamp = ((int(o.code.value), -1, -1) if isinstance(o, Refusal)
                                 else (int(o.value), -1, -1) if isinstance(o, ErrorCode)
                                 else (0, *o))
            out += (_PARTITION_V5.pack(index, code, base, stamp, -1) if version >= 5
                    else _PARTITION_V3.pack(index, code, base, stamp))
            if isinstance(o, Refusal) and version >= 8:
                out += _record_errors(o, flexible)
                out += _NO_TAGS if flexible else b""
            else:
                out += after_partition
        if flexible:
            out += _NO_TAGS
    out += _INT32.pack(throttle_ms)
    if flexible:
        out += _NO_TAGS
    return b.encoded(out)
