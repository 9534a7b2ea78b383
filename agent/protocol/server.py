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
thread pool). Handlers answer the failures they meet (a store outage, a topic deleted
meanwhile) with their API's error codes; one that escapes a handler closes that connection,
as does a reply that cannot be written (the replies behind it are dropped, and the
connection ends even if its reply queue is full).

Limits (agent settings, Kafka's names where Kafka has one): the bytes of requests read and
not yet answered, per connection and in all (queued.max.request.bytes): past either, the
server reads no further frame on that connection until replies free room (backpressure, as
Kafka mutes a channel when its memory pool is empty), though a connection with nothing
pending may always read one frame when nothing is queued at all, so the agent holds at most
max(queued.max.request.bytes, socket.request.max.bytes) of requests. A frame must arrive
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
import contextlib
import dataclasses
import functools
import logging
import resource
import signal
import time
from collections.abc import Sequence
from inspect import isawaitable, iscoroutine
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
from .codec import FRAME, PREFIX, Builder, RawToken, decode_request, encode_response
from .context import PEER, THROTTLE, EffectiveSetting, ServerContext, Throttle, Wakeup
from .error_responses import error_response
from .errors import ProtocolError
from .health import AgentMetrics
from .refusals import Refusals
from .registry import Registration
from .session import SESSION, Session
from .timers import offsets_expiry, producer_expiry, quota_refresh, transactions_sweep
from .tls import Tls, certificate_principal
from .tlsconn import Scratch, TlsTransport, tls_protocol
from .writev import send_buffers

log = logging.getLogger(__name__)

# Replies queued per connection before it stops reading. Produce replies wait for the flush
# (250 ms by default) and librdkafka pipelines a small request per linger.ms (5 ms) per
# broker without limit: at 32, reading stalled and acks came seconds late. The records of
# queued produces are bounded by buffer.memory, not by this count.
MAX_IN_FLIGHT = 4096
SHUTDOWN_GRACE_S = 30.0
# How often the sweep looks for idle and slow connections: a quarter of the shorter of the
# two limits, within these bounds.
SWEEP_MIN_S, SWEEP_MAX_S = 0.01, 1.0


@functools.cache
def builder(api_key: int, version: int) -> Builder:
    return Builder(api_key, version)


class _Connection:
    """One client connection: its reader task, whether it waits for a new frame, and what
    the limits look at."""

    __slots__ = ("active", "auth", "idle", "ip", "pending", "queued", "reason", "started",
                 "task", "writer")

    def __init__(self, task: asyncio.Task[None], writer: asyncio.StreamWriter,
                 ip: str, auth: Authenticator | None = None) -> None:
        self.task = task
        self.auth = auth  # SASL listeners: the connection's authentication state
        self.writer = writer
        self.ip = ip
        self.idle = True  # waiting for the first byte of a frame
        self.started: float | None = None  # when the frame being read began (monotonic)
        self.active = time.monotonic()  # the last frame read or reply written
        self.pending = 0  # requests read and not yet answered
        self.queued = 0  # their bytes
        self.reason: str | None = None  # why the server is closing it (the sweep)


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
        self._conns: dict[asyncio.Task[None], _Connection] = {}
        self._per_ip: dict[str, int] = {}
        self._queued = 0  # bytes of requests read and not yet answered, all connections
        self._room = Wakeup()  # set when replies free queued bytes
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
            serve = functools.partial(self._serve, listener)
            if listener.tls:
                server = await self.ctx.loop.create_server(
                    functools.partial(tls_protocol, serve, self.ctx.loop, Scratch()),
                    listener.host, listener.port)
            else:
                server = await asyncio.start_server(serve, listener.host, listener.port)
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self.listeners[i] = dataclasses.replace(listener, port=port)
            host, advertised_port = advertised.get(listener.name, (listener.host, port))
            advertised[listener.name] = (host, advertised_port or port)
        self.ctx.advertised = advertised
        self._sweep = asyncio.create_task(self._sweeper())
        if self.tls is not None:
            self._reloader = asyncio.create_task(self._reload_tls(self.tls))

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
        self._room.notify()  # readers waiting for room read their frame and end
        self.ctx.notify_commit()  # long-polling fetches answer now
        self.ctx.notify_room()  # produces waiting for buffer.memory give up
        for conn in self._conns.values():
            if conn.idle:
                conn.task.cancel()
        await self.ctx.run(self.ctx.agent.flush)
        if self._conns:
            _, late = await asyncio.wait(list(self._conns), timeout=SHUTDOWN_GRACE_S)
            for task in late:  # past the grace: drop the connection, then reap its task
                self._conns[task].writer.transport.abort()
                task.cancel()
            if late:  # its finally closes the writer (an unreaped one leaks its socket)
                await asyncio.wait(late, timeout=SHUTDOWN_GRACE_S)
        for server in self._servers:
            await server.wait_closed()

    # ------------------------------------------------------------------ connections

    async def _serve(self, listener: Listener, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) else ""
        if not self._admit(ip, peer):
            writer.transport.abort()  # nothing was read: no reason to linger
            return
        auth = None
        if listener.sasl:
            assert self.ctx.sasl is not None
            auth = Authenticator(self.ctx.sasl, ip, time.monotonic())
        AUTH.set(auth)
        conn = self._conns[task] = _Connection(task, writer, ip, auth)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        telemetry.connection_opened()
        self.refusals.say("opened", logging.DEBUG, "connection %s: opened", peer)
        replies: asyncio.Queue[tuple[int, int, Any] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        sender = asyncio.create_task(self._send(replies, conn))
        PEER.set(f"/{ip}" if ip else "")
        throttle = Throttle()
        THROTTLE.set(throttle)
        SESSION.set(Session(host=ip, listener=listener.name,
                            security_protocol=listener.protocol))
        max_bytes = self.config.socket_request_max_bytes
        sasl_bytes = self.config.sasl_server_max_receive_size
        try:
            if listener.tls:
                await self._handshake(conn, listener)
            # A connection whose replies can no longer be written (the sender aborted it)
            # reads no further: what it already received is not dispatched.
            while not self._stopping and not writer.transport.is_closing():
                conn.idle, conn.started = True, None
                if (muted := throttle.until - time.monotonic()) > 0:  # a client quota
                    await asyncio.sleep(muted)
                first = await reader.readexactly(1)
                conn.idle, conn.started = False, time.monotonic()
                size = FRAME.unpack(first + await reader.readexactly(FRAME.size - 1))[0]
                if auth is not None and not auth.authenticated and size > sasl_bytes:
                    raise ProtocolError(f"frame of {size} bytes before authentication"
                                        f" (sasl.server.max.receive.size {sasl_bytes})",
                                        "frame_too_large")
                if not PREFIX.size <= size <= max_bytes:
                    raise ProtocolError(f"frame of {size} bytes (socket.request.max.bytes"
                                        f" {max_bytes})", "frame_too_large")
                if not self._has_room(conn, size):
                    conn.started = None  # the wait is the server's, not the client's
                    await self._wait_for_room(conn, size)
                    conn.started = time.monotonic()
                payload = await reader.readexactly(size)
                conn.started, conn.active = None, time.monotonic()
                self._take(conn, size)
                try:
                    if auth is not None and auth.raw and auth.state == AUTHENTICATE:
                        correlation_id, reply = -1, await self._raw_token(auth, payload)
                    else:
                        correlation_id, reply = await self._dispatch(payload, auth)
                    if replies.full():  # MAX_IN_FLIGHT replies wait to be written
                        await replies.put((size, correlation_id, reply))
                    else:
                        replies.put_nowait((size, correlation_id, reply))
                except BaseException:
                    self._release(conn, size)
                    raise
                if auth is not None and auth.close_after_reply is not None:
                    self.refusals.refused(auth.close_after_reply, "connection %s: SASL %s,"
                                          " closing after the answer", peer,
                                          auth.close_after_reply, level=logging.DEBUG)
                    break
        except asyncio.IncompleteReadError as exc:
            if conn.reason is not None:
                self._closed(conn, peer)
            elif exc.partial or not conn.idle:
                self.refusals.say("truncated", logging.INFO,
                                  "connection %s: closed by the client mid-frame", peer)
            else:
                self.refusals.say("closed", logging.DEBUG, "connection %s: closed by the"
                                  " client", peer)
        except ProtocolError as exc:
            self.refusals.refused(exc.reason, "connection %s: %s, closing", peer, exc)
        except ConnectionError as exc:
            if conn.reason is not None:
                self._closed(conn, peer)
            else:
                self.refusals.say("reset", logging.INFO, "connection %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass  # shutdown while waiting for a request
        except Exception:
            telemetry.connection_refused("handler_error")
            log.exception("connection %s: handler failed, closing", peer)
        finally:
            try:
                if not sender.done():  # it drains the queue to this end, failed or not
                    await replies.put(None)
                with contextlib.suppress(Exception):
                    await sender
            except asyncio.CancelledError:  # reaped while finishing: stop writing now
                sender.cancel()
                writer.transport.abort()
                raise
            finally:  # the socket is closed however this ends (never left to the GC)
                writer.close()
                self._forget(task, conn)
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handshake(self, conn: _Connection, listener: Listener) -> None:
        """TLS on a new connection of a TLS listener, with the context current now, within
        request.read.timeout.ms (the sweep's frame deadline); on an SSL listener the client
        certificate's principal becomes the session's. ProtocolError: the connection is
        refused (a failed handshake, a subject no mapping rule takes)."""
        assert self.tls is not None and isinstance(conn.writer.transport, TlsTransport)
        conn.idle, conn.started = False, time.monotonic()
        try:
            await conn.writer.transport.handshake(self.tls.context)
        except (OSError, asyncio.IncompleteReadError) as exc:
            why = "not finished within request.read.timeout.ms" if conn.reason else exc
            raise ProtocolError(f"TLS handshake failed ({why})", "tls_handshake") from None
        conn.idle, conn.started, conn.active = True, None, time.monotonic()
        tls = conn.writer.get_extra_info("ssl_object")
        self.refusals.say("tls", logging.DEBUG, "connection %s: TLS %s, %s",
                          conn.writer.get_extra_info("peername"), tls.version(),
                          (tls.cipher() or ("",))[0])
        if not listener.sasl:
            try:
                principal = certificate_principal(
                    conn.writer.get_extra_info("ssl_object"), self.tls.mapper)
            except NoMatchingRule as exc:
                raise ProtocolError(str(exc), "ssl_principal") from None
            SESSION.set(SESSION.get().with_principal(principal))
            self.refusals.say("authenticated", logging.DEBUG, "connection %s: TLS, principal"
                              " %s", conn.writer.get_extra_info("peername"), principal)

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

    def _forget(self, task: asyncio.Task[None], conn: _Connection) -> None:
        """A connection ended: its slot, and whatever it still had queued, are free."""
        del self._conns[task]
        left = self._per_ip[conn.ip] - 1
        if left:
            self._per_ip[conn.ip] = left
        else:
            del self._per_ip[conn.ip]
        if conn.queued:  # replies never sent (the sender was reaped at shutdown)
            self._queued -= conn.queued
            conn.queued = conn.pending = 0
            self._room.notify()
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
        if self._queued == 0:
            return True
        if self._queued + size > self.config.queued_max_request_bytes:
            return False
        return (conn.queued == 0
                or conn.queued + size <= self.config.queued_max_request_bytes_per_connection)

    async def _wait_for_room(self, conn: _Connection, size: int) -> None:
        self.refusals.say("backpressure", logging.DEBUG, "connection %s: waiting for %d"
                          " queued bytes to be answered (%d on this connection)",
                          conn.writer.get_extra_info("peername"), self._queued, conn.queued)
        while True:
            freed = self._room.event()
            if self._has_room(conn, size) or self._stopping:
                return
            await freed.wait()

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
        self._room.notify()

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
            for conn in list(self._conns.values()):
                if conn.reason is not None:
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
                conn.writer.transport.abort()  # its reader sees the end, says conn.reason
            self.refusals.flush()

    async def _raw_token(self, auth: Authenticator, token: bytes) -> RawToken:
        """The answer to a SASL token sent raw (after a v0 SaslHandshake); a failure closes
        the connection unanswered (v0 has no error frame), after its pacing delay."""
        outcome, delay = await self.ctx.run(auth.authenticate, token)
        if outcome.error is not None:
            await asyncio.sleep(delay)
            raise ProtocolError(outcome.error, "sasl_failed")
        if auth.authenticated:
            SESSION.set(SESSION.get().with_principal(auth.session_principal()))
        return RawToken(outcome.token)

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

    async def _send(self, replies: asyncio.Queue[tuple[int, int, Any] | None],
                    conn: _Connection) -> None:
        """Write replies in request order (awaiting the pending ones) until the reader's
        end (None), each freeing its request's queued bytes once written. The replies
        already answered behind the one awaited go out in the same write (a flush answers
        a connection's pipelined Produces at once: one system call for all of them, not
        one each). If one cannot be written the connection is aborted, so its reader stops
        too (the client reconnects), and the replies still coming are dropped: taken off
        the queue all the same, so a reader waiting for room in a full one is never left
        waiting (it would hang, and its connection with it)."""
        writer = conn.writer
        failed = False
        held: list[tuple[int, int, Any] | None] = []  # taken while gathering, not ready
        while (item := held.pop() if held else await replies.get()) is not None:
            size, correlation_id, reply = item
            sizes = [size]
            try:
                if failed:
                    _drop(reply)
                    continue
                if isawaitable(reply):
                    reply = await reply
                parts = [] if reply is None else encode_response(correlation_id, reply)
                while not replies.empty():  # the answered ones behind it join this write
                    after = replies.get_nowait()
                    ready = _answered(after)
                    if after is None or ready is _NOT_READY:
                        held.append(after)
                        break
                    sizes.append(after[0])
                    if ready is not None:  # None: acks=0
                        parts += encode_response(after[1], ready)
                if not parts:  # acks=0
                    continue
                if isinstance(writer.transport, TlsTransport):
                    await writer.transport.send(parts)
                else:
                    await send_buffers(writer, parts)
            except asyncio.CancelledError:
                writer.transport.abort()
                raise
            except Exception as exc:
                failed = True
                writer.transport.abort()
                self.refusals.refused("reply_failed", "connection %s: reply not sent (%s),"
                                      " closing", writer.get_extra_info("peername"), exc)
            finally:
                for size in sizes:
                    self._release(conn, size)


_NOT_READY = object()


def _answered(item: tuple[int, int, Any] | None) -> Any:
    """A queued reply's response if it is already answered (None: no response), else
    _NOT_READY: not resolved yet, failed (left to the sender's usual path, which closes
    the connection after the replies before it), or an awaitable other than a future."""
    if item is None:
        return _NOT_READY
    reply = item[2]
    if not isawaitable(reply):
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
