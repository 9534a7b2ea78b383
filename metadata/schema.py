"""Tables and the ordered list of schema migrations.

Schema (version 1):

- `schema_version(version PK, applied_at_ms)` — one row per applied migration.
- `cluster(id=1, secret, created_at_ms)` — the per-cluster 32-byte secret for keyed key hashes
  (v6 adds the cluster's identity).
- `topics(id, name UNIQUE, partitions, configs JSON text, created_at_ms)`.
- `partitions(topic_id, partition, log_start_offset, next_offset)`, PK (topic_id, partition).
- `files(id, object_key UNIQUE, size, data_offset, data_length, meta_offset, meta_length, level,
  state, holds_compacted, created_at_ms, state_changed_at_ms, job_id)`; the layout columns are
  NULL while the file is pending. States: pending → live → deleting → deleted, and
  pending → abandoned → deleting → deleted (GC may also take pending → deleting).
- `segments(id, file_id FK, topic_id, partition, base_offset, last_offset (inclusive), record_count,
  data_pos, data_len, hash_pos, hash_count, batch_count, min_timestamp, max_timestamp,
  tombstone_count, frame_crc, live, created_at_ms, cleaned_at_ms)`; record_count ..
  frame_crc are the fields of `models.Segment` (v1's frozen in `_v1`); the partial index
  `(topic_id, partition, last_offset) WHERE live` serves reads by offset in one range scan.
  Live segments of one partition never overlap, so last_offset order is base_offset order.
  (Its foreign keys, to files and to partitions, go in v16.)
- `jobs(id, spec_id, state, input_file_ids JSON text, owner, fence, input_segments,
  lease_expires_ms, attempts, created_at_ms, updated_at_ms, result JSON text)`: compaction
  jobs. States: leased → committed | failed | abandoned; a leased job past its expiry may be
  taken over (fence + 1). At most one leased job per spec_id (partial unique index).
  `files.job_id` names the job currently holding the file. Files replaced by a compaction
  go live → retired → deleting → deleted, retired ones only after the GC grace period.

Version 2 (the front door: agent registry, idempotent producers):

- `agents(node_id, agent_id UNIQUE, host, port, registered_at_ms, heartbeat_at_ms, stopped)`:
  agents serving the Kafka protocol; `node_id` is the Kafka broker id, never reused (SQLite
  AUTOINCREMENT), kept across re-registrations of the same `agent_id`. Live: not stopped and
  a heartbeat within the session timeout.
- `producer_ids(id=1, next_id)`: the producer-id sequence (one row, incremented under its
  row lock / the SQLite write lock, so concurrent allocations never collide).
- `producer_state(producer_id, topic_id, partition, epoch, batches JSON text, updated_at_ms)`,
  PK (producer_id, topic_id, partition): an idempotent producer's epoch and its last five
  batches `[first_seq, last_seq, base_offset, last_offset]` on one partition, updated in the
  transaction that commits them (files.py); idle rows expire (producers.py).

Version 3 (topic deletion):

- `topic_ids(id=1, next_id)`: the topic-id sequence. Topic ids come from it (not from the
  table's rowid, which SQLite reuses after the highest row is deleted), so a topic deleted
  and created again under its name is a new topic with a new id (a new Kafka topic id).

Version 4 (consumer groups):

- `group_coordinators(group_id PK, agent_id, epoch, acquired_at_ms)`: which agent coordinates
  a group (a lease valid while that agent is live in `agents`, so its registry heartbeat
  renews all its groups at once); `epoch` grows at every takeover and fences the
  coordinator's writes.
- `groups(group_id PK, protocol_type, protocol_name, generation, leader, state, members JSON
  text, state_at_ms)`: a group as its coordinator last stored it (groups.py).
- `group_offsets(group_id, topic, partition, committed_offset, leader_epoch, metadata,
  committed_at_ms)`, PK (group_id, topic, partition): committed offsets, by topic NAME as
  Kafka keeps them; deleting a topic deletes them (topics.py).

Version 5 (bounded metadata, incremental snapshots):

- `files.segments_version`: +1 whenever one of the file's segments leaves the log while the
  file stays live (retention, DeleteRecords, topic deletion: `files.retire_segments`). A
  live file's segments are all inserted with it and only ever go live → dead, so (file id,
  segments_version) names its live segments exactly: `reads.snapshot` rereads only files
  whose version it has not seen. Row ids are never reused: pruning (history.py) keeps each
  table's highest id, so SQLite never hands an id out twice.

Version 6 (cluster identity):

- `cluster.cluster_id` (a UUID, also written in the object store's marker
  `_silt/cluster.json`) and `cluster.store_url` (the store whose marker it wrote first;
  NULL until then): a metadata store used with another store is refused (identity.py).

Version 7 (big topic deletions):

- indexes `segments_partition` and `producer_state_partition` on (topic_id, partition): the
  foreign-key checks of deleting partition rows find their rows without a scan.

Version 8 (authorization):

- `acls(id, resource_type, resource_name, pattern_type, principal, host, operation,
  permission, created_at_ms)`: Kafka ACL bindings, their enums as Kafka's wire codes
  (`acl.model`); a binding is stored once (acls.py checks before inserting, under the
  version's row lock).
- `acl_version(id=1, next_id)`: +1 in every transaction that changes `acls` (taken first, so
  ACL writers serialize on its row): agents compare it to the version their cache holds and
  reload the bindings only when it moved.

Version 9 (listeners):

- `agents.endpoints`: JSON `[[listener name, host, port], ...]`, the address the agent
  advertises on each of its listeners (Metadata answers a client with the endpoints of the
  listener it came in on); NULL for a row registered before v9 (`host`/`port` then serve
  every listener). `host`/`port` stay the first listener's.

Version 10 (transactions):

- `transaction_coordinators(transactional_id PK, agent_id, epoch, acquired_at_ms)`: which
  agent coordinates a transactional id, a lease exactly like `group_coordinators`' (leases.py).
- `transactions(transactional_id PK, producer_id, producer_epoch, last_producer_id,
  last_producer_epoch, state, partitions JSON text, groups JSON text, timeout_ms,
  start_ms, updated_ms)`: Kafka's TransactionMetadata as its coordinator last stored it
  (txnstate.py); in PrepareCommit/PrepareAbort `partitions` are those still waiting for
  their marker.
- `transaction_offsets(transactional_id, group_id, topic, partition, committed_offset,
  leader_epoch, metadata, committed_at_ms)`, PK (transactional_id, group_id, topic,
  partition): TxnOffsetCommit's offsets, moved into `group_offsets` by the commit that
  completes the transaction, deleted by an abort.

Version 11 (transactions on the partitions' side):

- `open_txns(topic_id, partition, producer_id, first_offset)`, PK (topic_id, partition,
  producer_id): each producer's open transaction on a partition, from its first
  transactional batch's offset until its marker; the smallest first offset is the
  partition's last stable offset (else the high watermark).
- `aborted_txns(topic_id, partition, last_offset, producer_id, first_offset)`, PK
  (topic_id, partition, last_offset): Kafka's transaction index, one row per aborted
  transaction (`last_offset` is its ABORT marker's offset), for read_committed fetches and
  the compactor; rows wholly below the log start go with retention.
  Both are written by the agent commit that stores the batches (files.py, producers.py).

Version 12 (exactly-once streaming sinks):

- `stream_sinks(sink PK, batch_id, committed_at_ms)`: the last micro-batch each streaming
  sink committed (a Spark `writeStream.format("silt")` query, by its queryId), written
  in the transaction that makes the batch's objects live (`files.commit_sink_batch`), so a
  batch id replayed after a driver failure commits nothing twice. One row per sink, never
  pruned.

Version 13 (client quotas):

- `client_quotas(entity, quota_key, value)`, PK (entity, quota_key): Kafka's client quotas
  (AlterClientQuotas), `entity` the canonical JSON of its (type, name or null for the
  default) pairs sorted by type (quotas.py); the agents enforce the byte rates.

Version 14 (users):

- `scram_credentials(user_name, mechanism, salt, stored_key, server_key, iterations,
  updated_at_ms)`, PK (user_name, mechanism): SCRAM credentials as Kafka keeps them
  (mechanism: SCRAM-SHA-256 or SCRAM-SHA-512); never a password.
  SASL/PLAIN and SCRAM logins on the agents check against them (users.py).

Version 15 (dynamic configs):

- `dynamic_configs(resource_type, resource_name, config_key, value)`, PK (resource_type,
  resource_name, config_key): the configs AlterConfigs and IncrementalAlterConfigs set on a
  resource that is not a topic (a topic's are `topics.configs`), as Kafka's
  ConfigurationControlManager keeps them per ConfigResource: `resource_type` is Kafka's
  ConfigResource.Type id (4: BROKER, `resource_name` a broker id or "" for the
  cluster-wide default: brokerconfig.py; 32: GROUP, a group id: groupconfig.py), each
  stored and described, not applied (dynconfigs.py reads and replaces a resource's set).

Version 16 (cheaper flush commits):

- `segments` loses its foreign keys to `files` and `partitions`, which both databases checked
  row by row (`_v16`); the writers hold the rows they named (the file they turn live, the
  partitions they lock) and the deleters delete segments first. `segments_partition` stays:
  a topic's deletion deletes its segments by partition.

A migration is a function of a connection inside the transaction that also records its
version; `MIGRATIONS[i]` brings the schema from version i to i + 1. Migrations are frozen once
released: a later change to a table is a new migration, and `_v1` then gets its own copy of
the old table definitions.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from .models import segment_columns

FILE_PENDING = "pending"
FILE_LIVE = "live"
FILE_DELETING = "deleting"
FILE_DELETED = "deleted"
FILE_ABANDONED = "abandoned"
FILE_RETIRED = "retired"  # replaced by a compaction; deleted after the grace period
FILE_STATES = (FILE_PENDING, FILE_LIVE, FILE_DELETING, FILE_DELETED, FILE_ABANDONED,
               FILE_RETIRED)

JOB_LEASED = "leased"
JOB_COMMITTED = "committed"
JOB_FAILED = "failed"
JOB_ABANDONED = "abandoned"
JOB_STATES = (JOB_LEASED, JOB_COMMITTED, JOB_FAILED, JOB_ABANDONED)

# Auto-incrementing 64-bit ids; SQLite only auto-increments an INTEGER PRIMARY KEY.
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

md = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    md,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("applied_at_ms", sa.BigInteger, nullable=False),
)

def _cluster_table(metadata: sa.MetaData, *extra: sa.Column[Any]) -> sa.Table:
    """The one-row cluster table with `extra` columns (v1 has none; v6 adds the identity)."""
    return sa.Table(
        "cluster",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("secret", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        *extra,
        sa.CheckConstraint("id = 1", name="cluster_singleton"),
    )


def _identity_columns() -> list[sa.Column[Any]]:
    # v6: the cluster's id (also in the object store's marker) and the store it was first
    # bound to (NULL until a marker was written: identity.py).
    return [sa.Column("cluster_id", sa.String(36)), sa.Column("store_url", sa.Text)]


cluster = _cluster_table(md, *_identity_columns())

topics = sa.Table(
    "topics",
    md,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(249), nullable=False, unique=True),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("configs", sa.Text, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.CheckConstraint("partitions >= 1", name="topics_partitions_positive"),
)

partitions = sa.Table(
    "partitions",
    md,
    sa.Column("topic_id", sa.BigInteger, sa.ForeignKey("topics.id"), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("log_start_offset", sa.BigInteger, nullable=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    # The cleaner checkpoint: the first offset not yet deduplicated by a whole-log pass.
    sa.Column("clean_offset", sa.BigInteger, nullable=False, server_default="0"),
    sa.CheckConstraint("0 <= log_start_offset AND log_start_offset <= next_offset",
                       name="partitions_offsets"),
)

def _files_table(metadata: sa.MetaData, *extra: sa.Column[Any]) -> sa.Table:
    """The files table with `extra` columns after job_id (v1 has none; v5 adds
    segments_version), its constraints and index."""
    return sa.Table(
        "files",
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("object_key", sa.String(1024), nullable=False, unique=True),
        sa.Column("size", sa.BigInteger),
        sa.Column("data_offset", sa.BigInteger),
        sa.Column("data_length", sa.BigInteger),
        sa.Column("meta_offset", sa.BigInteger),
        sa.Column("meta_length", sa.BigInteger),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("holds_compacted", sa.Boolean, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("state_changed_at_ms", sa.BigInteger, nullable=False),
        sa.Column("job_id", sa.BigInteger),  # the compaction job holding the file
        *extra,
        sa.CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in FILE_STATES) + ")", name="files_state"
        ),
        sa.Index("files_state_changed", "state", "state_changed_at_ms"),
    )


def _segments_version() -> sa.Column[int]:
    # +1 whenever a segment of the file leaves the log while the file stays live (v5).
    return sa.Column("segments_version", sa.BigInteger, nullable=False, server_default="0")


files = _files_table(md, _segments_version())

# SQL types of the Segment fields' "sql" metadata (models.segment_columns).
SQL_TYPES: dict[str, type[sa.types.TypeEngine[Any]]] = {
    "bigint": sa.BigInteger, "integer": sa.Integer,
}


def _segments_table(metadata: sa.MetaData,
                    recorded: Sequence[tuple[str, type[sa.types.TypeEngine[Any]]]], *,
                    foreign_keys: bool) -> sa.Table:
    """The segments table whose columns between last_offset and live are `recorded`, with
    its constraints and indexes (the read path's partial index on live segments), and with
    `foreign_keys` to files and partitions (versions 1 to 15; see _v16 for why not since)."""
    keys: list[sa.ForeignKeyConstraint] = [
        sa.ForeignKeyConstraint(["file_id"], ["files.id"]),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"], ["partitions.topic_id", "partitions.partition"]
        ),
    ] if foreign_keys else []
    table = sa.Table(
        "segments",
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("file_id", sa.BigInteger, nullable=False),
        sa.Column("topic_id", sa.BigInteger, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("base_offset", sa.BigInteger, nullable=False),
        sa.Column("last_offset", sa.BigInteger, nullable=False),
        *(sa.Column(name, kind, nullable=False) for name, kind in recorded),
        sa.Column("live", sa.Boolean, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("cleaned_at_ms", sa.BigInteger),  # first time its tombstones were compacted
        *keys,
        sa.CheckConstraint("base_offset <= last_offset", name="segments_offsets"),
        sa.Index("segments_file", "file_id"),
    )
    # The read path: live segments of one partition from an offset on, in offset order.
    sa.Index(
        "segments_live_by_offset",
        table.c.topic_id,
        table.c.partition,
        table.c.last_offset,
        postgresql_where=table.c.live == sa.true(),
        sqlite_where=table.c.live == sa.true(),
    )
    return table


# The current table: the recorded columns are models.Segment's (one definition).
segments = _segments_table(md, [(name, SQL_TYPES[sql]) for name, sql in segment_columns()],
                           foreign_keys=False)
jobs = sa.Table(
    "jobs",
    md,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("spec_id", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("input_file_ids", sa.Text, nullable=False),  # JSON list
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("fence", sa.BigInteger, nullable=False),  # +1 on every takeover
    # Live segments of the inputs at the first lease. A live file's segment set is fixed
    # (segments are inserted only while it is pending) and `live` only goes true -> false,
    # so an equal count at commit means the very same segments are still live.
    sa.Column("input_segments", sa.BigInteger, nullable=False),
    sa.Column("lease_expires_ms", sa.BigInteger, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    sa.Column("result", sa.Text),
    sa.CheckConstraint(
        "state IN (" + ", ".join(f"'{s}'" for s in JOB_STATES) + ")", name="jobs_state"
    ),
    sa.Index("jobs_spec", "spec_id", "state"),
)
# At most one leased job per spec, whatever the lock order of racing lessees.
sa.Index("jobs_one_leased_per_spec", jobs.c.spec_id, unique=True,
         postgresql_where=jobs.c.state == JOB_LEASED, sqlite_where=jobs.c.state == JOB_LEASED)

# v12: the last micro-batch each streaming sink committed (by its queryId).
SINK_ID_MAX = 1024
stream_sinks = sa.Table(
    "stream_sinks",
    md,
    sa.Column("sink", sa.String(SINK_ID_MAX), primary_key=True),
    sa.Column("batch_id", sa.BigInteger, nullable=False),
    sa.Column("committed_at_ms", sa.BigInteger, nullable=False),
)

LIVE = segments.c.live == sa.true()  # queries must use this exact predicate to hit the index
# A topic being created or deleted in several transactions is renamed "/c/<id>" or "/d/<id>"
# (topics.py): no Kafka name holds a '/', so lookups by name miss it; listings use this.
HIDDEN_TOPIC = "/"
VISIBLE_TOPIC = sa.func.substr(topics.c.name, 1, 1) != HIDDEN_TOPIC

# Version 1's recorded segment columns, frozen: the current ones follow models.Segment, so a
# new field there needs a migration that adds its column (and _v1 keeps creating these).
_V1_SEGMENT_COLUMNS = (
    ("record_count", sa.BigInteger), ("data_pos", sa.BigInteger), ("data_len", sa.BigInteger),
    ("hash_pos", sa.BigInteger), ("hash_count", sa.BigInteger), ("batch_count", sa.Integer),
    ("min_timestamp", sa.BigInteger), ("max_timestamp", sa.BigInteger),
    ("tombstone_count", sa.BigInteger), ("frame_crc", sa.BigInteger),
)


def _v1(conn: sa.Connection, now_ms: int) -> None:
    """Create every table and the cluster secret."""
    v1 = sa.MetaData()
    tables = [_cluster_table(v1), *(t.to_metadata(v1) for t in (topics, partitions))]
    tables += [_files_table(v1), _segments_table(v1, _V1_SEGMENT_COLUMNS, foreign_keys=True),
               jobs.to_metadata(v1)]
    v1.create_all(conn, tables=tables)
    conn.execute(tables[0].insert().values(id=1, secret=os.urandom(32), created_at_ms=now_ms))


def _agents_table(metadata: sa.MetaData, *extra: sa.Column[Any]) -> sa.Table:
    """The agent registry with `extra` columns (v2 has none; v9 adds the endpoints)."""
    return sa.Table(
        "agents",
        metadata,
        sa.Column("node_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("agent_id", sa.String(255), nullable=False, unique=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
        sa.Column("heartbeat_at_ms", sa.BigInteger, nullable=False),
        sa.Column("stopped", sa.Boolean, nullable=False),
        *extra,
        sa.CheckConstraint("port BETWEEN 0 AND 65535", name="agents_port"),
        sqlite_autoincrement=True,  # a node id is never handed out twice
    )


def _endpoints_column() -> sa.Column[str]:
    # v9: the advertised endpoint of each listener, JSON [[name, host, port], ...]; NULL for
    # an agent registered before v9 (host:port serves every listener).
    return sa.Column("endpoints", sa.Text, nullable=True)


agents = _agents_table(md, _endpoints_column())

def _sequence(name: str) -> sa.Table:
    """A sequence as a one-row table (`id` = 1, `next_id`): portable across SQLite and
    PostgreSQL, taken under the row's write lock by `take_next`."""
    return sa.Table(
        name,
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("next_id", sa.BigInteger, nullable=False),
        sa.CheckConstraint("id = 1", name=f"{name}_singleton"),
    )


def take_next(conn: sa.Connection, sequence: sa.Table) -> int:
    """The sequence's next value, advanced in the caller's write transaction (its row lock
    on PostgreSQL, the write lock on SQLite): concurrent takers never get the same one."""
    c = sequence.c
    return int(conn.execute(sequence.update().where(c.id == 1).values(next_id=c.next_id + 1)
                            .returning(c.next_id)).scalar_one()) - 1


producer_ids = _sequence("producer_ids")

producer_state = sa.Table(
    "producer_state",
    md,
    sa.Column("producer_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("topic_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.Integer, nullable=False),
    sa.Column("batches", sa.Text, nullable=False),  # JSON [[first_seq, last_seq, base, last]]
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"], ["partitions.topic_id", "partitions.partition"]
    ),
    sa.Index("producer_state_updated", "updated_at_ms"),
)

FIRST_PRODUCER_ID = 1


def _v2(conn: sa.Connection, now_ms: int) -> None:
    """The agent registry and idempotent producers' state."""
    v2 = sa.MetaData()
    tables = [_agents_table(v2), *(t.to_metadata(v2) for t in (producer_ids, producer_state))]
    # producer_state's foreign key needs `partitions` in the same MetaData to resolve.
    partitions.to_metadata(v2)
    v2.create_all(conn, tables=tables)
    conn.execute(tables[1].insert().values(id=1, next_id=FIRST_PRODUCER_ID))


topic_ids = _sequence("topic_ids")


def _v3(conn: sa.Connection, now_ms: int) -> None:
    """The topic-id sequence, starting past every id handed out so far."""
    v3 = sa.MetaData()
    table = topic_ids.to_metadata(v3)
    v3.create_all(conn, tables=[table])
    top = conn.execute(sa.select(sa.func.max(topics.c.id))).scalar()
    conn.execute(table.insert().values(id=1, next_id=int(top or 0) + 1))


def _lease_table(name: str, key: str) -> sa.Table:
    """A coordinator lease table (leases.py): which agent coordinates each `key`, under
    which epoch, since when; indexed by agent (a restarted agent takes its leases back)."""
    return sa.Table(
        name,
        md,
        sa.Column(key, sa.String(255), primary_key=True),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("acquired_at_ms", sa.BigInteger, nullable=False),
        sa.Index(f"{name}_agent", "agent_id"),
    )


group_coordinators = _lease_table("group_coordinators", "group_id")

groups = sa.Table(
    "groups",
    md,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("protocol_type", sa.String(255), nullable=True),
    sa.Column("protocol_name", sa.String(255), nullable=True),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("leader", sa.String(255), nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("members", sa.Text, nullable=False),  # JSON list of models.GroupMember
    sa.Column("state_at_ms", sa.BigInteger, nullable=False),
)

def _offset_columns() -> list[sa.Column[Any]]:
    """A committed offset's columns, keyed by (group, topic NAME, partition) as Kafka keeps
    them: the groups' committed offsets and a transaction's pending ones."""
    return [
        sa.Column("group_id", sa.String(255), primary_key=True),
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("committed_offset", sa.BigInteger, nullable=False),
        sa.Column("leader_epoch", sa.Integer, nullable=False),
        sa.Column("metadata", sa.Text, nullable=True),
        sa.Column("committed_at_ms", sa.BigInteger, nullable=False),
    ]


group_offsets = sa.Table("group_offsets", md, *_offset_columns())


def _v4(conn: sa.Connection, now_ms: int) -> None:
    """Consumer groups: coordinator leases, stored groups, committed offsets."""
    v4 = sa.MetaData()
    v4.create_all(conn, tables=[t.to_metadata(v4)
                                for t in (group_coordinators, groups, group_offsets)])


def _v5(conn: sa.Connection, now_ms: int) -> None:
    """files.segments_version: the snapshot's change marker for a live file's segments."""
    column = _segments_version()
    kind = column.type.compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE files ADD COLUMN {column.name} {kind} NOT NULL"
                         f" DEFAULT 0")


def _v6(conn: sa.Connection, now_ms: int) -> None:
    """The cluster's identity, no store bound yet. The id is the UUID the agents derived
    from the secret before v6 (their Kafka cluster id and topic ids' namespace), so those
    stay what they were."""
    for column in _identity_columns():
        kind = column.type.compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE cluster ADD COLUMN {column.name} {kind}")
    secret = conn.execute(sa.text("SELECT secret FROM cluster WHERE id = 1")).scalar_one()
    digest = hashlib.sha256(b"siltstream cluster id" + bytes(secret)).digest()
    cluster_id = uuid.UUID(bytes=digest[:16], version=4)
    conn.execute(sa.text("UPDATE cluster SET cluster_id = :id WHERE id = 1"),
                 {"id": str(cluster_id)})


def _v7(conn: sa.Connection, now_ms: int) -> None:
    """Indexes on the partition columns of segments and producer_state: deleting a partition
    row (a topic's deletion) has SQLite and PostgreSQL check these foreign keys, which
    without them scans the whole table once per partition (the live-segments index is
    partial, so neither can use it): 2,000 partitions of a topic took 0.4 s against 20,000
    segments."""
    conn.exec_driver_sql("CREATE INDEX segments_partition ON segments (topic_id, partition)")
    conn.exec_driver_sql(
        "CREATE INDEX producer_state_partition ON producer_state (topic_id, partition)")


acls = sa.Table(
    "acls",
    md,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("resource_type", sa.SmallInteger, nullable=False),
    sa.Column("resource_name", sa.Text, nullable=False),
    sa.Column("pattern_type", sa.SmallInteger, nullable=False),
    sa.Column("principal", sa.Text, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("operation", sa.SmallInteger, nullable=False),
    sa.Column("permission", sa.SmallInteger, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    sqlite_autoincrement=True,
)

acl_version = _sequence("acl_version")


def _v8(conn: sa.Connection, now_ms: int) -> None:
    """ACL bindings and their change counter."""
    v8 = sa.MetaData()
    tables = [t.to_metadata(v8) for t in (acls, acl_version)]
    v8.create_all(conn, tables=tables)
    conn.execute(tables[1].insert().values(id=1, next_id=1))


def _v9(conn: sa.Connection, now_ms: int) -> None:
    """agents.endpoints: each agent's advertised endpoint per listener."""
    column = _endpoints_column()
    kind = column.type.compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE agents ADD COLUMN {column.name} {kind}")


transaction_coordinators = _lease_table("transaction_coordinators", "transactional_id")

transactions = sa.Table(
    "transactions",
    md,
    sa.Column("transactional_id", sa.String(255), primary_key=True),
    sa.Column("producer_id", sa.BigInteger, nullable=False),
    sa.Column("producer_epoch", sa.Integer, nullable=False),
    sa.Column("last_producer_id", sa.BigInteger, nullable=False),
    sa.Column("last_producer_epoch", sa.Integer, nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("partitions", sa.Text, nullable=False),  # JSON [[topic, partition], ...]
    sa.Column("groups", sa.Text, nullable=False),  # JSON [group id, ...]
    sa.Column("timeout_ms", sa.Integer, nullable=False),
    sa.Column("start_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.Index("transactions_producer", "producer_id"),
    sa.Index("transactions_state", "state"),
)

transaction_offsets = sa.Table(
    "transaction_offsets",
    md,
    sa.Column("transactional_id", sa.String(255), primary_key=True),
    *_offset_columns(),
)


def _v10(conn: sa.Connection, now_ms: int) -> None:
    """Transactions: coordinator leases, the transactions' state, their pending offsets."""
    v10 = sa.MetaData()
    v10.create_all(conn, tables=[t.to_metadata(v10) for t in (
        transaction_coordinators, transactions, transaction_offsets)])


open_txns = sa.Table(
    "open_txns",
    md,
    sa.Column("topic_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("producer_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("first_offset", sa.BigInteger, nullable=False),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"], ["partitions.topic_id", "partitions.partition"]
    ),
)

aborted_txns = sa.Table(
    "aborted_txns",
    md,
    sa.Column("topic_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("last_offset", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("producer_id", sa.BigInteger, nullable=False),
    sa.Column("first_offset", sa.BigInteger, nullable=False),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"], ["partitions.topic_id", "partitions.partition"]
    ),
    sa.CheckConstraint("first_offset <= last_offset", name="aborted_txns_offsets"),
)

scram_credentials = sa.Table(
    "scram_credentials",
    md,
    sa.Column("user_name", sa.String(255), primary_key=True),
    sa.Column("mechanism", sa.String(32), primary_key=True),
    sa.Column("salt", sa.LargeBinary, nullable=False),
    sa.Column("stored_key", sa.LargeBinary, nullable=False),
    sa.Column("server_key", sa.LargeBinary, nullable=False),
    sa.Column("iterations", sa.Integer, nullable=False),
    sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
)


def _v11(conn: sa.Connection, now_ms: int) -> None:
    """Open transactions and the aborted-transaction index, per partition."""
    v11 = sa.MetaData()
    tables = [t.to_metadata(v11) for t in (open_txns, aborted_txns)]
    partitions.to_metadata(v11)  # for the foreign keys to resolve
    v11.create_all(conn, tables=tables)


def _v12(conn: sa.Connection, now_ms: int) -> None:
    """Exactly-once streaming sinks: the last batch each committed."""
    v12 = sa.MetaData()
    v12.create_all(conn, tables=[stream_sinks.to_metadata(v12)])


client_quotas = sa.Table(
    "client_quotas",
    md,
    sa.Column("entity", sa.Text, primary_key=True),
    sa.Column("quota_key", sa.Text, primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
)


def _v13(conn: sa.Connection, now_ms: int) -> None:
    """Client quotas."""
    v13 = sa.MetaData()
    v13.create_all(conn, tables=[client_quotas.to_metadata(v13)])


def _v14(conn: sa.Connection, now_ms: int) -> None:
    """SCRAM credentials (the agents' user database)."""
    v14 = sa.MetaData()
    v14.create_all(conn, tables=[scram_credentials.to_metadata(v14)])


dynamic_configs = sa.Table(
    "dynamic_configs",
    md,
    sa.Column("resource_type", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("resource_name", sa.String(255), primary_key=True),
    sa.Column("config_key", sa.String(255), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


def _v15(conn: sa.Connection, now_ms: int) -> None:
    """Dynamic configs of resources other than topics (Kafka's dynamic broker configs)."""
    v15 = sa.MetaData()
    v15.create_all(conn, tables=[dynamic_configs.to_metadata(v15)])


def _v16(conn: sa.Connection, now_ms: int) -> None:
    """segments without foreign keys. Both databases check a foreign key row by row (a
    PostgreSQL trigger per inserted row and key): at 1,000 partitions a flush, the two
    checks were 18 of the 44 ms of database CPU its commit cost. Every writer of segments
    already holds what they checked: the file row it turns live and the partition rows it
    locks (see `files.lock_partitions`); every deleter of files or partitions deletes their
    segments first. PostgreSQL drops the constraints; SQLite, which cannot, rebuilds the
    table (the same columns in the same order, ids kept)."""
    if conn.dialect.name == "postgresql":
        for (name,) in conn.exec_driver_sql(
                "SELECT conname FROM pg_constraint WHERE conrelid = 'segments'::regclass"
                " AND contype = 'f' ORDER BY conname").all():
            conn.exec_driver_sql(f'ALTER TABLE segments DROP CONSTRAINT "{name}"')
        return
    for index in ("segments_file", "segments_live_by_offset", "segments_partition"):
        conn.exec_driver_sql(f"DROP INDEX {index}")
    conn.exec_driver_sql("ALTER TABLE segments RENAME TO segments_v15")
    v16 = sa.MetaData()
    table = _segments_table(v16, _V1_SEGMENT_COLUMNS, foreign_keys=False)
    v16.create_all(conn, tables=[table])
    columns = ", ".join(f'"{c.name}"' for c in table.c)
    conn.exec_driver_sql(f"INSERT INTO segments ({columns}) SELECT {columns} FROM segments_v15")
    conn.exec_driver_sql("DROP TABLE segments_v15")
    conn.exec_driver_sql("CREATE INDEX segments_partition ON segments (topic_id, partition)")


Migration = Callable[[sa.Connection, int], None]
MIGRATIONS: list[Migration] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11, _v12,
                               _v13, _v14, _v15, _v16]
LATEST_VERSION = len(MIGRATIONS)
