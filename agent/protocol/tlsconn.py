"""TLS on a listener's connections, driven here: an `ssl.SSLObject` between two MemoryBIOs
under the socket's transport, instead of asyncio's SSL protocol (`start_tls`).

Why: asyncio's SSL protocol (Python 3.11) encrypts each buffer of a reply as its own call
(a record per small buffer), reads the whole reply's ciphertext out in one piece, hands it
to the socket transport, which copies what the socket does not take into its buffer and
moves that buffer's tail after every send; incoming records are decrypted one at a time
into new 256 KiB bytes objects that are then joined. Here a reply is encrypted in pieces
of up to WRITE_PIECE bytes (a record per 16 KiB, small buffers joined first, large ones
sliced, not copied), each piece's ciphertext is sent with writev(2) from where it lies
before the next is encrypted (a full socket: wait until it is writable, through a
duplicate of its descriptor, as writev.py does); incoming ciphertext is received into one
buffer and decrypted into another, both allocated once per listener (each step uses them
within one callback of the event loop and copies out what it keeps: no connection holds
them across steps).

`TlsConnection` is the socket transport's protocol; the connection's own protocol (the
server's connection) sits on top of `TlsTransport`, its transport. The
socket is not read until the server calls `TlsTransport.handshake` with the context current
then (a connection refused by the limits never starts one). Every ciphertext byte leaves
through one queue in the order it was produced, whether a reply's, the handshake's or one
OpenSSL writes while reading (TLS 1.3 session tickets, a KeyUpdate answer), so records are
never reordered. Anything the peer sends that TLS refuses (a bad record, a plaintext Kafka
frame, an alert) ends the connection as a ConnectionError, never the agent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import ssl
from collections.abc import Iterator, Sequence
from typing import Any, cast

from .codec import Buffer
from .writev import IOV_MAX

READ_BUFFER = 256 * 1024  # ciphertext received, and plaintext decrypted, per step
WRITE_PIECE = 256 * 1024  # plaintext encrypted per SSLObject.write
SMALL = 16 * 1024  # buffers below one record's payload are joined before encryption


def _pieces(buffers: Sequence[Buffer]) -> Iterator[Buffer]:
    """The reply's bytes in order as pieces of at most WRITE_PIECE bytes: runs of small
    buffers joined (one record rather than one each), large ones sliced, not copied."""
    run: list[Buffer] = []
    size = 0
    for buffer in buffers:
        n = len(buffer)
        if not n:
            continue
        if n < SMALL and size + n <= WRITE_PIECE:
            run.append(buffer)
            size += n
            continue
        if run:
            yield run[0] if len(run) == 1 else b"".join(run)
            run, size = [], 0
        if n < SMALL:
            run, size = [buffer], n
            continue
        view = memoryview(buffer)
        for start in range(0, n, WRITE_PIECE):
            yield view[start:start + WRITE_PIECE]
    if run:
        yield run[0] if len(run) == 1 else b"".join(run)


def _lost(exc: BaseException | None = None) -> ConnectionError:
    """What a failed TLS connection reports to its reader and writer."""
    if isinstance(exc, ConnectionError):
        return exc
    return ConnectionResetError(f"TLS connection failed ({exc})" if exc else
                                "connection closed")


class Scratch:
    """A listener's receive and decrypt buffers, shared by its connections (one loop)."""

    def __init__(self) -> None:
        self.received = memoryview(bytearray(READ_BUFFER))
        self.plain = memoryview(bytearray(READ_BUFFER))


class TlsConnection(asyncio.BufferedProtocol):
    """The socket transport's protocol on a TLS listener: TLS records in and out, the
    plaintext to and from `app` (the connection's protocol) through
    `self.transport`."""

    def __init__(self, app: asyncio.Protocol, loop: asyncio.AbstractEventLoop,
                 scratch: Scratch) -> None:
        self.app = app
        self.loop = loop
        self.transport = TlsTransport(self)
        self.raw: asyncio.Transport | None = None
        self.ssl: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._received = scratch.received
        self._plain = scratch.plain
        self._handshake: asyncio.Future[None] | None = None
        self.app_paused = False  # the app paused reading
        self._ended = False  # the peer's close_notify or end of stream was passed on
        self.closing = False  # closed or aborted here
        self.failure: ConnectionError | None = None  # why TLS (or the socket) failed
        self.queue: collections.deque[memoryview] = collections.deque()  # ciphertext
        self._watch_fd = -1  # a duplicate of the socket's descriptor watched for writing
        self._drained: asyncio.Future[None] | None = None  # `send` waiting for the queue

    # ------------------------------------------------------------------ the socket side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.raw = transport
        transport.pause_reading()  # until the handshake starts
        self.app.connection_made(self.transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._received

    def buffer_updated(self, nbytes: int) -> None:
        self._incoming.write(self._received[:nbytes])
        if self._handshake is not None and not self._handshake.done():
            self._do_handshake()
        else:
            self._decrypt()

    def eof_received(self) -> bool:
        self._incoming.write_eof()
        if self._handshake is not None and not self._handshake.done():
            self._do_handshake()  # fails: the peer left mid-handshake
        else:
            self._decrypt()
        self._end()
        return False  # the socket transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.failure is None:
            self.failure = _lost(exc)
        self.closing = True
        self._stop_watching()
        self.queue.clear()
        gone = self.failure or ConnectionResetError("connection closed")
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(gone)
        self._wake(gone)
        self.app.connection_lost(self.failure)  # None: the reader sees the end

    def pause_writing(self) -> None:
        pass  # only the handshake's and closing bytes go through the socket transport

    def resume_writing(self) -> None:
        pass

    # ------------------------------------------------------------------ handshake

    async def handshake(self, context: ssl.SSLContext) -> None:
        """The server side of the TLS handshake with `context`; OSError if it fails."""
        assert self.raw is not None and self.ssl is None
        if self.raw.is_closing():
            raise ConnectionResetError("connection closed before the TLS handshake")
        self.ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshake = self.loop.create_future()
        self.raw.resume_reading()
        self._do_handshake()
        await self._handshake

    def _do_handshake(self) -> None:
        assert self.ssl is not None and self._handshake is not None
        try:
            self.ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            if self._incoming.eof:  # not expected: OpenSSL reports the end itself
                self._fail(ConnectionResetError("closed during the TLS handshake"))
            return
        except (ssl.SSLError, OSError) as exc:  # the alert, if any, goes out first
            self._flush()
            self._fail(exc)
            return
        self._handshake.set_result(None)
        self._flush()
        self._decrypt()  # records that came with the handshake's last flight

    # ------------------------------------------------------------------ reading

    def _decrypt(self) -> None:
        """Pass what can be decrypted to the app, up to its pause."""
        if self.ssl is None or self.app_paused or self._ended or self.failure \
                or self.closing:
            return
        plain = self._plain
        filled = 0
        try:
            while True:
                # with a buffer, read() returns the count (typeshed says bytes)
                n = cast(int, self.ssl.read(READ_BUFFER - filled, plain[filled:]))
                if not n:  # close_notify
                    self._deliver(filled)
                    self._end()
                    return
                filled += n
                if filled == READ_BUFFER:
                    self._deliver(filled)
                    filled = 0
                    if self.app_paused:
                        return
        except ssl.SSLWantReadError:
            self._deliver(filled)
        except ssl.SSLEOFError:  # the socket's end without close_notify: most clients'
            self._deliver(filled)
            self._end()
            return
        except (ssl.SSLError, OSError) as exc:  # a bad record, an alert
            self._deliver(filled)
            self._fail(exc)
            return
        if self._outgoing.pending:  # a session ticket, a KeyUpdate answer
            self._flush()

    def _deliver(self, n: int) -> None:
        if n:
            # the app copies what it keeps (the buffer is the next step's)
            self.app.data_received(cast(bytes, self._plain[:n]))

    def _end(self) -> None:
        """The peer is done sending: the app sees the end of its stream (once)."""
        if self._ended or self.failure is not None or self.closing:
            return
        self._ended = True
        self.app.eof_received()

    def pause_reading(self) -> None:
        self.app_paused = True
        if self.raw is not None and self.ssl is not None:
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        if not self.app_paused:
            return
        self.app_paused = False
        if self.raw is not None and self.ssl is not None and not self.raw.is_closing():
            self.raw.resume_reading()
            self.loop.call_soon(self._decrypt)  # what is already in the BIO

    # ------------------------------------------------------------------ writing

    async def send(self, buffers: Sequence[Buffer]) -> None:
        """Encrypt `buffers` in order and send them, waiting while the socket is full;
        ConnectionError if the connection failed or closed."""
        for piece in _pieces(buffers):
            if self.failure is not None:
                raise self.failure
            if self.ssl is None or self.raw is None or self.closing or self.raw.is_closing():
                raise ConnectionResetError("connection closed")
            try:
                self.ssl.write(piece)
            except (ssl.SSLError, OSError) as exc:
                self._fail(exc)
                raise _lost(exc) from None
            if not self._flush():
                if self.failure is not None:  # the socket refused the bytes
                    raise self.failure
                self._drained = self.loop.create_future()
                try:
                    await self._drained
                finally:
                    self._drained = None

    def write(self, data: Buffer) -> None:
        """Encrypt and queue `data` (the StreamWriter's write: not the reply path)."""
        if self.ssl is None or self.failure is not None or self.closing:
            return
        try:
            self.ssl.write(data)
        except (ssl.SSLError, OSError) as exc:
            self._fail(exc)
            return
        self._flush()

    def _flush(self) -> bool:
        """Queue what OpenSSL wrote and send what the socket takes; whether all went out
        (if not, the rest goes when the socket is writable)."""
        if self._outgoing.pending:
            self.queue.append(memoryview(self._outgoing.read()))
        if self.raw is None or self.failure is not None:
            return not self.queue
        if self.raw.get_write_buffer_size():  # closing: the transport's buffer has bytes
            self._hand_over()
            return True
        sock = self.raw.get_extra_info("socket")
        queue = self.queue
        while queue:
            try:
                sent = os.writev(sock.fileno(), list(_head(queue)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._fail(exc)
                return False
            while sent:
                size = len(queue[0])
                if sent < size:
                    queue[0] = queue[0][sent:]
                    break
                sent -= size
                queue.popleft()
        if queue:
            self._watch(sock)
            return False
        self._stop_watching()
        self._wake()
        return True

    def _watch(self, sock: socket.socket) -> None:
        if self._watch_fd < 0:
            # The loop refuses a writer on the transport's own descriptor.
            self._watch_fd = os.dup(sock.fileno())
            self.loop.add_writer(self._watch_fd, self._writable)

    def _stop_watching(self) -> None:
        if self._watch_fd >= 0:
            self.loop.remove_writer(self._watch_fd)
            os.close(self._watch_fd)
            self._watch_fd = -1

    def _writable(self) -> None:
        self._flush()

    def _wake(self, exc: ConnectionError | None = None) -> None:
        if self._drained is not None and not self._drained.done():
            if exc is None:
                self._drained.set_result(None)
            else:
                self._drained.set_exception(exc)

    def _hand_over(self) -> None:
        """Give the queued ciphertext to the socket transport (closing: it sends what it
        holds, in order, before it closes the socket)."""
        self._stop_watching()
        if self.raw is not None and self.queue:
            self.raw.write(b"".join(self.queue))
        self.queue.clear()

    # ------------------------------------------------------------------ closing

    def _fail(self, exc: BaseException) -> None:
        """The connection cannot go on: drop it; its reader and writer see `exc`."""
        if self.failure is not None:
            return
        self.failure = _lost(exc)
        self._stop_watching()
        self.queue.clear()
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(self.failure)
        self._wake(self.failure)
        if self.raw is not None:
            if self.raw.get_write_buffer_size():  # an alert to the peer: flush, then close
                self.raw.close()
            else:
                self.raw.abort()

    def close(self) -> None:
        """Send close_notify after what is queued, then close the socket."""
        if self.raw is None or self.closing or self.raw.is_closing():
            return
        self.closing = True
        if self.ssl is not None and self.failure is None and self._handshake is not None \
                and self._handshake.done() and not self._handshake.exception():
            with contextlib.suppress(ssl.SSLError, OSError):
                self.ssl.unwrap()  # queues close_notify (the peer's is not awaited)
            if self._outgoing.pending:
                self.queue.append(memoryview(self._outgoing.read()))
        self._hand_over()
        self._wake(ConnectionResetError("connection closed"))
        self.raw.close()

    def abort(self) -> None:
        """Drop the connection now, queued bytes and all."""
        self.closing = True
        self._stop_watching()
        self.queue.clear()
        self._wake(ConnectionResetError("connection aborted"))
        if self.raw is not None:
            self.raw.abort()


def _head(queue: collections.deque[memoryview]) -> Iterator[memoryview]:
    for i, view in enumerate(queue):
        if i == IOV_MAX:
            return
        yield view


class TlsTransport(asyncio.Transport):
    """The plaintext side of a `TlsConnection`: its app's transport."""

    def __init__(self, conn: TlsConnection) -> None:
        super().__init__()
        self._conn = conn

    async def handshake(self, context: ssl.SSLContext) -> None:
        """The TLS handshake with `context` (the server calls it once); OSError if it
        fails."""
        await self._conn.handshake(context)

    async def send(self, buffers: Sequence[Buffer]) -> None:
        """Encrypt and send a reply's buffers in order; ConnectionError if the peer is
        gone."""
        await self._conn.send(buffers)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        obj = self._conn.ssl
        if name == "ssl_object":
            return obj
        if name == "sslcontext":
            return None if obj is None else obj.context
        if name == "peercert":
            return None if obj is None else obj.getpeercert()
        if name == "cipher":
            return None if obj is None else obj.cipher()
        raw = self._conn.raw
        return default if raw is None else raw.get_extra_info(name, default)

    def is_closing(self) -> bool:
        conn = self._conn
        return conn.closing or conn.failure is not None or conn.raw is None \
            or conn.raw.is_closing()

    def close(self) -> None:
        self._conn.close()

    def abort(self) -> None:
        self._conn.abort()

    def is_reading(self) -> bool:
        return not self._conn.app_paused

    def pause_reading(self) -> None:
        self._conn.pause_reading()

    def resume_reading(self) -> None:
        self._conn.resume_reading()

    def write(self, data: Buffer) -> None:
        if data:
            self._conn.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return sum(len(v) for v in self._conn.queue)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        raise NotImplementedError("a TLS connection keeps its protocol")

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._conn.app
