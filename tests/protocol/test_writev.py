"""`send_buffers` writes a reply's buffers in order through a stream's socket, waiting for
room when the socket is full (a reply much larger than the socket buffers), and reports a
peer that is gone as ConnectionError."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket

import pytest

from agent.protocol.codec import Buffer
from agent.protocol.writev import IOV_MAX, send_buffers


async def _pair() -> tuple[asyncio.StreamWriter, socket.socket]:
    """A server-side StreamWriter (a real transport) and the raw client socket."""
    accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

    async def on_client(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(writer)

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    writer = await accepted
    server.close()
    return writer, client


def receive(sock: socket.socket, n: int) -> bytes:
    """Up to `n` bytes from `sock`: fewer only if the peer closed first."""
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def _reply_larger_than_the_socket() -> None:
    writer, client = await _pair()
    data = os.urandom(32 << 20)  # more than the kernel's socket buffers (4 + 6 MiB at most)
    view = memoryview(data)
    # more buffers than one writev takes, of uneven sizes, some empty
    cuts = sorted({0, len(data), *range(0, len(data), 3001)})
    buffers: list[Buffer] = [view[a:b] for a, b in itertools.pairwise(cuts)]
    buffers[5:5] = [b"", bytearray(b"x"), b""]
    want = b"".join(buffers)
    assert len(buffers) > IOV_MAX
    loop = asyncio.get_running_loop()
    received = loop.run_in_executor(None, receive, client, len(want))
    await send_buffers(writer.transport, buffers)
    assert await received == want
    await send_buffers(writer.transport, [b"next"])  # the connection still works after waiting
    assert await loop.run_in_executor(None, receive, client, 4) == b"next"
    client.close()
    writer.close()


async def _peer_gone() -> None:
    writer, client = await _pair()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # RST
    with pytest.raises(ConnectionError):
        for _ in range(100):
            await send_buffers(writer.transport, [b"x" * (1 << 20)])
    writer.close()


def test_a_reply_larger_than_the_socket_goes_out_whole_and_in_order() -> None:
    asyncio.run(_reply_larger_than_the_socket())


def test_a_peer_gone_is_a_connection_error() -> None:
    asyncio.run(_peer_gone())
