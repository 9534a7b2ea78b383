"""The compaction policy: `propose(snapshot, now_ms, config) -> Plan`. Pure; cost per segment.

Rules:
- Jobs take whole files and never share a file; leased files are never proposed.
- A job's files are *closed* under partition contiguity: for every partition they hold, any
  live segment lying between the job's first and last segment of it is in the job too, so
  the output segment (one per partition) overlaps no other live segment.
- Compacted partitions follow Kafka's cleaner: cleanable ratio = dirty bytes / (clean +
  dirty bytes) below the first uncleanable offset (min.compaction.lag.ms; fresh L0 files act
  as the active segment). Above `min.cleanable.dirty.ratio` (dirtiest first), or once the
  oldest dirty data is older than `max.compaction.lag.ms`, a job takes every file holding
  the partition (its whole log). A whole-log job that needs a leased file waits.
- Size-tiered levels: level L is merged into L+1 when it has enough files or bytes, or its
  oldest file is old enough; jobs are bin-packed to the target size. From L1 on, files
  hold either compacted-topic data or delete-policy data, and are merged per kind.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .model import (
    FileView,
    JobSpec,
    PartitionPlan,
    Plan,
    PlannerConfig,
    SegmentView,
    Snapshot,
    TopicCleaning,
    TopicPartition,
    TopicPolicy,
    Trigger,
)

MIB = 1024 * 1024
_BASE_OFFSET = attrgetter("base_offset")


def spec_id_of(input_file_ids: Iterable[int], output_level: int) -> str:
    """Deterministic id: the same inputs and level give the same spec id."""
    ids = ",".join(str(i) for i in sorted(input_file_ids))
    return hashlib.sha256(f"{ids}->{output_level}".encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A compacted partition due for a whole-log clean."""

    ratio: float
    tp: TopicPartition
    trigger: Trigger
    reason: str


class _Index:
    """Per-partition views of a snapshot at one instant.

    Built in one pass over the segments; the loops below run per segment of a whole
    snapshot (100,000 and more), so they use plain tuples and sets and no per-segment
    method calls.
    """

    def __init__(self, snap: Snapshot, now_ms: int, config: PlannerConfig) -> None:
        self.snap = snap
        self.now_ms = now_ms
        self.config = config
        self.files = {f.file_id: f for f in snap.files}
        by_tp: dict[TopicPartition, list[SegmentView]] = {}
        for f in snap.files:
            for s in f.segments:
                tp = (s.topic, s.partition)
                segs = by_tp.get(tp)
                if segs is None:
                    by_tp[tp] = [s]
                else:
                    segs.append(s)
        # file id -> (partition, index of its segment in the partition's list) per segment
        self.places: dict[int, list[tuple[TopicPartition, int]]] = {
            f.file_id: [] for f in snap.files}
        for tp, segs in by_tp.items():
            segs.sort(key=_BASE_OFFSET)
            for i, s in enumerate(segs):
                self.places[s.file_id].append((tp, i))
        self.by_tp: defaultdict[TopicPartition, list[SegmentView]] = defaultdict(list, by_tp)
        self.compacted = frozenset(t for t, p in snap.topics.items() if p.compacted)
        self.fresh_ids = frozenset(f.file_id for f in snap.files if self.fresh(f))
        self._uncleanable: dict[TopicPartition, int] = {}

    def policy(self, topic: str) -> TopicPolicy | None:
        """The topic's policy if it is compacted, else None."""
        p = self.snap.topics.get(topic)
        return p if p is not None and p.compacted else None

    def checkpoint(self, tp: TopicPartition) -> int:
        state = self.snap.partitions.get(tp)
        return state.clean_offset if state is not None else 0

    def dirty(self, s: SegmentView) -> bool:
        """Not yet deduplicated by a whole-log pass (or straddling the cleaner checkpoint)."""
        return s.cleaned_at_ms is None or s.last_offset >= self.checkpoint(s.tp)

    def first_uncleanable(self, tp: TopicPartition) -> int:
        """Kafka's first uncleanable offset: the base of the first dirty segment holding a
        record younger than min.compaction.lag.ms (by its max timestamp), else the log end;
        never past the last stable offset (an open transaction's records are not cleaned,
        nor anything after them: LogCleanerManager's firstUnstableOffset)."""
        hit = self._uncleanable.get(tp)
        if hit is not None:
            return hit
        segs = self.by_tp[tp]
        policy = self.policy(tp[0])
        end = segs[-1].last_offset + 1 if segs else 0
        state = self.snap.partitions.get(tp)
        if state is not None:
            end = max(end, state.next_offset)
            if state.last_stable_offset is not None:
                end = min(end, state.last_stable_offset)
        if policy is not None and policy.min_compaction_lag_ms > 0:
            horizon = self.now_ms - policy.min_compaction_lag_ms
            for s in segs:
                if self.dirty(s) and s.max_timestamp > horizon:
                    end = s.base_offset
                    break
        self._uncleanable[tp] = end
        return end

    def fresh(self, f: FileView) -> bool:
        """An L0 file still inside its age window: like Kafka's active segment."""
        return f.level == 0 and self.now_ms - f.created_at_ms < self.config.l0_max_age_ms

    def closure(self, seeds: Iterable[int]) -> set[int]:
        """The smallest superset of `seeds` whose segments are contiguous per partition.

        Keeps a covered index span per partition: each round takes in the files found in
        the last one, widens the spans over their segments, then scans only the newly
        covered indexes for files not yet in, so each segment is visited about twice.
        """
        job: set[int] = set()
        span: dict[TopicPartition, list[int]] = {}  # inclusive [first, last] index
        places, by_tp = self.places, self.by_tp
        found = set(seeds)
        while found:
            job |= found
            before: dict[TopicPartition, tuple[int, int] | None] = {}
            for fid in found:
                for tp, k in places[fid]:
                    cur = span.get(tp)
                    if cur is None:
                        before[tp] = None
                        span[tp] = [k, k]
                        continue
                    if tp not in before:
                        before[tp] = (cur[0], cur[1])
                    if k < cur[0]:
                        cur[0] = k
                    elif k > cur[1]:
                        cur[1] = k
            found = set()
            for tp, old in before.items():
                lo, hi = span[tp]
                segs = by_tp[tp]
                new = (segs[lo:hi + 1] if old is None
                       else segs[lo:old[0]] + segs[old[1] + 1:hi + 1])
                for x in new:
                    if x.file_id not in job:
                        found.add(x.file_id)
        return job

    def partition_plans(self, file_ids: set[int]) -> tuple[PartitionPlan, ...]:
        """A plan for every compacted partition the files hold."""
        compacted = self.compacted
        in_job: dict[TopicPartition, list[SegmentView]] = defaultdict(list)
        for fid in file_ids:
            for s in self.files[fid].segments:
                if s.topic in compacted:
                    in_job[(s.topic, s.partition)].append(s)
        plans = []
        for tp in sorted(in_job):
            policy = self.snap.topics[tp[0]]
            segs = in_job[tp]
            upto = self.first_uncleanable(tp)
            checkpoint = self.checkpoint(tp)
            # Closed files hold a contiguous run; holding the first live segment means
            # holding the log from its start (compaction leaves offset gaps, so compare
            # segments, not offsets with log_start_offset).
            whole = self.by_tp[tp][0].file_id in file_ids
            horizon = self.now_ms - policy.delete_retention_ms
            drop = frozenset(
                s.segment_id for s in segs
                if s.tombstone_count > 0 and s.cleaned_at_ms is not None
                and s.cleaned_at_ms <= horizon and s.last_offset < upto
            ) if whole else frozenset()
            plans.append(PartitionPlan(
                tp[0], tp[1], whole_log=whole, clean_upto_offset=upto,
                delete_retention_ms=policy.delete_retention_ms,
                dirty_start_offset=checkpoint,
                dedupe=any((s.cleaned_at_ms is None or s.last_offset >= checkpoint)
                           and s.base_offset < upto for s in segs),
                tombstone_drop_segment_ids=drop,
                codec=policy.codec,
            ))
        return tuple(plans)

    def job(self, files: set[int], trigger: Trigger, reason: str) -> JobSpec:
        level = min(self.config.max_level, max(self.files[f].level for f in files) + 1)
        ids = tuple(sorted(files))
        return JobSpec(
            spec_id=spec_id_of(ids, level),
            input_file_ids=ids,
            output_level=level,
            trigger=trigger,
            reason=reason,
            input_bytes=sum(self.files[f].size_bytes for f in files),
            partitions=self.partition_plans(files),
        )

    def cleanable(self, tp: TopicPartition) -> tuple[int, int, int | None]:
        """(clean bytes, dirty bytes, oldest dirty timestamp) of a compacted partition
        below its first uncleanable offset, fresh L0 files left out: what Kafka's cleaner
        weighs (its cleanable ratio, and the age max.compaction.lag.ms bounds)."""
        upto = self.first_uncleanable(tp)
        checkpoint = self.checkpoint(tp)
        fresh = self.fresh_ids
        clean = dirty = 0
        oldest: int | None = None
        for s in self.by_tp[tp]:
            if s.last_offset >= upto or s.file_id in fresh:
                break  # Kafka only weighs what lies below the first uncleanable offset
            if s.cleaned_at_ms is None or s.last_offset >= checkpoint:  # dirty
                dirty += s.size_bytes
                ts = s.min_timestamp if s.min_timestamp is not None else s.created_at_ms
                if oldest is None or ts < oldest:
                    oldest = ts
            else:
                clean += s.size_bytes
        return clean, dirty, oldest

    def dirty_candidates(self) -> tuple[list[_Candidate], str | None]:
        """Compacted partitions due for a whole-log clean (dirtiest first), and a summary
        of the dirtiest one that is not due yet."""
        out: list[_Candidate] = []
        best: tuple[float, TopicPartition, float] | None = None
        for tp in sorted(tp for tp in self.by_tp if tp[0] in self.compacted):
            policy = self.snap.topics[tp[0]]
            clean, dirty, oldest = self.cleanable(tp)
            if oldest is None or dirty == 0:
                continue
            ratio = dirty / (clean + dirty)
            name = f"{tp[0]}/{tp[1]}"
            if self.now_ms - oldest >= policy.max_compaction_lag_ms:
                out.append(_Candidate(ratio, tp, Trigger.MAX_COMPACTION_LAG,
                                      f"{name}: dirty data {self.now_ms - oldest} ms old >= "
                                      f"max.compaction.lag.ms={policy.max_compaction_lag_ms}"))
            elif ratio > policy.min_cleanable_dirty_ratio:
                out.append(_Candidate(ratio, tp, Trigger.DIRTY_RATIO,
                                      f"{name}: cleanable ratio {ratio:.2f} > "
                                      f"min.cleanable.dirty.ratio="
                                      f"{policy.min_cleanable_dirty_ratio}"))
            elif best is None or ratio > best[0]:
                best = (ratio, tp, policy.min_cleanable_dirty_ratio)
        out.sort(key=lambda c: (-c.ratio, c.tp))  # Kafka: the filthiest log first
        summary = None
        if best is not None:
            summary = (f"compacted {best[1][0]}/{best[1][1]}: cleanable ratio {best[0]:.2f}, "
                       f"cleans above min.cleanable.dirty.ratio={best[2]} (dirtiest not due)")
        return out, summary


def propose(snap: Snapshot, now_ms: int, config: PlannerConfig | None = None) -> Plan:
    """Jobs to run now (never overlapping, never touching leased files) and what waits.

    Whole-log cleans of compacted partitions come first (dirtiest first), then the
    size-tiered merges per level, over the files the cleans left.
    """
    config = config or PlannerConfig()
    ix = _Index(snap, now_ms, config)
    taken: set[int] = {f.file_id for f in snap.files if f.leased}
    leased = set(taken)
    jobs: list[JobSpec] = []
    job_inputs: list[set[int]] = []
    waiting: list[str] = []

    def admit(seeds: set[int], trigger: Trigger, reason: str, single_ok: bool) -> None:
        # A busy seed settles it without the closure (which may span the whole snapshot:
        # while a whole-log clean runs, every compacted partition's candidate lands here).
        full = seeds if seeds & taken else ix.closure(seeds)
        busy = full & taken
        if busy:
            who = "running jobs" if busy <= leased else "jobs proposed above"
            waiting.append(f"{reason}: waits for files {sorted(busy)} held by {who}")
            return
        if len(full) == 1 and not single_ok:
            return
        extra = f" (+{len(full) - len(seeds)} files for contiguity)" if full != seeds else ""
        jobs.append(ix.job(full, trigger, reason + extra))
        job_inputs.append(full)
        taken.update(full)

    candidates, summary = ix.dirty_candidates()
    for c in candidates:
        files = {s.file_id for s in ix.by_tp[c.tp]}
        if any(files <= inputs for inputs in job_inputs):
            continue  # a job above already holds (and cleans) this partition's whole log
        admit(files, c.trigger, c.reason, single_ok=True)
    if summary is not None:
        waiting.append(summary)

    for level in range(config.max_level):
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
            due, status = _due(level, members, now_ms, config)
            if due is None:
                waiting.append(f"{name}: {status}")
                continue
            for bin_ in _bin_pack(members, config.target_file_bytes):
                # Above L0 a lone file would only be copied one level up.
                admit({f.file_id for f in bin_}, due, f"{name}: {due.value} ({status})",
                      single_ok=level == 0)
    return Plan(jobs, waiting)


def cleaner_state(snap: Snapshot, now_ms: int,
                  config: PlannerConfig | None = None) -> dict[str, TopicCleaning]:
    """Per compacted topic, what its partitions' cleanable data looks like now (the
    compactor's metrics): the largest dirty ratio and the age of the oldest dirty record,
    as the planner weighs them (`_Index.cleanable`); zeros for a topic with nothing dirty."""
    ix = _Index(snap, now_ms, config or PlannerConfig())
    ratios = {name: 0.0 for name, p in snap.topics.items() if p.compacted}
    oldest: dict[str, int] = {}
    for tp in ix.by_tp:
        if tp[0] not in ratios:
            continue
        clean, dirty, first = ix.cleanable(tp)
        if dirty and first is not None:
            ratios[tp[0]] = max(ratios[tp[0]], dirty / (clean + dirty))
            oldest[tp[0]] = min(oldest.get(tp[0], first), first)
    return {name: TopicCleaning(ratio, max(0, now_ms - oldest[name]) if name in oldest else 0)
            for name, ratio in ratios.items()}


def _due(level: int, members: list[FileView], now_ms: int,
         config: PlannerConfig) -> tuple[Trigger | None, str]:
    """Which trigger fires for a level's group (None: not yet), and a status line."""
    count, size = len(members), sum(f.size_bytes for f in members)
    age = now_ms - members[0].created_at_ms
    files, nbytes, max_age = (config.trigger_files(level), config.trigger_bytes(level),
                              config.max_age_ms(level))
    status = (f"{count} files, {size / MIB:.1f} MiB; triggers at {files} files / "
              f"{nbytes / MIB:g} MiB"
              + (f" / oldest {max_age / 1000:g} s (now {age / 1000:.1f} s)"
                 if max_age is not None else ""))
    if level > 0 and count < 2:
        return None, status
    if count >= files:
        return Trigger.FILE_COUNT, status
    if size >= nbytes:
        return Trigger.BYTES, status
    if max_age is not None and age >= max_age:
        return Trigger.AGE, status
    return None, status


def _bin_pack(files: list[FileView], target: int) -> list[list[FileView]]:
    """Consecutive runs (oldest first) of at most about `target` bytes each."""
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
    """Ignore triggers: as few jobs as possible covering every file not held by a running
    job, each cleaning its compacted partitions as fully as it can (whole log where the
    leases allow).

    Usually one job: a job writes compacted and delete-policy data to separate outputs, so
    the two groups need no separate jobs. Leased files split the rest into greedy jobs that
    avoid them. Files above L0 with nothing to dedupe, no tombstone to drop and at most one
    file per kind (compacted, delete-policy) are already fully compacted and left alone, so
    repeated runs settle.
    """
    config = config or PlannerConfig()
    ix = _Index(snap, now_ms, config)
    leased = {f.file_id for f in snap.files if f.leased}
    free = [f.file_id for f in sorted(snap.files, key=lambda f: (f.level, f.created_at_ms,
                                                                    f.file_id))
            if not f.leased]
    waiting = [f"files {sorted(leased)} are held by running jobs"] if leased else []
    groups: list[set[int]] = []
    whole = ix.closure(free)
    if not whole & leased:
        groups = [whole] if whole else []
    else:
        assigned: set[int] = set()
        for fid in free:
            if fid in assigned:
                continue
            own = ix.closure([fid])
            if own & leased:
                continue
            hits = [i for i, g in enumerate(groups) if g & own]
            if len(hits) > 1:
                continue
            placed = False
            for i in hits or range(len(groups)):  # join the group it touches, else any
                merged = ix.closure(groups[i] | own)
                if not merged & leased and not any(
                        merged & g for j, g in enumerate(groups) if j != i):
                    groups[i] = merged
                    assigned |= merged
                    placed = True
                    break
            if not placed and not hits:
                groups.append(own)
                assigned |= own
        blocked = set(free) - assigned
        if blocked:
            waiting.append(f"files {sorted(blocked)} are contiguous with files held by "
                           f"running jobs")
    jobs = []
    for files in groups:
        spec = ix.job(files, Trigger.FORCED_ALL, f"--all: {len(files)} files")
        if _settled(ix, spec):
            ids = ", ".join(str(i) for i in spec.input_file_ids)
            noun = "file" if len(files) == 1 else "files"
            waiting.append(f"{noun} {ids} {'is' if len(files) == 1 else 'are'} already "
                           f"fully compacted")
            continue
        jobs.append(spec)
    if not jobs and not waiting:
        waiting.append("nothing to compact")
    return Plan(jobs, waiting)


def _settled(ix: _Index, spec: JobSpec) -> bool:
    """Rewriting the spec's files would change nothing but their level: none is in L0,
    no compacted partition has dirty data or droppable tombstones, and there is at most one
    file per kind (a job would write the same one or two files again). Without this, a
    compacted-topic file beside a delete-policy file would be rewritten on every `--all`.
    """
    files = [ix.files[f] for f in spec.input_file_ids]
    if any(f.level == 0 for f in files):
        return False
    if any(p.dedupe or p.tombstone_drop_segment_ids for p in spec.partitions):
        return False
    compacted = sum(f.holds_compacted for f in files)
    return compacted <= 1 and len(files) - compacted <= 1


def validate(spec: JobSpec, snap: Snapshot) -> list[str]:
    """Why the spec can no longer run as proposed (empty list: it can).

    The inputs must all still be live and unleased, still contiguous per partition (no
    segment committed in between since), each whole-log partition must still start in
    the inputs, and the spec must still plan exactly the compacted partitions the inputs
    hold (a topic's cleanup.policy may have changed since: the executor goes by the spec).
    """
    files = {f.file_id: f for f in snap.files}
    problems = []
    for fid in spec.input_file_ids:
        f = files.get(fid)
        if f is None:
            problems.append(f"file {fid} is no longer live (or unknown)")
        elif f.leased:
            problems.append(f"file {fid} is held by another job")
    if problems:
        return problems
    ix = _Index(snap, 0, PlannerConfig())
    inputs = set(spec.input_file_ids)
    if ix.closure(inputs) != inputs:
        problems.append("inputs are no longer contiguous per partition")
    for p in spec.partitions:
        segs = ix.by_tp.get((p.topic, p.partition))
        if p.whole_log and (not segs or segs[0].file_id not in inputs):
            problems.append(f"{p.topic}/{p.partition}: inputs no longer hold the log start")
    planned = {(p.topic, p.partition) for p in spec.partitions}
    changed = sorted({s.topic for fid in inputs for s in files[fid].segments
                      if (s.topic in ix.compacted) != (s.tp in planned)})
    problems.extend(f"topic {t}: cleanup.policy changed since the job was planned"
                    for t in changed)
    return problems


def describe(plan: Plan) -> dict[str, Any]:
    """JSON-able form for `silt plan --json`: {"jobs": [...], "waiting": [...]}."""
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
                "partitions": [
                    {
                        "topic": p.topic,
                        "partition": p.partition,
                        "dedupe": p.dedupe,
                        "whole_log": p.whole_log,
                        "clean_upto_offset": p.clean_upto_offset,
                        "dirty_start_offset": p.dirty_start_offset,
                        "tombstone_drop_segments": sorted(p.tombstone_drop_segment_ids),
                    }
                    for p in j.partitions
                ],
            }
            for j in plan.jobs
        ],
        "waiting": list(plan.waiting),
    }
