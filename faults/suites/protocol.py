"""The protocol suite: adversarial frames against one real `silt agent` (issue 22).

One run, on a fresh SQLite metadata store and file store in a temp dir, one agent process
on 127.0.0.1 while confluent-kafka clients keep producing (one idempotent, one not) and
consuming in the background:

1. frames (faults/frames.py): issue 22's killer frames; for every served API key and
   version (agent/protocol/apis TABLE), the sample request with each length field at 0,
   -1, 2^31-1 and 2^35-2, and `trials` random mutants (truncations, byte flips, random
   bodies, lengths changed together); `every_truncation` adds each truncation point. Each
   frame goes on its own connection; after every chunk the agent must be alive (a death is
   counted, its suspects described with their hex, the agent restarted on its port) and a
   probe connection must be answered within PROBE_S;
2. malformed record batches (frames.bad_batches), each kind as Produce v3..v11 to topic
   `bad`, each next to a valid produce on another connection (same flush): the bad one must
   be answered with an error, the good one acked;
3. slow and idle connections (a frame declared 50 MiB, then a byte a second; connections
   opened and left idle) must be closed by the agent, and one IP may not hold more than
   `max.connections.per.ip` connections, while the probe is still answered;
4. a topic name of 32,767 characters, CreateTopics of 10^6, 10^9, 2^31-1 and 0 partitions
   (validate_only, then real) must be refused with an error code; a Fetch listing one
   partition 5,000 times with max_bytes 2^31-1 must answer about what one listing does;
5. the agent's SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-512 users made by the suite;
   faults/saslframes.py): mutated SaslHandshake and SaslAuthenticate frames of every
   version, before and after a handshake; garbage PLAIN and SCRAM client-first messages as
   every SaslAuthenticate version, and garbage client-final ones built on the server's
   nonce (each must fail, the good one succeed); every API version's request in the middle
   of an exchange (it must be answered ILLEGAL_SASL_STATE in its API's response and the
   connection closed, as Kafka); after a PLAIN login, the killers, random mutants of every
   API version and the malformed batches as Produce v11. A SCRAM-SHA-512 producer keeps
   producing over it.

Every reply to a frame must be a well-formed response to it (kio decodes it as its API
version's response, with its correlation id) or a close.

Then the background clients stop, and with the product's Reader over the store and
metadata: nothing of topic `bad` is stored and its log ends are 0, every stored batch of
the fuzzed topic reads back, and every record the background producers were acked is read
exactly once at its offset, in order (faults.check.check_log); the consumer must have
received every acked record of its topic. The agent's peak RSS (VmHWM) over its starting
RSS is the memory figure; a watchdog kills it past RSS_CAP (counted as a death).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import os
import random
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.index import load_payload_module, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import OutOfBoundValue
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from agent import Reader
from agent.protocol.apis import SASL_AUTHENTICATE, TABLE
from agent.sasl.scram import make_credential
from faults import frames, saslframes
from faults.check import Tally, check_log
from faults.frames import Conversation, Frame
from harness.agent_process import REPO, free_port
from metadata import MetadataStore
from objectstore import open_store

FRONT_DOOR = (
    "agent deaths",
    "bad batches stored",  # batches of topic `bad` readable from the store, or unreadable ones
    "log ends moved",  # partitions of `bad` whose next offset is not 0
    "bad batches acked",  # answered with error 0
    "bad batches unanswered",  # connection closed or no reply instead of an error code
    "good produces failed",  # the valid produce sent beside a bad batch was not acked
    "probe timeouts",  # the agent did not answer a well-behaved request within PROBE_S
    "slow connections held",
    "idle connections held",
    "connections past the per-IP limit",
    "huge or bad creates accepted",
    "long topic name not refused",
    "fetch answers past bounds",
    "malformed replies",  # a reply that is not its request's API version's response
    "out-of-turn requests not refused as Kafka",  # mid-exchange: no ILLEGAL_SASL_STATE+close
    "garbage logins accepted",  # a bad PLAIN or SCRAM message authenticated
    "good logins refused",
)
# The background clients' acked records (faults.check.check_log), and the consumer's.
RECORDS = ("lost", "duplicated", "out_of_order", "unknown", "consumer missed")
KINDS = FRONT_DOOR + RECORDS
TOPICS = (("good-i", 3), ("good-p", 3), ("good-s", 3), ("good-raw", 1), ("bad", 4),
          (frames.TOPIC, 2))
CHUNK = 32  # frames between probes
REPLY_S = 1.5  # a frame's reply wait (no reply is not a fault: the connection is dropped)
PROBE_S = 5.0
RSS_CAP = 2 << 30  # bytes over the starting RSS before the watchdog kills the agent
ADDRESS_SPACE = 8 << 30  # RLIMIT_AS of the agent: no frame may take the machine with it
STARTUP_S = 60.0
# Settings the suite lowers when the agent declares them (unknown names would be refused).
# (Kafka's names; request.read.timeout.ms: how long a frame, once begun, may take to arrive.)
LIMITS = {"connections.max.idle.ms": 3000, "request.read.timeout.ms": 3000,
          "max.connections.per.ip": 64, "max.connections.total": 2000}
# The SASL listener: every mechanism with users (failed logins paced 1 ms, doubling).
SASL_ENV = {"SILT_AGENT_LISTENER_SECURITY_PROTOCOL_MAP":
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "SILT_AGENT_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "SILT_AGENT_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "1"}
SLOW_WAIT_S = 8.0  # how long slow and idle connections are watched
DEFAULT_PER_IP = 100  # connections one IP may hold when the agent declares no limit
FLOOD = 300  # connections opened from one IP
FETCH_CAP = 64 << 20  # no Fetch answer may exceed this (Kafka's fetch.max.bytes is 55 MiB)


def _declared_agent_settings() -> set[str]:
    from agent.config import AgentConfig
    from settings.core import declared

    return set(declared(AgentConfig))


def limit_env() -> dict[str, str]:
    """SILT_AGENT_* for the LIMITS this agent declares."""
    known = _declared_agent_settings()
    return {f"SILT_AGENT_{k.upper().replace('.', '_')}": str(v)
            for k, v in LIMITS.items() if k in known}


PER_KIND = 3  # examples kept per kind of violation


@dataclass
class KindTally(Tally):
    """A Tally keeping the first PER_KIND examples of each kind (so one kind's many cannot
    hide the others)."""

    by_kind: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, count: int, example: str) -> None:
        assert kind in self.kinds, kind
        if count:
            self.counts[kind] += count
            kept = self.by_kind.setdefault(kind, [])
            if len(kept) < PER_KIND:
                kept.append(f"{kind}: {example}")

    def all_examples(self) -> list[str]:
        return [e for kind in self.kinds for e in self.by_kind.get(kind, [])]


# ------------------------------------------------------------------ the agent


@dataclass
class Agent:
    """`silt agent` on fixed ports of 127.0.0.1 (restarts reuse them: PLAINTEXT on `port`,
    SASL_PLAINTEXT on `sasl_port`), its output in `log`; peak RSS tracked by a watchdog
    thread that kills it past RSS_CAP over its start."""

    store_url: str
    metadata_url: str
    log: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    sasl_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    peak_growth: int = 0  # bytes: max over processes of VmHWM - RSS at start
    capped: list[str] = field(default_factory=list)
    _base: int = 0
    _log_from: int = 0  # where this process's output starts in `log`

    def start(self) -> None:
        env = {**os.environ, "SILT_AGENT_LINGER_MS": "50", **SASL_ENV, **self.env,
               "PYTHONPATH": str(REPO)}
        listen = f"PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        with self.log.open("ab") as out:
            self._log_from = out.tell()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "--store", self.store_url, "--metadata",
                 self.metadata_url, "agent", "--listen", listen],
                env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_limit_memory)
        self.starts += 1
        deadline = time.monotonic() + STARTUP_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"silt agent exited {self.proc.returncode}: {self.tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"silt agent did not listen: {self.tail()}") from None
                time.sleep(0.05)
        self._base = self.memory()[0]
        threading.Thread(target=self._watch, args=(self.proc,), daemon=True).start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def memory(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in bytes; (0, 0) once the process is gone."""
        assert self.proc is not None
        found = {"VmRSS:": 0, "VmHWM:": 0}
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                words = line.split()
                if words and words[0] in found:
                    found[words[0]] = int(words[1]) * 1024
        return found["VmRSS:"], found["VmHWM:"]

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        while proc.poll() is None:
            rss, hwm = self.memory() if proc is self.proc else (0, 0)
            self.peak_growth = max(self.peak_growth, hwm - self._base)
            if rss - self._base > RSS_CAP:
                self.capped.append(f"RSS {rss >> 20} MiB (started at {self._base >> 20})")
                proc.kill()
            time.sleep(0.05)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()

    def tail(self, lines: int = 3) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return " | ".join(text.strip().splitlines()[-lines:])[-600:]

    def last_error(self) -> str:
        """The line of this process's log saying why it died (an allocation failure, a
        panic, a Python exception: the last such line), else its last line."""
        with self.log.open("rb") as f:
            f.seek(self._log_from)
            lines = f.read().decode(errors="replace").splitlines()
        for line in reversed(lines[-200:]):
            if any(w in line for w in ("memory allocation", "panicked", "Error", "error:")):
                return line.strip()[:200]
        return lines[-1].strip()[:200] if lines else ""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


# ------------------------------------------------------------------ background clients


class Background:
    """Well-behaved confluent-kafka clients: an idempotent producer to `good-i`, a plain
    one (acks=all) to `good-p`, an idempotent one logged in with SCRAM-SHA-512 on the SASL
    listener (`sasl_bootstrap`) to `good-s`, a consumer of `good-i`; `acked` holds what
    they were told is stored, per partition, as (offset, key, value)."""

    RATE = 100  # records per second per producer
    TAGS = ("i:", "p:", "s:")  # their values' prefixes

    def __init__(self, bootstrap: str, sasl_bootstrap: str) -> None:
        from confluent_kafka import Consumer, Producer

        quiet = {"bootstrap.servers": bootstrap, "log_level": 0, "error_cb": lambda _e: None}
        scram = {**quiet, "bootstrap.servers": sasl_bootstrap,
                 "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": saslframes.SCRAM,
                 "sasl.username": saslframes.SCRAM_USER,
                 "sasl.password": saslframes.PASSWORD}
        self.producers = {
            "i": (Producer({**quiet, "enable.idempotence": True, "linger.ms": 5}), "good-i"),
            "p": (Producer({**quiet, "acks": "all", "enable.idempotence": False,
                            "linger.ms": 5}), "good-p"),
            "s": (Producer({**scram, "enable.idempotence": True, "linger.ms": 5}), "good-s"),
        }
        self.consumer = Consumer({**quiet, "group.id": "fz-background",
                                  "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
        self.acked: dict[tuple[str, int], list[tuple[int, bytes | None, bytes]]] = {}
        self.consumed: list[bytes] = []
        self.errors: Counter[str] = Counter()
        self._stop, self._flushed = threading.Event(), threading.Event()
        self._deadline = float("inf")
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self.consumer.assign([TopicPartition("good-i", p, OFFSET_BEGINNING) for p in range(3)])
        for t in self._threads:
            t.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[str(err.name())] += 1
            return
        with self._lock:
            self.acked.setdefault((msg.topic(), msg.partition()), []).append(
                (msg.offset(), msg.key(), msg.value()))

    def _produce(self) -> None:
        n = 0
        while not self._stop.is_set():
            for tag, (producer, topic) in self.producers.items():
                for i in range(n, n + self.RATE // 10):
                    with contextlib.suppress(BufferError):
                        producer.produce(topic, f"{tag}:{i}".encode(), f"k{i % 5}".encode(),
                                         partition=i % 3, on_delivery=self._delivered)
                producer.poll(0)
            n += self.RATE // 10
            self._stop.wait(0.1)

    def _consume(self) -> None:
        """Poll until every acked record of `good-i` was received, once the producers are
        flushed (or the deadline passed)."""
        while not (self._flushed.is_set() and self._caught_up()):
            msg = self.consumer.poll(0.2)
            value = msg.value() if msg is not None and msg.error() is None else None
            if value is not None:
                with self._lock:
                    self.consumed.append(value)
            if time.monotonic() > self._deadline:
                return

    def _caught_up(self) -> bool:
        with self._lock:
            want = {v for tp, acks in self.acked.items() if tp[0] == "good-i" for *_, v in acks}
            return want <= set(self.consumed)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop producing, wait for every delivery report and then for the consumer to catch
        up (at most `timeout` each), close."""
        self._stop.set()
        self._threads[0].join()
        for producer, _ in self.producers.values():
            producer.flush(timeout)
        self._deadline = time.monotonic() + timeout
        self._flushed.set()
        self._threads[1].join()
        self.consumer.close()


# ------------------------------------------------------------------ frames on the wire


@dataclass
class Outcomes:
    """How the frames ended: answered, closed by the agent, no reply, refused (agent gone)."""

    sent: int = 0
    by: Counter[str] = field(default_factory=Counter)


async def exchange(port: int, data: bytes, wait: float = REPLY_S, source: str = "127.0.0.1",
                   keep: bool = False, replies: int = 1, bodies: list[bytes] | None = None,
                   half_close: bool = True) -> tuple[str, bytes]:
    """Send `data` on a new connection, half-close it (unless not `half_close`), read
    `replies` replies: (outcome, the last reply's body); outcome is answered (all came) |
    closed | timeout | refused. `keep`: the last body is returned (else only its size is
    read through); `bodies` gets every body read (kept whole)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(source, 0))
    except OSError:
        return "refused", b""
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            with contextlib.suppress(OSError):
                writer.write_eof()
        body = b""
        async with asyncio.timeout(wait):
            for _ in range(replies):
                body = await _read_reply(reader, keep or bodies is not None)
                if bodies is not None:
                    bodies.append(body)
            return "answered", body
    except (asyncio.IncompleteReadError, ConnectionError):
        return "closed", b""
    except TimeoutError:
        return "timeout", b""
    finally:
        writer.transport.abort()


async def _read_reply(reader: asyncio.StreamReader, keep: bool) -> bytes:
    """One reply's body (`keep`), else its size read through (the size's bytes returned)."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    if keep:
        return await reader.readexactly(size)
    left = size
    while left > 0:
        part = await reader.read(min(left, 1 << 20))
        if not part:
            raise asyncio.IncompleteReadError(b"", left)
        left -= len(part)
    return struct.pack(">i", size)


class Run:
    """One suite run's agent, clients, counts and checks."""

    def __init__(self, where: Path, seed: int, max_deaths: int) -> None:
        self.where = where
        self.rng = random.Random(seed)
        self.md_url = f"sqlite:///{where}/md.db"
        self.store_url = f"file://{where}/store"
        self.tally = KindTally(KINDS)
        self.out = Outcomes()
        self.sasl_out = Outcomes()  # phase 5's frames
        self.codes: Counter[str] = Counter()  # bad batches' answers
        md = MetadataStore.open(self.md_url, create=True)
        for name, partitions in TOPICS:
            md.create_topic(name, partitions)
        for user, mechanism in ((saslframes.SCRAM_USER, saslframes.SCRAM),
                                (saslframes.PLAIN_USER, "SCRAM-SHA-256")):
            md.alter_scram_credentials([], [(user, make_credential(
                mechanism, saslframes.PASSWORD, 4096))])
        md.close()
        self.agent = Agent(self.store_url, self.md_url, where / "agent.log", limit_env())
        self.deaths_left = max_deaths
        self.skipped = 0  # frames not sent: max_deaths reached
        self.deaths_by: Counter[str] = Counter()  # API name (or phase) -> deaths
        self.kinds_stored: set[str] = set()  # kinds of bad batch acknowledged
        self.exact = 0  # acked records read back once, at their offset
    # -- liveness

    async def probe(self) -> None:
        """A Metadata request from a well-behaved client must be answered within PROBE_S,
        on the PLAINTEXT listener and after a PLAIN login on the SASL one."""
        for port, login, answers in ((self.agent.port, b"", 0),
                                     (self.agent.sasl_port, saslframes.plain_login(), 2)):
            started = time.monotonic()
            outcome, _ = await exchange(port, login + _metadata_request(), PROBE_S,
                                        replies=answers + 1)
            if outcome != "answered" and self.agent.alive():
                self.tally.note("probe timeouts", 1, f"probe on port {port} {outcome} after"
                                f" {time.monotonic() - started:.1f} s")

    def check_replies(self, talk: Conversation, bodies: Sequence[bytes]) -> None:
        """Every reply must be its request's response (module docstring); a garbage login
        (`must_fail`) must not be answered error 0."""
        requests = [*frames.split(talk.prefix), talk.frame.data]
        for i, (request, body) in enumerate(zip(requests, bodies, strict=False)):
            if talk.raw and i == len(requests) - 1:
                continue
            problem = reply_problem(request, body)
            if problem is not None:
                self.tally.note("malformed replies", 1, f"{talk.frame.what}: {problem}:"
                                f" {body.hex()[:160]}")
            elif talk.must_fail and i == len(requests) - 1 and 0 in _codes(request, body):
                self.tally.note("garbage logins accepted", 1, talk.frame.what)

    def check_alive(self, suspects: Sequence[Frame], context: str) -> bool:
        """Whether the agent lived; a death is counted, described (`suspects`: the frames
        that may have killed it, likeliest first) and the agent restarted."""
        if self.agent.alive():
            return True
        assert self.agent.proc is not None
        code = self.agent.proc.returncode
        cap = f" ({self.agent.capped.pop()})" if self.agent.capped else ""
        who = suspects[0].describe() if suspects else context
        more = f" (or one of {len(suspects) - 1} before it)" if len(suspects) > 1 else ""
        why = cap or f"; log: {self.agent.last_error()}"
        self.tally.note("agent deaths", 1, f"exit {code} after {who}{more}{why}")
        self.deaths_by[suspects[0].api if suspects else context] += 1
        self.deaths_left -= 1
        self.agent.start()
        return False

    # -- phase 1

    async def send_frames(self, talks: Iterable[Conversation], port: int,
                          out: Outcomes) -> None:
        """One conversation at a time, each on its own connection to `port`, its replies
        checked. The agent is checked after each frame it did not answer (a killed agent's
        sockets close as it exits, so the frame that found its connection closed is the
        killer); a frame that found the agent already gone is sent again once it is
        restarted."""
        recent: list[Frame] = []  # the last frames the agent closed
        for n, talk in enumerate(talks):
            frame = talk.frame
            if self.deaths_left <= 0:
                self.skipped += 1
                continue
            outcome = "refused"
            for _ in range(2):
                bodies: list[bytes] = []
                outcome = (await exchange(port, talk.prefix + frame.data,
                                          replies=talk.answers + 1, bodies=bodies))[0]
                if outcome != "answered":
                    await asyncio.sleep(0.002)  # the exit follows the close within 1 ms
                suspects = recent[::-1] if outcome == "refused" else [frame]
                if self.check_alive(suspects, frame.what) or outcome != "refused":
                    break
            self.check_replies(talk, bodies)
            out.sent += outcome != "refused"
            out.by[outcome] += 1
            recent = [*recent[-2:], frame] if outcome == "closed" else recent
            if n % CHUNK == CHUNK - 1:
                await self.probe()

    # -- phase 2

    async def bad_batches(self, versions: Sequence[int], sasl: bool = False) -> None:
        """Each kind of malformed batch as each Produce version, beside a valid produce
        (`sasl`: both on the SASL listener, after a PLAIN login)."""
        port = self.agent.sasl_port if sasl else self.agent.port
        login = saslframes.plain_login() if sasl else b""
        replies = 3 if sasl else 1
        pid, epoch = await self._producer_id()
        kinds = frames.bad_batches(pid, epoch)
        correlation = 0
        for version in versions:
            for i, (kind, raw) in enumerate(kinds.items()):
                correlation += 1
                good = frames.good_batch([f"r:{version}:{i}".encode()])
                bad_req = frames.produce_request(version, "bad", i % 4, raw, correlation=7)
                good_req = frames.produce_request(version, "good-raw", 0, good, correlation=8)
                (b_out, b_body), (g_out, g_body) = await asyncio.gather(
                    exchange(port, login + bad_req, 15, keep=True, replies=replies),
                    exchange(port, login + good_req, 15, keep=True, replies=replies))
                self.out.sent += 2
                what = f"{kind} as Produce v{version}{' over SASL' if sasl else ''}"
                b_code = _produce_error(version, b_body) if b_out == "answered" else None
                self.codes[f"{kind}: {b_out if b_code is None else b_code}"] += 1
                if b_code == 0:
                    self.kinds_stored.add(kind)
                    self.tally.note("bad batches acked", 1,
                                    f"{what} acked: {bad_req.hex()[:240]}")
                elif b_code is None:
                    self.tally.note("bad batches unanswered", 1,
                                    f"{what}: {b_out}: {bad_req.hex()[:240]}")
                g_code = _produce_error(version, g_body) if g_out == "answered" else g_out
                if g_code != 0:
                    self.tally.note("good produces failed", 1,
                                    f"valid produce beside {what}: {g_code}")
                if not self.check_alive([Frame(bad_req, what)], what):
                    continue
            await self.probe()

    async def _producer_id(self) -> tuple[int, int]:
        mod = load_payload_module(22, 0, EntityType.request)
        req = mod.InitProducerIdRequest(transactional_id=None, transaction_timeout=_ms(60_000))
        outcome, body = await exchange(self.agent.port, _frame(22, 0, req), 15, keep=True)
        if outcome != "answered":
            return 4242, 0
        resp = _decode(22, 0, body)
        return int(resp.producer_id), int(resp.producer_epoch)

    # -- phase 3

    async def slow_and_idle(self) -> None:
        known = _declared_agent_settings()
        per_ip = LIMITS["max.connections.per.ip"] if "max.connections.per.ip" in known \
            else DEFAULT_PER_IP
        slow = [await _connect(self.agent.port, "127.0.0.3") for _ in range(4)]
        idle = [await _connect(self.agent.port, "127.0.0.4") for _ in range(16)]
        declared = struct.pack(">i", 50 << 20) + frames.sample_body(18, 0)[:8]
        for c in slow:
            if c is not None:
                c[1].write(declared)
        deadline = time.monotonic() + SLOW_WAIT_S
        flood = [await _connect(self.agent.port, "127.0.0.5") for _ in range(FLOOD)]
        served = sum(await asyncio.gather(*(_served(c) for c in flood)))
        self.out.sent += FLOOD + len(slow) + len(idle)
        self.tally.note("connections past the per-IP limit", max(0, served - per_ip),
                        f"{served} of {FLOOD} connections from 127.0.0.5 served"
                        f" (limit {per_ip})")
        while time.monotonic() < deadline:
            for c in slow:
                if c is not None and not c[1].is_closing():
                    with contextlib.suppress(OSError):
                        c[1].write(b"\x00")
            await self.probe()
            await asyncio.sleep(1)
        open_slow = sum([await _still_open(c) for c in slow])
        open_idle = sum([await _still_open(c) for c in idle])
        self.tally.note("slow connections held", open_slow,
                        f"{open_slow} connections sending a 50 MiB frame a byte a second"
                        f" still open after {SLOW_WAIT_S:.0f} s")
        self.tally.note("idle connections held", open_idle,
                        f"{open_idle} idle connections still open after {SLOW_WAIT_S:.0f} s")
        for c in [*slow, *idle, *flood]:
            if c is not None:
                c[1].transport.abort()
        self.check_alive([], "slow and idle connections")

    # -- phase 4

    async def huge(self) -> None:
        long_name = "x" * 32767
        for validate in (True, False):
            outcome, code = await self._create(4, long_name, 1, validate)
            if code != 17:  # INVALID_TOPIC_EXCEPTION
                self.tally.note("long topic name not refused", 1,
                                f"CreateTopics v4 of a 32,767-character name"
                                f" (validate_only {validate}): {outcome} {code}")
        cases = [("fz-big", 10**6), ("fz-big", 10**9), ("fz-big", 2**31 - 1), ("fz-zero", 0),
                 ("bad name!", 1), ("..", 1), ("y" * 250, 1)]
        for validate in (True, False):
            for name, n in cases:
                if not validate and n == 2**31 - 1:
                    continue  # last: it may take the agent's memory
                outcome, code = await self._create(5, name, n, validate)
                if code == 0 or outcome != "answered":
                    self.tally.note("huge or bad creates accepted", 1,
                                    f"CreateTopics v5 {name[:20]!r} x {n} partitions"
                                    f" (validate_only {validate}): {outcome} {code}")
                self.check_alive([], f"CreateTopics {name[:20]!r} x {n}")
        await self.huge_fetch()
        outcome, code = await self._create(5, "fz-huge", 2**31 - 1, False)
        if code == 0 or outcome != "answered":
            self.tally.note("huge or bad creates accepted", 1,
                            f"CreateTopics v5 'fz-huge' x 2^31-1 partitions: {outcome} {code}")
        self.check_alive([], "CreateTopics of 2^31-1 partitions")

    async def _create(self, version: int, name: str, partitions: int, validate: bool
                      ) -> tuple[str, int | None]:
        mod = load_payload_module(19, version, EntityType.request)
        topic = mod.CreatableTopic(name=name, num_partitions=i32(partitions),
                                   replication_factor=i16(-1), assignments=(), configs=())
        req = mod.CreateTopicsRequest(topics=(topic,), timeout=_ms(30_000),
                                      validate_only=validate)
        outcome, body = await exchange(self.agent.port, _frame(19, version, req), 120,
                                       keep=True)
        self.out.sent += 1
        if outcome != "answered":
            return outcome, None
        topics = _decode(19, version, body).topics
        return outcome, int(topics[0].error_code.value) if topics else None

    async def huge_fetch(self) -> None:
        """One partition listed once, then 5,000 times, max_bytes 2^31-1."""
        one = await self._fetch(1)
        many = await self._fetch(5000)
        self.out.sent += 2
        if many > min(FETCH_CAP, one + (1 << 20)):
            self.tally.note("fetch answers past bounds", 1,
                            f"Fetch v12 of good-p/0 listed 5,000 times: {many} bytes"
                            f" (listed once: {one})")
        self.check_alive([], "Fetch of one partition listed 5,000 times")

    async def _fetch(self, times: int) -> int:
        mod = load_payload_module(1, 12, EntityType.request)
        part = mod.FetchPartition(partition=i32(0), current_leader_epoch=i32(-1),
                                  fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                                  log_start_offset=i64(-1),
                                  partition_max_bytes=i32(2**31 - 1))
        topic = mod.FetchTopic(topic="good-p", partitions=(part,) * times)
        req = mod.FetchRequest(replica_id=i32(-1), max_wait=_ms(0), min_bytes=i32(0),
                               max_bytes=i32(2**31 - 1), isolation_level=0,
                               session_id=i32(0), session_epoch=i32(-1), topics=(topic,),
                               forgotten_topics_data=(), rack_id="")
        size = 0
        data = _frame(1, 12, req)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.agent.port)
        except OSError:
            return 0
        try:
            writer.write(data)
            async with asyncio.timeout(120):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()
        return size

    # -- phase 5

    async def sasl(self, trials: int, every_truncation: bool) -> None:
        port = self.agent.sasl_port
        talks = itertools.chain(
            saslframes.before_handshake(trials, self.rng, every_truncation),
            saslframes.bad_tokens(),
            (Conversation(saslframes.plain_login(), 2, f)
             for f in post_auth_frames(trials, self.rng)))
        await self.send_frames(talks, port, self.sasl_out)
        for talk in saslframes.out_of_turn():
            await self.out_of_turn(talk)
        for version in saslframes.versions(SASL_AUTHENTICATE):
            for kind, final in saslframes.bad_finals().items():
                await self.scram_final(version, kind, final)
        await self.bad_batches([11], sasl=True)
        await self.probe()

    async def out_of_turn(self, talk: Conversation) -> None:
        """A request mid-exchange: ILLEGAL_SASL_STATE in its API's response, then closed
        (the client keeps its end open: the close must be the agent's)."""
        bodies: list[bytes] = []
        outcome, _ = await exchange(self.agent.sasl_port, talk.prefix + talk.frame.data,
                                    replies=talk.answers + 2, bodies=bodies,
                                    half_close=False)
        self.sasl_out.sent += 1
        self.sasl_out.by["closed" if outcome == "closed" else "answered"] += 1
        self.check_replies(talk, bodies)
        illegal = (len(bodies) == talk.answers + 1
                   and ErrorCode.illegal_sasl_state in _codes(talk.frame.data, bodies[-1]))
        if outcome != "closed" or not illegal:
            self.tally.note("out-of-turn requests not refused as Kafka", 1,
                            f"{talk.frame.what}: {len(bodies)} replies, then {outcome}")
        self.check_alive([talk.frame], talk.frame.what)

    async def scram_final(self, version: int, kind: str, final: saslframes.Final) -> None:
        """A SCRAM-SHA-512 login whose client-final message is `final` of the server's
        first one, as SaslAuthenticate `version`: only the good ones may succeed."""
        first = saslframes.authenticate(b"n,," + saslframes.FIRST_BARE.encode(), version)
        requests = [saslframes.handshake(saslframes.SCRAM), first]
        bodies: list[bytes] = []
        outcome = "answered"
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.agent.sasl_port)
        except OSError:
            return
        try:
            async with asyncio.timeout(15):
                writer.write(b"".join(requests))
                bodies += [await _read_reply(reader, True) for _ in requests]
                server_first = _decode(36, version, bodies[-1]).auth_bytes.decode()
                requests.append(saslframes.authenticate(final(server_first), version))
                writer.write(requests[-1])
                bodies.append(await _read_reply(reader, True))
        except (asyncio.IncompleteReadError, ConnectionError):
            outcome = "closed"
        except TimeoutError:
            outcome = "timeout"
        finally:
            writer.transport.abort()
        what = f"SCRAM client-final {kind} as SaslAuthenticate v{version}"
        self.sasl_out.sent += len(requests)
        self.sasl_out.by[outcome] += 1
        talk = Conversation(b"".join(requests[:-1]), len(requests) - 1,
                            Frame(requests[-1], what))
        self.check_replies(talk, bodies)
        accepted = len(bodies) == 3 and _codes(requests[-1], bodies[-1]) == [ErrorCode.none]
        if kind in saslframes.GOOD_FINALS and not accepted:
            self.tally.note("good logins refused", 1, f"{what}: {outcome}")
        elif kind not in saslframes.GOOD_FINALS and accepted:
            self.tally.note("garbage logins accepted", 1, what)
        self.check_alive([talk.frame], what)

    # -- the checks at the end

    def verify(self, background: Background) -> None:
        md = MetadataStore.open(self.md_url)
        reader = Reader(open_store(self.store_url), md)
        try:
            self._verify_bad(md, reader)
            for tp, acks in sorted(background.acked.items()):
                try:
                    log = list(reader.read(*tp))
                except Exception as exc:
                    self.tally.note("lost", len(acks), f"{tp} unreadable: {exc}"[:300])
                    continue
                check_log(self.tally, tp, log, sorted(acks), Background.TAGS,
                          compacted=False)
                at: dict[bytes | None, list[int]] = {}
                for rec in log:
                    at.setdefault(rec.value, []).append(rec.offset)
                self.exact += sum(at.get(value) == [offset] for offset, _, value in acks)
            want = {v for tp, acks in background.acked.items() if tp[0] == "good-i"
                    for *_, v in acks}
            missed = len(want - set(background.consumed))
            self.tally.note("consumer missed", missed,
                            f"{missed} of {len(want)} acked records of good-i never consumed")
        finally:
            md.close()

    def _verify_bad(self, md: MetadataStore, reader: Reader) -> None:
        for p in md.partitions("bad"):
            try:
                stored = sum(1 for _ in reader.read_batches("bad", p.partition))
                what = f"{stored} batches stored in bad/{p.partition}"
            except Exception as exc:
                stored, what = 1, f"bad/{p.partition} unreadable: {exc}"[:300]
            self.tally.note("bad batches stored", stored, what)
            self.tally.note("log ends moved", int(p.next_offset != 0),
                            f"bad/{p.partition} log end {p.next_offset}")
        for p in md.partitions(frames.TOPIC):
            try:
                for _ in reader.read(frames.TOPIC, p.partition):
                    pass
            except Exception as exc:
                self.tally.note("bad batches stored", 1,
                                f"{frames.TOPIC}/{p.partition} unreadable: {exc}"[:300])


def _chunks(items: Iterable[Frame], n: int) -> Iterator[list[Frame]]:
    chunk: list[Frame] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connect(port: int, source: str) -> Conn | None:
    try:
        return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return None


async def _served(conn: Conn | None) -> int:
    """1 if an ApiVersions request on `conn` is answered within PROBE_S."""
    if conn is None:
        return 0
    reader, writer = conn
    try:
        writer.write(frames.framed(frames.sample_body(18, 0)))
        async with asyncio.timeout(PROBE_S):
            await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
        return 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return 0


async def _still_open(conn: Conn | None) -> int:
    """1 if the agent has not closed `conn` (a read finds no EOF within 0.2 s)."""
    if conn is None:
        return 0
    try:
        async with asyncio.timeout(0.2):
            data = await conn[0].read(1 << 16)
            return 0 if not data else 1
    except TimeoutError:
        return 1
    except OSError:
        return 0


def _ms(ms: int) -> i32Timedelta:
    """A request's millisecond field (kio's i32Timedelta)."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _frame(api_key: int, version: int, request: Any) -> bytes:
    return frames.framed(frames.encode_request(api_key, version, request))


def _decode(api_key: int, version: int, body: bytes) -> Any:
    cls = load_response_schema(api_key, version)
    _, n = entity_reader(cls.__header_schema__)(body, 0)
    return entity_reader(cls)(body, n)[0]


def reply_problem(request: bytes, body: bytes) -> str | None:
    """Why `body` is not a well-formed response to `request` (a frame): kio must decode it
    whole as the response of the request's API version (ApiVersions of an unsupported one:
    v0), with the request's correlation id; None if it is. A value kio's reader refuses
    but Kafka sends (OutOfBoundValue: DescribeTransactions' start time -1 of a transaction
    not begun) is checked by its lengths alone (frames.walk)."""
    key, version, correlation = struct.unpack_from(">hhi", request, 4)
    api = TABLE.get(key)
    if key == 18 and (api is None or not api.supports(version)):
        version = 0
    cls = load_response_schema(key, version)
    try:
        header, n = entity_reader(cls.__header_schema__)(body, 0)
        try:
            _, size = entity_reader(cls)(body, n)  # readers say how many bytes they took
        except OutOfBoundValue:
            size = frames.walk(cls, body, n) - n
    except Exception as exc:
        return f"not api {key} v{version}'s response ({type(exc).__name__}: {exc})"[:200]
    if int(header.correlation_id) != correlation:
        return f"correlation id {header.correlation_id}, not {correlation}"
    left = len(body) - n - size
    return None if left == 0 else f"{left} bytes past api {key} v{version}'s response"


def error_codes(entity: Any) -> list[ErrorCode]:
    """Every error code in a decoded response `entity` (nested entities and arrays too)."""
    found: list[ErrorCode] = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, ErrorCode):
                found.append(item)
            elif dataclasses.is_dataclass(item):
                found += error_codes(item)
    return found


def _codes(request: bytes, body: bytes) -> list[ErrorCode]:
    """Every error code in the response `body` to `request` (a well-formed one)."""
    key, version = struct.unpack_from(">hh", request, 4)
    api = TABLE.get(key)
    return error_codes(_decode(key, 0 if key == 18 and (api is None or not api.supports(version))
                               else version, body))


def _produce_error(version: int, body: bytes) -> int | str:
    try:
        resp = _decode(0, version, body)
        return int(resp.responses[0].partition_responses[0].error_code.value)
    except Exception as exc:
        return f"undecodable reply ({exc})"


def _metadata_request() -> bytes:
    return frames.framed(frames.sample_body(3, 1))


def killers() -> Iterator[Frame]:
    return (Frame(data, "issue 22 killer") for data in frames.KILLERS)


def all_frames(trials: int, rng: random.Random, every_truncation: bool) -> Iterator[Frame]:
    """The killers, then per API version: its length mutants, `trials` random mutants and
    (if asked) every truncation."""
    yield from killers()
    for key, api in sorted(TABLE.items()):
        for version in range(api.min_version, api.max_version + 1):
            yield from frames.mutants(key, version, trials, rng, every_truncation)


def post_auth_frames(trials: int, rng: random.Random) -> Iterator[Frame]:
    """What phase 5 sends after a login: the killers and `trials` random mutants (at least
    one) per API version (the decoders are phase 1's: this checks the session's state)."""
    yield from killers()
    for key, api in sorted(TABLE.items()):
        for version in range(api.min_version, api.max_version + 1):
            yield from frames.random_mutants(key, version, max(trials, 1), rng)


def run(trials: int, seed: int, every_truncation: bool = False, max_deaths: int = 10_000,
        produce_versions: Sequence[int] = range(3, 12)) -> dict[str, Any]:
    """The suite (module docstring): `trials` random mutants per API version, malformed
    batches as each of `produce_versions`; after `max_deaths` deaths no more frames are sent
    (counted as skipped). The figures (see faults/chaos.py)."""
    where = Path(tempfile.mkdtemp(prefix="silt-chaos-protocol-"))
    r = Run(where, seed, max_deaths)
    bg: Background | None = None
    try:
        r.agent.start()
        bg = Background(f"127.0.0.1:{r.agent.port}", f"127.0.0.1:{r.agent.sasl_port}")
        bg.start()
        asyncio.run(r.send_frames((Conversation(b"", 0, f) for f in all_frames(
            trials, r.rng, every_truncation)), r.agent.port, r.out))
        asyncio.run(r.bad_batches(produce_versions))
        asyncio.run(r.slow_and_idle())
        asyncio.run(r.huge())
        asyncio.run(r.sasl(trials, every_truncation))
        bg.stop()
        exit_code = r.agent.stop()
        r.verify(bg)
    finally:
        if r.agent.alive():
            r.agent.stop()
        shutil.rmtree(where, ignore_errors=True)
    t = r.tally
    return {
        "frames sent": r.out.sent,
        "frames skipped (max_deaths reached)": r.skipped,
        "frames answered / closed / no reply": "{} / {} / {}".format(
            r.out.by["answered"], r.out.by["closed"], r.out.by["timeout"]),
        "SASL listener frames sent": r.sasl_out.sent,
        "SASL conversations answered / closed / no reply": "{} / {} / {}".format(
            r.sasl_out.by["answered"], r.sasl_out.by["closed"], r.sasl_out.by["timeout"]),
        "agent starts": r.agent.starts,
        "deaths by API": ", ".join(f"{k} {n}" for k, n in r.deaths_by.most_common()) or "none",
        "bad batch kinds acked": ", ".join(sorted(r.kinds_stored)) or "none",
        **{k: t.counts[k] for k in FRONT_DOOR},
        "good records acked": sum(len(a) for a in bg.acked.values()),
        "good records read back exactly": r.exact,
        **{k: t.counts[k] for k in RECORDS},
        "consumer records": len(bg.consumed),
        "peak RSS growth (MiB)": r.agent.peak_growth >> 20,
        "agent exit code": exit_code,
        "violations": t.violations(),
        "examples": t.all_examples(),
    }
