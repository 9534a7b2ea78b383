"""Kafka's default partitioner: murmur2 of the key, else round robin."""

from __future__ import annotations

import itertools

from aiokafka.partitioner import murmur2


class DefaultPartitioner:
    """Same partition for the same key as a Java Kafka producer; round robin for null keys."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def partition(self, key: bytes | None, partitions: int) -> int:
        if key is None:
            return next(self._counter) % partitions
        return (int(murmur2(key)) & 0x7FFFFFFF) % partitions
