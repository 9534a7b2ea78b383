"""Idempotent and transactional batches as a Kafka client encodes them (kafka-python 3's
batch builder), and what the agent hands the commit for them."""

from __future__ import annotations

from dataclasses import replace

from kafka.record.default_records import DefaultRecordBatchBuilder

from metadata import BatchKind, ChunkMeta, MetadataStore, ProducerBatch
from metadata.models import NO_SEQUENCE
from tests.layouts import layout


def client_batch(producer_id: int, epoch: int, first_seq: int, count: int = 3,
                 tag: bytes = b"v", *, transactional: bool = False) -> bytes:
    """`count` records from an idempotent (or transactional) producer, sequences
    first_seq.. (wrapping)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=first_seq, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i,
                       value=tag + b"-%d" % i, headers=[])
    return bytes(builder.build())


def pbatch(producer_id: int, epoch: int, first_seq: int, count: int = 3,
           offset_delta: int = 0, kind: BatchKind = BatchKind.IDEMPOTENT) -> ProducerBatch:
    """What the agent hands the commit for such a batch."""
    return ProducerBatch(producer_id, epoch, first_seq, (first_seq + count - 1) % 2**31,
                         offset_delta, kind)


def tbatch(producer_id: int, epoch: int, first_seq: int, count: int = 3) -> ProducerBatch:
    """A transactional batch."""
    return pbatch(producer_id, epoch, first_seq, count, kind=BatchKind.TRANSACTIONAL)


def marker(producer_id: int, epoch: int, *, commit: bool) -> ProducerBatch:
    """A COMMIT or ABORT marker (one offset, no sequence)."""
    return ProducerBatch(producer_id, epoch, NO_SEQUENCE, NO_SEQUENCE, 0,
                         BatchKind.COMMIT if commit else BatchKind.ABORT)


def chunk(topic: str, partition: int, span: int) -> ChunkMeta:
    """A plausible chunk of `span` records (the commit checks counts, not bytes)."""
    return ChunkMeta(topic, partition, record_count=span, data_pos=0, data_len=10 * span,
                     hash_pos=0, hash_count=0, batch_count=1, min_timestamp=0,
                     max_timestamp=0, tombstone_count=0, frame_crc=0, offset_span=span)


def commit(md: MetadataStore, key: str,
           parts: dict[tuple[str, int], list[ProducerBatch]],
           plain: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], object]:
    """Register and commit one object whose chunks hold `parts` (batches back to back)."""
    fid = md.register_pending_file(key)
    chunks = [chunk(t, p, sum(b.seq_span for b in bs)) for (t, p), bs in parts.items()]
    chunks += [chunk(t, p, n) for (t, p), n in (plain or {}).items()]
    placed = {}
    for tp, bs in parts.items():
        delta, out = 0, []
        for b in bs:
            out.append(replace(b, offset_delta=delta))
            delta += b.seq_span
        placed[tp] = out
    return dict(md.commit_produced(fid, layout(chunks), batches=placed))
