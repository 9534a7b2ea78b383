"""One data object written crash-safely: the sequence every writer of a data object follows
(an agent flush, a compaction output, a Spark task's object), and what a crash at each step
leaves behind. Written once, here; the writers' docstrings refer to it.

1. register (`ObjectUpload(...)`: `MetadataStore.register_pending_file`) — a `pending` file
   row names the key before any byte is uploaded. Crash after it: a pending row and no
   object; GC marks it deleted once older than max(grace, lease.ms).
2. stream (`start`, then the writer's `FileWriter.add` per chunk) — the object goes to the
   store (one PUT, or a multipart upload past the threshold). Crash: no object exists (an
   unfinished multipart upload is invisible; GC aborts it once older than max(grace,
   lease.ms)); the pending row as after 1.
3. finish (`finish`) — META and footer written, the upload completed: the object exists and
   nothing reads it. Crash: a pending row and an unread object; GC deletes both.
4. commit — the writer's own metadata transaction, taking the `FileLayout` whole
   (`commit_produced`, `commit_compaction`, `commit_files` on the Spark driver): pending →
   live with the segments, in one transaction. Crash before its COMMIT: as after 3. After
   it: the data is visible; what the writer had still to do (acks, the job's answer) is
   lost.
5. abandon, only on a definite failure (`abandoning`) — an exception before the commit, or
   from a commit that certainly did not apply, marks the rows `abandoned` (GC deletes their
   objects; compaction deletes its finished outputs at once). A commit whose outcome is
   unknown (`CommitUnknownError`), or a BaseException that is not an Exception (it may
   have struck inside the commit), leaves the rows as they are: the files may be live,
   and a pending one is GC's. Crash while abandoning: the rows stay pending, which GC
   treats the same way. Every unfinished upload's stream is aborted, whatever the exit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence

from fileformat import Chunk, FileLayout, FileWriter
from metadata import MetadataStore
from metadata.errors import CommitUnknownError, FileStateError
from objectstore import ObjectStore, ObjectWriter

log = logging.getLogger(__name__)


class ObjectUpload:
    """One data object: its pending file row (registered on construction: step 1), its
    streamed upload (`start`, `finish`: steps 2-3) and its layout once finished."""

    def __init__(self, store: ObjectStore, metadata: MetadataStore, key: str, *,
                 level: int = 0, holds_compacted: bool = False) -> None:
        self.key = key
        self.file_id = metadata.register_pending_file(key, level=level,
                                                      holds_compacted=holds_compacted)
        self._store = store
        self._metadata = metadata
        self._upload: ObjectWriter | None = None
        self._writer: FileWriter | None = None
        self.layout: FileLayout | None = None  # once finished

    @property
    def finished(self) -> bool:
        """Whether the object is complete in the store (step 3 done)."""
        return self.layout is not None

    def start(self) -> FileWriter:
        """Open the upload (step 2); chunks go to the returned writer (`FileWriter.add`)."""
        assert self._upload is None, "upload already started"
        self._upload = self._store.put_stream(self.key)
        self._writer = FileWriter(self._upload.write)
        return self._writer

    def finish(self) -> FileLayout:
        """Write META and footer and complete the upload (step 3): the object's layout."""
        assert self._upload is not None and self._writer is not None, "upload not started"
        layout = self._writer.finish()
        self._upload.close()
        self.layout = layout
        return layout

    def write(self, chunks: Iterable[Chunk]) -> FileLayout:
        """Steps 2-3 at once: `chunks` (in (topic, partition) order) as the whole object."""
        writer = self.start()
        for chunk in chunks:
            writer.add(chunk)
        return self.finish()

    def abort(self) -> None:
        """Drop the upload if it is not finished (no object; idempotent). The row stays."""
        if self.layout is None and self._upload is not None:
            self._upload.abort()
            assert self._writer is not None
            self._writer.close()

    def abandon(self) -> None:
        """Nothing will be committed: the upload aborted if unfinished, the row `abandoned`
        (its object, if finished, is GC's). Raises what marking the row raises."""
        self.abort()
        self._metadata.abandon_file(self.file_id)


def abandon_files(metadata: MetadataStore, file_ids: Iterable[int]) -> None:
    """Step 5 by file id, in a process other than the writer's (the Spark driver's abort):
    every file left `abandoned`, but one that is live (a commit whose outcome was unknown did
    apply), which stays."""
    for file_id in file_ids:
        with contextlib.suppress(FileStateError):
            metadata.abandon_file(file_id)


def discard(store: ObjectStore, metadata: MetadataStore, uploads: Sequence[ObjectUpload], *,
            delete: bool = False) -> None:
    """Step 5 after a definite failure: unfinished uploads aborted, finished objects deleted
    at once if `delete` (else GC's), rows `abandoned`. Never raises: what fails is left to GC
    (a pending row is collected as an abandoned one)."""
    for upload in uploads:
        upload.abort()
    keys = [u.key for u in uploads if u.finished]
    try:
        if delete and keys:
            store.delete_many(keys)
        for upload in uploads:
            metadata.abandon_file(upload.file_id)
    except Exception:
        log.warning("could not clean up objects %s; GC will",
                    [u.key for u in uploads], exc_info=True)


@contextlib.contextmanager
def abandoning(store: ObjectStore, metadata: MetadataStore, uploads: Sequence[ObjectUpload],
               *, delete: bool = False) -> Iterator[None]:
    """Around steps 2-4 of `uploads` (a list the body may still append to): a definite
    failure inside (any Exception but CommitUnknownError) discards them (`discard`) and
    propagates; any other exit leaves their rows as they are, their unfinished streams
    aborted."""
    try:
        yield
    except CommitUnknownError:
        raise
    except Exception:
        discard(store, metadata, uploads, delete=delete)
        raise
    finally:
        for upload in uploads:
            upload.abort()
