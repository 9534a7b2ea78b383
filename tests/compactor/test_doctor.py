"""`silt doctor` on file:// + SQLite and on moto S3 + PostgreSQL: a healthy store passes; a
deleted, truncated or corrupted object, orphans, a stale pending row and metadata that
disagrees with the objects are each reported; `--fix` removes old orphans only; the
requests it makes, as the S3 server saw them."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from clock import ManualClock
from compactor import CompactorConfig
from compactor.doctor import (
    CORRUPT,
    DANGLING_SEGMENT,
    MISSING,
    ORPHAN,
    SIZE,
    STALE_PENDING,
    STRAY_SEGMENTS,
    DoctorReport,
    doctor,
)
from metadata import FileInfo
from metadata import schema as s
from objects.keys import DATA_PREFIXES
from objectstore import MTIME_SLACK_MS
from objectstore.testserver import RecordingMotoServer
from tests.compactor.cli_support import run
from tests.compactor.support import Harness, Row

GRACE_MS = CompactorConfig().grace_ms
LEASE_MS = CompactorConfig().lease_ms


@pytest.fixture(params=["file+sqlite", "s3+postgres"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(store URL, metadata URL)."""
    if request.param == "file+sqlite":
        return f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db"
    return str(request.getfixturevalue("s3_url")), str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def h(urls: tuple[str, str]) -> Iterator[Harness]:
    """A store in use: two flushes compacted (outputs live, inputs retired within the GC
    grace), then one more flush; the clock at real time, as the stores' own clocks are."""
    store_url, metadata_url = urls
    harness = Harness.open(metadata_url, store_url, ManualClock(time.time_ns() // 1_000_000))
    harness.md.create_topic("state", 2, {"cleanup.policy": "compact"})
    harness.md.create_topic("events", 2)

    def rows(n: int) -> list[Row]:
        return ([("state", p, b"k%d" % (i % 3), b"v%d" % i, ()) for p in range(2)
                 for i in range(n)]
                + [("events", p, None, b"e%d" % i, ()) for p in range(2) for i in range(n)])

    harness.produce(rows(5))
    harness.produce(rows(7))
    reports = harness.compactor().run_once(everything=True)
    assert reports and all(r.outcome == "committed" for r in reports)
    harness.produce(rows(3))
    yield harness
    harness.close()


def check(h: Harness, *, deep: bool = False, fix: bool = False,
          now_ms: int | None = None) -> DoctorReport:
    return doctor(h.store, h.md, CompactorConfig(), deep=deep, fix=fix,
                  clock=ManualClock(h.clock.now_ms() if now_ms is None else now_ms))


def kinds(report: DoctorReport) -> list[tuple[str, str]]:
    return sorted((p.kind, p.key) for p in report.problems)


def live_files(h: Harness) -> list[FileInfo]:
    return [f for f in h.md.audit_snapshot().files if f.state == s.FILE_LIVE]


def a_live_file(h: Harness, prefix: str = "data/") -> FileInfo:
    return next(f for f in live_files(h) if f.object_key.startswith(prefix))


def test_healthy_store_passes(h: Harness) -> None:
    files = live_files(h)
    assert {f.object_key.split("/")[0] + "/" for f in files} == set(DATA_PREFIXES)
    assert any(f.state == s.FILE_RETIRED for f in h.md.audit_snapshot().files)
    report = check(h)
    assert report.ok and report.problems == []
    assert report.live_files == len(files)
    assert report.live_bytes == sum(f.size or 0 for f in files)
    # Retired inputs awaiting GC are listed too: they have rows, so they are no orphans.
    assert report.objects_listed > len(files)
    deep = check(h, deep=True)
    assert deep.ok and deep.objects_verified == len(files)


def test_deleted_object_is_missing(h: Harness) -> None:
    f = a_live_file(h, "compacted/")
    h.store.delete_many([f.object_key])
    report = check(h, deep=True)
    assert not report.ok
    assert kinds(report) == [(MISSING, f.object_key)]
    assert report.problems[0].file_id == f.id
    assert report.objects_verified == report.live_files - 1  # not read: known missing


def test_truncated_object_has_the_wrong_size(h: Harness) -> None:
    f = a_live_file(h)
    h.store.put(f.object_key, h.store.get(f.object_key)[:-10])
    report = check(h)
    assert kinds(report) == [(SIZE, f.object_key)]
    assert f.size is not None
    assert report.problems[0].detail == f"{f.size - 10:,} bytes in the store, {f.size:,} in its row"


def test_orphans_are_reported_and_fix_removes_only_those_past_the_grace(h: Harness) -> None:
    # An object whose row GC deleted: a retired input collected after the grace period,
    # then written again (an upload that landed after GC gave up on it).
    retired = [f for f in h.md.audit_snapshot().files if f.state == s.FILE_RETIRED]
    kept = {f.object_key: h.store.get(f.object_key) for f in retired}
    h.clock.advance(GRACE_MS + 1)
    assert sorted(h.compactor().collect_garbage().deleted) == sorted(kept)
    late, data = next(iter(kept.items()))
    h.store.put(late, data)
    old = "data/00000000000000000001-orphan.silt"
    h.store.put(old, b"old")
    time.sleep(1.1)  # S3's LastModified has whole seconds: the young one is a second later
    young = "data/99999999999999999999-orphan.silt"
    h.store.put(young, b"young")
    times = {o.key: o.modified_ms or 0 for o in h.store.list("data/")}
    assert min(times[old], times[late]) > 0  # both stores keep modification times
    assert times[young] > max(times[old], times[late])
    # Now: the young one is exactly at the grace period (plus the store clock's slack).
    now = times[young] + GRACE_MS + MTIME_SLACK_MS

    report = check(h, now_ms=now)
    assert kinds(report) == sorted([(ORPHAN, late), (ORPHAN, old), (ORPHAN, young)])
    assert not report.ok and not any(p.removed for p in report.problems)
    by_key = {p.key: p for p in report.problems}
    assert "is deleted" in by_key[late].detail and "no file row" in by_key[old].detail
    assert "past the GC grace" in by_key[old].detail
    assert "within the GC grace" in by_key[young].detail
    assert {o.key for o in h.store.list("data/")} >= {late, old, young}  # nothing removed

    fixed = check(h, fix=True, now_ms=now)
    assert {p.key: p.removed for p in fixed.problems} == {late: True, old: True, young: False}
    assert not fixed.ok  # the young orphan is still there
    left = {o.key for o in h.store.list("data/")}
    assert young in left and old not in left and late not in left
    assert kinds(check(h, now_ms=now)) == [(ORPHAN, young)]
    # Past the grace, --fix takes it too; then the store is healthy.
    assert check(h, fix=True, now_ms=now + 1).ok
    assert check(h, now_ms=now + 1).problems == []


def test_stale_pending_row(h: Harness) -> None:
    file_id = h.md.register_pending_file("data/stuck.silt")
    registered = h.clock.now_ms()
    assert check(h, now_ms=registered + LEASE_MS).ok  # not older than the lease yet
    report = check(h, now_ms=registered + LEASE_MS + 1)
    assert kinds(report) == [(STALE_PENDING, "data/stuck.silt")]
    assert report.problems[0].file_id == file_id
    assert "compactor.lease.ms" in report.problems[0].detail


@pytest.mark.parametrize("section", ["data", "meta"])
def test_corrupted_byte_is_found_by_deep_only(h: Harness, section: str) -> None:
    f = a_live_file(h, "compacted/")
    assert f.layout is not None
    raw = bytearray(h.store.get(f.object_key))
    pos = f.layout.data_offset + 100 if section == "data" else f.layout.meta_offset + 30
    raw[pos] ^= 0x5A
    h.store.put(f.object_key, bytes(raw))
    assert check(h).ok  # same size: only reading it tells
    report = check(h, deep=True)
    assert kinds(report) == [(CORRUPT, f.object_key)]
    assert "CRC" in report.problems[0].detail
    assert report.objects_verified == report.live_files


def test_segment_row_that_disagrees_with_the_object_index(h: Harness) -> None:
    f = a_live_file(h)
    with h.md.write() as conn:
        seg = conn.execute(sa.select(s.segments.c.id).where(
            s.segments.c.file_id == f.id, s.LIVE).limit(1)).scalar_one()
        conn.execute(s.segments.update().where(s.segments.c.id == seg)
                     .values(record_count=s.segments.c.record_count + 1))
    assert check(h).ok
    report = check(h, deep=True)
    assert kinds(report) == [(CORRUPT, f.object_key)]
    assert f"live segment {seg} " in report.problems[0].detail
    assert report.problems[0].detail.endswith("record_count")


def test_live_segments_in_a_file_that_is_not_live(h: Harness) -> None:
    f = a_live_file(h)
    with h.md.write() as conn:
        conn.execute(s.files.update().where(s.files.c.id == f.id)
                     .values(state=s.FILE_RETIRED))
    report = check(h, deep=True)
    assert kinds(report) == [(STRAY_SEGMENTS, f.object_key)]
    assert "live segments in a retired file" in report.problems[0].detail


# ------------------------------------------------------------------ requests (moto)


def test_requests_as_the_server_saw_them(s3_url: str, postgres_url: str,
                                         moto_server: RecordingMotoServer) -> None:
    h = Harness.open(postgres_url, s3_url, ManualClock(time.time_ns() // 1_000_000))
    try:
        h.md.create_topic("events", 3)
        for i in range(4):
            h.produce([("events", p, None, b"e%d" % i, ()) for p in range(3)])
        assert h.compactor().run_once(everything=True)
        h.produce([("events", p, None, b"late", ()) for p in range(3)])
        n_live = len(live_files(h))
        assert n_live == 2

        moto_server.clear_log()
        report = check(h)
        assert report.ok
        # One LIST per data prefix (under 1,000 objects each): no HEAD, no GET.
        assert moto_server.counts() == {"LIST": len(DATA_PREFIXES)}
        assert report.requests == dict(moto_server.counts())

        moto_server.clear_log()
        report = check(h, deep=True)
        assert report.ok and report.objects_verified == n_live
        # --deep: two ranged GETs per live object, whatever it holds.
        assert moto_server.counts() == {"LIST": len(DATA_PREFIXES), "GET": 2 * n_live}
        assert report.requests == dict(moto_server.counts())
        gets = [r for r in moto_server.requests if r.operation == "GET"]
        assert all(r.range for r in gets)

        h.store.put("data/orphan.silt", b"x")
        moto_server.clear_log()
        report = check(h, fix=True, now_ms=h.clock.now_ms() + GRACE_MS + 10 * MTIME_SLACK_MS)
        assert report.ok and [p.removed for p in report.problems] == [True]
        assert moto_server.counts() == {"LIST": len(DATA_PREFIXES), "DELETE": 1}
    finally:
        h.close()


# ------------------------------------------------------------------ the command


def test_silt_doctor_command(h: Harness, urls: tuple[str, str]) -> None:
    env = {"SILT_STORE": urls[0], "SILT_METADATA": urls[1]}
    code, out, err = run(["doctor", "--json"], env)
    assert code == 0, err
    got = json.loads(out)
    assert got["ok"] and got["problems"] == [] and got["live_files"] == len(live_files(h))
    code, out, _ = run(["doctor", "--deep"], env)
    assert code == 0 and "no problem" in out.splitlines()[-1]

    f = a_live_file(h)
    h.store.delete_many([f.object_key])
    code, out, _ = run(["doctor", "--json"], env)
    assert code == 1
    got = json.loads(out)
    assert not got["ok"]
    assert [(p["kind"], p["key"]) for p in got["problems"]] == [(MISSING, f.object_key)]
    code, out, _ = run(["doctor"], env)
    assert code == 1 and out.startswith(f"missing: {f.object_key} (file {f.id})")


def test_silt_doctor_fix_removes_old_orphans_only(tmp_path: Path) -> None:
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    objects = tmp_path / "objects" / "data"
    objects.mkdir(parents=True)
    (objects / "old.silt").write_bytes(b"old")
    (objects / "young.silt").write_bytes(b"young")
    hour_ago = time.time() - 3600
    os.utime(objects / "old.silt", (hour_ago, hour_ago))
    assert run(["init"], env)[0] == 0  # doctor reads; it creates no metadata
    code, out, _ = run(["doctor", "--fix", "--json"], env)
    assert code == 1  # the young orphan is left
    got = {p["key"]: p["removed"] for p in json.loads(out)["problems"]}
    assert got == {"data/old.silt": True, "data/young.silt": False}
    assert sorted(p.name for p in objects.iterdir()) == ["young.silt"]
    # A shorter grace period (the GC's own setting) makes the young one old enough too.
    env["SILT_COMPACTOR_FILE_DELETE_DELAY_MS"] = "0"
    os.utime(objects / "young.silt", (hour_ago, hour_ago))
    code, out, _ = run(["doctor", "--fix"], env)
    assert code == 0 and "1 orphans removed" in out
    assert list(objects.iterdir()) == []


def test_segment_rows_whose_partition_or_file_is_gone(h: Harness) -> None:
    """The segments table has no foreign keys (schema v16): a segment row left behind its
    partition's or its file's row is reported, by segment."""
    events = h.md.get_topic("events").id
    sg = s.segments.c
    with h.md.read() as conn:
        in_p1 = conn.execute(sa.select(sg.id).where(sg.topic_id == events, sg.partition == 1)
                             .order_by(sg.id)).scalars().all()
        other = conn.execute(sa.select(sg.id, sg.file_id).where(sg.topic_id != events)
                             .order_by(sg.id).limit(1)).one()
    with h.md.write() as conn:  # what no metadata function does: the bugs this finds
        conn.execute(s.partitions.delete().where(s.partitions.c.topic_id == events,
                                                 s.partitions.c.partition == 1))
        conn.execute(s.segments.update().where(sg.id == other.id).values(file_id=10**9))
    report = check(h)
    dangling = sorted(int(p.detail.split()[1]) for p in report.problems
                      if p.kind == DANGLING_SEGMENT)
    assert dangling == sorted([*in_p1, other.id]) and len(in_p1) >= 3
    assert not report.ok
    assert all(p.kind == DANGLING_SEGMENT for p in report.problems)
    assert any(p.file_id == 10**9 and p.key == "" for p in report.problems)
