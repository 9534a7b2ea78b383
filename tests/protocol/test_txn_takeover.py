"""The transaction coordinator SIGKILLed, two real agents, a real transactional producer
(confluent-kafka), SQLite and PostgreSQL: mid-transaction, after EndTxn's markers were
buffered (`txn.markers`), and between the commit that completed the transaction and
EndTxn's answer (`txn.committed`). The other agent takes the transactional id over once the
dead one's registry session lapses and completes the transaction; the client's retry of
commit_transaction gets success; every marker is written once per partition and no
partition's last stable offset stays stuck."""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import KafkaException, Producer

from agent.placement import coordinator
from metadata import MetadataStore
from metadata.models import TXN_COMPLETE_COMMIT

from .server import AgentProcess, Backend

TOPIC = "tx"
FAST = {"SILT_AGENT_LINGER_MS": "20", "SILT_METADATA_BROKER_SESSION_TIMEOUT_MS": "3000",
        "SILT_METADATA_BROKER_HEARTBEAT_INTERVAL_MS": "300",
        "SILT_AGENT_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "500"}


def _txn_id_led_by(md: MetadataStore, agent: AgentProcess) -> str:
    """A transactional id that placement gives `agent` (so it becomes its coordinator)."""
    live = md.live_brokers()
    for i in range(1000):
        if coordinator(f"app-{i}", live).port == agent.port:
            return f"app-{i}"
    raise AssertionError("no transactional id placed on the agent")


def _commit(producer: Producer, deadline_s: float = 60) -> int:
    """commit_transaction, retried while the client says it may be; the retries made."""
    deadline = time.monotonic() + deadline_s
    retries = 0
    while True:
        try:
            producer.commit_transaction(20)
            return retries
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable() or time.monotonic() > deadline:
                raise
            retries += 1


@pytest.mark.parametrize("kill", ["mid", "txn.markers", "txn.committed"])
def test_coordinator_killed(backend: Backend, kill: str) -> None:
    md = backend.metadata()
    md.create_topic(TOPIC, 4)
    armed = {} if kill == "mid" else {"SILT_KILLPOINT": kill}
    a = backend.agent("a", {**FAST, **armed}, entry=["-m", "faults.killpoints"]).start()
    b = backend.agent("b", FAST).start()
    try:
        txn_id = _txn_id_led_by(md, a)
        producer = Producer({"bootstrap.servers": f"{a.bootstrap},{b.bootstrap}",
                             "transactional.id": txn_id, "linger.ms": 5,
                             "transaction.timeout.ms": 60_000})
        producer.init_transactions(30)
        holder = md.transaction_coordinator(txn_id)
        assert holder is not None and holder.port == a.port
        producer.begin_transaction()
        for i in range(8):
            producer.produce(TOPIC, value=b"v%d" % i, partition=i % 4)
        producer.flush(30)
        assert all(p.last_stable_offset == 0 for p in md.partitions(TOPIC))  # open
        if kill == "mid":
            assert a.terminate(signal.SIGKILL) == -signal.SIGKILL
        _commit(producer)
        if kill != "mid":
            assert a.proc is not None and a.proc.wait(30) == -signal.SIGKILL  # killed itself
        state = md.load_transaction(txn_id)
        assert state is not None and state.state == TXN_COMPLETE_COMMIT
        holder = md.transaction_coordinator(txn_id)
        assert holder is not None and holder.port == b.port
        # 2 records + 1 marker per partition: the markers once each, none left open.
        assert {p.partition: (p.next_offset, p.last_stable_offset)
                for p in md.partitions(TOPIC)} == {q: (3, 3) for q in range(4)}
        # The producer goes on with the next transaction on the new coordinator.
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"after", partition=0)
        _commit(producer)
        first = md.partitions(TOPIC)[0]
        assert (first.next_offset, first.last_stable_offset) == (5, 5)
    finally:
        a.terminate()
        b.terminate()
        md.close()
