"""One confluent-kafka group member in its own process, for the rebalance benchmark
(bench/groups.py), which can then kill it with SIGKILL.

`python -m bench.group_member BOOTSTRAP GROUP TOPIC SESSION_MS HEARTBEAT_MS`: subscribes to
TOPIC in GROUP and polls; prints one JSON line per event on stdout, timed with
time.monotonic() (CLOCK_MONOTONIC, one clock for every process of the machine):
`{"event": "assigned"|"revoked", "partitions": [...], "t": ...}` from the rebalance
callbacks, and `{"event": "closed", "t0": ..., "t1": ...}` around close(), which it calls
when a line "close" arrives on stdin, then exits.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main(argv: list[str]) -> int:
    bootstrap, group, topic, session_ms, heartbeat_ms = argv
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "session.timeout.ms": int(session_ms),
                         "heartbeat.interval.ms": int(heartbeat_ms),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})

    def assigned(_: Consumer, parts: list[TopicPartition]) -> None:
        _say("assigned", partitions=sorted(p.partition for p in parts), t=time.monotonic())

    def revoked(_: Consumer, parts: list[TopicPartition]) -> None:
        _say("revoked", partitions=sorted(p.partition for p in parts), t=time.monotonic())

    closing = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        closing.set()  # "close", or the parent went away (EOF)

    threading.Thread(target=read_stdin, daemon=True).start()
    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    while not closing.is_set():
        consumer.poll(0.05)
    t0 = time.monotonic()
    consumer.close()
    _say("closed", t0=t0, t1=time.monotonic())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
