"""Validation and helpers of the metadata records (pure logic)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from rlm.metastore import ByteRange, IndexType, LeaderEpochEntry, LogPosition, ObjectLayout
from tests.metadata_support import LAYOUT, segment


def test_epoch_ranges_end_where_the_next_epoch_starts() -> None:
    seg = segment(100, 199, epochs=((2, 100), (3, 100), (5, 150), (9, 199)))
    assert seg.epoch_range(2) is None  # epoch 3 started at the same offset: 2 wrote nothing
    assert seg.epoch_range(3) == (100, 149)
    assert seg.epoch_range(5) == (150, 198)
    assert seg.epoch_range(9) == (199, 199)
    assert seg.epoch_range(4) is None
    assert seg.contains(100) and seg.contains(199) and not seg.contains(200)


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"start_offset": -1}, "offset range"),
        ({"end_offset": 99}, "offset range"),
        ({"max_timestamp_ms": -2}, "max timestamp"),
        ({"size_bytes": -1}, "size"),
        ({"leader_epochs": ()}, "at least one leader epoch"),
        ({"leader_epochs": (LeaderEpochEntry(1, 101),)}, "first leader epoch starts at 101"),
        (
            {"leader_epochs": (LeaderEpochEntry(3, 100), LeaderEpochEntry(3, 120))},
            "out of order",
        ),
        (
            {"leader_epochs": (LeaderEpochEntry(3, 100), LeaderEpochEntry(4, 90))},
            "out of order",
        ),
        (
            {"leader_epochs": (LeaderEpochEntry(3, 100), LeaderEpochEntry(4, 200))},
            "starts after the segment",
        ),
    ],
)
def test_a_malformed_segment_is_refused(changes: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        dataclasses.replace(segment(100, 199), **changes)  # type: ignore[arg-type]


def test_layout_finds_index_ranges_and_refuses_bad_ones() -> None:
    assert LAYOUT.index_range(IndexType.TIMESTAMP) == ByteRange(120, 180)
    assert LAYOUT.index_range(IndexType.TRANSACTION) is None
    assert ByteRange(120, 180).end == 300
    with pytest.raises(ValueError, match="listed twice"):
        ObjectLayout("a", "b", ((IndexType.OFFSET, ByteRange(0, 1)),) * 2)
    with pytest.raises(ValueError, match="negative"):
        ObjectLayout("a", "b", ((IndexType.OFFSET, ByteRange(-1, 1)),))
    with pytest.raises(ValueError, match="empty"):
        ObjectLayout("", "b", ())


TOPIC = uuid.UUID(int=1)


@pytest.mark.parametrize(
    ("position", "other", "ahead"),
    [
        (LogPosition(TOPIC, 5, 20), LogPosition(TOPIC, 4, 99), True),  # a newer epoch comes first
        (LogPosition(TOPIC, 4, 99), LogPosition(TOPIC, 5, 20), False),
        (LogPosition(TOPIC, 4, 30), LogPosition(TOPIC, 4, 29), True),
        (LogPosition(TOPIC, 4, 29), LogPosition(TOPIC, 4, 29), False),  # equal is not ahead
        (LogPosition(None, 4, 30), LogPosition(None, 4, 29), True),
        (LogPosition(uuid.UUID(int=2), 9, 99), LogPosition(TOPIC, 0, 0), False),  # another topic's
        (LogPosition(TOPIC, 9, 99), LogPosition(None, 0, 0), False),
    ],
)
def test_a_log_position_is_ahead_by_epoch_then_offset_of_the_same_topic_only(
    position: LogPosition, other: LogPosition, ahead: bool
) -> None:
    assert position.ahead_of(other) is ahead
