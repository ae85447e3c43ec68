"""The in-memory segment search (:class:`rlm.lookup.segment_lists.SegmentList`) against brute
force, over many random segment sets: overlapping, sharing start offsets, timestamps that fall as
well as rise. (Against the metadata store itself: tests/integration/test_segment_lists.py.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.lookup.segment_lists import SegmentList
from rlm.metastore import RemoteSegment
from tests.metadata_support import segment


@st.composite
def _segments(draw: st.DrawFn) -> list[RemoteSegment]:
    out = []
    for _ in range(draw(st.integers(0, 40))):
        start = draw(st.integers(0, 100))
        out.append(segment(start, start + draw(st.integers(0, 30)), draw(st.integers(-1, 25))))
    return sorted(out, key=lambda s: (s.start_offset, s.segment_id.int))


@settings(max_examples=400, deadline=None)
@given(segments=_segments())
def test_first_for_timestamp_is_the_first_qualifying_segment_in_offset_order(
    segments: list[RemoteSegment],
) -> None:
    listed = SegmentList(segments)
    assert len(listed) == len(segments)
    for timestamp in range(-3, 28):
        for offset in range(-2, 135):
            found = listed.first_for_timestamp(timestamp, from_offset=offset)
            expected = next(
                (s for s in segments if s.max_timestamp_ms >= timestamp and s.end_offset >= offset), None
            )
            assert found is expected, (timestamp, offset)


@settings(max_examples=300, deadline=None)
@given(segments=_segments())
def test_last_holding_is_the_last_segment_starting_after_the_bound_that_holds_the_offset(
    segments: list[RemoteSegment],
) -> None:
    listed = SegmentList(segments)
    for after in range(-1, 131, 7):
        for offset in range(-2, 135):
            found = listed.last_holding(offset, starting_after=after)
            holding = [s for s in segments if after < s.start_offset <= offset <= s.end_offset]
            assert found is (holding[-1] if holding else None), (after, offset)
