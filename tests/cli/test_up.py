"""`silt up` as a real process on the embedded default (./silt-data: SQLite and files):
confluent-kafka produces to and consumes from its Kafka endpoint, its compactor compacts a
compacted topic meanwhile, and SIGTERM stops both children cleanly (exit 0)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from harness.agent_process import REPO, free_port
from metadata import MetadataStore
from metadata import schema as s

WAIT_S = 60.0
KEYS, ROUNDS = 20, 4


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Up:
    """`silt up` in `cwd` on a free port, its output in `log`."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None, port: int = 0) -> None:
        self.port = port or free_port()
        cwd.mkdir(exist_ok=True)
        self.log = cwd / "up.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SILT_")}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "up", "--listen", f"127.0.0.1:{self.port}"],
                env={**clean, **(env or {}), "PYTHONPATH": str(REPO)}, cwd=cwd, stdout=out,
                stderr=subprocess.STDOUT)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        wait_until(lambda: "with compaction running" in self.text() or
                   self.proc.poll() is not None, "silt up")
        assert self.proc.poll() is None, self.text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(WAIT_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    proc = Up(tmp_path, env={"SILT_PLANNER_L0_TRIGGER_FILES": "2",
                             "SILT_COMPACTOR_POLL_INTERVAL_S": "0.2"})
    yield proc
    proc.kill()


def consume_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes | None, bytes | None]] = []
    try:
        while True:
            msg = consumer.poll(30)
            assert msg is not None, f"no record or end of partition after {len(got)}"
            err = msg.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                return got
            assert err is None, err
            got.append((msg.key(), msg.value()))
    finally:
        consumer.close()


def test_up_serves_kafka_clients_and_compacts(up: Up, tmp_path: Path) -> None:
    up.wait_ready()
    admin = AdminClient({"bootstrap.servers": up.bootstrap})
    futures = admin.create_topics([NewTopic("users", 1, 1,
                                            config={"cleanup.policy": "compact"})])
    futures["users"].result(30)
    producer = Producer({"bootstrap.servers": up.bootstrap, "acks": "all"})
    for r in range(ROUNDS):  # one flush (one object) per round: the acks come after it
        for k in range(KEYS):
            producer.produce("users", f"v{r}".encode(), f"k{k}".encode(), partition=0)
        assert producer.flush(30) == 0
    md = MetadataStore.open(f"sqlite:///{tmp_path}/silt-data/metadata.db", create=True)
    try:
        def compacted() -> bool:
            return any(j.result and j.result["stats"].get("duplicates_dropped")
                       for j in md.list_jobs(s.JOB_COMMITTED))
        wait_until(compacted, "a compaction job dropping duplicates")
    finally:
        md.close()
    records = consume_all(up.bootstrap, "users")
    latest = {(f"k{k}".encode(), f"v{ROUNDS - 1}".encode()) for k in range(KEYS)}
    assert set(records) >= latest
    assert len(records) < KEYS * ROUNDS  # duplicates are gone from the log clients read
    assert up.stop() == 0, up.text()
    assert "agent exited 0, compactor exited 0" in up.text()
    assert list((tmp_path / "silt-data" / "objects").rglob("*.silt"))  # the embedded default


def test_up_refuses_a_taken_port_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    first = Up(tmp_path / "first")
    try:
        first.wait_ready()
        second = Up(tmp_path / "second", port=first.port)
        try:
            assert second.proc.wait(WAIT_S) == 1
        finally:
            second.kill()
        assert second.text() == (f"silt: cannot serve on {first.bootstrap}: something listens"
                                 " there already\n")
        assert first.stop(signal.SIGINT) == 0, first.text()
        # The compactor started just before this: stopped by SIGTERM before it set up its
        # handlers is a clean stop too (cli/up.py), as is exit 0 after them.
        assert re.search(r"agent exited 0, compactor exited (0|-15)\b", first.text()), \
            first.text()
    finally:
        first.kill()


def test_up_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    up = Up(tmp_path, env={"SILT_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "-1"})
    assert up.proc.wait(WAIT_S) == 1
    assert up.text() == ("silt: invalid setting compactor.shutdown.timeout.ms=-1 (from env"
                         " SILT_COMPACTOR_SHUTDOWN_TIMEOUT_MS): must be an integer >= 0\n")
