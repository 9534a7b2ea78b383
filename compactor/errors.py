"""Errors of the compactor. A job's own failures are reported in its JobReport's `outcome`,
never raised to the caller; these are signals inside a job."""

from __future__ import annotations


class JobAbandoned(Exception):
    """The worker is stopping and the job's time ran out: raised by the merge's heartbeat at
    the next partition boundary, caught by `Compactor.run_job` (outcome `abandoned`)."""

    retriable = True  # another worker (or this one, restarted) runs the job again
