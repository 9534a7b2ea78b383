"""The Kafka front door: a confluent-kafka client against one `silt agent` process.

Measured per store (file:// or moto S3, SQLite metadata), the agent at its defaults (flush
every 250 ms or 8 MiB):
- produce: acks=all, `value_size` values round robin over `partitions`, as fast as the
  producer goes; MiB/s per agent core (the agent process's CPU seconds, all threads, from
  /proc) and wall MiB/s.
- latency: a steady `rate_mib_s` below saturation for `seconds`; produce-ack latency (the
  delivery callback's time minus the produce call's) p50/p99, and objects written per
  second (objects listed under the store's data/ prefix, before and after).
- fetch: a consumer assigned every partition from offset 0 reads the produce run's records
  back; MiB/s per agent core and wall.
- many small producers: 50 producer clients at their defaults, 20 KiB/s each; agent CPU per
  Produce request (counted by the agent's /metrics) and per MiB, ack p50/p99.
- long-polls: 50 consumers caught up on 2 partitions each while one producer trickles 20
  records a second: Fetch requests per agent core and metadata round trips per Fetch (the
  agent's /metrics), next to the floor measured right after on the same agent: pipelined
  Fetches of no partition (no metadata read, no record) per agent core.
MiB are value bytes (keys and framing not counted). The client runs in this process and
shares the machine's cores with the agent: wall figures depend on both.
"""

from __future__ import annotations

import selectors
import socket
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from agent.protocol.server import open_files
from harness.agent_process import AgentProcess, free_port
from metadata import MetadataStore
from objects.keys import DATA_PREFIX
from objectstore import ObjectStore, open_store

TOPIC = "wire"
CAPACITY_TOPIC = "wire-capacity"  # never written: the capacity run's long-polls wait on it
MIB = 2**20
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class WireParams:
    """One run against one agent process."""

    store: str  # "file" or an s3:// URL (its bucket exists)
    records: int  # produced as fast as possible (0: skip the produce and fetch runs)
    rate_mib_s: float  # the latency run's steady load
    seconds: float  # the latency run's length
    partitions: int = 100
    value_size: int = 1024
    small_producers: bool = False  # also the many-small-producers run (run_many_small)
    long_polls: bool = False  # also the caught-up long-polls run and its floor (run_long_polls)


def _objects(store: ObjectStore) -> int:
    return sum(1 for _ in store.list(DATA_PREFIX))


def _store_name(store: str) -> str:
    return "file" if store == "file" else "s3 (moto server)"


def _producer(bootstrap: str, conf: dict[str, Any] | None = None) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", **(conf or {})})


def _produce(producer: Producer, partition: int, key: bytes, value: bytes,
             on_delivery: Callable[[KafkaError | None, Message], None]) -> None:
    """One produce call, waiting for room in the producer's queue when it is full."""
    while True:
        try:
            producer.produce(TOPIC, value, key, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)


def _drain(producer: Producer, errors: list[KafkaError]) -> None:
    if producer.flush(TIMEOUT_S) != 0:
        raise RuntimeError("producer did not deliver everything in time")
    if errors:
        raise RuntimeError(f"{len(errors)} deliveries failed, first: {errors[0]}")


def run_produce(agent: AgentProcess, p: WireParams, bootstrap: str | None = None,
                conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """Produce `p.records` records as fast as the producer goes; every one acked (through
    `bootstrap` with client settings `conf`: another listener, TLS, SASL)."""
    producer = _producer(bootstrap or agent.bootstrap, conf)
    errors: list[KafkaError] = []

    def acked(err: KafkaError | None, _: Message) -> None:
        if err is not None:
            errors.append(err)

    value = b"x" * p.value_size
    cpu0, wall0 = agent.cpu_seconds(), time.perf_counter()
    for i in range(p.records):
        _produce(producer, i % p.partitions, b"p%d" % i, value, acked)
        if i % 1000 == 0:
            producer.poll(0)
    _drain(producer, errors)
    cpu, wall = agent.cpu_seconds() - cpu0, time.perf_counter() - wall0
    mib = p.records * p.value_size / MIB
    return {"measure": "produce", "records": p.records, "agent_cpu_s": round(cpu, 2),
            "mib_per_s_per_agent_core": round(mib / cpu, 1),
            "mib_per_s_wall": round(mib / wall, 1)}


@dataclass
class _Acks:
    """Delivery reports of timed produce calls: each one's latency, and the errors."""

    errors: list[KafkaError] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def since(self, sent: float) -> Callable[[KafkaError | None, Message], None]:
        """A delivery callback for a record produced at `sent` (perf_counter)."""
        def acked(err: KafkaError | None, _: Message) -> None:
            if err is not None:
                self.errors.append(err)
            self.latencies.append(time.perf_counter() - sent)
        return acked


def run_latency(agent: AgentProcess, store: ObjectStore, p: WireParams, metrics_port: int
                ) -> dict[str, Any]:
    """A steady `p.rate_mib_s` for `p.seconds`: ack latency percentiles, objects/s, and the
    agent's CPU per Produce request."""
    producer = _producer(agent.bootstrap)
    acks = _Acks()
    errors, latencies, acked_since = acks.errors, acks.latencies, acks.since

    value = b"x" * p.value_size
    per_s = p.rate_mib_s * MIB / p.value_size
    total = int(per_s * p.seconds)
    # Warm the connection and the metadata first: the first produce pays for both.
    _produce(producer, 0, b"warm", value, acked_since(time.perf_counter()))
    _drain(producer, errors)
    latencies.clear()
    objects0, cpu0 = _objects(store), agent.cpu_seconds()
    requests0 = _produce_requests(metrics_port)
    start = time.perf_counter()
    i = 0
    while i < total:
        due = min(total, int((time.perf_counter() - start) * per_s) + 1)
        while i < due:
            _produce(producer, i % p.partitions, b"l%d" % i, value,
                     acked_since(time.perf_counter()))
            i += 1
        producer.poll(0.001)  # serves delivery callbacks as they arrive
    _drain(producer, errors)
    elapsed = time.perf_counter() - start
    cpu, objects = agent.cpu_seconds() - cpu0, _objects(store) - objects0
    requests = _produce_requests(metrics_port) - requests0
    lat = sorted(latencies)
    return {"measure": "latency", "records": total, "load_mib_s": p.rate_mib_s,
            "agent_cpu_s": round(cpu, 2), "produce_requests": int(requests),
            "agent_cpu_us_per_request": round(1e6 * cpu / requests) if requests else 0,
            "ack_ms_p50": round(statistics.median(lat) * 1000, 1),
            "ack_ms_p99": round(lat[max(0, int(len(lat) * 0.99) - 1)] * 1000, 1),
            "puts_per_s": round(objects / elapsed, 2)}


SMALL_PRODUCERS = 50
SMALL_RATE_KIB_S = 20  # each producer's load: 20 records of 1 KiB a second


def _metric(metrics_port: int, sample: str) -> float:
    """The value of one sample of the agent's /metrics (`name{labels}` as exposed; 0 if
    absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def _produce_requests(metrics_port: int) -> float:
    """Produce requests the agent has dispatched so far (its /metrics)."""
    return _metric(metrics_port, 'silt_requests_total{api="produce"}')


def run_many_small(agent: AgentProcess, p: WireParams, metrics_port: int) -> dict[str, Any]:
    """SMALL_PRODUCERS producer clients at their defaults (linger.ms 5), each sending 20
    KiB/s of 1 KiB records for `p.seconds`, as many small producers at low rates load an
    agent: agent CPU per Produce request and per MiB, ack p50/p99."""
    producers = [_producer(agent.bootstrap) for _ in range(SMALL_PRODUCERS)]
    acks = _Acks()
    errors, latencies, acked_since = acks.errors, acks.latencies, acks.since

    value = b"s" * 1024
    for n, producer in enumerate(producers):  # connections and metadata warmed first
        _produce(producer, n % p.partitions, b"warm", value, acked_since(time.perf_counter()))
    for producer in producers:
        _drain(producer, errors)
    latencies.clear()
    per_s = SMALL_RATE_KIB_S
    total = int(per_s * p.seconds)
    requests0, cpu0 = _produce_requests(metrics_port), agent.cpu_seconds()
    start = time.perf_counter()
    sent = 0
    for i in range(total):  # one record per producer every 1/per_s seconds, spread over it
        for n, producer in enumerate(producers):
            due = start + (i + n / len(producers)) / per_s
            while (now := time.perf_counter()) < due:
                time.sleep(min(due - now, 0.002))
            _produce(producer, (sent + n) % p.partitions, b"s%d" % sent, value,
                     acked_since(time.perf_counter()))
            producer.poll(0)
        sent += len(producers)
    for producer in producers:
        _drain(producer, errors)
    cpu = agent.cpu_seconds() - cpu0
    requests = _produce_requests(metrics_port) - requests0
    lat = sorted(latencies)
    mib = sent * len(value) / MIB
    return {"measure": f"{SMALL_PRODUCERS} small producers", "records": sent,
            "load_mib_s": round(SMALL_PRODUCERS * per_s / 1024, 2),
            "agent_cpu_s": round(cpu, 2), "produce_requests": int(requests),
            "agent_cpu_us_per_request": round(1e6 * cpu / requests) if requests else 0,
            "agent_cpu_s_per_mib": round(cpu / mib, 3),
            "ack_ms_p50": round(statistics.median(lat) * 1000, 1),
            "ack_ms_p99": round(lat[max(0, int(len(lat) * 0.99) - 1)] * 1000, 1)}


LONG_POLL_CONSUMERS = 50
LONG_POLL_PARTITIONS = 2  # each consumer's, so 100 partitions in all
LONG_POLL_WAIT_MS = 100  # fetch.wait.max.ms: each caught-up fetch waits this long
# The capacity run's raw long-polls: ~15,000 Fetches offered a second, beyond one agent core
# on every machine measured (500 left the faster ones' agent half idle, ~4,800 a second).
# One address opens them all: the run's agent allows that many (max.connections.per.ip).
CAPACITY_CONNECTIONS = 1_500
TRICKLE_PER_S = 20  # the producer's records a second (1 KiB), round robin
FLOOR_BATCH = 200  # requests written before reading their responses
FLOOR_PER_S = 1_000  # the floor's requests per second of the run's `seconds`


def run_long_polls(agent: AgentProcess, p: WireParams, metrics_port: int) -> list[dict[str, Any]]:
    """LONG_POLL_CONSUMERS consumers (assign, no group), each on LONG_POLL_PARTITIONS
    partitions from their end, long-polling while one producer trickles TRICKLE_PER_S
    records a second for `p.seconds`: Fetch requests per agent core (all its CPU, the
    trickle's produce and flushes included) and metadata round trips per Fetch; then the
    same trickle alone for as long (what the agent spends without the consumers), what the
    long-polls cost beyond it, and the floor on the same agent (`run_floor`)."""
    ends = _end_offsets(agent)
    consumers = []
    for n in range(LONG_POLL_CONSUMERS):
        c = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "long-polls",
                      "enable.auto.commit": False, "fetch.wait.max.ms": LONG_POLL_WAIT_MS})
        first = n * LONG_POLL_PARTITIONS % p.partitions
        c.assign([TopicPartition(TOPIC, q, ends[q])
                  for q in range(first, first + LONG_POLL_PARTITIONS)])
        consumers.append(c)
    producer = _producer(agent.bootstrap)
    acks = _Acks()
    got = 0

    def poll_all() -> None:
        nonlocal got
        for c in consumers:
            for msg in c.consume(100, 0):
                if msg.error() is not None:
                    raise RuntimeError(f"fetch failed: {msg.error()}")
                got += 1

    try:
        warm_until = time.monotonic() + 2.0  # every consumer's offsets known, polling
        while time.monotonic() < warm_until:
            poll_all()
            time.sleep(0.01)
        fetch = 'silt_requests_total{api="fetch"}'
        fetches0, cpu0 = _metric(metrics_port, fetch), agent.cpu_seconds()
        trips0 = _metric(metrics_port, "silt_fetch_metadata_round_trips_sum")
        counted0 = _metric(metrics_port, "silt_fetch_metadata_round_trips_count")
        got = 0
        sent = _trickle(producer, acks, p, poll_all)
        cpu = agent.cpu_seconds() - cpu0
        fetches = _metric(metrics_port, fetch) - fetches0
        trips = _metric(metrics_port, "silt_fetch_metadata_round_trips_sum") - trips0
        counted = _metric(metrics_port, "silt_fetch_metadata_round_trips_count") - counted0
        _drain(producer, acks.errors)
    finally:
        for c in consumers:
            c.close()
    cpu0 = agent.cpu_seconds()
    alone = _trickle(producer, acks, p, lambda: None)
    alone_cpu = agent.cpu_seconds() - cpu0
    _drain(producer, acks.errors)
    beyond = cpu - alone_cpu
    rows = [{"measure": f"{LONG_POLL_CONSUMERS} long-polling consumers", "records": sent,
             "agent_cpu_s": round(cpu, 2), "fetch_requests": int(fetches),
             "requests_per_s_per_agent_core": round(fetches / cpu),
             "agent_cpu_us_per_request": round(1e6 * cpu / fetches),
             "round_trips_per_fetch": round(trips / counted, 3) if counted else None},
            {"measure": "the trickle alone", "records": alone,
             "agent_cpu_s": round(alone_cpu, 2)},
            {"measure": "long-polls beyond the trickle", "agent_cpu_s": round(beyond, 2),
             "fetch_requests": int(fetches),
             "requests_per_s_per_agent_core": round(fetches / beyond) if beyond > 0 else None,
             "agent_cpu_us_per_request": round(1e6 * beyond / fetches) if beyond > 0 else None}]
    return [*rows, run_floor(agent, max(FLOOR_BATCH, int(FLOOR_PER_S * p.seconds))),
            run_long_poll_capacity(agent, p)]


def _trickle(producer: Producer, acks: _Acks, p: WireParams, poll: Callable[[], None]
             ) -> int:
    """TRICKLE_PER_S records a second round robin for `p.seconds`, calling `poll` every
    ~5 ms (the consumers'); the records sent."""
    sent = 0
    start = time.perf_counter()
    value = b"t" * p.value_size
    while (elapsed := time.perf_counter() - start) < p.seconds:
        while sent < int(elapsed * TRICKLE_PER_S) + 1:
            _produce(producer, sent % p.partitions, b"t%d" % sent, value,
                     acks.since(time.perf_counter()))
            sent += 1
        producer.poll(0)
        poll()
        time.sleep(0.005)
    return sent


def _end_offsets(agent: AgentProcess) -> dict[int, int]:
    """Every partition's end offset, in one metadata read."""
    with agent.metadata() as md:
        return {i.partition: i.next_offset for i in md.partitions(TOPIC)}


def run_floor(agent: AgentProcess, requests: int) -> dict[str, Any]:
    """The floor of a Fetch's agent CPU: `requests` Fetches of no partition (the request
    path, framing to reply, without a metadata read or a record) over one connection,
    FLOOR_BATCH written before their responses are read; requests per agent core."""
    frame = _fetch_frame((), 0)
    sent = requests // FLOOR_BATCH * FLOOR_BATCH
    with socket.create_connection(("127.0.0.1", agent.port), timeout=TIMEOUT_S) as sock:
        reader = sock.makefile("rb")
        cpu0 = agent.cpu_seconds()
        for _ in range(requests // FLOOR_BATCH):
            sock.sendall(frame * FLOOR_BATCH)
            for _ in range(FLOOR_BATCH):
                (size,) = struct.unpack(">i", reader.read(4))
                reader.read(size)
        cpu = agent.cpu_seconds() - cpu0
    return {"measure": "floor: empty Fetches", "agent_cpu_s": round(cpu, 2),
            "requests_per_s_per_agent_core": round(sent / cpu),
            "agent_cpu_us_per_request": round(1e6 * cpu / sent)}


def run_paced_floor(agent: AgentProcess, per_s: float, seconds: float) -> dict[str, Any]:
    """The floor of a small request's agent CPU at the latency run's pace: empty Fetches
    (no metadata read, no record) sent one at a time, `per_s` a second for `seconds`, over
    one connection, each answer read as it comes (not awaited before the next is sent),
    as the latency run's producer sends its Produces. What the agent spends to be woken,
    read a frame, dispatch it and write its reply, next to what a small Produce costs."""
    frame = _fetch_frame((), 0)
    total = int(per_s * seconds)
    with socket.create_connection(("127.0.0.1", agent.port), timeout=TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ)
        received = bytearray()
        answered = sent = 0
        cpu0, start = agent.cpu_seconds(), time.perf_counter()
        while answered < total:
            due = min(total, int((time.perf_counter() - start) * per_s) + 1)
            while sent < due:
                sock.sendall(frame)
                sent += 1
            for _ in sel.select(0.0005 if sent < total else 1.0):
                if not (chunk := sock.recv(MIB)):
                    raise RuntimeError("the agent closed the paced floor's connection")
                received += chunk
            answered += _whole_frames(received)
        cpu = agent.cpu_seconds() - cpu0
        sel.close()
    return {"measure": "floor: empty Fetches at the latency run's pace",
            "agent_cpu_s": round(cpu, 2), "fetch_requests": answered,
            "requests_per_s_per_agent_core": round(answered / cpu) if cpu > 0 else None,
            "agent_cpu_us_per_request": round(1e6 * cpu / answered) if answered else None}


def _whole_frames(received: bytearray) -> int:
    """How many whole response frames `received` begins with, taken off it."""
    pos = whole = 0
    while len(received) - pos >= 4:
        end = pos + 4 + struct.unpack_from(">i", received, pos)[0]
        if end > len(received):
            break
        pos, whole = end, whole + 1
    del received[:pos]
    return whole


def _fetch_frame(partitions: Sequence[int], max_wait_ms: int) -> bytes:
    """A framed Fetch v4 (header v1: key, version, correlation id, client id; then
    replica_id -1, max_wait_ms, min_bytes, max_bytes 1 MiB, read_uncommitted) of
    CAPACITY_TOPIC's `partitions` from offset 0 (caught up: that topic stays empty) with
    min_bytes 1, or of no topic at all with min_bytes 0 (the floor's) if none is given."""
    name = CAPACITY_TOPIC.encode()
    topics = (struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", len(partitions))
              + b"".join(struct.pack(">iqi", q, 0, MIB) for q in partitions)
              if partitions else struct.pack(">i", 0))
    message = (struct.pack(">hhih", 1, 4, 0, 5) + b"bench"
               + struct.pack(">iiiib", -1, max_wait_ms, 1 if partitions else 0, MIB, 0)
               + topics)
    return struct.pack(">i", len(message)) + message


def run_long_poll_capacity(agent: AgentProcess, p: WireParams) -> dict[str, Any]:
    """How many caught-up long-polls one agent core answers: CAPACITY_CONNECTIONS raw
    connections, each a Fetch of 2 of CAPACITY_TOPIC's empty partitions waiting
    LONG_POLL_WAIT_MS, sent again as soon as it is answered, for `p.seconds` (no client
    library: the bench process must keep up). That offers ~CAPACITY_CONNECTIONS * 10
    Fetches a second, beyond one core on the machines measured, so the agent's event loop
    is saturated: its capacity, where the 50 consumers' row also pays for waking an idle
    agent for each request. `agent_busy` is its CPU seconds per second of the run (near 1:
    saturated, as the figure assumes)."""
    frames = [_fetch_frame([2 * i % p.partitions, (2 * i + 1) % p.partitions],
                           LONG_POLL_WAIT_MS) for i in range(CAPACITY_CONNECTIONS)]
    open_files(CAPACITY_CONNECTIONS + 256)  # this process's sockets
    socks = [socket.create_connection(("127.0.0.1", agent.port), timeout=TIMEOUT_S)
             for _ in range(CAPACITY_CONNECTIONS)]
    sel = selectors.DefaultSelector()
    pending = [bytearray() for _ in socks]
    answered = 0
    try:
        for i, sock in enumerate(socks):
            sock.sendall(frames[i])
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ, i)
        cpu0, start = agent.cpu_seconds(), time.monotonic()
        end = start + p.seconds
        while time.monotonic() < end:
            for key, _ in sel.select(0.5):
                i = key.data
                pending[i] += socks[i].recv(MIB)
                for _ in range(_whole_frames(pending[i])):
                    answered += 1
                    socks[i].setblocking(True)
                    socks[i].sendall(frames[i])
                    socks[i].setblocking(False)
        cpu, wall = agent.cpu_seconds() - cpu0, time.monotonic() - start
    finally:
        sel.close()
        for sock in socks:
            sock.close()
    return {"measure": f"{CAPACITY_CONNECTIONS} raw long-polls (capacity)",
            "agent_cpu_s": round(cpu, 2), "agent_busy": round(cpu / wall, 2),
            "fetch_requests": answered,
            "requests_per_s_per_agent_core": round(answered / cpu) if cpu > 0 else None,
            "agent_cpu_us_per_request": round(1e6 * cpu / answered) if answered else None}


def run_fetch(agent: AgentProcess, p: WireParams, records: int, bootstrap: str | None = None,
              conf: dict[str, Any] | None = None, passes: int = 1) -> dict[str, Any]:
    """Read `records` records back from offset 0 of every partition (assign, no group),
    `passes` times (a consumer each, one CPU window: more CPU seconds than /proc's 10 ms
    ticks can blur)."""
    cpu0, wall0 = agent.cpu_seconds(), time.perf_counter()
    got = nbytes = 0
    for _ in range(passes):
        n, b = _fetch_pass(agent, p, records, bootstrap, conf)
        got, nbytes = got + n, nbytes + b
    cpu, wall = agent.cpu_seconds() - cpu0, time.perf_counter() - wall0
    mib = nbytes / MIB
    return {"measure": "fetch", "records": got, "agent_cpu_s": round(cpu, 2),
            "mib_per_s_per_agent_core": round(mib / cpu, 1),
            "mib_per_s_wall": round(mib / wall, 1)}


def _fetch_pass(agent: AgentProcess, p: WireParams, records: int, bootstrap: str | None,
                conf: dict[str, Any] | None) -> tuple[int, int]:
    """One consumer reading `records` records from offset 0: (records, value bytes)."""
    consumer = Consumer({"bootstrap.servers": bootstrap or agent.bootstrap,
                         "group.id": "wire-bench", "enable.auto.commit": False,
                         "auto.offset.reset": "error", **(conf or {})})
    consumer.assign([TopicPartition(TOPIC, i, 0) for i in range(p.partitions)])
    got = nbytes = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while got < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fetched {got} of {records} records in {TIMEOUT_S} s")
            for msg in consumer.consume(min(10_000, records - got), 1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"fetch failed: {msg.error()}")
                got += 1
                nbytes += len(msg.value() or b"")
    finally:
        consumer.close()
    if got != records:
        raise RuntimeError(f"fetched {got} records, expected {records}")
    return got, nbytes


def run_wire(p: WireParams, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Start an agent on `p.store` + SQLite, run produce and fetch (if `p.records`) and
    latency, stop it. `env`: extra environment for the agent (the S3 endpoint)."""
    with tempfile.TemporaryDirectory(prefix="silt-wire-") as tmp:
        store_url = f"file://{tmp}/objects" if p.store == "file" else p.store
        md_url = f"sqlite:///{tmp}/md.db"
        md = MetadataStore.open(md_url, create=True)
        md.create_topic(TOPIC, p.partitions)
        if p.long_polls:
            md.create_topic(CAPACITY_TOPIC, p.partitions)
        md.close()
        store = open_store(store_url)
        metrics_port = free_port()
        agent = AgentProcess(store_url, md_url, Path(tmp) / "agent.log", {
            "SILT_AGENT_METRICS_LISTENERS": f"127.0.0.1:{metrics_port}",
            "SILT_AGENT_MAX_CONNECTIONS_PER_IP": str(2 * CAPACITY_CONNECTIONS), **(env or {})})
        agent.start()
        try:
            rows = []
            if p.records:  # fetch reads the produce run's batches (before the latency run's)
                rows += [run_produce(agent, p), run_fetch(agent, p, p.records)]
            latency = run_latency(agent, store, p, metrics_port)
            rows += [latency, run_paced_floor(agent, latency["produce_requests"] / p.seconds,
                                              p.seconds)]
            if p.small_producers:
                rows.append(run_many_small(agent, p, metrics_port))
            if p.long_polls:
                rows += run_long_polls(agent, p, metrics_port)
        except BaseException:
            print(agent.log(), file=sys.stderr)
            raise
        finally:
            agent.terminate()
    common = {"benchmark": "wire", "store": _store_name(p.store), "partitions": p.partitions,
              "value_bytes": p.value_size}
    return [{**common, **row} for row in rows]
