"""Idempotent batches as a Kafka client encodes them (kafka-python 3's batch builder)."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from metadata import ChunkMeta, MetadataStore, ProducerBatch
from tests.layouts import layout


def client_batch(producer_id: int, epoch: int, first_seq: int, count: int = 3,
                 tag: bytes = b"v") -> bytes:
    """`count` records from an idempotent producer, sequences first_seq.. (wrapping)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=first_seq, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i,
                       value=tag + b"-%d" % i, headers=[])
    return bytes(builder.build())


def pbatch(producer_id: int, epoch: int, first_seq: int, count: int = 3,
           offset_delta: int = 0) -> ProducerBatch:
    """What the agent hands the commit for such a batch."""
    return ProducerBatch(producer_id, epoch, first_seq, (first_seq + count - 1) % 2**31,
                         offset_delta)


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
            out.append(ProducerBatch(b.producer_id, b.epoch, b.first_seq, b.last_seq, delta))
            delta += b.seq_span
        placed[tp] = out
    return dict(md.commit_produced(fid, layout(chunks), batches=placed))
