"""propose_all (`silt compact --once --all`), validate, describe, spec ids."""

from __future__ import annotations

import json
from dataclasses import replace

from fileformat import Compression
from planner import TopicPolicy, Trigger, describe, propose, propose_all, spec_id_of, validate

from .helpers import NOW, TOPICS, file, l0_files, seg, snapshot


def test_propose_all_is_one_job_over_both_kinds() -> None:
    files = [*l0_files(3, created=NOW, topic="c"), *l0_files(2, created=NOW, start_id=10),
             file(20, seg(20, "d", 100, 109), level=3)]
    (job,) = propose_all(snapshot(*files), NOW).jobs
    assert job.trigger == Trigger.FORCED_ALL and job.output_level == 4
    assert set(job.input_file_ids) == {f.file_id for f in files}
    assert all(p.whole_log for p in job.partitions)


def test_propose_all_skips_a_lone_file_with_nothing_to_do() -> None:
    done = file(1, seg(1, "c", 0, 9, cleaned=NOW - 5), level=2)
    plan = propose_all(snapshot(done), NOW)
    assert plan.jobs == [] and "already fully compacted" in plan.waiting[0]
    assert propose_all(snapshot(), NOW).waiting == ["nothing to compact"]
    # Dirty, or an L0 file (it leaves L0), or a tombstone past its horizon: worth a job.
    assert propose_all(snapshot(file(1, seg(1, "c", 0, 9), level=2)), NOW).jobs
    assert propose_all(snapshot(file(1, seg(1, "d", 0, 9))), NOW).jobs
    tomb = file(1, seg(1, "tomb", 0, 9, cleaned=NOW - 1000, tombstones=1), level=2)
    assert propose_all(snapshot(tomb), NOW).jobs
    tomb = file(1, seg(1, "tomb", 0, 9, cleaned=NOW - 999, tombstones=1), level=2)
    assert not propose_all(snapshot(tomb), NOW).jobs


def test_propose_all_works_around_leased_files() -> None:
    # Partition c/0 runs through files 1, 2 (leased), 3; file 4 holds another partition.
    files = [file(1, seg(1, "c", 0, 9)), file(2, seg(2, "c", 10, 19), leased=True),
             file(3, seg(3, "c", 20, 29), seg(3, "d", 0, 9)), file(4, seg(4, "d", 10, 19)),
             file(5, seg(5, "c", 0, 9, part=1))]
    plan = propose_all(snapshot(*files), NOW)
    ids = [set(j.input_file_ids) for j in plan.jobs]
    assert all(2 not in s for s in ids)
    assert sum(len(s) for s in ids) == len(set().union(*ids)) == 4
    assert any("[2]" in w for w in plan.waiting)
    for job in plan.jobs:
        assert validate(job, snapshot(*files)) == []
        for p in job.partitions:
            assert p.whole_log == (p.partition == 1 or 1 in job.input_file_ids)


def test_validate_reports_what_changed() -> None:
    files = l0_files(2, created=NOW - 10**6, topic="c")
    (job,) = propose_all(snapshot(*files), NOW).jobs
    assert validate(job, snapshot(*files)) == []
    assert validate(job, snapshot(files[0])) == ["file 2 is no longer live (or unknown)"]
    leased = file(2, *files[1].segments, leased=True)
    assert validate(job, snapshot(files[0], leased)) == ["file 2 is held by another job"]
    # A merge elsewhere committed a segment between the two inputs: not contiguous now.
    f1 = file(1, seg(1, "c", 0, 9))
    f3 = file(3, seg(3, "c", 20, 29))
    (job,) = propose_all(snapshot(f1, f3), NOW).jobs
    between = file(2, seg(2, "c", 10, 19), level=1)
    assert "no longer contiguous" in validate(job, snapshot(f1, between, f3))[0]
    # An older segment appeared before the whole-log inputs.
    (job,) = propose_all(snapshot(file(2, seg(2, "c", 10, 19))), NOW).jobs
    head = file(1, seg(1, "c", 0, 9), level=1)
    assert "log start" in validate(job, snapshot(head, file(2, seg(2, "c", 10, 19))))[0]


def test_the_spec_carries_the_topics_decisions() -> None:
    # The executor goes by the spec: a plan per compacted partition, with its codec.
    files = [file(1, seg(1, "c", 0, 9), seg(1, "d", 0, 9))]
    zstd = replace(snapshot(*files), topics={**TOPICS, "c": TopicPolicy(
        "c", compacted=True, codec=Compression.ZSTD)})
    (job,) = propose_all(zstd, NOW).jobs
    assert [(p.topic, p.codec) for p in job.partitions] == [("c", Compression.ZSTD)]
    # ... so a spec planned before a topic's cleanup.policy changed no longer runs.
    assert validate(job, zstd) == []
    no_longer = {**TOPICS, "c": TopicPolicy("c", compacted=False)}
    assert validate(job, replace(zstd, topics=no_longer)) == [
        "topic c: cleanup.policy changed since the job was planned"]
    now_compacted = {**TOPICS, "d": TopicPolicy("d", compacted=True)}
    assert validate(job, replace(zstd, topics=now_compacted)) == [
        "topic d: cleanup.policy changed since the job was planned"]


def test_spec_id_is_deterministic_and_order_free() -> None:
    files = [*l0_files(3, created=NOW - 40_000, topic="c")]
    a = propose(snapshot(*files), NOW).jobs
    b = propose(snapshot(*reversed(files)), NOW + 5).jobs
    assert [j.spec_id for j in a] == [j.spec_id for j in b]
    assert a[0].spec_id == spec_id_of([3, 1, 2], 1) != spec_id_of([1, 2, 3], 2)


def test_describe_is_json() -> None:
    files = [*l0_files(2, created=NOW - 40_000, topic="c"), *l0_files(1, created=NOW,
                                                                      start_id=5)]
    out = describe(propose(snapshot(*files), NOW))
    assert json.loads(json.dumps(out)) == out
    (job,) = out["jobs"]
    assert job["trigger"] == "dirty_ratio" and job["input_files"] == [1, 2]
    assert job["input_bytes"] == 2000 and job["output_level"] == 1
    assert job["partitions"][0]["whole_log"] and job["reason"].startswith("c/0: cleanable")
    assert out["waiting"] == [
        "L0: 1 files, 0.0 MiB; triggers at 32 files / 64 MiB / oldest 30 s (now 0.0 s)"]


def test_propose_all_settles_on_one_file_per_kind() -> None:
    # What a job leaves behind: one clean compacted-topic file and one delete-policy file.
    clean = file(1, seg(1, "c", 0, 9, cleaned=NOW - 5), level=1)
    other = file(2, seg(2, "d", 0, 9), level=1)
    plan = propose_all(snapshot(clean, other), NOW)
    assert plan.jobs == [] and plan.waiting == ["files 1, 2 are already fully compacted"]
    # Two files of one kind still merge; so does dirty data beside the pair.
    more = file(3, seg(3, "d", 10, 19), level=1)
    (job,) = propose_all(snapshot(clean, other, more), NOW).jobs
    assert set(job.input_file_ids) == {1, 2, 3}
    dirty = file(4, seg(4, "c", 10, 19), level=1)
    assert propose_all(snapshot(clean, other, dirty), NOW).jobs
