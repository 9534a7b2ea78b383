"""Periodic housekeeping of `silt agent` on its own threads (`clock.Periodic`, timed by the
injected clock, so a ManualClock test drives it without sleeping): deleting expired producer
states every producer.id.expiration.check.interval.ms, expired committed offsets every
offsets.retention.check.interval.ms, the transaction coordinator's sweep (timed-out
transactions aborted, dead coordinators' transactions finished) every
transaction.abort.timed.out.transaction.cleanup.interval.ms, and reloading client quotas
every second."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.transactions.coordinator import TransactionCoordinator
from clock import Periodic
from metadata import MetadataStore

log = logging.getLogger(__name__)


def producer_expiry(metadata: MetadataStore) -> Periodic:
    """The (unstarted) timer deleting producer states idle past producer.id.expiration.ms,
    every producer.id.expiration.check.interval.ms, on the metadata store's clock."""

    def expire() -> None:
        if n := metadata.expire_producers():
            log.info("expired %d idle producer states", n)

    return Periodic("silt-producer-expiry",
                    metadata.config.producer_id_expiration_check_interval_ms, expire,
                    metadata.clock)


def offsets_expiry(metadata: MetadataStore) -> Periodic:
    """The (unstarted) timer deleting committed offsets past offsets.retention.minutes,
    every offsets.retention.check.interval.ms, on the metadata store's clock."""

    def expire() -> None:
        if n := metadata.expire_offsets():
            log.info("expired %d committed offsets", n)

    return Periodic("silt-offsets-expiry",
                    metadata.config.offsets_retention_check_interval_ms, expire,
                    metadata.clock)


def transactions_sweep(coordinator: TransactionCoordinator, interval_ms: int,
                       loop: asyncio.AbstractEventLoop) -> Periodic:
    """The (unstarted) timer running the transaction coordinator's `sweep` on the event
    loop every `interval_ms`, on the coordinator's clock (its steps wait for their markers'
    flush on the loop, so each run waits for the sweep to end)."""

    def sweep() -> None:
        try:
            if n := asyncio.run_coroutine_threadsafe(coordinator.sweep(), loop).result():
                log.info("stepped %d timed-out or orphaned transactions", n)
        except Exception:
            log.exception("transaction sweep failed (retrying)")

    return Periodic("silt-transactions", interval_ms, sweep, coordinator.clock)


QUOTA_REFRESH_MS = 1000  # how soon an agent sees client quotas altered through another


def quota_refresh(metadata: MetadataStore, refresh: Callable[[], None]) -> Periodic:
    """The (unstarted) timer reloading the client quotas every QUOTA_REFRESH_MS
    (`ServerContext.refresh_quotas`), on the metadata store's clock."""

    def reload() -> None:
        try:
            refresh()
        except Exception as exc:  # the store unreachable: keep the quotas known
            log.warning("reloading client quotas failed: %s", exc)

    return Periodic("silt-quota-refresh", QUOTA_REFRESH_MS, reload, metadata.clock)
