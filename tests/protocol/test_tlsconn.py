"""The TLS listeners' own TLS driving (agent/protocol/tlsconn.py) against real clients over
real sockets: large transfers both ways arrive whole and in order (the reader paused and
resumed, the sender waiting for a full socket), the peer's end with and without
close_notify is the end of the stream, and bad bytes at every stage (a plaintext frame,
an end mid-handshake, garbage and truncated records, random mutations of a client's
flights) end only their own connection as an OSError, never reaching the event loop's
exception handler."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.protocol.codec import Buffer
from agent.protocol.tlsconn import Scratch, TlsConnection, TlsTransport
from harness.certs import CertificateAuthority

from .test_writev import receive

Handler = Callable[[asyncio.StreamReader, TlsTransport], Awaitable[Any]]
# What a connection may end with when its peer misbehaves: never anything else.
ENDINGS = (OSError, asyncio.IncompleteReadError)


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]:
    """(server, client, TLS 1.2 client) contexts: a server certificate for localhost,
    clients that trust its CA."""
    ca = CertificateAuthority(Path(tmp_path_factory.mktemp("certs")))
    pem = ca.issue("server", "CN=localhost", server=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(pem.cert, pem.key)
    tls12 = ssl.create_default_context(cafile=str(ca.path))
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    return server, ssl.create_default_context(cafile=str(ca.path)), tls12


Contexts = tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]


class Served:
    """A TLS server on 127.0.0.1 whose connections run `handler` after the handshake;
    each connection's outcome (its handler's result or exception) in `outcomes`, and
    whatever reached the loop's exception handler in `loop_errors`."""

    def __init__(self, context: ssl.SSLContext, handler: Handler) -> None:
        self.context = context
        self.handler = handler
        self.outcomes: asyncio.Queue[object] = asyncio.Queue()
        self.loop_errors: list[dict[str, Any]] = []
        self.port = 0

    async def start(self) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: self.loop_errors.append(context))
        server = await loop.create_server(
            functools.partial(_tls_streams, self._serve, loop, Scratch()), "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        assert isinstance(transport, TlsTransport)
        try:
            await transport.handshake(self.context)
            outcome: object = await self.handler(reader, transport)
        except Exception as exc:
            outcome = exc
        finally:
            writer.close()
        await self.outcomes.put(outcome)


def _client(context: ssl.SSLContext, port: int) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return context.wrap_socket(sock, server_hostname="localhost")


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def test_large_transfers_both_ways_arrive_whole_and_in_order(
        contexts: Contexts) -> None:
    """8 MiB up (far past the StreamReader's limit: paused and resumed), then 32 MiB
    down as thousands of uneven buffers, some empty (far past the socket buffers: the
    sender waits), then a small reply: all in order, on TLS 1.3 and TLS 1.2."""
    up = os.urandom(8 << 20)
    down = os.urandom(32 << 20)
    view = memoryview(down)
    cuts = sorted({0, len(down), *range(0, len(down), 3001), *range(0, len(down), 70001)})
    buffers: list[Buffer] = [view[a:b] for a, b in itertools.pairwise(cuts)]
    buffers[5:5] = [b"", bytearray(b"x"), b""]
    want = b"".join(buffers)

    async def handler(reader: asyncio.StreamReader, transport: TlsTransport) -> bytes:
        got = await reader.readexactly(len(up))
        await transport.send(buffers)
        await transport.send([b"next"])
        return got

    def client(sock: ssl.SSLSocket) -> bytes:
        sock.sendall(up)
        return receive(sock, len(want) + 4)

    async def main(client_context: ssl.SSLContext) -> None:
        served = Served(contexts[0], handler)
        server = await served.start()
        sock = await _in_thread(_client, client_context, served.port)
        received = await _in_thread(client, sock)
        assert await served.outcomes.get() == up
        assert received == want + b"next"
        sock.close()
        server.close()
        assert not served.loop_errors

    asyncio.run(main(contexts[1]))
    asyncio.run(main(contexts[2]))


def test_the_peers_end_ends_the_stream(contexts: Contexts) -> None:
    """Bytes then close_notify, or bytes then the socket's end without it (what many
    clients do): the reader gets the bytes, then the end of its stream."""

    async def handler(reader: asyncio.StreamReader, _: TlsTransport) -> bytes:
        return await reader.read()  # to the end

    async def main() -> None:
        served = Served(contexts[0], handler)
        server = await served.start()
        for notify in (True, False):
            sock = await _in_thread(_client, contexts[1], served.port)
            sock.sendall(b"hello" * 1000)
            if notify:
                plain = await _in_thread(sock.unwrap)  # close_notify, and the server's
            else:  # the socket's end; what the server sent read, so the close is no reset
                sock.shutdown(socket.SHUT_WR)  # (the SSLSocket is a plain socket after)
                await _in_thread(receive, sock, 1 << 30)
                plain = sock
            plain.close()
            assert await served.outcomes.get() == b"hello" * 1000
        server.close()
        assert not served.loop_errors

    asyncio.run(main())


def _handshake(context: ssl.SSLContext, sock: socket.socket
               ) -> tuple[ssl.SSLObject, ssl.MemoryBIO, list[bytes]]:
    """A client's side of a real handshake over `sock`, driven through memory BIOs (so
    its records can then be sent altered): the TLS object, its outgoing BIO and the
    flights it sent."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    flights: list[bytes] = []
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            if outgoing.pending:
                flights.append(outgoing.read())
                sock.sendall(flights[-1])
            data = sock.recv(1 << 16)
            assert data
            incoming.write(data)
    if outgoing.pending:
        flights.append(outgoing.read())
        sock.sendall(flights[-1])
    return tls, outgoing, flights


def _exchange(port: int, context: ssl.SSLContext | None, parts: list[bytes],
              rst: bool) -> list[bytes]:
    """On a new connection: a real handshake (unless `context` is None), then `parts` as
    raw bytes, then the end of the stream (a reset if `rst`), reading what comes back.
    The flights of the handshake."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    flights: list[bytes] = []
    try:
        if context is not None:
            _, _, flights = _handshake(context, sock)
        for part in parts:
            sock.sendall(part)
        if not rst:
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 16):
                pass
    except OSError:
        pass  # the server may reset a connection it refused
    finally:
        if rst:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
        sock.close()
    return flights


def _record(context: ssl.SSLContext, port: int) -> tuple[bytes, list[bytes]]:
    """A client's encrypted record of b"ping" (and the flights of its handshake), from a
    connection the server answers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    tls, outgoing, flights = _handshake(context, sock)
    tls.write(b"ping")
    record = outgoing.read()
    sock.sendall(record)
    sock.shutdown(socket.SHUT_WR)
    while sock.recv(1 << 16):
        pass
    sock.close()
    return record, flights


def _mutants(parts: list[bytes], rng: random.Random) -> list[bytes]:
    """`parts` with one to four bytes changed."""
    out = [bytearray(p) for p in parts]
    for _ in range(rng.randint(1, 4)):
        part = out[rng.randrange(len(out))]
        part[rng.randrange(len(part))] ^= rng.randrange(1, 256)
    return [bytes(p) for p in out]


def test_bad_bytes_end_only_their_connection(contexts: Contexts) -> None:
    """Before the handshake ends: a plaintext Kafka frame, a ClientHello cut short, random
    bytes, 150 mutations of a real client's flights. After it: a garbage record, a record
    cut short, a huge record length, plaintext, 150 mutations of a real record. Each
    connection ends with an OSError or the end of its stream, nothing reaches the loop's
    exception handler, and a good client is served after them all."""
    frame = b"\x00\x00\x00\x0e\x00\x12\x00\x03\x00\x00\x00\x01\x00\x01t\x00\x011\x00"

    async def handler(reader: asyncio.StreamReader, _: TlsTransport) -> bytes:
        return await reader.readexactly(4)

    async def main() -> None:
        served = Served(contexts[0], handler)
        server = await served.start()
        record, flights = await _in_thread(_record, contexts[1], served.port)
        assert await served.outcomes.get() == b"ping"
        rng = random.Random(25)
        before = [[frame], [flights[0][:50]], [flights[0][:-1]], [os.urandom(1000)],
                  [b"\x16\x03\x01\xff\xff" + os.urandom(300)],
                  *(_mutants(flights, rng) for _ in range(150))]
        after = [[b"\x17\x03\x03\x00\x40" + os.urandom(64)], [record[:-3]],
                 [b"\x17\x03\x03\xff\xff" + os.urandom(100)], [frame],
                 *(_mutants([record], rng) for _ in range(150))]
        cases = [(None, parts) for parts in before] + [(contexts[1], p) for p in after]
        for i, (context, parts) in enumerate(cases):
            await _in_thread(_exchange, served.port, context, parts, i % 2 == 1)
            outcome = await served.outcomes.get()
            assert isinstance(outcome, ENDINGS), (i, outcome)
        assert not served.loop_errors
        sock = await _in_thread(_client, contexts[1], served.port)  # still served
        sock.sendall(b"good")
        assert await served.outcomes.get() == b"good"
        sock.close()
        server.close()

    asyncio.run(main())


def test_a_peer_gone_mid_reply_is_a_connection_error(contexts: Contexts) -> None:
    """The client resets the connection while a large reply waits for room: the sender
    gets a ConnectionError instead of waiting forever."""

    async def handler(_: asyncio.StreamReader, transport: TlsTransport) -> None:
        for _mib in range(200):  # 200 MiB: more than the socket buffers hold
            await transport.send([b"x" * (1 << 20)])

    async def main() -> None:
        served = Served(contexts[0], handler)
        server = await served.start()
        sock = await _in_thread(_client, contexts[1], served.port)
        await _in_thread(sock.recv, 1)  # the reply has started
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
        sock.close()  # RST
        assert isinstance(await served.outcomes.get(), ConnectionError)
        server.close()
        assert not served.loop_errors

    asyncio.run(main())


def _tls_streams(serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                 loop: asyncio.AbstractEventLoop, scratch: Scratch) -> TlsConnection:
    """A new connection's protocol: TLS under a StreamReaderProtocol, so `serve` gets a
    reader and a writer (the writer's transport a TlsTransport)."""
    reader = asyncio.StreamReader(loop=loop)
    return TlsConnection(asyncio.StreamReaderProtocol(reader, serve, loop=loop), loop, scratch)
