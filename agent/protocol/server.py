"""The asyncio server: frames, dispatch through the one table, ordered replies, limits,
shutdown.

A frame is a 4-byte big-endian size and that many bytes. A size above
socket.request.max.bytes, a truncated frame, bytes that do not decode (every length is
checked against the frame before kio reads it: bounds.py), or an unknown API key or version
close THAT connection only (as Kafka does); an unsupported ApiVersions version gets the v0
error response UNSUPPORTED_VERSION with the supported list, so the client can retry with one
it has. Requests on one connection are read and dispatched one after the other and answered
in order; a Produce's reply waits for its flush while the next requests are read (up to
MAX_IN_FLIGHT replies), and nothing here blocks other connections (blocking work runs in the
thread pool). A connection is a Protocol: frames are parsed in the callback that brings
their bytes and each handler runs there up to its answer or its first suspension (then it
is stepped on from its awaited futures' callbacks, the frames behind it waiting), and the
ready replies are written there, together, when the connection's sender has nothing in
hand: a small request arriving alone costs one callback, not a task's wake-ups for reading
and for writing (bench/loop_floor.py measures the difference). Handlers answer the
failures they meet (a store outage, a topic deleted meanwhile) with their API's error
codes; one that escapes a handler closes that connection,
as does a reply that cannot be written (the replies behind it are dropped, and the
connection ends even if its reply queue is full).

Limits (agent settings, Kafka's names where Kafka has one): the bytes of requests read and
not yet answered, per connection and in all (queued.max.request.bytes): past either, the
server reads no further frame on that connection until replies free room (backpressure, as
Kafka mutes a channel when its memory pool is empty), though a connection with nothing
pending may always read one frame when nothing is queued at all, so the agent holds at most
max(queued.max.request.bytes, socket.request.max.bytes) of requests (and each connection
at most HOLD_BYTES and one socket read, 256 KiB, behind them). A frame must arrive
whole within request.read.timeout.ms of its first byte; a connection with nothing pending
that sends nothing for connections.max.idle.ms is closed (a sweep checks both); connections
past max.connections, or max.connections.per.ip from one address, are closed as they are
accepted (Kafka's acceptor instead waits for a slot: a client retries either way). Every
refusal and close is counted by reason and logged in one rate-limited line (refusals.py).

Shutdown (SIGTERM/SIGINT): stop accepting, stop reading new requests (connections waiting
for a request are dropped at once, the others after the request they are reading), flush the
agent, answer every request already read, close. A crash at any point loses only records
that were never acked; acked ones are committed (the agent's write-path guarantee).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import functools
import logging
import resource
import signal
import time
from collections.abc import Callable, Coroutine, Sequence
from inspect import iscoroutine
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

import telemetry
from agent.config import AgentConfig
from agent.listeners import Listener, endpoints_text
from agent.principals import NoMatchingRule
from agent.producer import Agent
from metadata import MetadataStore
from metadata.notify import CommitWatcher
from objectstore import ObjectStore

from .apis import API_VERSIONS, TABLE, api_versions
from .authenticator import AUTH, AUTHENTICATE, Authenticator, SaslService
from .bounds import walker
from .cache import SegmentCache
from .codec import FRAME, PREFIX, Buffer, Builder, RawToken, decode_request, encode_response
from .context import PEER, THROTTLE, EffectiveSetting, ServerContext, Throttle
from .error_responses import error_response
from .errors import ProtocolError
from .health import AgentMetrics
from .refusals import Refusals
from .registry import Registration
from .session import SESSION, Session
from .timers import offsets_expiry, producer_expiry, quota_refresh, transactions_sweep
from .tls import Tls, certificate_principal
from .tlsconn import Scratch, TlsConnection, TlsTransport
from .writev import send_buffers, write_now

log = logging.getLogger(__name__)

# Replies queued per connection before it stops reading. Produce replies wait for the flush
# (250 ms by default) and librdkafka pipelines a small request per linger.ms (5 ms) per
# broker without limit: at 32, reading stalled and acks came seconds late. The records of
# queued produces are bounded by buffer.memory, not by this count.
MAX_IN_FLIGHT = 4096
SHUTDOWN_GRACE_S = 30.0
# What a connection may hold unread behind a request whose handler runs (suspended), or
# before its TLS handshake is done: then it stops reading until the handler answers.
HOLD_BYTES = 64 * 1024
# How often the sweep looks for idle and slow connections: a quarter of the shorter of the
# two limits, within these bounds.
SWEEP_MIN_S, SWEEP_MAX_S = 0.01, 1.0


@functools.cache
def builder(api_key: int, version: int) -> Builder:
    return Builder(api_key, version)


Item = tuple[int, int, Any]  # (request bytes, correlation id, reply or its awaitable)


class _Unsent:
    """What is left of replies written at once that the socket did not take whole (the
    sender writes it), and the bytes of the requests answered in it after the first."""

    __slots__ = ("sizes", "views")

    def __init__(self, views: list[memoryview], sizes: list[int]) -> None:
        self.views, self.sizes = views, sizes


class _Connection(asyncio.Protocol):
    """One client connection: its frames parsed from the bytes as they arrive and
    dispatched one at a time in order, each in the callback that completed it (a handler
    that answers without suspending costs no task; one that suspends goes on as
    `_Handler`, and the frames behind it wait), its replies written in request order by
    its sender task (or at once, when the sender has nothing in hand and they are ready)."""

    def __init__(self, server: Server, listener: Listener) -> None:
        self.server = server
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer: object = None
        self.ip = ""
        self.auth: Authenticator | None = None  # SASL listeners: the authentication state
        self.context = contextvars.copy_context()  # the handlers' (its session, its quota)
        self.throttle = Throttle()
        self.buffer = bytearray()  # received and not yet dispatched
        self.fd = -1  # a plain socket's descriptor (replies written at once); -1: TLS
        self.ready = False  # reading (a TLS listener's: once the handshake is done)
        self.busy = False  # a request's handler suspended (`self.handler`)
        self.held = False  # reading paused here
        self.ended = False  # reads and dispatches nothing more
        self.finished = False  # the sender was told the end
        self.eof = False  # the client sent its last byte
        self.last: int | None = None  # shutdown: frames it may still dispatch
        self.processing = False
        self.scheduled = False  # a `_process` call is scheduled
        self.waits_for_room = False
        self.unmute: asyncio.TimerHandle | None = None
        self.replies: collections.deque[Item | None] = collections.deque()  # None: the end
        # Ready replies to write at once, together, when the frames at hand are dispatched
        # (the sender has nothing in hand), and their requests' bytes.
        self.batch: list[Buffer] = []
        self.batch_sizes: list[int] = []
        self.parked: asyncio.Future[None] | None = None  # the sender, waiting for a reply
        self.sender: asyncio.Task[None] | None = None
        self.handler: _Handler | None = None  # a suspended request's
        self.closed: asyncio.Future[None] = self.loop.create_future()  # sender done
        # What the limits look at (the sweep, queued bytes).
        self.idle = True  # waiting for the first byte of a frame
        self.started: float | None = None  # when the frame being read began (monotonic)
        self.active = time.monotonic()  # the last frame read or reply written
        self.pending = 0  # requests read and not yet answered
        self.queued = 0  # their bytes
        self.reason: str | None = None  # why the server is closing it (the sweep)

    # ------------------------------------------------------------------ the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        server = self.server
        peer = self.peer = transport.get_extra_info("peername")
        ip = self.ip = peer[0] if isinstance(peer, tuple) else ""
        if not server._admit(ip, peer):
            self.ended = True
            self.closed.set_result(None)
            transport.abort()  # nothing was read: no reason to linger
            return
        listener = self.listener
        if listener.sasl:
            assert server.ctx.sasl is not None
            self.auth = Authenticator(server.ctx.sasl, ip, time.monotonic())
        server._conns.add(self)
        server._per_ip[ip] = server._per_ip.get(ip, 0) + 1
        telemetry.connection_opened()
        server.refusals.say("opened", logging.DEBUG, "connection %s: opened", peer)
        self.context.run(self._session, listener)
        self.sender = self.loop.create_task(self._send())
        if listener.tls:
            self.idle, self.started = False, time.monotonic()  # the handshake's deadline
            handshake = self.loop.create_task(self._handshake())
            handshake.add_done_callback(self._handshaken)
            return
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1
        self.ready = True

    def _session(self, listener: Listener) -> None:
        AUTH.set(self.auth)
        PEER.set(f"/{self.ip}" if self.ip else "")
        THROTTLE.set(self.throttle)
        SESSION.set(Session(host=self.ip, listener=listener.name,
                            security_protocol=listener.protocol))

    def data_received(self, data: bytes) -> None:
        if self.ended:
            return
        self.buffer += data  # (a TLS connection's data is its scratch buffer: copied here)
        if self.ready and not self.busy:
            self._process()
        elif len(self.buffer) >= HOLD_BYTES:  # a handler runs: the frames behind it wait
            self._hold()

    def eof_received(self) -> bool:
        self.eof = True
        if self.ready:
            self._process()
        return True  # the replies of what was read still go out

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ended:
            return
        if not self.ready and self.listener.tls:
            return  # the handshake's task fails and says why
        if self.reason is not None:
            self.server._closed(self, self.peer)
        elif exc is not None:
            self.server.refusals.say("reset", logging.INFO, "connection %s: %s", self.peer,
                                     exc)
        else:
            self._said_end()
        self._end()

    # ------------------------------------------------------------------ reading

    def _process(self) -> None:
        """Dispatch the whole frames received, in order, while nothing holds this
        connection back; then read on, or pause reading until what holds it lets go."""
        if self.processing:
            return  # the running call looks again before it returns
        self.processing = True
        try:
            self._frames()
        except ProtocolError as exc:
            self.server.refusals.refused(exc.reason, "connection %s: %s, closing", self.peer,
                                         exc)
            self._end()
        finally:
            self.processing = False
            if self.batch_sizes:
                self._write_batch()

    def _frames(self) -> None:
        server, config, buffer = self.server, self.server.config, self.buffer
        assert self.transport is not None
        while not self.busy and not self.ended:
            if self.last == 0:  # shutdown
                self._end()
                return
            if self.transport.is_closing():  # its replies cannot be written
                self._end()
                return
            if self.pending >= MAX_IN_FLIGHT:  # replies to be written first
                self._hold()
                return
            now = time.monotonic()
            if (muted := self.throttle.until - now) > 0:  # a client quota
                self.idle, self.started = not buffer, None
                self._hold()
                if self.unmute is None:
                    self.unmute = self.loop.call_later(muted, self._unmuted)
                return
            if len(buffer) < FRAME.size:
                self.idle = not buffer
                self._read_on(now)
                return
            self.idle = False
            size = FRAME.unpack_from(buffer)[0]
            auth = self.auth
            if auth is not None and not auth.authenticated and \
                    size > config.sasl_server_max_receive_size:
                raise ProtocolError(f"frame of {size} bytes before authentication"
                                    " (sasl.server.max.receive.size"
                                    f" {config.sasl_server_max_receive_size})",
                                    "frame_too_large")
            if not PREFIX.size <= size <= config.socket_request_max_bytes:
                raise ProtocolError(f"frame of {size} bytes (socket.request.max.bytes"
                                    f" {config.socket_request_max_bytes})", "frame_too_large")
            if not server._has_room(self, size):
                self._wait_for_room(size)
                return
            end = FRAME.size + size
            if len(buffer) < end:
                self._read_on(now)
                return
            with memoryview(buffer) as view:
                payload = view[FRAME.size:end].tobytes()
            del buffer[:end]
            self.started, self.active = None, now
            server._take(self, size)
            if self.last is not None:
                self.last -= 1
            self._dispatch(payload, size)

    def _read_on(self, now: float) -> None:
        """Wait for more of the frame (its deadline runs from its first byte); at the
        client's end, end."""
        if self.eof:
            if self.buffer:
                self.server.refusals.say("truncated", logging.INFO,
                                         "connection %s: closed by the client mid-frame",
                                         self.peer)
            else:
                self._said_end()
            self._end()
            return
        if self.buffer and self.started is None:
            self.started = now
        if self.held and self.transport is not None and not self.transport.is_closing():
            self.held = False
            self.transport.resume_reading()

    def _hold(self) -> None:
        """Read nothing more for now (the transport's buffers fill, then the client's)."""
        if not self.held and self.transport is not None and not self.transport.is_closing():
            self.held = True
            self.transport.pause_reading()

    def _wait_for_room(self, size: int) -> None:
        server = self.server
        self.started = None  # the wait is the server's, not the client's
        self._hold()
        if not self.waits_for_room:
            self.waits_for_room = True
            server._waiting.add(self)
            server.refusals.say("backpressure", logging.DEBUG, "connection %s: waiting for"
                                " %d queued bytes to be answered (%d on this connection)",
                                self.peer, server._queued, self.queued)

    def room(self) -> None:
        """Queued bytes were freed (or the server is stopping): look again, soon."""
        self.waits_for_room = False
        self.soon()

    def soon(self) -> None:
        """`_process` from the loop, once, whatever asked for it (never from inside)."""
        if not self.scheduled and not self.ended:
            self.scheduled = True
            self.loop.call_soon(self._scheduled)

    def _scheduled(self) -> None:
        self.scheduled = False
        if self.ready:
            self._process()

    def _unmuted(self) -> None:
        self.unmute = None
        self._process()

    def stop_reading(self) -> None:
        """Shutdown: dispatch no new request. One waiting for a frame ends now; one reading
        a frame ends after it; one whose handler runs, or in its handshake, after that."""
        if self.ended:
            return
        reading = self.ready and not self.busy and bool(self.buffer)
        self.last = 1 if reading and self.throttle.until <= time.monotonic() else 0
        self.soon()

    def _said_end(self) -> None:
        self.server.refusals.say("closed", logging.DEBUG, "connection %s: closed by the"
                                 " client", self.peer)

    def _end(self) -> None:
        """Read and dispatch nothing more; the sender writes what was read, then closes."""
        if self.ended:
            return
        self.ended = True
        self._hold()
        if self.unmute is not None:
            self.unmute.cancel()
            self.unmute = None
        self.server._waiting.discard(self)
        self._finish()

    def _finish(self) -> None:
        """Tell the sender the end, once no handler is running (its reply comes first)."""
        if not self.finished and not self.busy:
            self.finished = True
            self._queue(None)

    # ------------------------------------------------------------------ requests

    def _dispatch(self, payload: bytes, size: int) -> None:
        """Run one request's handler in this connection's context up to its answer, or
        to its first suspension (then a task finishes it and the frames behind it wait)."""
        auth = self.auth
        coro: Coroutine[Any, Any, tuple[int, Any]]
        if auth is not None and auth.raw and auth.state == AUTHENTICATE:
            coro = self.server._raw_token(auth, payload)
        else:
            coro = self.server._dispatch(payload, auth)
        try:
            step = self.context.run(coro.send, None)
        except StopIteration as answered:
            self._answer(size, answered.value)
            return
        except Exception as exc:
            self.server._release(self, size)
            self._failed(exc)
            return
        self.busy = True
        self.handler = _Handler(self, coro, size)
        self.handler.wait(step)

    def _handled(self, handler: _Handler, answer: tuple[int, Any] | None,
                 failure: BaseException | None) -> None:
        """A suspended request's handler is done (its answer, or how it failed)."""
        self.busy, self.handler = False, None
        if answer is None:
            self.server._release(self, handler.size)
            self._failed(failure or RuntimeError("a handler answered nothing"))
            self._finish()
            return
        self._answer(handler.size, answer)
        if self.ended:
            self._finish()
        elif self.ready:
            self._process()

    def _answer(self, size: int, answer: tuple[int, Any]) -> None:
        correlation_id, reply = answer
        if self.ended:  # the connection was lost meanwhile: nobody to answer
            self.server._release(self, size)
            _drop(reply)
            return
        if self.parked is not None and not self.replies and self.fd >= 0 and \
                not _awaitable(reply):
            # The sender has nothing in hand (every reply before this one is written):
            # this one goes out without waking it, with the others answered from the
            # frames at hand (one write for a pipelined burst, `_write_batch`).
            if reply is None:  # acks=0
                self.server._release(self, size)
                return
            try:
                self.batch += encode_response(correlation_id, reply)
            except Exception:  # the sender meets it again and closes the connection
                pass
            else:
                self.batch_sizes.append(size)
                self._closing_after()
                return
        self._queue((size, correlation_id, reply))
        self._closing_after()

    def _write_batch(self) -> None:
        """Write the batched replies now; what the socket does not take goes to the
        sender (as does all of it if the connection is closing or fails)."""
        parts, sizes = self.batch, self.batch_sizes
        self.batch, self.batch_sizes = [], []
        rest: list[memoryview] = [memoryview(b) for b in parts]
        if self.transport is not None and not self.transport.is_closing() and \
                not self.transport.get_write_buffer_size():
            try:  # (not contextlib.suppress: three Python calls, per write)  # noqa: SIM105
                rest = write_now(self.fd, parts)
            except OSError:  # the sender meets it again and closes
                pass
        if rest:
            self._queue((sizes[0], -1, _Unsent(rest, sizes[1:])))
            return
        for size in sizes:
            self.server._release(self, size)

    def _closing_after(self) -> None:
        """A SASL exchange that ends the connection after this answer: read no more."""
        auth = self.auth
        if auth is not None and auth.close_after_reply is not None and not self.ended:
            self.server.refusals.refused(auth.close_after_reply, "connection %s: SASL %s,"
                                         " closing after the answer", self.peer,
                                         auth.close_after_reply, level=logging.DEBUG)
            self._end()

    def _failed(self, exc: BaseException) -> None:
        """A request the connection cannot go on after: say why, end it."""
        server = self.server
        if isinstance(exc, ProtocolError):
            server.refusals.refused(exc.reason, "connection %s: %s, closing", self.peer, exc)
        elif isinstance(exc, ConnectionError):
            if self.reason is not None:
                server._closed(self, self.peer)
            else:
                server.refusals.say("reset", logging.INFO, "connection %s: %s", self.peer,
                                    exc)
        elif not isinstance(exc, asyncio.CancelledError):
            telemetry.connection_refused("handler_error")
            log.error("connection %s: handler failed, closing", self.peer, exc_info=exc)
        self._end()

    # ------------------------------------------------------------------ TLS

    async def _handshake(self) -> str | None:
        """TLS with the context current now, within request.read.timeout.ms (the sweep's
        frame deadline); on an SSL listener, the client certificate's principal (None on
        SASL_SSL: SASL says who). ProtocolError: refused (a failed handshake, a subject no
        mapping rule takes)."""
        tls, transport = self.server.tls, self.transport
        assert tls is not None and isinstance(transport, TlsTransport)
        try:
            await transport.handshake(tls.context)
        except (OSError, asyncio.IncompleteReadError) as exc:
            why = "not finished within request.read.timeout.ms" if self.reason else exc
            raise ProtocolError(f"TLS handshake failed ({why})", "tls_handshake") from None
        session = transport.get_extra_info("ssl_object")
        self.server.refusals.say("tls", logging.DEBUG, "connection %s: TLS %s, %s", self.peer,
                                 session.version(), (session.cipher() or ("",))[0])
        if self.listener.sasl:
            return None
        try:
            principal = certificate_principal(session, tls.mapper)
        except NoMatchingRule as exc:
            raise ProtocolError(str(exc), "ssl_principal") from None
        self.server.refusals.say("authenticated", logging.DEBUG, "connection %s: TLS,"
                                 " principal %s", self.peer, principal)
        return principal

    def _handshaken(self, task: asyncio.Task[str | None]) -> None:
        if task.cancelled():
            self._end()
            return
        if (exc := task.exception()) is not None:
            self._failed(exc)
            return
        if (principal := task.result()) is not None:
            self.context.run(SESSION.set, self.context[SESSION].with_principal(principal))
        self.idle, self.started, self.active = True, None, time.monotonic()
        self.ready = True
        self._process()

    # ------------------------------------------------------------------ replies

    def _queue(self, item: Item | None) -> None:
        if self.batch_sizes:  # the replies before it
            self._write_batch()
        self.replies.append(item)
        if (parked := self.parked) is not None:
            self.parked = None
            parked.set_result(None)

    async def _send(self) -> None:
        """Write replies in request order (awaiting the pending ones) until the end
        (None), each freeing its request's queued bytes once written. The replies already
        answered behind the one awaited go out in the same write (a flush answers a
        connection's pipelined Produces at once: one system call for all of them, not one
        each). If one cannot be written the connection is aborted, so its reading stops
        too (the client reconnects), and the replies still coming are dropped: taken off
        the queue all the same, freeing their bytes."""
        server, replies = self.server, self.replies
        transport = self.transport
        assert transport is not None
        failed = False
        try:
            while True:
                if not replies:
                    self.parked = self.loop.create_future()
                    await self.parked
                    continue
                item = replies.popleft()
                if item is None:
                    break
                size, correlation_id, reply = item
                sizes = [size]
                try:
                    if failed:
                        _drop(reply)
                        continue
                    if _awaitable(reply):
                        reply = await reply
                    parts: list[Buffer]
                    if isinstance(reply, _Unsent):
                        parts = list(reply.views)
                        sizes += reply.sizes
                    else:
                        parts = [] if reply is None else encode_response(correlation_id, reply)
                    while replies:  # the answered ones behind it join this write
                        ready = _answered(replies[0])
                        if ready is _NOT_READY:
                            break
                        after = replies.popleft()
                        assert after is not None
                        sizes.append(after[0])
                        if ready is not None:  # None: acks=0
                            parts += encode_response(after[1], ready)
                    if not parts:  # acks=0
                        continue
                    if isinstance(transport, TlsTransport):
                        await transport.send(parts)
                    else:
                        await send_buffers(transport, parts)
                except asyncio.CancelledError:
                    transport.abort()
                    raise
                except Exception as exc:
                    failed = True
                    transport.abort()
                    server.refusals.refused("reply_failed", "connection %s: reply not sent"
                                            " (%s), closing", self.peer, exc)
                finally:
                    for size in sizes:
                        server._release(self, size)
        finally:
            self.parked = None
            transport.close()  # the socket is closed however this ends (never left to the GC)
            server._forget(self)
            if not self.closed.done():
                self.closed.set_result(None)


class _Handler:
    """A request's handler coroutine that suspended, stepped on as a Task would step it,
    in its connection's context, but without one: from the done-callback of each future it
    awaits (no task to create and no loop turn for a first step, per long-poll)."""

    __slots__ = ("conn", "coro", "size", "waiting")

    def __init__(self, conn: _Connection, coro: Coroutine[Any, Any, tuple[int, Any]],
                 size: int) -> None:
        self.conn, self.coro, self.size = conn, coro, size
        self.waiting: asyncio.Future[Any] | None = None

    def wait(self, yielded: Any) -> None:
        """Go on when what the coroutine yielded (a future, as Task expects) is done."""
        if asyncio.isfuture(yielded) and yielded._asyncio_future_blocking:
            yielded._asyncio_future_blocking = False
            self.waiting = yielded
            yielded.add_done_callback(self._wake)
        elif yielded is None:  # a bare yield (asyncio.sleep(0)): on at the next turn
            self.conn.loop.call_soon(self.step)
        else:
            error = RuntimeError(f"a handler yielded {yielded!r}, not a future")
            self.conn.loop.call_soon(self.step, error)

    def _wake(self, _: asyncio.Future[Any]) -> None:
        self.waiting = None
        self.step()

    def step(self, error: BaseException | None = None) -> None:
        conn, coro = self.conn, self.coro
        try:
            if error is None:
                yielded = conn.context.run(coro.send, None)
            else:
                yielded = conn.context.run(coro.throw, error)
        except StopIteration as done:
            conn._handled(self, done.value, None)
        except (Exception, asyncio.CancelledError) as failure:
            conn._handled(self, None, failure)
        else:
            self.wait(yielded)

    def cancel(self) -> None:
        """Shutdown past its grace: the future it awaits is cancelled, so the handler
        sees CancelledError there, as in a cancelled task."""
        if self.waiting is not None:
            self.waiting.cancel()


class Server:
    """Serves the Kafka protocol on `listeners` for the agent in `ctx` (the limits are the
    agent's, across all of them)."""

    def __init__(self, ctx: ServerContext, listeners: Sequence[Listener]) -> None:
        ctx.apis = TABLE
        ctx.agent.set_room_listener(ctx.notify_room_threadsafe)
        self.ctx = ctx
        self.listeners = list(listeners)  # ports resolved by `start`
        self.config: AgentConfig = ctx.config  # the limits
        self._servers: list[asyncio.Server] = []
        self._conns: set[_Connection] = set()
        self._per_ip: dict[str, int] = {}
        self._queued = 0  # bytes of requests read and not yet answered, all connections
        self._waiting: set[_Connection] = set()  # for queued bytes to be answered
        self._sweep: asyncio.Task[None] | None = None
        self._stopping = False
        self.refusals = Refusals()
        # The TLS listeners' context (files read now: a bad one stops start-up), reloaded
        # by `_reload_tls` every ssl.reload.interval.ms and on `reload_tls` (SIGHUP).
        self.tls = Tls(ctx.config) if any(lst.tls for lst in listeners) else None
        if any(lst.sasl for lst in listeners):
            ctx.sasl = SaslService(ctx.config, ctx.metadata)
        self._reloader: asyncio.Task[None] | None = None
        self._reload_now = asyncio.Event()

    @property
    def host(self) -> str:
        """The first listener's host."""
        return self.listeners[0].host

    @property
    def port(self) -> int:
        """The first listener's port (bound: known after `start`)."""
        return self.listeners[0].port

    async def start(self) -> None:
        """Bind every listener and start accepting (port 0 picks a free port, advertised
        as bound: read `self.listeners` after)."""
        self.ctx.loop = asyncio.get_running_loop()
        for key, api in TABLE.items():  # every walker compiled before the first request
            for version in range(api.min_version, api.max_version + 1):
                walker(key, version)
        advertised = dict(self.ctx.advertised)
        for i, listener in enumerate(self.listeners):
            factory: Callable[[], asyncio.BaseProtocol]
            if listener.tls:
                factory = functools.partial(self._tls_connection, listener, Scratch())
            else:
                factory = functools.partial(_Connection, self, listener)
            server = await self.ctx.loop.create_server(factory, listener.host, listener.port)
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self.listeners[i] = dataclasses.replace(listener, port=port)
            host, advertised_port = advertised.get(listener.name, (listener.host, port))
            advertised[listener.name] = (host, advertised_port or port)
        self.ctx.advertised = advertised
        self._sweep = asyncio.create_task(self._sweeper())
        if self.tls is not None:
            self._reloader = asyncio.create_task(self._reload_tls(self.tls))

    def _tls_connection(self, listener: Listener, scratch: Scratch) -> TlsConnection:
        """A TLS listener's new connection: TLS under the connection's protocol."""
        assert self.ctx.loop is not None
        return TlsConnection(_Connection(self, listener), self.ctx.loop, scratch)

    def reload_tls(self) -> None:
        """Check the TLS files now (SIGHUP), not at the next interval."""
        self._reload_now.set()

    async def _reload_tls(self, tls: Tls) -> None:
        interval_s = self.config.ssl_reload_interval_ms / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reload_now.wait(), interval_s)
            self._reload_now.clear()
            await self.ctx.run(tls.reload_if_changed)

    async def stop(self) -> None:
        """Stop accepting and reading, flush, answer what was read, close connections."""
        self._stopping = self.ctx.stopping = True
        for server in self._servers:
            server.close()
        if self._sweep is not None:
            self._sweep.cancel()
        if self._reloader is not None:
            self._reloader.cancel()
        self._room()  # readers waiting for room read their frame and end
        self.ctx.notify_commit()  # long-polling fetches answer now
        self.ctx.notify_room()  # produces waiting for buffer.memory give up
        for conn in self._conns:
            conn.stop_reading()
        await self.ctx.run(self.ctx.agent.flush)
        if self._conns:
            conns = list(self._conns)
            await asyncio.wait([c.closed for c in conns], timeout=SHUTDOWN_GRACE_S)
            late = [c for c in conns if not c.closed.done()]
            for conn in late:  # past the grace: drop the connection, reap its tasks
                if conn.transport is not None:
                    conn.transport.abort()
                if conn.handler is not None:
                    conn.handler.cancel()
                if conn.sender is not None:
                    conn.sender.cancel()
            if late:  # the sender's finally closes the socket (never left to the GC)
                await asyncio.wait([c.closed for c in late], timeout=SHUTDOWN_GRACE_S)
        for server in self._servers:
            await server.wait_closed()

    # ------------------------------------------------------------------ connections

    def _admit(self, ip: str, peer: object) -> bool:
        """Whether a new connection is within max.connections and max.connections.per.ip
        (else it is counted and said, and the caller closes it)."""
        if len(self._conns) >= self.config.max_connections:
            self.refusals.refused("max_connections", "connection %s: refused, %d connections"
                                  " open (max.connections.total)", peer, len(self._conns))
            return False
        if self._per_ip.get(ip, 0) >= self.config.max_connections_per_ip:
            self.refusals.refused("max_connections_per_ip", "connection %s: refused, %d"
                                  " connections from %s (max.connections.per.ip)", peer,
                                  self._per_ip[ip], ip)
            return False
        return True

    def _forget(self, conn: _Connection) -> None:
        """A connection ended: its slot, and whatever it still had queued, are free."""
        self._conns.discard(conn)
        left = self._per_ip[conn.ip] - 1
        if left:
            self._per_ip[conn.ip] = left
        else:
            del self._per_ip[conn.ip]
        if conn.queued:  # replies never sent (the sender was reaped at shutdown)
            self._queued -= conn.queued
            conn.queued = conn.pending = 0
            self._room()
        telemetry.connection_closed()

    def _closed(self, conn: _Connection, peer: object) -> None:
        """Say why the sweep closed `conn` (idle: debug, as Kafka; a slow frame: info)."""
        if conn.reason == "idle":
            self.refusals.refused("idle", "connection %s: idle for %d ms"
                                  " (connections.max.idle.ms), closed", peer,
                                  self.config.connections_max_idle_ms, level=logging.DEBUG)
        elif conn.reason == "sasl_timeout":
            self.refusals.refused("sasl_timeout", "connection %s: not authenticated within %d"
                                  " ms (sasl.authentication.timeout.ms), closed", peer,
                                  self.config.sasl_authentication_timeout_ms)
        else:
            self.refusals.refused("read_timeout", "connection %s: frame not received within"
                                  " %d ms of its first byte (request.read.timeout.ms), closed",
                                  peer, self.config.request_read_timeout_ms)

    # ------------------------------------------------------------------ queued bytes

    def _has_room(self, conn: _Connection, size: int) -> bool:
        """Whether `conn` may read a frame of `size` bytes now: always when nothing is
        queued at all; else within queued.max.request.bytes, and within the per-connection
        cap if it has requests pending (one frame alone always fits)."""
        if self._queued == 0 or self._stopping:
            return True
        if self._queued + size > self.config.queued_max_request_bytes:
            return False
        return (conn.queued == 0
                or conn.queued + size <= self.config.queued_max_request_bytes_per_connection)

    def _take(self, conn: _Connection, size: int) -> None:
        conn.pending += 1
        conn.queued += size
        self._queued += size

    def _release(self, conn: _Connection, size: int) -> None:
        """A request was answered (or will never be): its bytes free room."""
        conn.pending -= 1
        conn.queued -= size
        self._queued -= size
        conn.active = time.monotonic()
        if conn.pending == MAX_IN_FLIGHT - 1:
            conn.soon()  # it may read again
        if self._waiting:
            self._room()

    def _room(self) -> None:
        """Queued bytes were freed: the connections waiting for room look again."""
        waiting, self._waiting = self._waiting, set()
        for conn in waiting:
            conn.room()

    # ------------------------------------------------------------------ idle and slow

    async def _sweeper(self) -> None:
        """Close the connections idle past connections.max.idle.ms and those whose frame
        did not arrive within request.read.timeout.ms; sum up suppressed log lines."""
        idle_s = self.config.connections_max_idle_ms / 1000
        read_s = self.config.request_read_timeout_ms / 1000
        auth_s = self.config.sasl_authentication_timeout_ms / 1000
        period = min(max(min(idle_s, read_s, auth_s) / 4, SWEEP_MIN_S), SWEEP_MAX_S)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self._conns):
                if conn.reason is not None or conn.transport is None:
                    continue
                if conn.started is not None and now - conn.started > read_s:
                    conn.reason = "read_timeout"
                elif conn.idle and not conn.pending and now - conn.active > idle_s:
                    conn.reason = "idle"
                elif (conn.auth is not None and not conn.auth.authenticated
                      and now - conn.auth.accepted > auth_s):
                    conn.reason = "sasl_timeout"
                else:
                    continue
                conn.transport.abort()  # it sees the end, says conn.reason
            self.refusals.flush()

    async def _raw_token(self, auth: Authenticator, token: bytes) -> tuple[int, RawToken]:
        """The answer to a SASL token sent raw (after a v0 SaslHandshake); a failure closes
        the connection unanswered (v0 has no error frame), after its pacing delay."""
        outcome, delay = await self.ctx.run(auth.authenticate, token)
        if outcome.error is not None:
            await asyncio.sleep(delay)
            raise ProtocolError(outcome.error, "sasl_failed")
        if auth.authenticated:
            SESSION.set(SESSION.get().with_principal(auth.session_principal()))
        return -1, RawToken(outcome.token)

    async def _dispatch(self, payload: bytes,
                        auth: Authenticator | None = None) -> tuple[int, Any]:
        """(correlation id, reply) of one request; ProtocolError closes the connection (a
        request a SASL connection may not send yet: before it is decoded, as Kafka). One
        out of turn in a SASL exchange (`Authenticator.illegal`) is answered
        ILLEGAL_SASL_STATE in its API's shape once decoded, and the connection closes."""
        key, version, correlation_id = PREFIX.unpack_from(payload)
        illegal = None
        if auth is not None:
            why = auth.refusal(key, time.monotonic())
            if why is not None:
                raise ProtocolError(why, "sasl_expired" if "expired" in why else "sasl_state")
            illegal = auth.illegal(key)
        api = TABLE.get(key)
        if key == API_VERSIONS and (api is None or not api.supports(version)):
            if auth is not None and illegal is not None:  # Kafka parses it as v0
                return correlation_id, self._illegal(auth, illegal, API_VERSIONS, 0, None)
            return correlation_id, api_versions.response(
                self.ctx, builder(API_VERSIONS, 0), ErrorCode.unsupported_version)
        if api is None or not api.supports(version):
            raise ProtocolError(f"unsupported API key {key} version {version}",
                                "unsupported_version")
        header, request = decode_request(payload, key, version)
        if auth is not None:
            if illegal is not None:
                return correlation_id, self._illegal(auth, illegal, key, version, request)
            if key == API_VERSIONS and not auth.authenticated:
                auth.versions_answered = True
        telemetry.request(api.name)
        reply = await api.handler(self.ctx, header, request, builder(key, version))
        return correlation_id, reply

    def _illegal(self, auth: Authenticator, why: str, key: int, version: int,
                 request: Any) -> Entity:
        """ILLEGAL_SASL_STATE for a request out of turn in a SASL exchange, in its API's
        response; the connection closes after it."""
        log.info("connection from %s: %s, answered ILLEGAL_SASL_STATE and closing", auth.ip,
                 why)
        auth.close_after_reply = "sasl_state"
        return error_response(key, version, request, ErrorCode.illegal_sasl_state)


_NOT_READY = object()


def _awaitable(reply: object) -> bool:
    """Whether a handler's reply is to be awaited (a future, a coroutine): its type has
    `__await__`, what makes an awaitable (collections.abc.Awaitable's own test, without the
    ABC's isinstance machinery that inspect.isawaitable goes through for every ready reply:
    three Python calls)."""
    return hasattr(type(reply), "__await__")


def _answered(item: Item | None) -> Any:
    """A queued reply's response if it is already answered (None: no response), else
    _NOT_READY: not resolved yet, failed (left to the sender's usual path, which closes
    the connection after the replies before it), or an awaitable other than a future."""
    if item is None:
        return _NOT_READY
    reply = item[2]
    if not _awaitable(reply):
        return reply
    if asyncio.isfuture(reply) and reply.done() and not reply.cancelled() and (
            reply.exception() is None):
        return reply.result()
    return _NOT_READY


def _drop(reply: Any) -> None:
    """Let go of a reply that will not be sent (a pending Produce's stops waiting)."""
    if asyncio.isfuture(reply):
        reply.cancel()
    elif iscoroutine(reply):
        reply.close()


async def _check_group_leases(ctx: ServerContext) -> None:
    """Every broker.heartbeat.interval.ms, drop the groups whose lease moved elsewhere
    (this agent was paused past its session and another took them over)."""
    interval_s = ctx.metadata.config.broker_heartbeat_interval_ms / 1000
    while True:
        await asyncio.sleep(interval_s)
        try:
            await ctx.groups.check_leases()
        except Exception:
            log.exception("checking group leases failed (retrying)")


def open_files(wanted: int) -> int:
    """Raise this process's soft limit on open files to `wanted`, within the hard limit;
    the soft limit after (RLIM_INFINITY: none)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


def _descriptors_for(connections: int) -> None:
    """Raise the soft limit on open files toward max.connections (+ the agent's own files);
    say so if it still falls short (accepts would then fail)."""
    want = connections + 1024
    soft = open_files(want)
    if soft != resource.RLIM_INFINITY and soft < want:
        log.warning("open files limited to %d (RLIMIT_NOFILE): fewer connections than"
                    " max.connections (%d) can be accepted", soft, connections)


async def serve(store: ObjectStore, metadata: MetadataStore, config: AgentConfig,
                settings: Sequence[EffectiveSetting] = ()) -> None:
    """Run `silt agent` until SIGTERM or SIGINT, then shut down cleanly. `settings`: the
    effective settings `config` came from, loaded by the entry point (BROKER resources of
    DescribeConfigs)."""
    listeners = config.listener_list()
    agent = Agent(store, metadata, config)
    ctx = ServerContext(agent=agent, metadata=metadata, store=store,
                        advertised=config.advertised(),
                        cache=SegmentCache(store, config.fetch_cache_bytes), config=config,
                        settings=tuple(settings))
    server = Server(ctx, listeners)
    _descriptors_for(config.max_connections)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload_tls)  # renewed certificates
    watcher: CommitWatcher | None = None
    expiry = producer_expiry(metadata)
    offsets = offsets_expiry(metadata)
    txn_sweep = transactions_sweep(ctx.txns, config.transaction_abort_interval_ms, loop)
    quotas = quota_refresh(metadata, ctx.refresh_quotas)
    leases: asyncio.Task[None] | None = None
    metrics = AgentMetrics(ctx)  # agent.metrics.listeners: /metrics, /healthz, /readyz
    try:
        metrics.start()
        await ctx.run(ctx.authz.start, metadata)  # the ACLs, before the first request
        await ctx.run(ctx.refresh_quotas)  # and the client quotas
        await server.start()
        # Other agents' commits (and this one's) wake this agent's long-polling fetches;
        # their ACL changes refresh this agent's authorizer.
        watcher = await ctx.run(metadata.watch_commits, ctx.notify_commit_threadsafe,
                                ctx.authz.changed if ctx.authz.enabled else None)
        ctx.states.hearing = watcher.hearing  # offsets kept while it hears every commit
        expiry.start()
        offsets.start()
        quotas.start()
        registration = ctx.registration = Registration(metadata, ctx.advertised)
        info = await ctx.run(registration.start)
        ctx.groups.adopt_soon()  # the groups this agent's id still leases load now
        txn_sweep.start()
        leases = asyncio.create_task(_check_group_leases(ctx))
        log.warning("silt agent %s (node %d) listening on %s, advertised as %s",
                    info.agent_id, info.node_id,
                    endpoints_text({lst.name: (lst.host, lst.port) for lst in server.listeners}),
                    endpoints_text(ctx.advertised))
        await stop.wait()
        log.warning("silt agent stopping: deregistering, flushing, answering in-flight"
                    " requests")
        # Deregistered first: clients refreshing metadata move to other agents while this
        # one drains. A crash instead leaves the row until broker.session.timeout.ms.
        await ctx.run(registration.stop)
        ctx.groups.close()  # members waiting on a rebalance go to another agent now
        await server.stop()
        await ctx.run(txn_sweep.stop)
        ctx.txns.close()
    finally:
        if ctx.registration is not None:
            await ctx.run(ctx.registration.stop)
        if leases is not None:
            leases.cancel()
        ctx.groups.close()
        await ctx.run(txn_sweep.stop)
        ctx.txns.close()
        await ctx.run(expiry.stop)
        await ctx.run(offsets.stop)
        await ctx.run(quotas.stop)
        await ctx.run(agent.close)
        if watcher is not None:
            await ctx.run(watcher.close)
        await ctx.run(ctx.authz.stop)
        ctx.pool.shutdown()
        metrics.stop()
        # Shutdown is under way: a repeated SIGTERM/SIGINT must not kill the process between
        # the loop's end and its exit (the default action once asyncio drops its handlers).
        loop.remove_signal_handler(signal.SIGHUP)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
