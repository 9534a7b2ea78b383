"""What every handler shares: the agent, the metadata store, the segment cache, the
authorizer, the thread pool for blocking work, the broker list (the agent registry), topic
ids, and the wake-ups of coroutines waiting for a commit (fetch long-polls) or for
buffer.memory room (produce backpressure)."""

from __future__ import annotations

import asyncio
import base64
import contextvars
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import telemetry
from agent.config import AgentConfig
from agent.errors import NotCachedError
from agent.groups.coordinator import Coordinator
from agent.placement import on_listener
from agent.producer import Agent
from agent.quotas import QuotaManager
from agent.transactions.coordinator import TransactionCoordinator
from agent.transactions.markers import AgentMarkers
from metadata import AgentInfo, MetadataStore, TopicInfo
from objectstore import ObjectStore

from .authenticator import SaslService
from .authz import Authorization
from .cache import SegmentCache
from .errors import error_code
from .registry import Registration
from .session import SESSION
from .states import Key, Known, PartitionStates

if TYPE_CHECKING:
    from .apis import Api

T = TypeVar("T")

IO_THREADS = 16
# A topic id not among the known ones relists the topics at most this often (a client
# naming unknown ids must not turn every request into a listing of every topic).
TOPIC_RELIST_S = 1.0

# The client address of the connection whose request is being handled ("/host", as Kafka
# shows it in DescribeGroups): set by the server in each connection's task.
PEER: contextvars.ContextVar[str] = contextvars.ContextVar("peer", default="")


@dataclass(slots=True)
class Throttle:
    """A connection muted for a client quota: the server reads none of its requests before
    `until` (monotonic seconds), as Kafka mutes a throttled channel after its response."""

    until: float = 0.0


# The connection's Throttle: set by the server in each connection's task (None outside one).
THROTTLE: contextvars.ContextVar[Throttle | None] = contextvars.ContextVar("throttle",
                                                                          default=None)


@dataclass(eq=False)
class Wakeup:
    """Wakes every coroutine waiting for something to change, and only those that may have
    missed it: take `changed()` BEFORE looking, await it after; `notify` resolves the
    current future (each waiter's, or one already done) and starts a new one."""

    _changed: asyncio.Future[None] | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def changed(self) -> asyncio.Future[None]:
        """The future the next `notify` resolves (on the loop thread)."""
        if self._changed is None:
            self._loop = asyncio.get_running_loop()
            self._changed = self._loop.create_future()
        return self._changed

    def notify(self) -> None:
        """Wake every waiter (on the loop thread)."""
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    def notify_threadsafe(self) -> None:
        """`notify` from any thread (a no-op until someone waited)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.notify)


async def wait_at_most(changed: asyncio.Future[None], timeout_s: float) -> None:
    """Return when `changed` is done or after `timeout_s`, whichever comes first, leaving
    `changed` as it is (other waiters share it). Handlers run outside asyncio Tasks
    (server.py `_Handler`), and `asyncio.wait_for` and `asyncio.timeout` need the current
    task on Python 3.12+ ("Timeout should be used inside a task"): this needs none."""
    loop = asyncio.get_running_loop()
    mine: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not mine.done():
            mine.set_result(None)

    timer = loop.call_later(timeout_s, wake)
    changed.add_done_callback(wake)
    try:
        await mine
    finally:
        timer.cancel()
        changed.remove_done_callback(wake)


@dataclass(frozen=True, slots=True)
class EffectiveSetting:
    """One setting this agent runs with, as DescribeConfigs lists it for a BROKER resource:
    full key (`agent.linger.ms`), typed value, and whether it is the default (else it came
    from the settings file, the environment or a flag). The entry point that loaded the
    settings passes them in (`serve`), so the protocol never loads settings itself."""

    key: str
    value: object
    default: bool


@dataclass(eq=False)
class ServerContext:
    """State shared by the handlers of one server (one per `silt agent` process)."""

    agent: Agent
    metadata: MetadataStore
    store: ObjectStore
    advertised: Mapping[str, tuple[str, int]]  # listener name -> its advertised endpoint
    cache: SegmentCache
    apis: Mapping[int, Api] = field(default_factory=dict)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(IO_THREADS, thread_name_prefix="silt-io"))
    loop: asyncio.AbstractEventLoop | None = None
    registration: Registration | None = None  # set after binding (the port is known)
    stopping: bool = False  # set at shutdown: long-polls return at once
    config: AgentConfig = field(default_factory=AgentConfig)
    # The settings `silt agent` runs with, every section (DescribeConfigs BROKER resources).
    settings: Sequence[EffectiveSetting] = ()
    groups: Coordinator = field(init=False)  # the group coordinator (agent/groups/)
    txns: TransactionCoordinator = field(init=False)  # the transaction coordinator
    quotas: QuotaManager = field(init=False)  # client byte rates
    sasl: SaslService | None = None  # the SASL listeners' side (set by the server)
    authz: Authorization = field(init=False)  # ACL decisions (authz.py)
    # Partitions' offsets as last read, forgotten at each commit notification (states.py).
    states: PartitionStates = field(default_factory=PartitionStates)
    # Calls from other threads waiting for the loop (`call_threadsafe`).
    _calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = field(default_factory=list)
    _calls_lock: threading.Lock = field(default_factory=threading.Lock)
    _room: Wakeup = field(default_factory=Wakeup)
    _cluster_ns: uuid.UUID | None = None
    # Topics by id: each id handed out (`topic_id`) and the last listing's (`topics_by_id`).
    _by_id: dict[uuid.UUID, TopicInfo] = field(default_factory=dict)
    _by_id_at: float = float("-inf")

    def __post_init__(self) -> None:
        self.states.reader = self._read_offsets
        self.quotas = QuotaManager(self.config.quota_window_size_seconds * 1000,
                                   self.config.quota_window_num)
        self.groups = Coordinator(self.metadata, self.config, self.run, self._agent_id,
                                  codes=error_code)
        self.txns = TransactionCoordinator(
            self.metadata, self.config, self.run, self._agent_id,
            AgentMarkers(self.agent, self.metadata, self.run), codes=error_code)
        self.authz = Authorization(self.config)

    def _agent_id(self) -> str | None:
        """This agent's registry id, once registered (it coordinates groups under it)."""
        return None if self.registration is None else self.registration.agent_id

    # ----------------------------------------------------------------- brokers

    def live_brokers(self, listener: str | None = None) -> list[AgentInfo]:
        """The registry's live agents, this one included (empty only before it registered);
        with `listener`, the brokers Metadata lists to a client of that listener: those
        having it, at their endpoint there (`agent.placement.on_listener`). Blocking (a
        metadata read): call through `run`. Partition leaders among them:
        `agent.placement.leader`."""
        live = [] if self.registration is None else self.registration.live_brokers()
        return live if listener is None else on_listener(live, listener)

    # ----------------------------------------------------------------- identities

    def cluster_ns(self) -> uuid.UUID:
        """The cluster id (metadata/identity.py): the namespace of topic ids."""
        if self._cluster_ns is None:
            self._cluster_ns = uuid.UUID(self.metadata.cluster_identity().cluster_id)
        return self._cluster_ns

    def cluster_id(self) -> str:
        """Kafka-style 22-character cluster id (base64 of the cluster namespace UUID)."""
        return base64.urlsafe_b64encode(self.cluster_ns().bytes).decode().rstrip("=")

    def topic_id(self, topic: TopicInfo) -> uuid.UUID:
        """The topic's stable UUID: uuid5(cluster namespace, "<metadata topic id>/<name>"),
        so it survives restarts and differs for a topic deleted and created again. Kept for
        `topics_by_id`: a client names the ids it was given."""
        topic_id = self._uuid(topic)
        self._by_id[topic_id] = topic
        return topic_id

    def _uuid(self, topic: TopicInfo) -> uuid.UUID:
        return uuid.uuid5(self.cluster_ns(), f"{topic.id}/{topic.name}")

    def topics_by_id(self, ids: Collection[uuid.UUID], cached_only: bool = False
                     ) -> dict[uuid.UUID, TopicInfo]:
        """The topics (as they were when listed) that `ids` name, those found: from the ids
        handed out or listed, relisting the topics for any other (at most every
        TOPIC_RELIST_S: an id given by another agent may wait that long).
        An id names one incarnation of a topic, so a known one never names another; whether
        it still exists is the reader's check (`MetadataStore.partitions(name, row id)`).
        Blocking (a metadata read): call through `run`, or with `cached_only` (then
        NotCachedError rather than a relisting)."""
        known = self._by_id
        if cached_only and any(i not in known for i in ids):
            raise NotCachedError("a topic id not known here")
        if any(i not in known for i in ids) and (
                time.monotonic() - self._by_id_at >= TOPIC_RELIST_S):
            self._by_id_at = time.monotonic()
            known = self._by_id = {self._uuid(t): t for t in self.metadata.list_topics()}
        return {i: known[i] for i in ids if i in known}

    # ----------------------------------------------------------------- client quotas

    def refresh_quotas(self) -> None:
        """Load the stored client quotas (blocking: call through `run`, or a timer's
        thread: agent/protocol/timers.py `quota_refresh`)."""
        self.quotas.set_quotas(self.metadata.client_quotas())

    def throttle(self, kind: str, client_id: str | None, nbytes: float) -> int:
        """Record `nbytes` of `kind` (agent/quotas.py PRODUCE or FETCH) for the session's
        user and this client id; the throttle time in ms, for which the connection is then
        muted (0: within its quota)."""
        if not self.quotas.configured:
            return 0
        user = SESSION.get().principal.partition(":")[2]
        ms = self.quotas.record(kind, user, client_id or "", nbytes,
                                self.metadata.clock.now_ms())
        held = THROTTLE.get()
        if ms > 0 and held is not None:
            held.until = max(held.until, time.monotonic() + ms / 1000)
        return ms

    def quota_window_bytes(self, kind: str, client_id: str | None) -> float:
        """The most bytes of `kind` one response may carry for the session's user and this
        client id without certain throttling (infinite without a quota)."""
        if not self.quotas.configured:
            return float("inf")
        user = SESSION.get().principal.partition(":")[2]
        return self.quotas.max_window_bytes(kind, user, client_id or "")

    def unthrottle(self, kind: str, client_id: str | None, nbytes: float) -> None:
        """Take back bytes `throttle` recorded for a reply not sent as measured."""
        user = SESSION.get().principal.partition(":")[2]
        self.quotas.unrecord(kind, user, client_id or "", nbytes, self.metadata.clock.now_ms())

    # ----------------------------------------------------------------- threads and commits

    def call_threadsafe(self, fn: Callable[..., object], *args: Any) -> None:
        """Call `fn(*args)` on the loop from another thread, coalesced: calls made before
        the loop runs them share one wake-up (a flush completing many requests costs one
        cross-thread wake-up, not one per request)."""
        with self._calls_lock:
            self._calls.append((fn, args))
            if len(self._calls) > 1:
                return  # a wake-up is on its way and will run this call too
        loop = self.loop
        if loop is None:
            raise RuntimeError("call_threadsafe before the server's loop started")
        if not loop.is_closed():
            loop.call_soon_threadsafe(self._run_calls)

    def _run_calls(self) -> None:
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            fn(*args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking work (metadata queries, object GETs, agent appends) off the loop."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def notify_commit(self) -> None:
        """Forget the partitions' offsets read so far and look at the long-polls waiting for
        data again, waking those whose partitions moved (on the loop thread; at shutdown,
        all of them)."""
        self.states.changed()
        self._notified()

    def notify_commit_threadsafe(self) -> None:
        """`notify_commit` from any thread (the agent's flusher, the commit watcher): the
        offsets are forgotten at once, in that thread."""
        self.states.changed()
        if self.loop is not None and not self.loop.is_closed():
            self.call_threadsafe(self._notified)

    def _notified(self) -> None:
        if self.stopping:
            self.states.wake_all()
        else:
            self.states.notified()

    async def _read_offsets(self, topics: frozenset[str], numbers: frozenset[int]
                            ) -> tuple[dict[Key, Known], int]:
        """The long-polls' shared read (states.py): the offsets of partitions `numbers` of
        `topics`, and its metadata round trips."""
        return await self.run(_offsets_counted, self.metadata, topics, numbers)

    def room_freed(self) -> asyncio.Future[None]:
        """A future resolved the next time buffer.memory room is freed (take it BEFORE
        trying to append, so room freed meanwhile is not missed; await it with
        `wait_at_most`)."""
        return self._room.changed()

    def notify_room(self) -> None:
        """Wake every produce waiting for buffer.memory room (on the loop thread; also at
        shutdown, so waiters give up)."""
        self._room.notify()

    def notify_room_threadsafe(self) -> None:
        """`notify_room` from any thread (the agent's room listener)."""
        self._room.notify_threadsafe()


def _offsets_counted(md: MetadataStore, topics: frozenset[str], numbers: frozenset[int]
                     ) -> tuple[dict[Key, Known], int]:
    """`MetadataStore.partition_offsets`, and the round trips it made (in the pool thread
    it runs on)."""
    before = telemetry.round_trips_here()
    offsets = md.partition_offsets(topics, numbers)
    return offsets, telemetry.round_trips_here() - before
