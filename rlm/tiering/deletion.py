"""Deleting a remote segment: ``DELETE_SEGMENT_STARTED`` → delete its objects → ``DELETE_SEGMENT_FINISHED``.

Shared by retention (finished segments that expired) and the copier's cleanup (copies that never
finished). A copy that never finished may also have left unfinished puts of its keys (an S3
multipart upload, a filesystem temporary file: its process was killed mid-put); those are
removed before the objects: the uploads the copy recorded by their ids, the others as far as the
store can list them. A store that refuses those optional calls does not stop the deletion
(``RemoteStorage.abort_incomplete_puts``). Every step is idempotent, so a pass that dies anywhere
is simply run again: a row left in ``DELETE_SEGMENT_STARTED`` is retried, and deleting an object
that is already gone succeeds.
"""

from __future__ import annotations

from collections.abc import Callable

from rlm.errors import StateConflictError
from rlm.metastore.model import Lease, RemoteSegment, SegmentState
from rlm.metastore.protocol import MetadataStore
from rlm.storage.protocol import RemoteStorage

Step = Callable[[str], None]
"""Called with the name of each step done (a seam for crash tests); usually a no-op."""


def no_step(name: str) -> None:
    """The default step hook: does nothing."""


def deferred(segment: RemoteSegment, now_ms: int) -> bool:
    """Whether a ``DELETE_SEGMENT_STARTED`` segment must keep its objects a while longer.

    A compaction swap moves the segments it replaced to ``DELETE_SEGMENT_STARTED`` with a
    ``delete_after_ms`` ``remote.compaction.delete.delay.ms`` ahead, so that lookups and fetches
    that picked them before the swap finish. Cleanups that retry ``DELETE_SEGMENT_STARTED`` rows
    (the copier's, retention's, the next compaction's) leave such a row alone until then.
    """
    return (
        segment.state is SegmentState.DELETE_SEGMENT_STARTED
        and segment.delete_after_ms is not None
        and segment.delete_after_ms > now_ms
    )


def delete_segment(
    store: MetadataStore,
    storage: RemoteStorage,
    segment: RemoteSegment,
    *,
    now_ms: int,
    fence: Lease | None,
    step: Step = no_step,
) -> bool:
    """Delete ``segment`` from the remote tier; returns False when another deleter got there first,
    or a compaction swap replaced it meanwhile and its objects must wait (:func:`deferred`).

    ``segment`` may be ``COPY_SEGMENT_STARTED`` (an abandoned copy), ``COPY_SEGMENT_FINISHED``
    (expired) or already ``DELETE_SEGMENT_STARTED`` (a retry). The state moves first, so no reader
    picks the segment once its objects start to disappear. Unless the copy had finished, the
    unfinished puts of its keys are aborted before its objects are deleted (a retry may be the
    cleanup of an abandoned copy, so it aborts them too). Both state changes are fenced by
    ``fence``, the deleter's copy lease (``None``: not fenced).

    Raises:
        StaleLeaseError: ``fence`` is no longer the partition's lease.
        StorageError / MetadataError: the pass can be retried; the row stays ``DELETE_SEGMENT_STARTED``.
    """
    if segment.state is SegmentState.DELETE_SEGMENT_FINISHED:
        return False
    copy_finished = segment.state is SegmentState.COPY_SEGMENT_FINISHED
    if segment.state is not SegmentState.DELETE_SEGMENT_STARTED:
        try:
            update = store.update_segment_state(
                segment.segment_id,
                SegmentState.DELETE_SEGMENT_STARTED,
                event_time_ms=now_ms,
                expected=segment.state,
                fence=fence,
            )
        except StateConflictError:
            return False  # it finished or was deleted meanwhile; its new state is someone else's
        if not update.changed and deferred(update.segment, now_ms):
            # A compaction swap moved it meanwhile (the store takes the move as a repeat): its
            # objects stay until the swap's delay is over, for the reads that picked it before.
            return False
        step("delete_started")
    if not copy_finished:
        keys = [segment.layout.log_key, segment.layout.index_key]
        storage.abort_incomplete_puts(keys, store.pending_uploads(segment.segment_id))
    storage.delete_objects([segment.layout.log_key])
    step("log_deleted")
    storage.delete_objects([segment.layout.index_key])
    step("indexes_deleted")
    store.update_segment_state(
        segment.segment_id,
        SegmentState.DELETE_SEGMENT_FINISHED,
        event_time_ms=now_ms,
        fence=fence,
    )
    step("delete_finished")
    return True
