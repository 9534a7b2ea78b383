"""Metadata-store settings (the `metadata` section): which database, by URL, and the
cluster-wide timeouts the store applies (agent liveness, idle producer state). Loaded by
`settings.load` (env `SILT_METADATA` for the URL, as always); the URL forms are
`engine_url`'s. Pass the section to `MetadataStore.open(url, config=...)`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from settings import Section, integer, text

from .engine import DEFAULT_POOL_SIZE, DEFAULT_URL, engine_url
from .errors import UnsupportedMetadataUrlError

URL = "url"
PRODUCER_ID_EXPIRATION_MS = "producer.id.expiration.ms"
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = "producer.id.expiration.check.interval.ms"
BROKER_SESSION_TIMEOUT_MS = "broker.session.timeout.ms"
BROKER_HEARTBEAT_INTERVAL_MS = "broker.heartbeat.interval.ms"
OFFSETS_RETENTION_MINUTES = "offsets.retention.minutes"
OFFSETS_RETENTION_CHECK_INTERVAL_MS = "offsets.retention.check.interval.ms"
JOBS_RETENTION_MS = "jobs.retention.ms"
DELETED_FILES_RETENTION_MS = "deleted.files.retention.ms"
MAX_PARTITIONS = "max.partitions"
POOL_SIZE = "pool.size"
ENV_URL = "SILT_METADATA"


def _supported(url: str) -> bool:
    try:
        engine_url(url)
    except UnsupportedMetadataUrlError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class MetadataConfig(Section):
    """Where metadata lives: `sqlite:///path` (embedded) or `postgresql://...`."""

    SECTION: ClassVar[str] = "metadata"

    url: str = text(URL, DEFAULT_URL, allowed="a URL sqlite:///path or postgresql://...",
                    check=_supported, env=ENV_URL, doc="where metadata lives")
    # Kafka's producer.id.expiration.ms: a producer's state on a partition is forgotten
    # after this long without a write there (its next batch is then accepted at any
    # sequence, as a new producer's).
    producer_id_expiration_ms: int = integer(
        PRODUCER_ID_EXPIRATION_MS, 86_400_000, lo=1,
        doc="an idle producer's state on a partition is forgotten after this long")
    # Kafka's producer.id.expiration.check.interval.ms: how often each `silt agent` deletes
    # the expired states (`MetadataStore.expire_producers`; harmless when agents overlap).
    producer_id_expiration_check_interval_ms: int = integer(
        PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS, 600_000, lo=1,
        doc="how often each `silt agent` deletes expired producer states")
    # Kafka's KRaft broker.session.timeout.ms / broker.heartbeat.interval.ms: an agent is
    # live (listed as a broker) while its last heartbeat is younger than the timeout; it
    # heartbeats every interval.
    broker_session_timeout_ms: int = integer(
        BROKER_SESSION_TIMEOUT_MS, 9_000, lo=1,
        doc="an agent is live (listed as a broker) while its last heartbeat is younger")
    broker_heartbeat_interval_ms: int = integer(
        BROKER_HEARTBEAT_INTERVAL_MS, 2_000, lo=1,
        doc="how often an agent heartbeats in the agent registry (< the session timeout)")

    # Kafka's offsets.retention.minutes: a group's committed offsets are deleted once the
    # group has been empty this long (a "simple" consumer's, this long after each commit);
    # each `silt agent` checks every offsets.retention.check.interval.ms.
    offsets_retention_minutes: int = integer(
        OFFSETS_RETENTION_MINUTES, 7 * 24 * 60, lo=1,
        doc="a group's committed offsets are deleted once it has been empty this long")
    offsets_retention_check_interval_ms: int = integer(
        OFFSETS_RETENTION_CHECK_INTERVAL_MS, 600_000, lo=1,
        doc="how often each `silt agent` deletes expired committed offsets")

    # How long history rows stay (`MetadataStore.prune`, run by every compactor's GC pass):
    # a finished compaction job's row (committed, failed or abandoned; a leased one once its
    # lease has been expired this long) after its last update, a deleted file's row and its
    # segments' rows after the deletion. Without them the metadata only grows.
    jobs_retention_ms: int = integer(
        JOBS_RETENTION_MS, 86_400_000, lo=0,
        doc="a finished compaction job's row is deleted this long after its last update")
    deleted_files_retention_ms: int = integer(
        DELETED_FILES_RETENTION_MS, 300_000, lo=0,
        doc="a deleted file's row and its segments' rows are deleted this long after")

    # KIP-578's max.partitions: the partitions of all topics together. Past it CreateTopics,
    # CreatePartitions, auto-creation and `silt topics` are refused (POLICY_VIOLATION). The
    # default keeps every topic, and a Metadata of all topics, under librdkafka's 100,000
    # partitions (RD_KAFKAP_PARTITIONS_MAX: a client refuses a larger topic's metadata).
    max_partitions: int = integer(
        MAX_PARTITIONS, 100_000, lo=1, hi=2**31 - 1,
        doc="partitions of all topics together; creates and growth past it are refused")

    # Connections each process keeps to the metadata database, at most: a fixed pool, as
    # an agent's reads come from its 16 I/O threads at once (beyond it a thread waits for a
    # connection). Fixed rather than 5 kept + 10 opened and closed per burst: on PostgreSQL
    # each connection opened is a server process started (~6 a second under 50 long-polls).
    # Every process may hold this many: size PostgreSQL's max_connections for them.
    pool_size: int = integer(
        POOL_SIZE, DEFAULT_POOL_SIZE, lo=1, hi=1000,
        doc="connections each process keeps to the metadata database, at most")

    def check_across(self) -> None:
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise self.invalid(BROKER_HEARTBEAT_INTERVAL_MS, self.broker_heartbeat_interval_ms,
                               f"an integer < {BROKER_SESSION_TIMEOUT_MS}"
                               f" ({self.broker_session_timeout_ms})")
