"""Plain frozen values the metadata store takes and returns (no database handles inside)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, NamedTuple

from fileformat import FileLayout, ObjectLayout

from .errors import OffsetOutOfRangeError
from .topicconfig import TopicConfig


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: its id, name, partition count, effective config and the stored overrides."""

    id: int
    name: str
    partitions: int
    config: TopicConfig
    configs: Mapping[str, str]
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's offsets: readable from log_start_offset, next append at next_offset."""

    topic: str
    partition: int
    log_start_offset: int
    next_offset: int
    clean_offset: int = 0  # Kafka's cleaner checkpoint: records below it are already clean
    # The first offset of the partition's oldest open transaction (None: none is open).
    first_unstable: int | None = None

    @property
    def last_stable_offset(self) -> int:
        """Kafka's last stable offset: read_committed consumers read below it. The first
        offset of the oldest open transaction (never below the log start), else the high
        watermark."""
        if self.first_unstable is None:
            return self.next_offset
        return max(self.log_start_offset, min(self.first_unstable, self.next_offset))



# The one definition of a segment's recorded fields. Field metadata: "sql" is the column type
# (the current `segments` table and the commit's row tuples derive from it), "min" a lower
# bound the store enforces. ChunkMeta, OutputSegment and SegmentInfo inherit these fields;
# metadata/segments.py converts them (from the format's chunk index, to rows and back).
_COUNT = {"sql": "bigint", "min": 0}


@dataclass(frozen=True, slots=True)
class Segment:
    """What the store records of one chunk (one topic-partition's records in an object):
    where its bytes are (byte offsets in the object) and what they hold."""

    topic: str
    partition: int
    record_count: int = field(metadata=_COUNT)
    data_pos: int = field(metadata=_COUNT)
    data_len: int = field(metadata=_COUNT)
    hash_pos: int = field(metadata=_COUNT)  # absolute position of the 16-byte key hashes
    hash_count: int = field(metadata=_COUNT)
    batch_count: int = field(metadata={"sql": "integer", "min": 0})
    min_timestamp: int = field(metadata={"sql": "bigint"})  # -1 when the chunk is empty
    max_timestamp: int = field(metadata={"sql": "bigint"})
    tombstone_count: int = field(metadata=_COUNT)
    # u32 CRC32C of the batches' unchecksummed 17-byte prefixes (fileformat's frame_crc)
    frame_crc: int = field(metadata={"sql": "bigint"})


def segment_columns() -> tuple[tuple[str, str], ...]:
    """(name, SQL type) of the Segment fields stored as `segments` columns of the same name."""
    return tuple((f.name, f.metadata["sql"]) for f in fields(Segment) if "sql" in f.metadata)


@dataclass(frozen=True, slots=True)
class ChunkMeta(Segment):
    """What an agent commit records of one chunk; the store assigns its base offset.

    offset_span is how many offsets the chunk consumes (>= record_count once compacted away
    records leave gaps; equal for fresh data).
    """

    offset_span: int


@dataclass(frozen=True, slots=True)
class PlacedSegment(Segment):
    """A segment at its place in a partition's log: explicit offsets (they never change)."""

    base_offset: int
    last_offset: int  # inclusive: the last offset the segment covers
    cleaned_at_ms: int | None  # first time its tombstones were compacted

    @property
    def offset_span(self) -> int:
        """How many offsets the segment covers (records plus compacted-away gaps)."""
        return self.last_offset - self.base_offset + 1


@dataclass(frozen=True, slots=True)
class OutputSegment(PlacedSegment):
    """A segment of a compaction output."""


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One object's row; its layout is None until the file is committed."""

    id: int
    object_key: str
    layout: ObjectLayout | None
    level: int
    state: str
    holds_compacted: bool
    created_at_ms: int
    state_changed_at_ms: int
    job_id: int | None
    leased: bool = False  # held by a leased, unexpired compaction job (snapshot, get_file)

    @property
    def size(self) -> int | None:
        """The object's size, None until it is committed."""
        return None if self.layout is None else self.layout.size


@dataclass(frozen=True, slots=True)
class SegmentInfo(PlacedSegment):
    """A stored segment (a chunk's place in a partition's log) plus its object's key and size."""

    id: int
    file_id: int
    topic_id: int
    live: bool
    created_at_ms: int
    object_key: str
    file_size: int | None


@dataclass(frozen=True, slots=True)
class LevelStats:
    """Live files, their bytes and live segments at one compaction level."""

    level: int
    files: int
    bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts for operators: live data per level, files and bytes per state."""

    levels: tuple[LevelStats, ...]
    files_by_state: Mapping[str, int] = field(default_factory=dict)
    bytes_by_state: Mapping[str, int] = field(default_factory=dict)
    topics: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (used by `silt stats --json`)."""
        return {
            "topics": self.topics,
            "levels": [
                {"level": lv.level, "files": lv.files, "bytes": lv.bytes, "segments": lv.segments}
                for lv in self.levels
            ],
            "files_by_state": dict(self.files_by_state),
            "bytes_by_state": dict(self.bytes_by_state),
        }


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent view for the compaction planner: topics, partitions, live files and each
    one's live segments (`file_segments`, by file id; in (topic id, partition) order).

    An unchanged file's tuple is the very object of the previous snapshot taken through the
    same handle (reads.snapshot), so consumers may cache what they derive from it by
    identity."""

    taken_at_ms: int
    topics: tuple[TopicInfo, ...]
    partitions: tuple[PartitionInfo, ...]
    files: tuple[FileInfo, ...]
    file_segments: Mapping[int, tuple[SegmentInfo, ...]]
    leased_file_ids: frozenset[int] = frozenset()  # held by unexpired compaction leases

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        """Every live segment in (topic id, partition, offset) order; sorted on each call
        (hot paths use `file_segments`)."""
        return tuple(sorted((x for segs in self.file_segments.values() for x in segs),
                            key=lambda x: (x.topic_id, x.partition, x.last_offset)))


@dataclass(frozen=True, slots=True)
class AuditSnapshot:
    """What `silt doctor` checks the object store against, read in one consistent snapshot:
    every file row but the deleted ones; files that are not live yet hold live segments
    (none should: a file is retired with its last live segment), with how many; when asked
    for, every live segment (to compare with the objects' own indexes); and segment rows
    whose file or partition is gone."""

    files: tuple[FileInfo, ...]
    stray: tuple[tuple[FileInfo, int], ...]
    segments: tuple[SegmentInfo, ...] = ()
    # Segment rows (live or not) naming a file or partition row that does not exist: (segment
    # id, file id, topic id, partition), the first DANGLING_SHOWN. None should: the writers
    # hold both rows and the deleters delete segments first (no foreign key since schema v16).
    dangling: tuple[tuple[int, int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on a compaction job; `fence` orders competing holders."""

    job_id: int
    spec_id: str
    fence: int
    owner: str
    input_file_ids: tuple[int, ...]
    expires_ms: int


@dataclass(frozen=True, slots=True)
class CompactionOutput:
    """One uploaded output object (registered pending): its layout and its segments (its
    layout's chunks placed at their offsets)."""

    file_id: int
    layout: FileLayout
    segments: tuple[OutputSegment, ...]


@dataclass(frozen=True, slots=True)
class CompactionCommit:
    """What a committed compaction changed."""

    job_id: int
    retired_file_ids: tuple[int, ...]
    output_file_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RetentionChange:
    """What retention removed from one partition: a prefix of its log, up to the new start."""

    topic: str
    partition: int
    log_start_offset: int  # the new log start (one past the last removed offset)
    segments: int
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """One retention pass: the partitions it shortened and the files left with no live
    segment (retired: their objects are deleted after the GC grace period)."""

    changes: tuple[RetentionChange, ...]
    retired_file_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one prune pass deleted: history rows past their retention."""

    files: int  # rows of deleted files
    segments: int  # their segments' rows
    jobs: int  # rows of finished (or long expired) compaction jobs


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One row of the jobs table."""

    id: int
    spec_id: str
    state: str
    input_file_ids: tuple[int, ...]
    owner: str
    fence: int
    lease_expires_ms: int
    attempts: int
    created_at_ms: int
    updated_at_ms: int
    result: Mapping[str, Any] | None
    input_segments: int = 0  # live segments of the inputs when first leased


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """A registered agent (a Kafka broker to clients): `node_id` is its broker id."""

    node_id: int
    agent_id: str
    host: str
    port: int
    registered_at_ms: int
    heartbeat_at_ms: int
    # (listener name, host, port) per listener; empty: registered before listeners had
    # names (schema v9), host:port serves every listener.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where clients of `listener` reach this agent, or None if it has no such listener
        (Kafka then leaves the broker out of that listener's Metadata)."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


SEQUENCE_WRAP = 2**31  # producer sequences run 0 .. 2**31 - 1, then 0 again
MAX_EPOCH = 2**15 - 1  # a producer epoch is an int16


class BatchKind(IntEnum):
    """What a producer's batch is to the commit: data, idempotent only or inside a
    transaction, or a transaction marker (a control batch, Kafka's COMMIT or ABORT)."""

    IDEMPOTENT = 0
    TRANSACTIONAL = 1
    COMMIT = 2
    ABORT = 3


NO_SEQUENCE = -1  # a marker's sequences (Kafka's RecordBatch.NO_SEQUENCE)


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """One batch of an idempotent or transactional producer handed to an agent commit: who
    wrote it, its sequence range (inclusive; wraps after 2**31 - 1; NO_SEQUENCE for a
    marker, which covers one offset), where it starts in the chunk, and its kind."""

    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    offset_delta: int  # the batch's first offset relative to the chunk's base
    kind: BatchKind = BatchKind.IDEMPOTENT

    @property
    def seq_span(self) -> int:
        """How many offsets the batch covers (its last offset delta + 1)."""
        return (self.last_seq - self.first_seq) % SEQUENCE_WRAP + 1

    @property
    def is_marker(self) -> bool:
        """A COMMIT or ABORT marker (no sequence; ends the producer's transaction)."""
        return self.kind >= BatchKind.COMMIT


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction of one partition, as Kafka's transaction index keeps it: the
    producer, its first offset and its ABORT marker's offset (`last_offset`)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ChunkChanges:
    """What an accepted chunk's producer batches change on its partition: the producers'
    new states, the open transactions after it (producer id -> first offset) and the
    transactions it aborted."""

    states: dict[int, ProducerState]
    open_txns: dict[int, int]
    aborted: tuple[AbortedTxn, ...]


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A committed batch of a producer as its state keeps it: sequences and offsets."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerState:
    """An idempotent producer's state on one partition: its epoch and its last (up to five)
    batches of that epoch, oldest first (none after a marker that moved the epoch)."""

    producer_id: int
    epoch: int
    batches: tuple[BatchRecord, ...]
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class RejectedChunk:
    """An agent commit did not insert this chunk: one of its idempotent batches was a
    duplicate or out of order, or its topic or partition no longer exists. `answers` holds,
    per idempotent batch in the order given, the original base offset (a duplicate) or the
    error for that batch; every other record of the chunk gets `other` (nothing of the
    chunk was stored: retriable, or UnknownTopicError / UnknownPartitionError)."""

    answers: tuple[int | Exception, ...]
    other: Exception


# Consumer-group states, with Kafka's names (GroupState in the GroupCoordinator).
GROUP_EMPTY = "Empty"
GROUP_PREPARING_REBALANCE = "PreparingRebalance"
GROUP_COMPLETING_REBALANCE = "CompletingRebalance"
GROUP_STABLE = "Stable"
GROUP_DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A member of a consumer group as its coordinator stores it: who it is, its timeouts,
    its subscription metadata for the group's protocol and its assignment (both opaque bytes
    the clients' assignors write and read)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    metadata: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A consumer group as last stored by its coordinator (Kafka's GroupMetadata record):
    stored when a rebalance completes and when the group empties or stops being empty.
    `state_at_ms` is when it entered `state` (offsets expire counting from when it emptied)."""

    group_id: str
    protocol_type: str | None
    protocol_name: str | None
    generation: int
    leader: str | None
    state: str
    members: tuple[GroupMember, ...]
    state_at_ms: int


@dataclass(frozen=True, slots=True)
class GroupLease:
    """The right of agent `agent_id` to coordinate a group; `epoch` fences its writes (a
    takeover bumps it, so a paused former coordinator's writes are refused)."""

    group_id: str
    agent_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset to commit for a group: the next offset to consume, the leader
    epoch of the last consumed record (-1: unknown) and the client's metadata string."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class CommittedOffset(OffsetCommit):
    """A committed offset as stored, with when it was committed."""

    committed_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position on one partition: its committed offset (None: none), the
    partition's log end offset, i.e. its next offset (None: the partition does not exist
    now), and the lag, end - committed (None unless both are known)."""

    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None


# Transaction states, with Kafka's names (TransactionState in the TransactionCoordinator).
TXN_EMPTY = "Empty"
TXN_ONGOING = "Ongoing"
TXN_PREPARE_COMMIT = "PrepareCommit"
TXN_PREPARE_ABORT = "PrepareAbort"
TXN_COMPLETE_COMMIT = "CompleteCommit"
TXN_COMPLETE_ABORT = "CompleteAbort"
TXN_DEAD = "Dead"
TXN_STATES = (TXN_EMPTY, TXN_ONGOING, TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT,
              TXN_COMPLETE_COMMIT, TXN_COMPLETE_ABORT, TXN_DEAD)
NO_PRODUCER_EPOCH = -1  # Kafka's RecordBatch.NO_PRODUCER_EPOCH (and NO_PRODUCER_ID is -1)


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """A transactional id's state as its coordinator stores it (Kafka's TransactionMetadata):
    its producer id and epoch, the previous ones (a retried InitProducerId is recognised by
    them), the state, the partitions and groups of the ongoing transaction (in Prepare*:
    the partitions still waiting for their marker), its timeout, when it started (-1: no
    transaction yet) and when it last changed."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    state: str
    partitions: tuple[tuple[str, int], ...]
    groups: tuple[str, ...]
    timeout_ms: int
    start_ms: int
    updated_ms: int


@dataclass(frozen=True, slots=True)
class TxnLease:
    """The right of agent `agent_id` to coordinate a transactional id; `epoch` fences its
    writes (a takeover bumps it) and is the coordinator epoch its markers carry."""

    transactional_id: str
    agent_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the cluster keeps of a user's password for one SCRAM mechanism (Kafka's
    ScramCredential): salt, iterations, StoredKey and ServerKey (agent/sasl/scram.py)."""

    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class PartitionFrom(NamedTuple):
    """A partition as a fetch reads it, in one statement with the others
    (`MetadataStore.partitions_from`): its topic's row id (a Kafka topic id names one
    incarnation), its offsets, its first live segments from the fetch offset, or the
    OffsetOutOfRangeError of an offset below its log start, and whether an aborted
    transaction's marker lies at or after that offset (`aborted_after`: only then may a
    read_committed fetch from it have aborted transactions to send). A named tuple: every
    long-poll makes one per partition, and a frozen dataclass costs ~4x as much to make."""

    topic_id: int
    info: PartitionInfo
    segments: list[SegmentInfo] | OffsetOutOfRangeError
    aborted_after: bool = False
