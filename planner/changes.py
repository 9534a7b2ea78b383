"""When the plan next changes on its own: `next_change(snapshot, now_ms, config)`. Pure.

With no new data, `propose` gives other jobs later only because a clock threshold passes:
an L0 file turning `l0.max.age.ms` old (a level's age trigger, and no longer "active" for
the dirty ratio), `level.max.age.ms` above L0, a compacted partition's dirty data reaching
`max.compaction.lag.ms`, a record leaving `min.compaction.lag.ms` (the first uncleanable
offset moves), or a cleaned tombstone passing `delete.retention.ms`. Each threshold is a
candidate instant; the first at which `propose` gives other jobs than now is the change.
`silt plan` prints it, so a `silt compact --once` run later is no surprise.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import LONG_MAX, PlannerConfig, Snapshot
from .policy import propose

MAX_CANDIDATES = 64  # instants tried (each a `propose`): the earliest ones


@dataclass(frozen=True, slots=True)
class Change:
    """The first instant (ms) after now at which the proposed jobs differ, and why."""

    at_ms: int
    reason: str


def _candidates(snap: Snapshot, now_ms: int, config: PlannerConfig) -> dict[int, str]:
    """Threshold instants after `now_ms`, each with what passes then (the first reason
    found for an instant is kept)."""
    out: dict[int, str] = {}

    def add(at: int, reason: str) -> None:
        if at > now_ms and at not in out:
            out[at] = reason

    for f in snap.files:
        age = config.max_age_ms(f.level)
        if age is not None:
            add(f.created_at_ms + age, f"L{f.level} file {f.file_id} turns {age / 1000:g} s old")
    for f in snap.files:
        for s in f.segments:
            policy = snap.topics.get(s.topic)
            if policy is None or not policy.compacted:
                continue
            name = f"{s.topic}/{s.partition}"
            if s.cleaned_at_ms is None:
                first = s.min_timestamp if s.min_timestamp is not None else s.created_at_ms
                if policy.max_compaction_lag_ms < LONG_MAX:
                    add(first + policy.max_compaction_lag_ms,
                        f"{name}: dirty data reaches max.compaction.lag.ms"
                        f"={policy.max_compaction_lag_ms}")
                if policy.min_compaction_lag_ms > 0:
                    add(s.max_timestamp + policy.min_compaction_lag_ms,
                        f"{name}: records pass min.compaction.lag.ms"
                        f"={policy.min_compaction_lag_ms}")
            elif s.tombstone_count > 0:
                add(s.cleaned_at_ms + policy.delete_retention_ms,
                    f"{name}: tombstones pass delete.retention.ms"
                    f"={policy.delete_retention_ms}")
    return out


def next_change(snap: Snapshot, now_ms: int,
                config: PlannerConfig | None = None) -> Change | None:
    """The first instant after `now_ms` at which `propose` on the same snapshot gives
    other jobs (by spec id and trigger), or None if none of the earliest MAX_CANDIDATES
    thresholds changes them."""
    config = config or PlannerConfig()

    def jobs(at: int) -> list[tuple[str, str]]:
        return [(j.spec_id, j.trigger.value) for j in propose(snap, at, config).jobs]

    now_jobs = jobs(now_ms)
    candidates = _candidates(snap, now_ms, config)
    for at in sorted(candidates)[:MAX_CANDIDATES]:
        if jobs(at) != now_jobs:
            return Change(at, candidates[at])
    return None
