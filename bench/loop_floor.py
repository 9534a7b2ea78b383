"""What an asyncio server pays per small request arriving alone, before any work:
`python -m bench.loop_floor` prints one JSON document.

A client process sends a 1 KiB frame every 0.5 ms (the latency run's ~2,000 Produces a
second, one at a time) to a server in this process that answers each with 8 bytes, read
two ways: through a StreamReader in a task, with the replies handed to a sender task
through a queue (as the agent's server read and answered until it became a Protocol), and
in a Protocol's `data_received`, answered there (as it does now). The server's CPU (user
and system, from getrusage) per request is the floor of each way of reading on this
machine, next to the agent's own (the wire suite's paced floor and latency rows). With two
cores or more the server runs on the last and the client on the first, as an agent and its
clients would.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import resource
import struct
import subprocess
import sys
from typing import Any

REQUESTS = 10_000
INTERVAL_S = 0.0005
FRAME = struct.Struct(">i")
REPLY = b"r" * 8

_CLIENT = """
import socket, struct, sys, time
port, n, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
frame = struct.pack(">i", 1024) + b"x" * 1024
start, got = time.perf_counter(), 0
for i in range(n):
    while time.perf_counter() < start + i * interval:
        pass
    s.sendall(frame)
    s.setblocking(False)
    try:
        got += len(s.recv(1 << 16))
    except BlockingIOError:
        pass
    s.setblocking(True)
while got < n * 8:
    got += len(s.recv(1 << 16))
"""


async def _stream_server() -> asyncio.Server:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        replies: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def send() -> None:
            while (reply := await replies.get()) is not None:
                writer.write(reply)

        sender = asyncio.create_task(send())
        try:
            while True:
                first = await reader.readexactly(1)
                size = FRAME.unpack(first + await reader.readexactly(FRAME.size - 1))[0]
                await reader.readexactly(size)
                replies.put_nowait(REPLY)
        except asyncio.IncompleteReadError:
            pass
        replies.put_nowait(None)
        await sender
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


class _Frames(asyncio.Protocol):
    """Frames parsed from what each `data_received` brings, answered at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos, answered = 0, 0
        while len(buf) - pos >= FRAME.size:
            size = FRAME.unpack_from(buf, pos)[0]
            if len(buf) - pos - FRAME.size < size:
                break
            pos += FRAME.size + size
            answered += 1
        del buf[:pos]
        if answered:
            self.transport.write(REPLY * answered)


async def _measure(way: str, requests: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    server = (await _stream_server() if way == "stream task" else
              await loop.create_server(_Frames, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    cpus = sorted(os.sched_getaffinity(0))
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, str(port), str(requests),
                               str(INTERVAL_S)])
    if len(cpus) > 1:  # the client on the first core, this server on the last
        os.sched_setaffinity(client.pid, {cpus[0]})
        os.sched_setaffinity(0, {cpus[-1]})
    before = resource.getrusage(resource.RUSAGE_SELF)
    while client.poll() is None:
        await asyncio.sleep(0.05)
    after = resource.getrusage(resource.RUSAGE_SELF)
    server.close()
    os.sched_setaffinity(0, cpus)
    if client.returncode:
        raise SystemExit(f"the client failed ({client.returncode})")
    user = (after.ru_utime - before.ru_utime) / requests * 1e6
    system = (after.ru_stime - before.ru_stime) / requests * 1e6
    return {"read": way, "cpu_us_per_request": round(user + system, 1)}


def run(rounds: int = 3, requests: int = REQUESTS) -> dict[str, Any]:
    """Each way `rounds` times, alternated, `requests` requests each."""
    rows = [asyncio.run(_measure(way, requests)) for _ in range(rounds)
            for way in ("stream task", "protocol")]
    return {"benchmark": "loop_floor", "python": platform.python_version(),
            "requests": requests, "interval_ms": INTERVAL_S * 1000, "results": rows}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
