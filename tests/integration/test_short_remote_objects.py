"""A remote ``.log`` object shorter than its metadata row: lookups and streams fail naming it.

A lookup neither answers from the batches before the cut as if the segment ended there, nor reads
the same short bytes again and again (it spun on one, holding its reader thread, until the
process ended); a stream does not go on from the segment's end offset, its last batches missing.
The same holds for a batch whose size field (which no CRC covers) says more bytes than its object
or rolled segment has left: only the broker's active segment may end in a batch not written whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.errors import CorruptDataError
from rlm.log.model import LOG_OVERHEAD
from rlm.metastore.model import SegmentState
from rlm.stream.plan import RangeQuery
from tests.integration.test_fetch import BACKEND_PARAMS, tiered_partition
from tests.integration.test_reads_under_local_retention import stream
from tests.lookup_support import Tiered


@pytest.fixture(params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tiered]:
    yield from tiered_partition(request, tmp_path)


def test_a_lookup_into_a_cut_remote_log_is_corrupt_data(tiered: Tiered) -> None:
    rt, truth, tp = tiered.runtime, tiered.truth, tiered.tp
    finished = [s for s in rt.store.list_segments(tp) if s.state is SegmentState.COPY_SEGMENT_FINISHED]
    assert len(finished) >= 2, "the partition has too few remote segments to cut one"
    cut = finished[0]
    # The timestamp answered by the segment's last answering record: its batch lies past the cut.
    answers = [
        truth.for_timestamp(r.record.timestamp)
        for r in truth.records
        if cut.start_offset <= r.record.offset <= cut.end_offset and not r.control
    ]
    wanted = max((a for a in answers if a.offset <= cut.end_offset), key=lambda a: a.offset)
    assert wanted.offset > truth.batch_holding(cut.start_offset)[1], "the segment has one batch"
    kept = rt.storage.read_range(cut.layout.log_key, 0, cut.size_bytes // 2)
    rt.storage.put_object(cut.layout.log_key, kept)  # the object loses its second half

    reads = itertools.count()

    def bounded() -> None:  # called before each remote read: a spinning search fails the test
        assert next(reads) < 1000, "the search reads the short object again and again"

    with pytest.raises(CorruptDataError, match="shorter"):
        rt.lookup.find(tp, wanted.timestamp, checkpoint=bounded)


def test_a_stream_over_a_cut_remote_log_does_not_end_short_silently(tiered: Tiered) -> None:
    rt, truth, tp = tiered.runtime, tiered.truth, tiered.tp
    finished = [s for s in rt.store.list_segments(tp) if s.state is SegmentState.COPY_SEGMENT_FINISHED]
    cut = finished[0]
    kept = rt.storage.read_range(cut.layout.log_key, 0, cut.size_bytes // 2)
    rt.storage.put_object(cut.layout.log_key, kept)
    plan = rt.streams.plan(RangeQuery(tp, offset=max(cut.start_offset, truth.log_start_offset)))
    assert plan.local_start is None or plan.local_start > cut.end_offset, "the cut segment is read locally"
    with pytest.raises(CorruptDataError):
        stream(tiered, plan)


def _second_batch_runs_past_the_end(data: bytes) -> bytes:
    """``data`` with its second batch's size field 5000 bytes larger than the batch."""
    second = LOG_OVERHEAD + int.from_bytes(data[8:12], "big")
    assert second < len(data), "the segment has one batch"
    size = int.from_bytes(data[second + 8 : second + 12], "big")
    return data[: second + 8] + (size + 5000).to_bytes(4, "big") + data[second + 12 :]


def test_a_stream_over_a_remote_batch_sized_past_its_object_fails(tiered: Tiered) -> None:
    rt, truth, tp = tiered.runtime, tiered.truth, tiered.tp
    finished = [s for s in rt.store.list_segments(tp) if s.state is SegmentState.COPY_SEGMENT_FINISHED]
    damaged = finished[0]
    key = damaged.layout.log_key
    rt.storage.put_object(
        key, _second_batch_runs_past_the_end(rt.storage.read_range(key, 0, damaged.size_bytes))
    )
    plan = rt.streams.plan(RangeQuery(tp, offset=max(damaged.start_offset, truth.log_start_offset)))
    assert plan.local_start is None or plan.local_start > damaged.end_offset, "the segment is read locally"
    with pytest.raises(CorruptDataError, match="the last batch is cut short"):
        stream(tiered, plan)


def test_a_stream_over_a_rolled_local_batch_sized_past_its_segment_fails(tiered: Tiered) -> None:
    rt, tp = tiered.runtime, tiered.tp
    rolled = tiered.partition.segments()[0]
    rolled.log_path.write_bytes(_second_batch_runs_past_the_end(rolled.log_path.read_bytes()))
    plan = rt.streams.plan(RangeQuery(tp, offset=rolled.base_offset))
    assert plan.local_start is not None and plan.local_start <= rolled.base_offset, "read remotely"
    with pytest.raises(CorruptDataError, match="the last batch is cut short"):
        stream(tiered, plan)


def test_a_fetch_over_a_rolled_local_batch_sized_past_its_segment_fails(tiered: Tiered) -> None:
    rt, tp = tiered.runtime, tiered.tp
    rolled = tiered.partition.segments()[0]
    rolled.log_path.write_bytes(_second_batch_runs_past_the_end(rolled.log_path.read_bytes()))
    with pytest.raises(CorruptDataError, match="the last batch is cut short"):
        rt.fetcher.fetch(tp, rolled.base_offset, 1 << 20)
