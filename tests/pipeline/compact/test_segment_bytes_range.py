"""segment.bytes is an int32 as Kafka has it: a compacted segment never outgrows its index."""

from __future__ import annotations

import uuid

import pytest

from rlm.config import TopicSettings, load_settings
from rlm.errors import ConfigError
from rlm.log.index import OffsetIndex
from rlm.metastore.model import LeaderEpochEntry, ObjectLayout, RemoteSegment, TopicPartition
from rlm.pipeline.compact.segment import SegmentChange, group_segments
from rlm.remote_tier.read_plan import SegmentSummary

GIB = 1 << 30


def _summary(start: int, end: int, size: int) -> SegmentSummary:
    row = RemoteSegment(
        segment_id=uuid.uuid4(),
        topic_partition=TopicPartition("orders", 0),
        topic_id=None,
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1000,
        size_bytes=size,
        broker_id=1,
        event_time_ms=1000,
        leader_epochs=(LeaderEpochEntry(0, start),),
        layout=ObjectLayout(f"{start}.log", f"{start}.indexes", ()),
        txn_index_empty=True,
    )
    return SegmentSummary(row, start, end)


def test_a_segment_bytes_past_int32_would_merge_segments_no_offset_index_can_address() -> None:
    # Two 1.5 GiB inputs that compaction keeps most of go into one run under a 4 GiB target: its
    # output's later batches lie past 2**31 - 1 bytes, which an offset index entry cannot hold.
    inputs = [_summary(0, 999, 3 * GIB // 2), _summary(1000, 1999, 3 * GIB // 2)]
    changes = [SegmentChange(removed=1, stamped=0, kept=999, total=1000)] * 2
    assert len(group_segments(inputs, changes, 1999, 4 * GIB)) == 1
    with pytest.raises(ValueError, match="int32"):
        OffsetIndex(0).append(1500, 3 * GIB)
    # Kafka's segment.bytes is an int: the largest keeps each input a run of its own.
    assert len(group_segments(inputs, changes, 1999, 2**31 - 1)) == 2


@pytest.mark.parametrize("value", [2**31, 4 * GIB, 2**63 - 1])
def test_segment_bytes_past_int32_is_refused_naming_the_setting(value: int) -> None:
    with pytest.raises(ConfigError, match=rf"segment\.bytes must be 14 to 2147483647, not {value}"):
        TopicSettings(segment_bytes=value)
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        load_settings(env={"RLM_SEGMENT_BYTES": str(value)})
    assert TopicSettings(segment_bytes=2**31 - 1).segment_bytes == 2**31 - 1
