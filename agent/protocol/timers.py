"""Periodic housekeeping of `silt agent` on its own threads (`clock.Periodic`, timed by the
injected clock, so a ManualClock test drives it without sleeping): deleting expired producer
states every producer.id.expiration.check.interval.ms, and expired committed offsets every
offsets.retention.check.interval.ms."""

from __future__ import annotations

import logging

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
