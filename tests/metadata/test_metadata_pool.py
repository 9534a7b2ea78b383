"""The metadata.pool.size setting: a fixed pool, so concurrent reads open connections once
and keep them (none opened and closed per burst), never more than the setting."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from metadata import MetadataStore
from metadata.config import MetadataConfig

POOL = 3
THREADS = 6
ROUNDS = 5


def test_concurrent_reads_reuse_a_fixed_pool(metadata_url: str) -> None:
    md = MetadataStore.open(metadata_url, create=True, config=MetadataConfig(pool_size=POOL))
    opened = 0
    held = 0
    most = 0
    lock = threading.Lock()

    def connect(*_: object) -> None:
        nonlocal opened
        opened += 1

    def checkout(*_: object) -> None:
        nonlocal held, most
        with lock:
            held += 1
            most = max(most, held)

    def checkin(*_: object) -> None:
        nonlocal held
        with lock:
            held -= 1

    sa.event.listen(md.engine, "connect", connect)
    sa.event.listen(md.engine, "checkout", checkout)
    sa.event.listen(md.engine, "checkin", checkin)
    md.engine.dispose()  # count from an empty pool
    start = threading.Barrier(THREADS)

    def reads() -> None:
        start.wait()
        for _ in range(ROUNDS):
            with md.read() as conn:
                conn.execute(sa.text("SELECT 1")).scalar()
                threading.Event().wait(0.01)  # hold it: the threads overlap

    threads = [threading.Thread(target=reads) for _ in range(THREADS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        md.close()
    assert most == POOL  # the other threads waited for one
    assert opened == POOL  # opened once each, not per burst
