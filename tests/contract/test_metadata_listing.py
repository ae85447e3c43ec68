"""Contract of ``list_segments``: one listing is one snapshot of the partition, read page by page
as it is consumed, on SQLite and PostgreSQL. The ``store`` fixture reads 3 segments a page."""

from __future__ import annotations

import dataclasses
import uuid

from metadata.store import SqlMetadataStore
from rlm.metastore import RemoteSegment, SegmentState
from tests.metadata_support import TP, add_finished, segment

FINISHED = SegmentState.COPY_SEGMENT_FINISHED
PAGE = 3


def covered(segments: list[RemoteSegment]) -> set[int]:
    return {offset for s in segments for offset in range(s.start_offset, s.end_offset + 1)}


def test_a_listing_interleaved_with_a_swap_between_pages_misses_no_offset(store: SqlMetadataStore) -> None:
    # The last segment of the first page and the first of the second are swapped for one output
    # that starts where the first did but whose id sorts before it: a listing that resumed after
    # the last segment it returned would skip the output, and the second segment is gone.
    segments = [segment(start, start + 99) for start in range(0, 600, 100)]
    last_of_page = dataclasses.replace(segments[PAGE - 1], segment_id=uuid.UUID(int=(1 << 128) - 1))
    segments[PAGE - 1] = last_of_page
    add_finished(store, *segments)
    output = dataclasses.replace(
        segment(last_of_page.start_offset, segments[PAGE].end_offset), segment_id=uuid.UUID(int=1)
    )
    everything = covered(segments)

    listing = store.list_segments(TP, states=[FINISHED])
    seen = [next(listing) for _ in range(PAGE)]  # the first page, all of it
    lease = store.acquire_compaction_lease(TP, "job-1", 600_000)
    assert lease is not None
    replaced = [last_of_page.segment_id, segments[PAGE].segment_id]
    assert store.swap_compacted(lease, [output], replaced, now_ms=1, delete_after_ms=2)
    seen += list(listing)

    assert covered(seen) == everything
    # As the partition was when the listing began.
    assert [s.segment_id for s in seen] == [s.segment_id for s in segments]
    after = list(store.list_segments(TP, states=[FINISHED]))
    assert covered(after) == everything
    assert output.segment_id in {s.segment_id for s in after}


def test_a_listing_sees_the_partition_as_it_was_when_it_began(store: SqlMetadataStore) -> None:
    segs = [segment(i * 10, i * 10 + 9) for i in range(8)]
    for seg in segs:
        store.add_segment(seg)
    listing = store.list_segments(TP)
    assert [next(listing).start_offset for _ in range(4)] == [0, 10, 20, 30]
    store.add_segment(segment(75, 79))  # lands in a page not read yet
    store.update_segment_state(segs[6].segment_id, FINISHED, event_time_ms=2)
    rest = list(listing)
    assert [s.start_offset for s in rest] == [40, 50, 60, 70]
    assert rest[2] == segs[6]  # still COPY_SEGMENT_STARTED in this listing
    assert [s.start_offset for s in store.list_segments(TP)] == [0, 10, 20, 30, 40, 50, 60, 70, 75]


def test_a_listing_given_up_part_way_gives_its_connection_back(store: SqlMetadataStore) -> None:
    for i in range(3 * PAGE):
        store.add_segment(segment(i * 10, i * 10 + 9))
    pool = store.engine.pool
    listing = store.list_segments(TP)
    assert next(listing).start_offset == 0
    assert pool.checkedout() == 1  # type: ignore[attr-defined]
    listing.close()  # type: ignore[attr-defined]
    assert pool.checkedout() == 0  # type: ignore[attr-defined]

    assert next(store.list_segments(TP)).start_offset == 0  # and dropped
    assert pool.checkedout() == 0  # type: ignore[attr-defined]
