"""Produce (key 0): record batches appended through the agent, kept as bytes end to end.

Each partition's records field is split into batches by their length prefixes
(`fileformat.batch.split_frames`); each batch is
CRC-checked and stored byte for byte by `Agent.produce_batches` (baseOffset patched there,
null keys of compacted topics refused there), which checks all of a partition's batches
before buffering any, so a bad one stores none of that partition. Idempotent producers'
batches are checked by the agent and again at commit: a resend is answered with its original
offset, a gap with OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch with INVALID_PRODUCER_EPOCH.
The response is written only after the agent's flush has PUT the object and committed it
(acks=1 and acks=-1 alike); acks=0 gets no response.

Backpressure: when buffer.memory has no room for a partition's batches, that partition
waits, up to the request's timeout_ms, for the agent to free room (an asyncio event set by
its flusher: no thread blocks, so other connections' fetches and produces go on), then
answers REQUEST_TIMED_OUT with nothing of it buffered. Memory never exceeds buffer.memory.
The connection's next requests wait behind it (requests of one connection are admitted in
order, which idempotent producers' sequences need).

A crash before the commit loses unacked records only; after it, records are visible even if
the response never leaves (a non-idempotent producer's retry then writes them again).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from agent.errors import (
    AgentClosedError,
    BufferFullError,
    FlushError,
    FlushOutcomeUnknownError,
    InvalidRecordError,
    NullKeyError,
    RecordTooLargeError,
)
from agent.producer import ProduceFuture
from fileformat import FormatError
from fileformat.batch import split_frames
from fileformat.errors import UnsupportedError
from metadata.errors import (
    BatchRejectedError,
    InvalidProducerEpochError,
    MetadataError,
    OutOfOrderSequenceError,
    UnknownTopicError,
)

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

# `_admit`'s answer when buffer.memory has no room now: try again when room is freed.
FULL = object()


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error a produce failure is reported as (retriable ones make clients retry)."""
    match exc:
        case UnknownTopicError():
            return ErrorCode.unknown_topic_or_partition
        case RecordTooLargeError():
            return ErrorCode.message_too_large
        case NullKeyError():
            return ErrorCode.invalid_record
        case InvalidRecordError():  # a partition out of range
            return ErrorCode.unknown_topic_or_partition
        case UnsupportedError():
            return ErrorCode.unsupported_for_message_format
        case FormatError():  # bad CRC, framing, magic
            return ErrorCode.corrupt_message
        case BufferFullError() | FlushOutcomeUnknownError():
            return ErrorCode.request_timed_out
        case FlushError():
            return ErrorCode.kafka_storage_error
        case OutOfOrderSequenceError():
            return ErrorCode.out_of_order_sequence_number
        case InvalidProducerEpochError():
            return ErrorCode.invalid_producer_epoch
        case BatchRejectedError():
            # Nothing of the batch was stored (another batch of its chunk was refused at
            # commit): a code librdkafka and kafka-python retry with the same sequences.
            return ErrorCode.not_enough_replicas
        case AgentClosedError():
            return ErrorCode.not_leader_or_follower
        case MetadataError():
            return ErrorCode.kafka_storage_error
    return ErrorCode.unknown_server_error


def _admit(ctx: ServerContext, topic: str, partition: int,
           records: bytes | None) -> list[ProduceFuture] | ErrorCode | object:
    """Buffer one partition's batches in the agent, or FULL without waiting (blocking only
    on metadata reads: runs in the pool)."""
    agent = ctx.agent
    try:
        info = agent.topic(topic)
        if not 0 <= partition < info.partitions:
            return ErrorCode.unknown_topic_or_partition
        batches = [bytes(batch) for batch in split_frames(records or b"")]
        if not batches:
            return ErrorCode.corrupt_message
        futures = agent.produce_batches(topic, partition, batches, block_s=0)
    except BufferFullError:
        return FULL
    except Exception as exc:
        return error_code(exc)
    # Fetches long-polling this partition wake when its flush commits (acks=0 included).
    futures[-1].add_done_callback(lambda _: ctx.notify_commit_threadsafe())
    return futures


def _admit_some(ctx: ServerContext, parts: list[tuple[str, Any]]) -> list[Any]:
    return [_admit(ctx, topic, p.index, p.records) for topic, p in parts]


async def _admit_all(ctx: ServerContext, request: Any,
                     ) -> list[tuple[str, list[tuple[int, Any]]]]:
    """Every partition's futures or error code, partitions finding buffer.memory full
    retried whenever room is freed until the request's timeout (then REQUEST_TIMED_OUT)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.timeout.total_seconds(), 0.0)
    parts = [(t.name, p) for t in request.topic_data for p in t.partition_data]
    outcomes: list[Any] = [FULL] * len(parts)
    waiting = list(range(len(parts)))
    while True:
        room = ctx.room_freed()  # before trying: room freed during the attempt wakes us
        tried = await ctx.run(_admit_some, ctx, [parts[i] for i in waiting])
        for i, outcome in zip(waiting, tried, strict=True):
            outcomes[i] = outcome
        waiting = [i for i in waiting if outcomes[i] is FULL]
        remaining = deadline - loop.time()
        if not waiting or remaining <= 0 or ctx.stopping:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(room.wait(), remaining)
    answers = iter(ErrorCode.request_timed_out if o is FULL else o for o in outcomes)
    return [(t.name, [(p.index, next(answers)) for p in t.partition_data])
            for t in request.topic_data]


async def _outcome(fut: ProduceFuture) -> int | ErrorCode:
    """The batch's base offset once flushed, or its error code."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int | ErrorCode] = loop.create_future()

    def settle(pf: ProduceFuture) -> None:
        exc = pf.exception()
        value: int | ErrorCode = error_code(exc) if exc is not None else pf.result()
        loop.call_soon_threadsafe(_resolve, done, value)

    fut.add_done_callback(settle)
    return await done


def _resolve(done: asyncio.Future[int | ErrorCode], value: int | ErrorCode) -> None:
    if not done.done():
        done.set_result(value)


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    if request.transactional_id is not None:
        return _response(b, [(t.name, [(p.index, ErrorCode.transactional_id_authorization_failed)
                                       for p in t.partition_data])
                             for t in request.topic_data])
    admitted = await _admit_all(ctx, request)
    if request.acks == 0:
        return None
    return asyncio.ensure_future(_complete(ctx, b, admitted))


async def _complete(ctx: ServerContext, b: Builder,
                    admitted: list[tuple[str, list[tuple[int, Any]]]]) -> Any:
    results: list[tuple[str, list[tuple[int, int | ErrorCode]]]] = []
    for topic, parts in admitted:
        done: list[tuple[int, int | ErrorCode]] = []
        for index, outcome in parts:
            if isinstance(outcome, list):
                offsets = [await _outcome(f) for f in outcome]
                errors = [o for o in offsets if isinstance(o, ErrorCode)]
                outcome = errors[0] if errors else offsets[0]
            done.append((index, outcome))
        results.append((topic, done))
    return _response(b, results)


def _response(b: Builder, results: list[tuple[str, list[tuple[int, Any]]]]) -> Any:
    return b("ProduceResponse", throttle_time=NO_THROTTLE, responses=tuple(
        b("TopicProduceResponse", name=topic, partition_responses=tuple(
            b("PartitionProduceResponse", index=i32(index),
              error_code=o if isinstance(o, ErrorCode) else ErrorCode.none,
              base_offset=i64(-1 if isinstance(o, ErrorCode) else o), log_append_time=None,
              log_start_offset=i64(-1), record_errors=(), error_message=None)
            for index, o in parts))
        for topic, parts in results))
