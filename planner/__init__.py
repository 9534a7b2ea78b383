"""The compaction planner: pure functions from a metadata snapshot and a clock to job specs."""

from .changes import Change, next_change
from .model import (
    FileView,
    JobSpec,
    PartitionPlan,
    PartitionState,
    Plan,
    PlannerConfig,
    SegmentView,
    Snapshot,
    TopicCleaning,
    TopicPolicy,
    Trigger,
)
from .policy import cleaner_state, describe, propose, propose_all, spec_id_of, validate

__all__ = [
    "Change",
    "FileView",
    "JobSpec",
    "PartitionPlan",
    "PartitionState",
    "Plan",
    "PlannerConfig",
    "SegmentView",
    "Snapshot",
    "TopicCleaning",
    "TopicPolicy",
    "Trigger",
    "cleaner_state",
    "describe",
    "next_change",
    "propose",
    "propose_all",
    "spec_id_of",
    "validate",
]
