"""Contract of the pending multipart uploads the store keeps per segment, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import NotFoundError, StaleLeaseError, StateConflictError
from rlm.metastore import PendingUpload, SegmentState
from tests.clock import FakeClock
from tests.metadata_support import TP, segment

TTL = 60_000
LOG = PendingUpload("3f/orders-0/00000000000000000000-seg.log", "upload-1")
INDEXES = PendingUpload("3f/orders-0/00000000000000000000-seg.indexes", "upload-2")
#: As long as S3's own upload ids get, in characters of base64 and punctuation.
LONG = PendingUpload("3f/orders-0/00000000000000000000-seg.log", "Vj3L.a-_~" * 100)


def test_uploads_are_kept_per_segment_until_asked_for(store: SqlMetadataStore) -> None:
    seg, other = segment(0, 99), segment(100, 199)
    store.add_segment(seg)
    store.add_segment(other)
    assert store.pending_uploads(seg.segment_id) == []

    store.add_pending_upload(seg.segment_id, LOG)
    store.add_pending_upload(seg.segment_id, INDEXES)
    store.add_pending_upload(seg.segment_id, LONG)
    store.add_pending_upload(other.segment_id, PendingUpload(LOG.key, "upload-9"))

    assert store.pending_uploads(seg.segment_id) == [INDEXES, LONG, LOG]
    assert store.pending_uploads(other.segment_id) == [PendingUpload(LOG.key, "upload-9")]
    assert store.pending_uploads(uuid.uuid4()) == []


def test_recording_an_upload_again_is_a_no_op(store: SqlMetadataStore) -> None:
    seg = segment(0, 99)
    store.add_segment(seg)
    store.add_pending_upload(seg.segment_id, LOG)
    store.add_pending_upload(seg.segment_id, LOG)
    assert store.pending_uploads(seg.segment_id) == [LOG]


@pytest.mark.parametrize(
    "path",
    [
        [SegmentState.COPY_SEGMENT_FINISHED],
        [SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED],
    ],
    ids=["copy-finished", "deleted"],
)
def test_a_segment_that_finished_either_way_forgets_its_uploads(
    store: SqlMetadataStore, path: list[SegmentState]
) -> None:
    seg = segment(0, 99)
    store.add_segment(seg)
    store.add_pending_upload(seg.segment_id, LOG)
    for number, state in enumerate(path, start=1):
        # The cleanup reads them while the segment is DELETE_SEGMENT_STARTED.
        assert store.pending_uploads(seg.segment_id) == [LOG]
        store.update_segment_state(seg.segment_id, state, event_time_ms=number)
    assert store.pending_uploads(seg.segment_id) == []


@pytest.mark.parametrize(
    "state",
    [SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED],
)
def test_an_upload_of_a_copy_no_longer_under_way_is_refused(
    store: SqlMetadataStore, state: SegmentState
) -> None:
    seg = segment(0, 99)
    store.add_segment(seg)
    store.update_segment_state(seg.segment_id, state, event_time_ms=1)
    with pytest.raises(
        StateConflictError, match=f"{seg.segment_id}.* is {state.value}, not COPY_SEGMENT_STARTED"
    ):
        store.add_pending_upload(seg.segment_id, LOG)
    assert store.pending_uploads(seg.segment_id) == []


def test_an_upload_of_an_unknown_segment_is_refused(store: SqlMetadataStore) -> None:
    unknown = uuid.uuid4()
    with pytest.raises(NotFoundError, match=str(unknown)):
        store.add_pending_upload(unknown, LOG)


def test_recording_an_upload_is_fenced_by_the_copy_lease(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    old = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert old is not None
    seg = segment(0, 99)
    store.add_segment(seg, fence=old)
    store.add_pending_upload(seg.segment_id, LOG, fence=old)
    clock.advance(TTL)
    new = store.acquire_lease(TP, owner=2, ttl_ms=TTL)
    assert new is not None

    with pytest.raises(StaleLeaseError, match="lease epoch 1 is stale"):
        store.add_pending_upload(seg.segment_id, INDEXES, fence=old)

    assert store.pending_uploads(seg.segment_id) == [LOG]
    store.add_pending_upload(seg.segment_id, INDEXES, fence=new)
    assert store.pending_uploads(seg.segment_id) == [INDEXES, LOG]
