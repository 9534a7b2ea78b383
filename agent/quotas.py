"""Client byte-rate quotas as Kafka's ClientQuotaManager enforces them: each client's
produce (request bytes) and fetch (response bytes) rate measured over a window of samples,
and, past its quota, the time it must wait for the rate to fall back to it.

Which quota applies to (user, client-id) is Kafka's precedence (the first stored one of
/users/<user>/clients/<client-id>, /users/<user>/clients/<default>, /users/<user>,
/users/<default>/clients/<client-id>, /users/<default>/clients/<default>, /users/<default>,
/clients/<client-id>, /clients/<default>), and clients share a sensor as Kafka's default
quota callback groups them: by the user if the quota names users, by the client id if it
names client ids (so a default quota applies to each user or client id on its own). A rate
is Kafka's Rate over a SampledStat: `samples` samples of `window_ms`, the oldest dropped as
time passes, the rate the samples' sum over their elapsed time (at least samples - 1 whole
windows). Recording past the quota gives a throttle of (rate - quota) / quota * that elapsed
time (Kafka's QuotaUtils.throttleTime). Pure: time comes in as arguments (the caller's
injected clock), so tests drive it without sleeping. Each agent measures its own clients:
a client spread over several agents gets the quota from each (as from each Kafka broker).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from metadata.quotas import CLIENT_ID, USER, Entity

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
WINDOW_MS = 1000  # Kafka's quota.window.size.seconds (1)
SAMPLES = 11  # Kafka's quota.window.num


def precedence(user: str, client_id: str) -> list[Entity]:
    """The entities whose quota applies to (user, client-id), first match wins."""
    return [((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)),
            ((USER, user),), ((CLIENT_ID, client_id), (USER, None)),
            ((CLIENT_ID, None), (USER, None)), ((USER, None),), ((CLIENT_ID, client_id),),
            ((CLIENT_ID, None),)]


@dataclass(slots=True)
class Rate:
    """Kafka's Rate over a SampledStat: per sample its start and sum."""

    window_ms: int = WINDOW_MS
    samples: int = SAMPLES
    starts: list[int] = field(default_factory=list)
    sums: list[float] = field(default_factory=list)

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self.starts or now_ms - self.starts[-1] >= self.window_ms:
            self.starts.append(now_ms)
            self.sums.append(0.0)
            if len(self.starts) > self.samples:
                del self.starts[0], self.sums[0]
        self.sums[-1] += value

    def _purge(self, now_ms: int) -> None:
        """Drop the samples that ended more than samples * window ago (Kafka's
        purgeObsoleteSamples)."""
        horizon = self.samples * self.window_ms
        while self.starts and now_ms - self.starts[0] >= horizon:
            del self.starts[0], self.sums[0]

    def elapsed_ms(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: since the oldest sample began, at least samples - 1
        whole windows."""
        oldest = self.starts[0] if self.starts else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def per_second(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(self.sums) / (self.elapsed_ms(now_ms) / 1000)


@dataclass
class QuotaManager:
    """Every client's rates and the stored quotas (`set_quotas`, replaced whole), shared by
    the connections of one agent (thread-safe)."""

    window_ms: int = WINDOW_MS
    samples: int = SAMPLES
    _quotas: Mapping[Entity, Mapping[str, float]] = field(default_factory=dict)
    _rates: dict[tuple[str, str, str], Rate] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Whether any quota is stored: set with `_quotas`, read without the lock, a plain
    # attribute (not a property: every request looks, and a property is a Python call).
    configured: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.configured = bool(self._quotas)

    def set_quotas(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        with self._lock:
            if quotas != self._quotas:
                self._quotas = quotas
                self._rates = {}  # sensors regroup as the quotas now say (Kafka: new tags)
                self.configured = bool(quotas)

    def quota(self, kind: str, user: str, client_id: str) -> tuple[float, Entity] | None:
        """The quota of `kind` for (user, client-id) and the entity that sets it, if any."""
        for entity in precedence(user, client_id):
            value = self._quotas.get(entity, {}).get(kind)
            if value is not None:
                return value, entity
        return None

    def max_window_bytes(self, kind: str, user: str, client_id: str) -> float:
        """Kafka's getMaxValueInQuotaWindow: quota x (samples - 1) windows, the most one
        response may carry without certain throttling (infinite without a quota)."""
        with self._lock:
            found = self.quota(kind, user, client_id)
        if found is None:
            return float("inf")
        return found[0] * (self.samples - 1) * self.window_ms / 1000

    def record(self, kind: str, user: str, client_id: str, nbytes: float,
               now_ms: int) -> int:
        """Record `nbytes` of `kind` for the client; the throttle time in ms (0: within
        its quota, or none applies)."""
        if not self.configured:  # nothing to count
            return 0
        with self._lock:
            found = self.quota(kind, user, client_id)
            if found is None:
                return 0
            limit, entity = found
            rate = self._sensor(kind, user, client_id, entity)
            rate.record(nbytes, now_ms)
            observed = rate.per_second(now_ms)
            if observed <= limit:
                return 0
            return round((observed - limit) / limit * rate.elapsed_ms(now_ms))

    def unrecord(self, kind: str, user: str, client_id: str, nbytes: float,
                 now_ms: int) -> None:
        """Take back bytes recorded for a response not sent as measured (a throttled
        fetch answers without records, as Kafka's unrecordQuotaSensor)."""
        with self._lock:
            found = self.quota(kind, user, client_id)
            if found is not None:
                self._sensor(kind, user, client_id, found[1]).record(-nbytes, now_ms)

    def _sensor(self, kind: str, user: str, client_id: str, entity: Entity) -> Rate:
        """The rate clients share under the quota of `entity` (Kafka's metric tags: the
        user if it names users, the client id if it names client ids)."""
        names = dict(entity)
        key = (kind, user if USER in names else "", client_id if CLIENT_ID in names else "")
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = Rate(self.window_ms, self.samples)
        return rate
