"""Data objects: what their keys are (`keys`) and how one is written crash-safely
(`ObjectUpload`: register pending → stream → finish → commit → abandon only on a definite
failure). Above `metadata` and `objectstore`, which stay independent of each other."""

from objects.keys import COMPACTED_PREFIX, DATA_PREFIX, DATA_PREFIXES, MARKER_KEY
from objects.upload import ObjectUpload, abandon_files, abandoning, discard

__all__ = [
    "COMPACTED_PREFIX",
    "DATA_PREFIX",
    "DATA_PREFIXES",
    "MARKER_KEY",
    "ObjectUpload",
    "abandon_files",
    "abandoning",
    "discard",
]
