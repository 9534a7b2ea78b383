"""The compaction service (`CompactorService`, what `silt compactor` runs): retention and GC
on timers of their own, and a stop that lets the job under way finish or abandons it and
releases its lease. Driven by a ManualClock in-process; tests/compactor/test_service_process.py
runs `silt compactor` itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from compactor import Compactor, CompactorConfig, CompactorService
from faults import GatedStore
from metadata import schema as s
from planner import PlannerConfig

from .support import Harness

WAIT_S = 30.0
GRACE_MS = 60_000
INTERVAL_MS = 10_000
SHUTDOWN_MS = 5_000


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def h(metadata_url: str) -> Iterator[Harness]:
    harness = Harness.open(metadata_url)
    yield harness
    harness.close()


class Running:
    """A service on its own thread whose compactor's uploads wait for `gate`."""

    def __init__(self, h: Harness) -> None:
        self.gate = threading.Event()
        self.store = GatedStore(h.store, self.gate)
        config = CompactorConfig(retention_check_interval_ms=INTERVAL_MS,
                                 gc_interval_ms=INTERVAL_MS, grace_ms=GRACE_MS,
                                 shutdown_timeout_ms=SHUTDOWN_MS, poll_interval_s=3600,
                                 planner=PlannerConfig(l0_trigger_files=2))
        self.service = CompactorService(Compactor(self.store, h.md, config, clock=h.clock))
        self.thread = threading.Thread(target=self.service.run, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()


def stuck_job(h: Harness) -> tuple[Running, int]:
    """Two L0 files of a compacted topic, and a service whose job on them is leased and
    stuck at its first output's upload (so its round never ends)."""
    h.md.create_topic("c", 2, {"cleanup.policy": "compact"})
    for i in range(2):
        h.produce([("c", p, b"k%d" % p, b"v%d" % i, ()) for p in range(2)])
    run = Running(h)
    wait_until(lambda: run.store.waiting == 1, "the job's first upload")
    (job,) = h.md.list_jobs(s.JOB_LEASED)
    return run, job.id


def pending_outputs(h: Harness, job_inputs: tuple[int, ...]) -> list[int]:
    """Pending files that are not inputs: the stuck job's registered outputs."""
    with h.md.read() as conn:
        rows = conn.execute(s.files.select().where(s.files.c.state == s.FILE_PENDING)).all()
    return [int(r.id) for r in rows if r.id not in job_inputs]


def test_retention_and_gc_run_on_their_timers_while_a_round_is_stuck(h: Harness) -> None:
    run, job_id = stuck_job(h)
    job = h.md.get_job(job_id)
    (output,) = pending_outputs(h, job.input_file_ids)
    # Data of a delete-policy topic, written after the job was leased (so it is not held).
    h.md.create_topic("logs", 1, {"retention.ms": "60000"})
    h.produce([("logs", 0, None, b"old", ())])
    (seg,) = h.md.find_segments("logs", 0, 0)
    key = h.md.get_file(seg.file_id).object_key

    h.clock.advance(60_001 + INTERVAL_MS)  # past retention.ms and a retention interval
    wait_until(lambda: h.md.partitions("logs")[0].log_start_offset == 1, "retention")
    assert h.md.get_file(seg.file_id).state == s.FILE_RETIRED
    assert key in {o.key for o in h.store.list()}  # kept through the grace period

    h.clock.advance(GRACE_MS + INTERVAL_MS)  # past the grace and a GC interval
    wait_until(lambda: h.md.get_file(seg.file_id).state == s.FILE_DELETED, "GC")
    assert key not in {o.key for o in h.store.list()}
    # Neither waited for a compaction round: the only one is still inside its job, whose
    # pending output GC left alone although it is older than the grace period.
    assert run.service.rounds == 0 and run.store.waiting == 1
    assert h.md.get_job(job_id).state == s.JOB_LEASED
    assert h.md.get_file(output).state == s.FILE_PENDING

    # Stopped, with the shutdown deadline past before the job can go on: it is abandoned
    # at its next partition boundary and its lease released.
    run.service.stop()
    h.clock.advance(SHUTDOWN_MS)
    run.gate.set()
    run.join()
    job = h.md.get_job(job_id)
    assert job.state == s.JOB_ABANDONED
    assert job.result is not None and job.result["outcome"] == "abandoned"
    for fid in job.input_file_ids:
        info = h.md.get_file(fid)
        assert (info.state, info.job_id) == (s.FILE_LIVE, None)
    assert h.md.get_file(output).state == s.FILE_ABANDONED
    assert not list(h.store.list("compacted/"))
    assert run.service.rounds == 1


def test_stop_lets_the_job_finish_within_the_deadline(h: Harness) -> None:
    run, job_id = stuck_job(h)
    run.service.stop()
    h.clock.advance(SHUTDOWN_MS - 1)  # still within the deadline
    run.gate.set()
    run.join()
    job = h.md.get_job(job_id)
    assert job.state == s.JOB_COMMITTED
    assert h.md.list_jobs(s.JOB_LEASED) == []
    for fid in job.input_file_ids:
        assert h.md.get_file(fid).state == s.FILE_RETIRED
    assert {p: {k: v for _, k, v in h.kv("c", p)} for p in range(2)} == \
        {p: {b"k%d" % p: b"v1"} for p in range(2)}
    assert list(h.store.list("compacted/"))


def test_no_new_job_after_stop(h: Harness) -> None:
    h.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    for i in range(2):
        h.produce([("c", 0, b"k", b"v%d" % i, ())])
    config = CompactorConfig(poll_interval_s=3600, planner=PlannerConfig(l0_trigger_files=2))
    service = CompactorService(Compactor(h.store, h.md, config, clock=h.clock))
    service.stop()
    service.run()  # returns at once: retention and GC ran, no round started a job
    assert h.md.list_jobs() == [] and service.rounds == 0


def test_lease_renewals_keep_a_jobs_outputs_from_other_workers_gc(h: Harness) -> None:
    """GC now runs during jobs: another worker's GC must not take the pending outputs of a
    job that is still renewing its lease, however long it runs."""
    h.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    h.produce([("c", 0, b"k", b"v", ())])
    (seg,) = h.md.find_segments("c", 0, 0)
    lease = h.md.lease_job("spec", [seg.file_id], owner="w1", lease_ms=60_000)
    renewed, left = (h.md.register_pending_file(f"compacted/{name}") for name in "ab")
    other = Compactor(h.store, h.md, CompactorConfig(grace_ms=GRACE_MS), clock=h.clock)
    for _ in range(3):  # 3 x 40 s: longer than the grace period, renewed every 40 s
        h.clock.advance(40_000)
        h.md.renew_lease(lease, 60_000, [renewed])
        other.collect_garbage()
    assert h.md.get_file(renewed).state == s.FILE_PENDING
    assert h.md.get_file(left).state == s.FILE_DELETED  # an upload nobody renews
