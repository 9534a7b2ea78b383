"""Instructions per small Produce request on the agent's event loop, counted by callgrind:
`python -m bench.instructions` (valgrind installed; a few minutes) prints one JSON document.

Why instructions: the agent CPU a small Produce costs is interpreter work (~250 Python
calls a request), and timing it on a shared 2-core machine varies ±20 % from run to run,
more than most single cuts gain. Callgrind's instruction count of the same calls varies by
~0.1 %, so a cut is measured exactly, in the same run as the floor (an empty call).

What is counted, each piece alone and warm, N calls after 200 unmeasured ones, per call:
`dispatch` (`Server._dispatch` of a Produce frame: decode, the handler up to its reply
future), and its parts: `decode` (the bounds walk and kio), `bounds` (the walk alone),
`handle`, `admit_all`, `admit` (one partition), `produce_batches` (the agent's append),
`check` (`check_client_batch`), `when_flushed`, `transactional`, `telemetry`. The frames
are librdkafka's own shape (v10, one 1 KiB batch per request, acks=-1), built here with
kio's encoding; the agent never flushes while counting (linger 10 minutes). And a caught-up
long-poll's Fetch as the wire suite's capacity run sends it (v4, 2 empty partitions, their
offsets kept; max_wait 0 so that it answers without parking): `fetch_dispatch`, and its
parts `fetch_decode`, `fetch_handle`, `fetch_read_all` (one pass over its partitions).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

N = 2000
WARM = 200
VERSION = 10  # what librdkafka 2.x sends for Produce
PIECES = ("dispatch", "decode", "bounds", "handle", "admit_all", "admit", "produce_batches",
          "check", "when_flushed", "transactional", "telemetry", "fetch_dispatch",
          "fetch_decode", "fetch_handle", "fetch_read_all")
PARTITIONS = 100


def _frames(count: int) -> list[bytes]:
    """Produce v10 frames (no size prefix) of one 1 KiB-valued record each, round robin over
    PARTITIONS, in the shape librdkafka sends (acks -1, timeout 30 s; client id "fuzz")."""
    from kio.schema.produce.v10.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.schema.types import TopicName
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    from faults.frames import encode_request
    from fileformat import build_batch

    frames = []
    for i in range(count):
        batch = build_batch([(0, 1_700_000_000_000 + i, b"l%d" % i, b"x" * 1024, [])])
        partition = PartitionProduceData(index=i32(i % PARTITIONS), records=Records(batch))
        topic = TopicProduceData(name=TopicName("wire"), partition_data=(partition,))
        request = ProduceRequest(transactional_id=None, acks=i16(-1),
                                 timeout=i32Timedelta.parse(timedelta(seconds=30)),
                                 topic_data=(topic,))
        frames.append(encode_request(0, VERSION, request, correlation_id=i))
    return frames


def _callgrind(*args: str) -> None:
    """A command to the callgrind running this process (instrumentation, zeroing, dumps)."""
    subprocess.run(["callgrind_control", *args, str(os.getpid())], capture_output=True,
                   check=False)


def _child(out_dir: str) -> None:
    """Run under callgrind: each piece N times, a dump of its instructions after each."""
    from agent import Agent, AgentConfig
    from agent.protocol.apis.fetch import handle as fetch
    from agent.protocol.apis.fetch import read_all, requested
    from agent.protocol.apis.produce import (
        _admit,
        _admit_all,
        _transactional,
        _when_flushed,
        handle,
    )
    from agent.protocol.bounds import check_request
    from agent.protocol.cache import SegmentCache
    from agent.protocol.codec import decode_request
    from agent.protocol.context import ServerContext
    from agent.protocol.server import Server, builder
    from fileformat.validate import check_client_batch
    from metadata import MetadataStore
    from objectstore import open_backend
    from telemetry import metrics

    from .wire import CAPACITY_TOPIC, _fetch_frame

    frames = _frames(PARTITIONS * 2)
    decoded = [decode_request(f, 0, VERSION) for f in frames]
    parts = [(r.topic_data[0].name, r.topic_data[0].partition_data[0]) for _, r in decoded]
    raws = [bytes(p.records) for _, p in parts]
    k = len(frames)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_backend(f"file://{tmp}/objects")
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db", create=True)
        md.create_topic("wire", PARTITIONS)
        md.create_topic(CAPACITY_TOPIC, PARTITIONS)
        config = AgentConfig(linger_ms=600_000, flush_bytes=64 << 20,
                             buffer_memory=128 << 20, topic_refresh_ms=10**9)
        agent = Agent(store, md, config)
        agent.topic("wire")
        ctx = ServerContext(agent=agent, metadata=md, store=store,
                            advertised={"PLAINTEXT": ("127.0.0.1", 0)},
                            cache=SegmentCache(store, 1 << 20), config=config)
        server = Server(ctx, [])
        loop = asyncio.new_event_loop()
        ctx.loop = loop
        asyncio._set_running_loop(loop)  # coroutines below are stepped by hand, not awaited

        def drive(coro: Any) -> Any:
            try:
                coro.send(None)
            except StopIteration as done:
                return done.value
            raise RuntimeError("a Produce suspended: the agent read its metadata store")

        admitted: list[Any] = []

        def count(name: str, fn: Callable[[int], object]) -> None:
            for i in range(WARM):
                fn(i)
            agent.flush()
            gc.collect()
            _callgrind("-z")
            _callgrind("-i", "on")
            for i in range(N):
                fn(i)
            _callgrind("-i", "off")
            _callgrind("-d", name)

        count("floor", lambda i: None)
        count("decode", lambda i: decode_request(frames[i % k], 0, VERSION))
        count("bounds", lambda i: check_request(frames[i % k], 0, VERSION))
        count("check", lambda i: check_client_batch(raws[i % k], False))
        count("produce_batches", lambda i: agent.produce_batches(
            parts[i % k][0], parts[i % k][1].index, [raws[i % k]], block_s=0,
            cached_only=True))
        count("admit", lambda i: _admit(ctx, parts[i % k][0], parts[i % k][1].index,
                                        parts[i % k][1].records, VERSION, cached_only=True))
        count("admit_all", lambda i: admitted.append(drive(_admit_all(
            ctx, decoded[i % k][1], VERSION, {"wire"}, {}, len(raws[i % k])))))
        count("when_flushed", lambda i: _when_flushed(ctx, admitted[i], None))
        count("transactional", lambda i: _transactional(decoded[i % k][1]))
        count("telemetry", lambda i: metrics.request("produce"))
        count("handle", lambda i: drive(handle(ctx, decoded[i % k][0], decoded[i % k][1],
                                               builder(0, VERSION))))
        count("dispatch", lambda i: drive(server._dispatch(frames[i % k])))

        fetches = [_fetch_frame([2 * i % PARTITIONS, (2 * i + 1) % PARTITIONS], 0)[4:]
                   for i in range(PARTITIONS // 2)]
        polls = [decode_request(f, 1, 4) for f in fetches]
        ctx.states.hearing = lambda: True  # as with the commit watcher attached
        for _, request in polls:  # every partition's offsets read once, and kept
            read_all(ctx, request, requested(request), lambda _: True)
        m = len(fetches)
        count("fetch_decode", lambda i: decode_request(fetches[i % m], 1, 4))
        count("fetch_read_all", lambda i: read_all(
            ctx, polls[i % m][1], requested(polls[i % m][1]), lambda _: True, cached_only=True))
        count("fetch_handle", lambda i: drive(fetch(ctx, polls[i % m][0], polls[i % m][1],
                                                    builder(1, 4))))
        count("fetch_dispatch", lambda i: drive(server._dispatch(fetches[i % m])))
        asyncio._set_running_loop(None)
        agent.flush()
        agent.close()
        md.close()


def run() -> dict[str, Any]:
    """Run the child under callgrind; instructions per call of each piece, floor removed."""
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="silt-instr-") as out:
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        f"--callgrind-out-file={out}/cg.out", sys.executable, "-m",
                        "bench.instructions", "--child", out],
                       check=True, capture_output=True, cwd=Path(__file__).parent.parent)
        totals: dict[str, int] = {}
        for dump in Path(out).glob("cg.out.*"):
            text = dump.read_text()
            name = re.search(r"^desc: Trigger: dump (\w+)", text, re.M)
            total = re.search(r"^totals: (\d+)", text, re.M)
            if name and total:
                totals[name.group(1)] = int(total.group(1))
    floor = totals.pop("floor")
    return {"benchmark": "instructions", "python": platform.python_version(),
            "calls": N, "floor_instructions": round(floor / N),
            "instructions_per_call": {name: round((totals[name] - floor) / N)
                                      for name in PIECES if name in totals}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        print(json.dumps(run(), indent=2))
