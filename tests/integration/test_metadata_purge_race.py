"""A write to a segment whose row a purge removes while the write waits for the partition lock,
on PostgreSQL (where writers wait on the row lock; SQLite serializes whole write transactions)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from sqlalchemy import delete, select, text, update

from metadata.engine import create_engine_for_url
from metadata.models import PartitionRow, SegmentEpochRow, SegmentRow
from rlm.errors import NotFoundError
from rlm.metastore import PendingUpload, SegmentState
from tests.clock import FakeClock
from tests.metadata_support import TP, clear, open_store, segment

pytestmark = pytest.mark.postgres


def _waiting_for_a_lock(url: str) -> bool:
    engine = create_engine_for_url(url, pooled=False)
    try:
        with engine.connect() as conn:
            count = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            return int(count) > 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("write", ["state", "upload"])
def test_a_write_to_a_segment_purged_while_it_waited_is_not_found(postgres_url: str, write: str) -> None:
    engine = create_engine_for_url(postgres_url, pooled=False)
    clear(engine)
    gone = segment(0, 9)
    with open_store(postgres_url, FakeClock()) as store, ThreadPoolExecutor(1) as pool:
        store.add_segment(gone)
        try:
            with engine.begin() as purge:
                # What purge_deleted_segments does, holding the partition's lock meanwhile.
                purge.execute(select(PartitionRow.id).where(PartitionRow.topic == TP.topic).with_for_update())
                call: Future[object]
                if write == "state":
                    call = pool.submit(
                        store.update_segment_state,
                        gone.segment_id,
                        SegmentState.DELETE_SEGMENT_STARTED,
                        event_time_ms=1,
                    )
                else:
                    call = pool.submit(store.add_pending_upload, gone.segment_id, PendingUpload("k", "u"))
                deadline = time.monotonic() + 10
                while not _waiting_for_a_lock(postgres_url):
                    assert time.monotonic() < deadline, "the write never waited for the partition lock"
                    time.sleep(0.01)
                purge.execute(update(SegmentRow).values(state=SegmentState.DELETE_SEGMENT_FINISHED.value))
                purge.execute(delete(SegmentEpochRow).where(SegmentEpochRow.segment_id == gone.segment_id))
                purge.execute(delete(SegmentRow).where(SegmentRow.segment_id == gone.segment_id))
            with pytest.raises(NotFoundError, match=str(gone.segment_id)):
                call.result(timeout=10)
        finally:
            engine.dispose()
