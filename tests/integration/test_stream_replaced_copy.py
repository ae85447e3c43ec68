"""Range streams whose remote copy is replaced while they read it.

A compaction swaps its outputs in for the segments it replaced, whose objects go once
``remote.compaction.delete.delay.ms`` has passed (remote retention deletes a segment's objects
too). A stream that looked a segment up before that, and reads its object after (a read resumed
after a broken connection, a slow client, the next segment's read begun ahead) finds it gone: it
looks the offset up again and reads on from the copy that holds it now, as each of Kafka's
fetches looks its segment up afresh; where none does, it ends with an offset out of range.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.errors import OffsetOutOfRangeError
from rlm.log.logdir import PartitionDir
from rlm.lookup.service import LookupService
from rlm.metastore.model import ObjectLayout, RemoteSegment, SegmentState, TopicPartition
from rlm.storage.layout import segment_keys
from rlm.stream.plan import RangeQuery
from tests.integration.test_fetch import BACKEND_PARAMS, tiered_partition
from tests.integration.test_reads_under_local_retention import stream
from tests.integration.test_stream import expected
from tests.lookup_support import Tiered


@pytest.fixture(params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tiered]:
    yield from tiered_partition(request, tmp_path, auth_enabled=False, remote_fetch_stream_buffer_bytes=4096)


def replaced(tiered: Tiered, old: RemoteSegment, *, copy: bool) -> None:
    """``old`` replaced (by a copy of its bytes under new keys when ``copy``), its objects deleted."""
    store, storage = tiered.runtime.store, tiered.runtime.storage
    if copy:
        new_id = uuid.uuid4()
        tp = old.topic_partition
        keys = segment_keys(tp.topic, old.topic_id, tp.partition, old.start_offset, new_id)
        layout = ObjectLayout(keys.log_key, keys.indexes_key, old.layout.index_ranges)
        for source, target in ((old.layout.log_key, keys.log_key), (old.layout.index_key, keys.indexes_key)):
            size = storage.object_size(source)
            assert size is not None
            storage.put_object(target, storage.read_range(source, 0, size))
        new = dataclasses.replace(
            old, segment_id=new_id, layout=layout, state=SegmentState.COPY_SEGMENT_STARTED
        )
        store.add_segment(new)
    store.update_segment_state(old.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=0)
    if copy:
        store.update_segment_state(
            new_id,
            SegmentState.COPY_SEGMENT_FINISHED,
            event_time_ms=0,
            expected=SegmentState.COPY_SEGMENT_STARTED,
        )
    storage.delete_objects([old.layout.log_key, old.layout.index_key])


def replaced_once_looked_up(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch, offset: int, *, copy: bool
) -> list[RemoteSegment]:
    """The segment holding ``offset`` is replaced right after a reader looked it up."""
    real = LookupService.remote_segment_for_offset
    done: list[RemoteSegment] = []

    def looked_up(
        self: LookupService, tp: TopicPartition, local: PartitionDir | None, at: int
    ) -> RemoteSegment | None:
        found = real(self, tp, local, at)
        if found is not None and not done and found.contains(offset):
            replaced(tiered, found, copy=copy)
            done.append(found)
        return found

    monkeypatch.setattr(LookupService, "remote_segment_for_offset", looked_up)
    return done


def test_a_copy_replaced_and_deleted_under_the_stream_is_read_from_the_copy_replacing_it(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = tiered.truth
    start = truth.log_start_offset
    plan = tiered.runtime.streams.plan(RangeQuery(tiered.tp, offset=start))
    done = replaced_once_looked_up(tiered, monkeypatch, start, copy=True)
    assert stream(tiered, plan) == expected(truth, start, None, False)
    assert done, "no segment was replaced: the test tested nothing"


def test_a_copy_deleted_under_the_stream_with_no_other_ends_it_out_of_range(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = tiered.truth.log_start_offset
    plan = tiered.runtime.streams.plan(RangeQuery(tiered.tp, offset=start))
    done = replaced_once_looked_up(tiered, monkeypatch, start, copy=False)
    with pytest.raises(OffsetOutOfRangeError, match=f"offset {start}"):
        stream(tiered, plan)
    assert done, "no segment was deleted: the test tested nothing"
