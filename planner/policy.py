"""The compaction policy: `propose(snapshot, now_ms, config) -> Plan`. Pure and per segment.

Rules:
- Jobs take whole files and never share a file; leased files are never proposed.
- A job's files are *closed* under partition contiguity: for every partition they hold,
  any live segment of it lying between the job's first and last segment of it must be in
  the job too, so the output segment (one per partition) overlaps no other live segment.
- Compacted partitions follow Kafka: cleanable ratio = dirty bytes / total bytes (dirty =
  never cleaned by a whole-log pass) above `min.cleanable.dirty.ratio`, dirtiest first, or
  forced once the oldest dirty data is older than `max.compaction.lag.ms`; such a job holds
  the partition's whole log. Data younger than `min.compaction.lag.ms` is not cleaned.
- Size-tiered levels: level L is merged into L+1 when it has enough files or bytes, or
  (L0 only) when its oldest file is old enough; bin-packed to the target file size. From
  L1 on, files hold either compacted-topic data or delete-policy data, never both.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .model import (
    FileView,
    JobSpec,
    PartitionPlan,
    Plan,
    PlannerConfig,
    SegmentView,
    Snapshot,
    TopicPartition,
    Trigger,
)

MIB = 1024 * 1024


def spec_id_of(input_file_ids: Iterable[int], output_level: int) -> str:
    """Deterministic id: the same inputs and level give the same spec id."""
    ids = ",".join(str(i) for i in sorted(input_file_ids))
    return hashlib.sha256(f"{ids}->{output_level}".encode()).hexdigest()[:20]


class _Index:
    """Per-partition views of a snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.files = {f.file_id: f for f in snap.files}
        self.by_tp: dict[TopicPartition, list[SegmentView]] = defaultdict(list)
        for f in snap.files:
            for s in f.segments:
                self.by_tp[s.tp].append(s)
        for segs in self.by_tp.values():
            segs.sort(key=lambda s: s.base_offset)

    def dirty(self, s: SegmentView) -> bool:
        """Not yet deduplicated by a whole-log pass (at or above the cleaner checkpoint)."""
        state = self.snap.partitions.get(s.tp)
        checkpoint = state.clean_offset if state is not None else 0
        return s.cleaned_at_ms is None or s.last_offset >= checkpoint

    def compacted(self, topic: str) -> bool:
        policy = self.snap.topics.get(topic)
        return policy is not None and policy.compacted

    def closure(self, file_ids: Iterable[int]) -> set[int]:
        """The smallest superset whose segments are contiguous per partition."""
        job = set(file_ids)
        changed = True
        while changed:
            changed = False
            ranges: dict[TopicPartition, tuple[int, int]] = {}
            for fid in job:
                for s in self.files[fid].segments:
                    lo, hi = ranges.get(s.tp, (s.base_offset, s.last_offset))
                    ranges[s.tp] = (min(lo, s.base_offset), max(hi, s.last_offset))
            for tp, (lo, hi) in ranges.items():
                for s in self.by_tp[tp]:
                    if s.file_id not in job and s.last_offset >= lo and s.base_offset <= hi:
                        job.add(s.file_id)
                        changed = True
        return job

    def partition_plans(self, file_ids: set[int], now_ms: int) -> tuple[PartitionPlan, ...]:
        """A plan for every compacted partition the files hold."""
        in_job: dict[TopicPartition, list[SegmentView]] = defaultdict(list)
        for fid in file_ids:
            for s in self.files[fid].segments:
                if self.compacted(s.topic):
                    in_job[s.tp].append(s)
        plans = []
        for tp in sorted(in_job):
            policy = self.snap.topics[tp[0]]
            all_live = self.by_tp[tp]
            state = self.snap.partitions.get(tp)
            # Live segments always start at the log start, so holding all of them is holding
            # the whole log: no older value of a key can exist outside the job.
            whole = all(s.file_id in file_ids for s in all_live)
            plans.append(PartitionPlan(
                tp[0], tp[1], whole_log=whole,
                clean_upto_offset=_first_uncleanable(all_live, policy.min_compaction_lag_ms,
                                                     now_ms),
                delete_retention_ms=policy.delete_retention_ms,
                dirty_start_offset=state.clean_offset if state is not None else 0,
            ))
        return tuple(plans)


def _first_uncleanable(segs: list[SegmentView], min_lag_ms: int, now_ms: int) -> int:
    """Kafka's first uncleanable offset: the first segment with data younger than the lag."""
    if min_lag_ms <= 0:
        return 2**63 - 1
    for s in segs:  # by base offset
        if s.max_timestamp > now_ms - min_lag_ms:
            return s.base_offset
    return 2**63 - 1


def _job(ix: _Index, files: set[int], trigger: Trigger, reason: str, now_ms: int,
         config: PlannerConfig) -> JobSpec:
    level = min(config.max_level, max(ix.files[f].level for f in files) + 1)
    ids = tuple(sorted(files))
    return JobSpec(
        spec_id=spec_id_of(ids, level),
        input_file_ids=ids,
        output_level=level,
        trigger=trigger,
        reason=reason,
        input_bytes=sum(ix.files[f].size_bytes for f in files),
        partitions=ix.partition_plans(files, now_ms),
    )


def _dirty_candidates(ix: _Index, now_ms: int,
                      config: PlannerConfig) -> list[tuple[float, TopicPartition, Trigger, str]]:
    """Compacted partitions due for a whole-log clean, dirtiest first."""
    out = []
    for tp, segs in ix.by_tp.items():
        if not ix.compacted(tp[0]):
            continue
        policy = ix.snap.topics[tp[0]]
        # Fresh L0 data is left to the age trigger (it dedupes too), like Kafka leaves the
        # active segment alone.
        settled = [s for s in segs if ix.files[s.file_id].level > 0
                   or now_ms - s.created_at_ms >= config.l0_max_age_ms]
        total = sum(s.size_bytes for s in segs)
        dirty = [s for s in settled if ix.dirty(s)]
        if not dirty or total == 0:
            continue
        ratio = sum(s.size_bytes for s in dirty) / total
        oldest = min(s.created_at_ms for s in dirty)
        if now_ms - oldest >= policy.max_compaction_lag_ms:
            out.append((2.0 + ratio, tp, Trigger.MAX_COMPACTION_LAG,
                        f"{tp[0]}/{tp[1]}: dirty data older than max.compaction.lag.ms="
                        f"{policy.max_compaction_lag_ms}"))
        elif ratio > policy.min_cleanable_dirty_ratio:
            out.append((ratio, tp, Trigger.DIRTY_RATIO,
                        f"{tp[0]}/{tp[1]}: cleanable ratio {ratio:.2f} > "
                        f"min.cleanable.dirty.ratio={policy.min_cleanable_dirty_ratio}"))
    out.sort(key=lambda c: -c[0])
    return out


def propose(snap: Snapshot, now_ms: int, config: PlannerConfig | None = None) -> Plan:
    """Jobs to run now (never overlapping, never touching leased files) and what waits."""
    config = config or PlannerConfig()
    ix = _Index(snap)
    taken: set[int] = {f.file_id for f in snap.files if f.leased}
    jobs: list[JobSpec] = []
    waiting: list[str] = []

    def admit(files: set[int], trigger: Trigger, reason: str) -> bool:
        full = ix.closure(files)
        busy = full & taken
        if busy:
            waiting.append(f"{reason}: waits for files {sorted(busy)} held by another job")
            return False
        if len(full) == 1 and ix.files[next(iter(full))].level > 0 and trigger not in (
                Trigger.DIRTY_RATIO, Trigger.MAX_COMPACTION_LAG):
            return False
        extra = f" (+{len(full) - len(files)} files for contiguity)" if full != files else ""
        jobs.append(_job(ix, full, trigger, reason + extra, now_ms, config))
        taken.update(full)
        return True

    for _, tp, trigger, reason in _dirty_candidates(ix, now_ms, config):
        files = {s.file_id for s in ix.by_tp[tp]}
        if files & {f for j in jobs for f in j.input_file_ids}:
            continue  # already cleaned whole by a job proposed above
        admit(files, trigger, reason)

    for level in range(config.max_level + 1):
        at_level = [f for f in snap.files if f.level == level and f.file_id not in taken]
        groups: list[tuple[str, list[FileView]]]
        if level == 0:
            groups = [("L0", at_level)]
        else:
            groups = [(f"L{level} compacted", [f for f in at_level if f.holds_compacted]),
                      (f"L{level} delete", [f for f in at_level if not f.holds_compacted])]
        for name, members in groups:
            if not members:
                continue
            members.sort(key=lambda f: (f.created_at_ms, f.file_id))
            count, size = len(members), sum(f.size_bytes for f in members)
            age = now_ms - members[0].created_at_ms
            trigger_files = config.l0_trigger_files if level == 0 else config.level_trigger_files
            due: Trigger | None = None
            if count >= trigger_files:
                due = Trigger.FILE_COUNT
            elif size >= config.level_trigger_bytes:
                due = Trigger.BYTES
            elif level == 0 and age >= config.l0_max_age_ms:
                due = Trigger.AGE
            if due is None or (level > 0 and count < 2) or level >= config.max_level:
                if level < config.max_level:
                    waiting.append(
                        f"{name}: {count} files, {size / MIB:.1f} MiB; triggers at "
                        f"{trigger_files} files / {config.level_trigger_bytes / MIB:.0f} MiB"
                        + (f" / oldest {config.l0_max_age_ms / 1000:g} s (now {age / 1000:.1f} s)"
                           if level == 0 else ""))
                continue
            for bin_ in _bin_pack(members, config.target_file_bytes):
                admit({f.file_id for f in bin_}, due,
                      f"{name}: {due.value} ({count} files, {size / MIB:.1f} MiB)")
    return Plan(jobs, waiting)


def _bin_pack(files: list[FileView], target: int) -> list[list[FileView]]:
    """Consecutive runs (oldest first) of about `target` bytes each."""
    bins: list[list[FileView]] = [[]]
    size = 0
    for f in files:
        if bins[-1] and size + f.size_bytes > target:
            bins.append([])
            size = 0
        bins[-1].append(f)
        size += f.size_bytes
    return [b for b in bins if b]


def propose_all(snap: Snapshot, now_ms: int, config: PlannerConfig | None = None) -> Plan:
    """Ignore triggers: one job over every file not held by a running job, fully cleaned."""
    config = config or PlannerConfig()
    ix = _Index(snap)
    leased = {f.file_id for f in snap.files if f.leased}
    free = {f.file_id for f in snap.files} - leased
    waiting = [f"files {sorted(leased)} are held by running jobs"] if leased else []
    # Drop files whose contiguity closure needs a leased file.
    usable = {f for f in free if not ix.closure({f}) & leased}
    if not usable:
        return Plan([], [*waiting, "nothing to compact"])
    full = ix.closure(usable)
    if full & leased:
        return Plan([], [*waiting, "every candidate overlaps a running job"])
    only = ix.files[next(iter(full))] if len(full) == 1 else None
    if only is not None and only.level > 0 and all(
            not s.tombstone_count and not (ix.compacted(s.topic) and ix.dirty(s))
            for s in only.segments):
        return Plan([], [*waiting, "already fully compacted"])
    job = _job(ix, full, Trigger.FORCED_ALL, f"--all: {len(full)} files", now_ms, config)
    return Plan([job], waiting)


def validate(spec: JobSpec, snap: Snapshot) -> list[str]:
    """Why the spec can no longer run as proposed (empty list: it can)."""
    files = {f.file_id: f for f in snap.files}
    problems = []
    for fid in spec.input_file_ids:
        f = files.get(fid)
        if f is None:
            problems.append(f"file {fid} is no longer live")
        elif f.leased:
            problems.append(f"file {fid} is held by another job")
    if not problems:
        ix = _Index(snap)
        if ix.closure(spec.input_file_ids) != set(spec.input_file_ids):
            problems.append("inputs are no longer contiguous per partition")
    return problems


def describe(plan: Plan) -> dict[str, Any]:
    """JSON-able form for `silt plan --json`."""
    return {
        "jobs": [
            {
                "spec_id": j.spec_id,
                "trigger": j.trigger.value,
                "reason": j.reason,
                "input_files": list(j.input_file_ids),
                "input_bytes": j.input_bytes,
                "output_level": j.output_level,
                "compacted_partitions": len(j.partitions),
                "whole_log_partitions": sum(p.whole_log for p in j.partitions),
            }
            for j in plan.jobs
        ],
        "waiting": plan.waiting,
    }
