"""Every metric siltstream exports, defined once, and the one call per event that updates it.

Names follow Prometheus' conventions: a `silt_` prefix, base units (seconds, bytes), counters
exposed with `_total`. Product code never touches a metric object: it calls a function
below where the event happens, or hands one to a hook that already exists (the object
store's request listeners). Counters and histograms are always on (a lock and an add per
event; those counted on the agent's event loop, a plain add: `LoopCounter`). State that
needs a metadata read (group lag, the cleaner's state, the GC backlog) is computed by the
services on a timer or once per compaction round, only while a metrics port is open
(`telemetry.serving()`), and handed over whole: series of a topic or group that went away
disappear with the next update. A scrape never reads the metadata store.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

# No `_created` series per counter and histogram: Prometheus ignores them in the text format,
# and they double what a scrape carries.
disable_created_metrics()  # type: ignore[no-untyped-call]  # (unannotated upstream)

# Histogram buckets: object sizes (1 KiB .. 256 MiB by 4x), commit and flush latencies, and
# compaction job durations (up to an hour).
SIZE_BUCKETS: Final = tuple(float(1024 * 4**i) for i in range(10))
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                          5.0, 10.0)
JOB_BUCKETS: Final = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)

# Outcomes of a compaction job (compactor.worker.JobReport.outcome), listed so every series
# exists from the start (Prometheus: initialise the label values you know).
JOB_OUTCOMES: Final = ("committed", "skipped", "lost", "failed", "unknown", "abandoned")


class LatestGauges:
    """A gauge family whose whole set of series is replaced by each update, for state
    computed elsewhere (a topic or group that went away disappears)."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self._values: dict[tuple[str, ...], float] = {}
        REGISTRY.register(self)

    def replace(self, values: Mapping[tuple[str, ...], float]) -> None:
        self._values = dict(values)  # one assignment: a scrape sees the old or the new set

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labels)]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, value in sorted(self._values.items()):
            family.add_metric(key, value)
        yield family


class LoopCounter:
    """A counter family by one label, counted by the agent's event loop (every Kafka request
    passes there): a plain add per event, no lock nor Python call of prometheus_client's
    (which cost ~5,000 instructions an event, a few % of a small request). One thread adds;
    a scrape (another thread) copies the counts in one step."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self.counts: dict[str, int] = {}
        REGISTRY.register(self)

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=(self.label,))]

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=(self.label,))
        for key, value in sorted(dict(self.counts).items()):
            family.add_metric((key,), value)
        yield family


class LoopHistogram:
    """A histogram observed by the agent's event loop, as `LoopCounter` counts: a bucket's
    count and the sum added per observation."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # per bucket, then above the last bound
        self.sum = 0.0
        REGISTRY.register(self)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self) -> Iterator[Metric]:
        counts, total = list(self.counts), self.sum
        cumulative, buckets = 0, []
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))  # type: ignore[no-untyped-call]
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets,
                                    sum_value=total)


# --------------------------------------------------------------------------- agent

PRODUCE_RECORDS = Counter("silt_produce_records", "Records committed by this agent's flushes,"
                          " by topic.", ["topic"])
PRODUCE_BYTES = Counter("silt_produce_bytes", "Record-batch bytes committed by this agent's"
                        " flushes, by topic.", ["topic"])
FLUSH_SIZE = Histogram("silt_flush_size_bytes", "Size of each object an agent flush wrote and"
                       " committed.", buckets=SIZE_BUCKETS)
FLUSH_DURATION = Histogram("silt_flush_duration_seconds", "Time to write and commit one flush"
                           " object: pending row, PUT, metadata commit.",
                           buckets=LATENCY_BUCKETS)
FLUSH_FAILURES = Counter("silt_flush_failures", "Flush objects not committed (failed) or whose"
                         " commit outcome is unknown.", ["outcome"])
FETCH_ROUND_TRIPS = LoopHistogram("silt_fetch_metadata_round_trips", "Metadata round trips"
                                  " each Fetch request cost, all its reads (a long-poll"
                                  " re-reads at each commit notification) counted.",
                                  buckets=(0, 1, 2, 3, 5, 10, 25, 100))
FETCH_BYTES = Counter("silt_fetch_bytes", "Record bytes returned to Fetch requests, by topic.",
                      ["topic"])
REQUESTS = LoopCounter("silt_requests", "Kafka requests dispatched, by API.", "api")
CONNECTIONS = Gauge("silt_connections", "Open Kafka client connections.")
SASL_AUTHENTICATIONS = Counter("silt_sasl_authentications", "SASL authentications on this"
                               " agent's SASL listeners, by mechanism and outcome (ok, failed).",
                               ["mechanism", "outcome"])
CONNECTIONS_ACCEPTED = Counter("silt_connections_accepted", "Kafka client connections"
                               " accepted.")
CONNECTIONS_REFUSED = Counter("silt_connections_refused", "Kafka client connections this agent"
                              " refused or closed, by reason: a request it would not read"
                              " (malformed_request, frame_too_large, unsupported_version), a"
                              " limit (max_connections, max_connections_per_ip, read_timeout,"
                              " idle), a handler failure (handler_error) or a reply it could"
                              " not write (reply_failed).", ["reason"])
GROUP_LAG = LatestGauges("silt_consumer_group_lag", "Records between a consumer group's"
                         " committed offsets and the log end, summed per topic, for the groups"
                         " this agent coordinates.", ("group", "topic"))

# --------------------------------------------------------------------------- object store

STORE_REQUESTS = Counter("silt_objectstore_requests", "Object-store requests made, by type"
                         " (as billed: each multipart part, list page and delete batch).",
                         ["type"])
STORE_FAILURES = Counter("silt_objectstore_request_failures", "Object-store requests that"
                         " failed, by type and the error the store contract maps them to"
                         " (reported per HTTP request by the S3 backend).", ["type", "error"])
STORE_BYTES = Counter("silt_objectstore_bytes", "Bytes sent to and received from the object"
                      " store.", ["direction"])

# --------------------------------------------------------------------------- metadata

METADATA_ROUND_TRIPS = Counter("silt_metadata_round_trips", "Round trips to the metadata"
                               " database, by type: a statement, a transaction's BEGIN and"
                               " COMMIT/ROLLBACK as the driver sends them, a connection's"
                               " liveness ping at checkout (PostgreSQL).", ["type"])
ROUND_TRIP_TYPES: Final = ("statement", "begin", "commit", "rollback", "ping")
COMMIT_DURATION = Histogram("silt_metadata_commit_duration_seconds", "Metadata commits"
                            " (the transaction, its retries and read-back), by kind and"
                            " outcome.", ["kind", "outcome"], buckets=LATENCY_BUCKETS)

# --------------------------------------------------------------------------- compactor

JOBS = Counter("silt_compaction_jobs", "Compaction jobs run, by outcome.", ["outcome"])
JOB_DURATION = Histogram("silt_compaction_job_duration_seconds", "Duration of committed"
                         " compaction jobs.", buckets=JOB_BUCKETS)
COMPACTION_BYTES = Counter("silt_compaction_bytes", "Bytes of input files merged (in) and of"
                           " output files written (out) by committed jobs.", ["direction"])
RECORDS_DROPPED = Counter("silt_compaction_records_dropped", "Records committed jobs dropped:"
                          " older values of a key (duplicate) and tombstones past"
                          " delete.retention.ms (tombstone).", ["reason"])
LAST_PLAN = Gauge("silt_compaction_last_plan_timestamp_seconds", "When this compactor last"
                  " planned a round (Unix time).")
MAX_DIRTY_RATIO = LatestGauges("silt_compaction_max_dirty_ratio", "Largest cleanable dirty"
                               " ratio (dirty / (clean + dirty) bytes below the first"
                               " uncleanable offset) among the partitions of a compacted"
                               " topic.", ("topic",))
OLDEST_DIRTY_AGE = LatestGauges("silt_compaction_oldest_dirty_age_seconds", "Age of the"
                                " oldest dirty record below the first uncleanable offset of a"
                                " compacted topic (compaction lag; what"
                                " max.compaction.lag.ms bounds).", ("topic",))
UNCLEANABLE = LatestGauges("silt_compaction_uncleanable_partitions", "Partitions of a"
                           " compacted topic whose last compaction job failed here.",
                           ("topic",))
GC_BACKLOG_FILES = LatestGauges("silt_gc_backlog_files", "Files whose objects garbage"
                                " collection has yet to delete, by state (retired:"
                                " replaced or past retention; abandoned: failed uploads;"
                                " deleting: under way).", ("state",))
GC_BACKLOG_BYTES = LatestGauges("silt_gc_backlog_bytes", "Bytes of the files of"
                                " silt_gc_backlog_files, by state.", ("state",))
LIVE_FILES = LatestGauges("silt_live_files", "Live files by level.", ("level",))
LIVE_BYTES = LatestGauges("silt_live_bytes", "Bytes of live files by level.", ("level",))
LIVE_SEGMENTS = LatestGauges("silt_live_segments", "Live segments by level.", ("level",))

# Why the agent refuses or closes a client connection (silt_connections_refused).
REFUSAL_REASONS: Final = ("malformed_request", "frame_too_large", "unsupported_version",
                          "max_connections", "max_connections_per_ip", "read_timeout", "idle",
                          "handler_error", "reply_failed", "tls_handshake",
                          "ssl_principal", "sasl_state", "sasl_failed", "sasl_timeout",
                          "sasl_expired")

# The file states whose objects GC deletes (metadata.schema: FILE_RETIRED, ...).
GC_STATES: Final = ("retired", "abandoned", "deleting")

for _outcome in JOB_OUTCOMES:
    JOBS.labels(_outcome)
for _label in ("in", "out"):
    COMPACTION_BYTES.labels(_label)
for _label in ("duplicate", "tombstone"):
    RECORDS_DROPPED.labels(_label)
for _label in ("sent", "received"):
    STORE_BYTES.labels(_label)
for _label in ("failed", "unknown"):
    FLUSH_FAILURES.labels(_label)
for _label in REFUSAL_REASONS:
    CONNECTIONS_REFUSED.labels(_label)

# ============================================================================ the calls


def flushed(seconds: float, size: int, by_topic: Mapping[str, tuple[int, int]]) -> None:
    """An agent committed a flush object of `size` bytes in `seconds`; `by_topic`: the
    records and batch bytes it made visible per topic."""
    FLUSH_DURATION.observe(seconds)
    FLUSH_SIZE.observe(size)
    for topic, (records, nbytes) in by_topic.items():
        PRODUCE_RECORDS.labels(topic).inc(records)
        PRODUCE_BYTES.labels(topic).inc(nbytes)


def flush_failed(unknown: bool) -> None:
    """A flush object was not committed (or its commit's outcome is `unknown`)."""
    FLUSH_FAILURES.labels("unknown" if unknown else "failed").inc()


def fetched(by_topic: Iterable[tuple[str, int]]) -> None:
    """A Fetch response carries these record bytes per topic."""
    for topic, nbytes in by_topic:
        if nbytes:
            FETCH_BYTES.labels(topic).inc(nbytes)


_REQUEST_COUNTS = REQUESTS.counts


def request(api: str) -> None:
    """A Kafka request of `api` (its handler's name: produce, fetch, ...) is dispatched (on
    the agent's event loop)."""
    _REQUEST_COUNTS[api] = _REQUEST_COUNTS.get(api, 0) + 1


def connection_opened() -> None:
    CONNECTIONS_ACCEPTED.inc()
    CONNECTIONS.inc()


def connection_closed() -> None:
    CONNECTIONS.dec()


def sasl_authentication(mechanism: str, outcome: str) -> None:
    """A SASL exchange with `mechanism` ended: "ok" or "failed"."""
    SASL_AUTHENTICATIONS.labels(mechanism, outcome).inc()


def connection_refused(reason: str) -> None:
    """The agent refused or closed a client connection for `reason` (REFUSAL_REASONS)."""
    CONNECTIONS_REFUSED.labels(reason).inc()


def store_request(op: str, sent: int, received: int) -> None:
    """An `objectstore.RequestListener`: one request of type `op` ("" = bytes received on
    a stream already counted)."""
    if op:
        STORE_REQUESTS.labels(op).inc()
    if sent:
        STORE_BYTES.labels("sent").inc(sent)
    if received:
        STORE_BYTES.labels("received").inc(received)


def store_failure(op: str, error: str) -> None:
    """An `objectstore.FailureListener`: a request of type `op` failed with `error`."""
    STORE_FAILURES.labels(op, error).inc()


class _Trips(threading.local):
    """This thread's metadata round trips so far (`round_trips_here`)."""

    count = 0


_TRIPS = _Trips()
_TRIP_COUNTERS = {kind: METADATA_ROUND_TRIPS.labels(kind) for kind in ROUND_TRIP_TYPES}


def metadata_round_trip(kind: str) -> None:
    """One round trip to the metadata database of `kind` (ROUND_TRIP_TYPES), made by the
    calling thread."""
    _TRIP_COUNTERS[kind].inc()
    _TRIPS.count += 1


def round_trips_here() -> int:
    """The metadata round trips the calling thread has made so far (a caller takes the
    difference around work it runs on that thread)."""
    return _TRIPS.count


def fetch_round_trips(n: int) -> None:
    """A Fetch request cost `n` metadata round trips (answered on the agent's event loop)."""
    FETCH_ROUND_TRIPS.observe(n)


def commit_done(kind: str, outcome: str, seconds: float) -> None:
    """A metadata commit of `kind` (files, compaction, topics, records, configs) ended with
    `outcome` (ok, refused, conflict, unknown, error) after `seconds`."""
    COMMIT_DURATION.labels(kind, outcome).observe(seconds)


class _Uncleanable:
    """Compacted partitions whose last job failed here, until a job covering them commits
    (Kafka's uncleanable partitions; forgotten at restart, as Kafka's are)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: set[tuple[str, int]] = set()
        self._topics: frozenset[str] = frozenset()

    def job(self, outcome: str, partitions: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            if outcome == "failed":
                self._failed.update(partitions)
            elif outcome == "committed":
                self._failed.difference_update(partitions)
            else:
                return
            self._publish()

    def topics(self, names: Iterable[str]) -> None:
        """The compacted topics (each gets a series, 0 when nothing failed)."""
        with self._lock:
            self._topics = frozenset(names)
            self._failed = {tp for tp in self._failed if tp[0] in self._topics}
            self._publish()

    def _publish(self) -> None:
        counts = dict.fromkeys(self._topics, 0)
        for topic, _ in self._failed:
            counts[topic] = counts.get(topic, 0) + 1
        UNCLEANABLE.replace({(t,): n for t, n in counts.items()})


_UNCLEANABLE = _Uncleanable()


def compaction_job(outcome: str, seconds: float, input_bytes: int, output_bytes: int,
                   duplicates: int, tombstones: int,
                   partitions: Iterable[tuple[str, int]]) -> None:
    """A compaction job ended with `outcome`; the rest counts only if it committed.
    `partitions`: the compacted partitions it held (uncleanable while their job fails)."""
    JOBS.labels(outcome).inc()
    _UNCLEANABLE.job(outcome, partitions)
    if outcome != "committed":
        return
    JOB_DURATION.observe(seconds)
    COMPACTION_BYTES.labels("in").inc(input_bytes)
    COMPACTION_BYTES.labels("out").inc(output_bytes)
    RECORDS_DROPPED.labels("duplicate").inc(duplicates)
    RECORDS_DROPPED.labels("tombstone").inc(tombstones)


def planned(now_s: float, topics: Mapping[str, tuple[float, float]]) -> None:
    """A compactor planned at `now_s`; per compacted topic (max dirty ratio, oldest dirty
    age in seconds)."""
    LAST_PLAN.set(now_s)
    MAX_DIRTY_RATIO.replace({(t,): ratio for t, (ratio, _) in topics.items()})
    OLDEST_DIRTY_AGE.replace({(t,): age for t, (_, age) in topics.items()})
    _UNCLEANABLE.topics(topics)


def store_state(files_by_state: Mapping[str, int], bytes_by_state: Mapping[str, int],
                levels: Iterable[tuple[int, int, int, int]]) -> None:
    """Files and bytes per file state (the GC backlog is taken from them), and per level
    (level, live files, live bytes, live segments)."""
    GC_BACKLOG_FILES.replace({(st,): files_by_state.get(st, 0) for st in GC_STATES})
    GC_BACKLOG_BYTES.replace({(st,): bytes_by_state.get(st, 0) for st in GC_STATES})
    rows = list(levels)
    LIVE_FILES.replace({(str(lv),): n for lv, n, _, _ in rows})
    LIVE_BYTES.replace({(str(lv),): b for lv, _, b, _ in rows})
    LIVE_SEGMENTS.replace({(str(lv),): s for lv, _, _, s in rows})


def group_lag(lag: Mapping[tuple[str, str], int]) -> None:
    """Per (group, topic) this agent coordinates: the summed lag of its partitions."""
    GROUP_LAG.replace({k: float(v) for k, v in lag.items()})
