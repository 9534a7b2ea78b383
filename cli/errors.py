"""Errors of the `silt` command itself."""

from __future__ import annotations


class CommandFailed(Exception):
    """The command ran but some of its work failed (e.g. a compaction job); the message is
    one line saying what, and the command exits 1."""

    retriable = False


class ClusterMismatchError(CommandFailed):
    """The object store and the metadata store belong to different clusters (cli/cluster.py):
    the command is refused before it reads or writes anything."""
