"""The asyncio server: frames, dispatch through the one table, ordered replies, shutdown.

A frame is a 4-byte big-endian size and that many bytes. A size above
socket.request.max.bytes, a truncated frame, bytes that do not decode, or an unknown API key
or version close THAT connection only (as Kafka does); an unsupported ApiVersions version
gets the v0 error response UNSUPPORTED_VERSION with the supported list, so the client can
retry with one it has. Requests on one connection are read and dispatched one after the
other and answered in order; a Produce's reply waits for its flush while the next requests
are read (up to MAX_IN_FLIGHT replies), and nothing here blocks other connections (blocking
work runs in the thread pool). Handlers answer the failures they meet (a store outage, a
topic deleted meanwhile) with their API's error codes; one that escapes a handler closes
that connection, as does a reply that cannot be written (the replies behind it are dropped,
and the connection ends even if its reply queue is full).

Shutdown (SIGTERM/SIGINT): stop accepting, stop reading new requests (connections waiting
for a request are dropped at once, the others after the request they are reading), flush the
agent, answer every request already read, close. A crash at any point loses only records
that were never acked; acked ones are committed (the agent's write-path guarantee).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from inspect import isawaitable, iscoroutine
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

import telemetry
from agent.config import AgentConfig
from agent.producer import Agent
from metadata import MetadataStore
from metadata.notify import CommitWatcher
from objectstore import ObjectStore
from settings import parse_host_port

from .apis import API_VERSIONS, TABLE, api_versions
from .cache import SegmentCache
from .codec import FRAME, PREFIX, Builder, decode_request, encode_response
from .context import PEER, ServerContext
from .errors import ProtocolError
from .health import AgentMetrics
from .registry import Registration
from .timers import offsets_expiry, producer_expiry
from .writev import send_buffers

if TYPE_CHECKING:
    from settings.load import Settings

log = logging.getLogger(__name__)

# Replies queued per connection before it stops reading. Produce replies wait for the flush
# (250 ms by default) and librdkafka pipelines a small request per linger.ms (5 ms) per
# broker without limit: at 32, reading stalled and acks came seconds late. The records of
# queued produces are bounded by buffer.memory, not by this count.
MAX_IN_FLIGHT = 4096
SHUTDOWN_GRACE_S = 30.0


@functools.cache
def builder(api_key: int, version: int) -> Builder:
    return Builder(api_key, version)


class _Connection:
    """One client connection: its reader task and whether it waits for a new frame."""

    __slots__ = ("idle", "task", "writer")

    def __init__(self, task: asyncio.Task[None], writer: asyncio.StreamWriter) -> None:
        self.task = task
        self.writer = writer
        self.idle = True


class Server:
    """Serves the Kafka protocol on one listener for the agent in `ctx`."""

    def __init__(self, ctx: ServerContext, host: str, port: int,
                 max_request_bytes: int = AgentConfig().socket_request_max_bytes) -> None:
        ctx.apis = TABLE
        ctx.agent.set_room_listener(ctx.notify_room_threadsafe)
        self.ctx = ctx
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[None], _Connection] = {}
        self._stopping = False

    async def start(self) -> None:
        """Bind and start accepting (port 0 picks a free port: read `self.port` after)."""
        self.ctx.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.ctx.advertised[1] == 0:
            self.ctx.advertised = (self.ctx.advertised[0], self.port)

    async def stop(self) -> None:
        """Stop accepting and reading, flush, answer what was read, close connections."""
        self._stopping = self.ctx.stopping = True
        if self._server is not None:
            self._server.close()
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
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = self._conns[task] = _Connection(task, writer)
        telemetry.connection_opened()
        replies: asyncio.Queue[tuple[int, Any] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        sender = asyncio.create_task(self._send(replies, writer))
        peer = writer.get_extra_info("peername")
        PEER.set(f"/{peer[0]}" if isinstance(peer, tuple) else "")
        try:
            # A connection whose replies can no longer be written (the sender aborted it)
            # reads no further: what it already received is not dispatched.
            while not self._stopping and not writer.transport.is_closing():
                conn.idle = True
                head = await reader.readexactly(FRAME.size)
                conn.idle = False
                size = FRAME.unpack(head)[0]
                if not PREFIX.size <= size <= self.max_request_bytes:
                    raise ProtocolError(f"frame of {size} bytes (limit "
                                        f"{self.max_request_bytes})")
                payload = await reader.readexactly(size)
                await replies.put(await self._dispatch(payload))
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                log.info("connection %s: truncated frame, closing", peer)
        except (ProtocolError, ConnectionError) as exc:
            log.info("connection %s: %s, closing", peer, exc)
        except asyncio.CancelledError:
            pass  # shutdown while waiting for a request
        except Exception:
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
                del self._conns[task]
                telemetry.connection_closed()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, payload: bytes) -> tuple[int, Any]:
        """(correlation id, reply) of one request; ProtocolError closes the connection."""
        key, version, correlation_id = PREFIX.unpack_from(payload)
        api = TABLE.get(key)
        if key == API_VERSIONS and (api is None or not api.supports(version)):
            return correlation_id, api_versions.response(
                self.ctx, builder(API_VERSIONS, 0), ErrorCode.unsupported_version)
        if api is None or not api.supports(version):
            raise ProtocolError(f"unsupported API key {key} version {version}")
        header, request = decode_request(payload, key, version)
        telemetry.request(api.name)
        reply = await api.handler(self.ctx, header, request, builder(key, version))
        return correlation_id, reply

    @staticmethod
    async def _send(replies: asyncio.Queue[tuple[int, Any] | None],
                    writer: asyncio.StreamWriter) -> None:
        """Write replies in request order (awaiting the pending ones) until the reader's
        end (None). If one cannot be written the connection is aborted, so its reader stops
        too (the client reconnects), and the replies still coming are dropped: taken off
        the queue all the same, so a reader waiting for room in a full one is never left
        waiting (it would hang, and its connection with it)."""
        failed = False
        while (item := await replies.get()) is not None:
            correlation_id, reply = item
            if failed:
                _drop(reply)
                continue
            try:
                if isawaitable(reply):
                    reply = await reply
                if reply is None:  # acks=0
                    continue
                await send_buffers(writer, encode_response(correlation_id, reply))
            except asyncio.CancelledError:
                writer.transport.abort()
                raise
            except Exception as exc:
                failed = True
                writer.transport.abort()
                log.info("connection %s: reply not sent (%s), closing",
                         writer.get_extra_info("peername"), exc)


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


async def serve(store: ObjectStore, metadata: MetadataStore, config: AgentConfig,
                settings: Settings | None = None) -> None:
    """Run `silt agent` until SIGTERM or SIGINT, then shut down cleanly. `settings`: the
    effective settings `config` came from (BROKER resources of DescribeConfigs)."""
    listen = parse_host_port(config.listeners)
    advertised = parse_host_port(config.advertised_listeners or config.listeners)
    assert listen is not None and advertised is not None  # checked by the settings
    agent = Agent(store, metadata, config)
    ctx = ServerContext(agent=agent, metadata=metadata, store=store, advertised=advertised,
                        cache=SegmentCache(store, config.fetch_cache_bytes), config=config,
                        loaded=settings)
    server = Server(ctx, *listen, max_request_bytes=config.socket_request_max_bytes)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher: CommitWatcher | None = None
    expiry = producer_expiry(metadata)
    offsets = offsets_expiry(metadata)
    leases: asyncio.Task[None] | None = None
    metrics = AgentMetrics(ctx)  # agent.metrics.listeners: /metrics, /healthz, /readyz
    try:
        metrics.start()
        await server.start()
        # Other agents' commits (and this one's) wake this agent's long-polling fetches.
        watcher = await ctx.run(metadata.watch_commits, ctx.notify_commit_threadsafe)
        expiry.start()
        offsets.start()
        registration = ctx.registration = Registration(metadata, *ctx.advertised)
        info = await ctx.run(registration.start)
        leases = asyncio.create_task(_check_group_leases(ctx))
        log.warning("silt agent %s (node %d) listening on %s:%d, advertised as %s:%d",
                    info.agent_id, info.node_id, server.host, server.port, *ctx.advertised)
        await stop.wait()
        log.warning("silt agent stopping: deregistering, flushing, answering in-flight"
                    " requests")
        # Deregistered first: clients refreshing metadata move to other agents while this
        # one drains. A crash instead leaves the row until broker.session.timeout.ms.
        await ctx.run(registration.stop)
        ctx.groups.close()  # members waiting on a rebalance go to another agent now
        await server.stop()
    finally:
        if ctx.registration is not None:
            await ctx.run(ctx.registration.stop)
        if leases is not None:
            leases.cancel()
        ctx.groups.close()
        await ctx.run(expiry.stop)
        await ctx.run(offsets.stop)
        await ctx.run(agent.close)
        if watcher is not None:
            await ctx.run(watcher.close)
        ctx.pool.shutdown()
        metrics.stop()
        # Shutdown is under way: a repeated SIGTERM/SIGINT must not kill the process between
        # the loop's end and its exit (the default action once asyncio drops its handlers).
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
