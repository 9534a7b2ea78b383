"""The crash suite's transactional trial: the transaction coordinator SIGKILLed at one of
EndTxn's named steps (`txn.prepared`, `txn.markers`, `txn.committed`, faults/killpoints.py).

One trial, on a fresh SQLite metadata store and file store: two real `silt agent`
processes, the first armed with the kill point; a confluent-kafka transactional producer
whose transactional id the first agent coordinates runs TRANSACTIONS transactions of
RECORDS records over the topic's partitions, each committed or aborted at random (the
client retries what it may retry, as an application does, so the second agent takes the id
over once the dead one's registry session lapses). Afterwards, read from the store:

- every transaction is wholly committed or wholly aborted: read_committed sees all of its
  records or none (`txn_partial`), and the outcome the client was told, if any, is the one
  stored (`txn_outcome`);
- read_uncommitted sees every record the client was told is stored, once (`lost`,
  `duplicated`);
- no partition's last stable offset stays below its log end (`lso_stuck`) once the
  surviving agent's housekeeping had its chance.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from confluent_kafka import KafkaException, Message, Producer

from agent import Reader
from agent.placement import coordinator
from faults.check import Tally
from harness.agent_process import AgentProcess
from metadata import MetadataStore
from objectstore import open_store

TOPIC = "x"
PARTITIONS = 3
TRANSACTIONS = 4
RECORDS = 6
KINDS = ("txn_partial", "txn_outcome", "lso_stuck")
FAST = {"SILT_AGENT_LINGER_MS": "20", "SILT_METADATA_BROKER_SESSION_TIMEOUT_MS": "3000",
        "SILT_METADATA_BROKER_HEARTBEAT_INTERVAL_MS": "300",
        "SILT_AGENT_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "500"}
DEADLINE_S = 60.0  # a client call's retries, and the wait for the LSOs


def _txn_id_led_by(md: MetadataStore, agent: AgentProcess) -> str:
    """A transactional id that placement gives `agent`."""
    live = md.live_brokers()
    for i in range(1000):
        if coordinator(f"app-{i}", live).port == agent.port:
            return f"app-{i}"
    raise RuntimeError("no transactional id placed on the agent")


def _retried(call: str, producer: Producer) -> str:
    """commit/abort/init, retried while the client says it may be: 'ok', or 'abort' (the
    transaction must be aborted), or 'failed' (fatal, or out of time)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            if call == "init":
                producer.init_transactions(20)
            elif call == "commit":
                producer.commit_transaction(20)
            else:
                producer.abort_transaction(20)
            return "ok"
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort() and call == "commit":
                return "abort"
            if error.fatal() or not error.retriable() or time.monotonic() > deadline:
                return "failed"


def trial(where: Path, step: str, rng: random.Random, tally: Tally,
          errors: list[str]) -> str:
    """One trial (module docstring) killing the coordinator at `step` (`name@N`); returns
    'step' if the coordinator died there, else 'step not reached'."""
    md_url = f"sqlite:///{where}/md.db"
    store_url = f"file://{where}/store"
    md = MetadataStore.open(md_url, create=True)
    md.create_topic(TOPIC, PARTITIONS)
    a = AgentProcess(store_url, md_url, where / "a.log", {**FAST, "SILT_KILLPOINT": step},
                     entry=["-m", "faults.killpoints"])
    b = AgentProcess(store_url, md_url, where / "b.log", dict(FAST))
    told: dict[str, bool | None] = {}  # transaction tag -> committed (None: not told)
    sent: list[bytes] = []  # the records the client was told are stored

    def delivered(error: object, message: Message) -> None:
        if error is None:
            sent.append(message.value() or b"")

    try:
        a.start()
        b.start()
        producer = Producer({"bootstrap.servers": f"{a.bootstrap},{b.bootstrap}",
                             "transactional.id": _txn_id_led_by(md, a), "linger.ms": 5,
                             "transaction.timeout.ms": 60_000, "log_level": 0})
        if _retried("init", producer) != "ok":
            errors.append(f"{step}: init_transactions failed")
        else:
            for j in range(TRANSACTIONS):
                tag = f"T{j}"
                producer.begin_transaction()
                for i in range(RECORDS):
                    producer.produce(TOPIC, value=f"{tag}-{i}".encode(),
                                     partition=i % PARTITIONS, on_delivery=delivered)
                producer.flush(DEADLINE_S)
                commit = rng.random() < 0.6
                result = _retried("commit" if commit else "abort", producer)
                if result == "abort":
                    result, commit = _retried("abort", producer), False
                if result != "ok":
                    told[tag] = None
                    break  # a fatal error ends the producer, as it ends an application
                told[tag] = commit
        _check(where, store_url, md, told, sent, step, tally)
    finally:
        for proc in (a, b):
            if proc.proc is not None:
                proc.terminate()
        md.close()
    killed = a.proc is not None and a.proc.returncode == -9
    return "step" if killed else "step not reached"


def _check(where: Path, store_url: str, md: MetadataStore, told: dict[str, bool | None],
           sent: list[bytes], step: str, tally: Tally) -> None:
    """The trial's promises (module docstring), counted in `tally`."""
    deadline = time.monotonic() + DEADLINE_S
    while True:  # the surviving agent finishes or times out what the dead one left
        parts = md.partitions(TOPIC)
        stuck = [p.partition for p in parts if p.last_stable_offset < p.next_offset]
        if not stuck or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    tally.note("lso_stuck", len(stuck), f"{step}: partitions {stuck} below their log end")
    reader = Reader(open_store(store_url), md)
    committed = [r.value or b"" for p in range(PARTITIONS)
                 for r in reader.read(TOPIC, p, 0, committed=True)]
    every = [r.value or b"" for p in range(PARTITIONS) for r in reader.read(TOPIC, p, 0)]
    tally.acked += len(sent)
    tally.read += len(every)
    tally.note("lost", len(set(sent) - set(every)), f"{step}: records sent, not stored")
    tally.note("duplicated", len(every) - len(set(every)), f"{step}: a record stored twice")
    for tag, outcome in told.items():
        seen = sum(v.startswith(f"{tag}-".encode()) for v in committed)
        tally.note("txn_partial", int(seen not in (0, RECORDS)),
                   f"{step}: {tag} shows {seen} of {RECORDS} records under read_committed")
        if outcome is not None:
            tally.note("txn_outcome", int((seen == RECORDS) != outcome),
                       f"{step}: {tag} told {'commit' if outcome else 'abort'}, "
                       f"{seen} records visible")
