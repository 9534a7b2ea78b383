"""A compactor killed at each step of a job: the topic reads exactly as before (or as after,
once committed), nothing is lost or duplicated, a later run finishes the work after the
lease expires, and GC removes leftovers only after the grace period."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from compactor import Compactor, CompactorConfig
from metadata.errors import CommitUnknownError
from tests.compactor.support import TP, Harness, Rec, assert_preserved, latest_per_key

LEASE_MS = 5_000
GRACE_MS = 60_000


@pytest.fixture
def h(metadata_url: str) -> Iterator[Harness]:
    harness = Harness.open(metadata_url)
    yield harness
    harness.close()


class Killed(Exception):
    """Stands for the process dying at this point (while it could still clean up)."""


class ProcessKilled(BaseException):
    """The process dies here: no handler of the worker runs (SIGKILL, OOM)."""


class UploadKillingStore:
    """Wraps a store; output uploads die after `after` bytes (0: at put_stream itself)."""

    def __init__(self, inner: Any, after: int | None) -> None:
        self._inner = inner
        self._after = after
        self.started: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_stream(self, key: str) -> Any:
        self.started.append(key)
        if self._after is None:
            raise Killed("killed before the upload")
        inner = self._inner.put_stream(key)
        limit = self._after

        class Writer:
            written = 0

            def write(self, data: bytes) -> int:
                if self.written + len(data) > limit:
                    raise Killed(f"killed after {self.written} bytes of {key}")
                self.written += len(data)
                return int(inner.write(data))

            def close(self) -> None:
                inner.close()

            def abort(self) -> None:
                inner.abort()

        return Writer()


def workload(h: Harness) -> None:
    h.md.create_topic("c", 2, {"cleanup.policy": "compact"})
    h.md.create_topic("d", 2)
    for rnd in range(3):
        h.produce([("c", i % 2, b"k%d" % (i % 5), b"%d-%d" % (rnd, i),
                    (("r", b"%d" % rnd),) if i % 3 == 0 else ()) for i in range(40)]
                  + [("c", 1, b"k1", None, ())]
                  + [("d", i % 2, None if i % 4 else b"x", b"%d-%d" % (rnd, i), ())
                     for i in range(10)])


def read_all(h: Harness) -> dict[TP, list[Rec]]:
    return {(t, p): h.read(t, p) for t in ("c", "d") for p in range(2)}


def assert_compacted_result(h: Harness) -> None:
    for p in range(2):
        assert h.read("d", p) == h.produced[("d", p)]
        got = h.read("c", p)
        assert_preserved(got, h.produced[("c", p)])
        assert got == sorted(latest_per_key(h.produced[("c", p)]).values(),
                             key=lambda r: r.offset)


def finish_and_collect(h: Harness, inputs: set[str]) -> None:
    """After the crash: the lease expires, a fresh worker finishes; GC after the grace."""
    h.clock.advance(LEASE_MS + 1)
    comp = h.compactor(lease_ms=LEASE_MS, grace_ms=GRACE_MS)
    (report,) = comp.run_once(everything=True)
    assert report.outcome == "committed", report.error
    assert_compacted_result(h)
    # Retired inputs stay readable for the grace period (a reader in flight can finish).
    assert inputs <= h.object_keys()
    h.clock.advance(GRACE_MS - 1)
    comp.collect_garbage()
    assert inputs <= h.object_keys()
    h.clock.advance(2)
    comp.collect_garbage()
    assert not inputs & h.object_keys()
    # Every object left is live, and every live file has its object.
    assert h.object_keys() == h.live_keys()
    assert_compacted_result(h)


@pytest.mark.parametrize("where", ["before_upload", "mid_upload", "at_close"])
def test_killed_during_upload(h: Harness, where: str) -> None:
    workload(h)
    before = read_all(h)
    inputs = h.object_keys()
    after = {"before_upload": None, "mid_upload": 100, "at_close": 10**9}[where]
    store = UploadKillingStore(h.store, after)
    if where == "at_close":
        real = store.put_stream

        def dying(key: str) -> Any:
            w = real(key)
            w.close = lambda: (_ for _ in ()).throw(Killed("killed completing the upload"))
            return w

        store.put_stream = dying  # type: ignore[method-assign]
    comp = Compactor(store, h.md, CompactorConfig(lease_ms=LEASE_MS),  # type: ignore[arg-type]
                     clock=h.clock)
    (report,) = comp.run_once(everything=True)
    assert report.outcome == "failed" and "Killed" in (report.error or "")
    assert store.started
    assert read_all(h) == before  # untouched
    assert h.object_keys() == inputs  # no partial output object is visible
    # Its pending output rows are not live; the job was released.
    assert all(h.md.get_file(f.id).state == "live" for f in h.md.snapshot().files)
    assert [j.state for j in h.md.list_jobs()] == ["failed"]
    finish_and_collect(h, inputs)


@pytest.mark.parametrize("error", ["runtime", "unknown"])
def test_killed_after_upload_before_commit(h: Harness, error: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    workload(h)
    before = read_all(h)
    inputs = h.object_keys()
    exc = RuntimeError("killed before COMMIT") if error == "runtime" else CommitUnknownError(
        "connection lost during COMMIT")

    def die(*_: Any, **__: Any) -> Any:
        raise exc

    monkeypatch.setattr(h.md, "commit_compaction", die)
    (report,) = h.compactor(lease_ms=LEASE_MS).run_once(everything=True)
    monkeypatch.undo()
    assert report.outcome == ("failed" if error == "runtime" else "unknown")
    assert read_all(h) == before
    outputs = h.object_keys() - inputs
    if error == "runtime":
        assert outputs == set()  # a definite failure deletes its outputs at once
    else:
        # Outcome unknown: the outputs may be live, so they are left for GC to decide.
        assert len(outputs) == 2
        h.clock.advance(GRACE_MS + 1)
        h.compactor(grace_ms=GRACE_MS).collect_garbage()
        assert read_all(h) == before
        assert h.object_keys() == inputs  # pending outputs collected, inputs kept
    finish_and_collect(h, inputs)


def test_pending_outputs_survive_gc_within_the_grace_period(h: Harness,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A slow job's pending outputs must not be collected under it."""
    workload(h)
    inputs = h.object_keys()

    def die(*_: Any, **__: Any) -> Any:
        raise CommitUnknownError("?")

    monkeypatch.setattr(h.md, "commit_compaction", die)
    h.compactor(lease_ms=LEASE_MS).run_once(everything=True)
    monkeypatch.undo()
    outputs = h.object_keys() - inputs
    h.clock.advance(GRACE_MS - 1)
    h.compactor(grace_ms=GRACE_MS).collect_garbage()
    assert outputs <= h.object_keys()
    h.clock.advance(2)
    h.compactor(grace_ms=GRACE_MS).collect_garbage()
    assert not outputs & h.object_keys()


def test_killed_right_after_commit(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    workload(h)
    inputs = h.object_keys()
    real = h.md.commit_compaction

    def commit_then_die(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise ProcessKilled("killed right after COMMIT")

    monkeypatch.setattr(h.md, "commit_compaction", commit_then_die)
    comp = h.compactor(lease_ms=LEASE_MS, grace_ms=GRACE_MS)
    with pytest.raises(ProcessKilled):
        comp.run_once(everything=True)
    monkeypatch.undo()
    # Committed: the topic reads as after compaction, whatever the dying worker thought.
    assert_compacted_result(h)
    assert [j.state for j in h.md.list_jobs()] == ["committed"]
    # The dying worker must not have deleted the outputs it had just made live.
    assert h.live_keys() <= h.object_keys()
    assert inputs <= h.object_keys()
    h.clock.advance(LEASE_MS + 1)
    assert all(r.outcome == "committed" for r in comp.run_once(everything=True))
    assert_compacted_result(h)  # a later run changes nothing visible
    h.clock.advance(GRACE_MS)
    comp.collect_garbage()
    assert h.object_keys() == h.live_keys()
    assert_compacted_result(h)
