"""The remote log start markers retention writes (:mod:`rlm.storage.log_start`), read back by a
rebuilt metadata store: a marker counts for the topic it was written for only.

A topic deleted and created again under the same name is another topic (a new id); the deleted
topic's marker stays beside its (deleted) segments, under its own id. Read back as the new topic's
log start, it would hide the new topic's offsets below it, and retention would then delete the
new topic's segments wholly below it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rlm.metastore.model import SegmentState
from rlm.pipeline.rebuild.job import restore_log_starts
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.log_start import marker_partition, write_marker
from tests.clock import FakeClock
from tests.metadata_support import TP, backend_url, open_store, segment

DELETED_TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-00000000dead")


def test_a_deleted_topics_marker_does_not_move_the_new_topics_log_start(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = open_store(backend_url("sqlite", request, tmp_path), FakeClock(1_700_000_000_000))
    storage = FilesystemStorage(tmp_path / "remote")
    try:
        # The new topic's segments start at 10, where its retention moved its log start.
        row = segment(10, 99, state=SegmentState.COPY_SEGMENT_STARTED)
        store.add_segment(row)
        store.update_segment_state(row.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=1)
        assert row.topic_id is not None and row.topic_id != DELETED_TOPIC_ID
        write_marker(storage, TP, row.topic_id, 10)
        write_marker(storage, TP, DELETED_TOPIC_ID, 5_000)  # the deleted topic's, higher
        markers = {key: tp for key in storage.list_keys("") if (tp := marker_partition(key)) is not None}
        assert len(markers) == 2

        restore_log_starts(store, storage, markers, ())

        record = store.get_partition(TP)
        assert record is not None and record.topic_id == row.topic_id
        assert record.remote_log_start_offset == 10
    finally:
        storage.close()
        store.close()
