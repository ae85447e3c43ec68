"""Which segments a job reads: partitions chosen, overlapping copies read once, summaries small."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import InvalidTopicNameError, NotFoundError
from rlm.log.txnindex import AbortedTxn
from rlm.metastore.model import IndexType, PartitionState, RemoteSegment, TopicPartition
from rlm.remote_tier.read_plan import (
    IndexRef,
    PartitionPlan,
    plan_partition,
    select_partitions,
    summarize,
    with_aborted,
)
from tests.clock import FakeClock
from tests.metadata_support import LAYOUT, add_finished, open_store, segment, sqlite_copy


def _ranges(segments: list[RemoteSegment], log_start: int = -1) -> list[tuple[int, int]]:
    return [(s.read_from, s.read_to) for s in summarize(segments, log_start)]


def test_contiguous_segments_are_read_whole() -> None:
    assert _ranges([segment(0, 9), segment(10, 19), segment(20, 29)]) == [(0, 9), (10, 19), (20, 29)]


def test_where_copies_overlap_the_later_one_is_read() -> None:
    # A takeover: the new leader's segment starts inside the last copied one and ends past it.
    assert _ranges([segment(50, 199), segment(0, 99)]) == [(0, 49), (50, 199)]
    # Same start, longer: the earlier copy yields every offset.
    summaries = summarize([segment(0, 99), segment(0, 150)])
    assert [(s.segment.end_offset, s.read_from, s.read_to) for s in summaries] == [(99, 0, -1), (150, 0, 150)]


def test_a_copy_wholly_inside_others_is_not_read() -> None:
    ranges = _ranges([segment(0, 99), segment(10, 20), segment(100, 150)])
    assert ranges[0] == (0, 99) and ranges[2] == (100, 150)
    assert ranges[1][0] > ranges[1][1]  # nothing


def test_reading_starts_at_the_remote_log_start_offset() -> None:
    assert _ranges([segment(0, 99), segment(100, 199)], log_start=50) == [(50, 99), (100, 199)]
    assert _ranges([segment(0, 99), segment(100, 199)], log_start=120)[0] == (120, 99)


def test_the_previous_segments_producer_snapshot_gives_the_start_state() -> None:
    first, second, after_gap = segment(0, 9), segment(10, 19), segment(30, 39)
    summaries = summarize([first, second, after_gap])
    snapshot = LAYOUT.index_range(IndexType.PRODUCER_SNAPSHOT)
    assert snapshot is not None
    assert summaries[1].previous_snapshot == IndexRef(LAYOUT.index_key, snapshot)
    assert summaries[0].previous_snapshot is None and summaries[0].start_state_known  # offset 0
    assert summaries[2].previous_snapshot is None and not summaries[2].start_state_known


def test_aborted_transactions_are_attached_where_they_overlap() -> None:
    plan = PartitionPlan(TopicPartition("orders", 0), None, summarize([segment(0, 9), segment(10, 19)]))
    early, spanning, late = AbortedTxn(7, 2, 4, 2), AbortedTxn(8, 5, 12, 5), AbortedTxn(9, 15, 16, 15)
    attached = with_aborted(plan, [late, spanning, early])
    assert [s.aborted for s in attached.segments] == [(early, spanning), (spanning, late)]


def test_summaries_are_small_and_picklable() -> None:
    summary = summarize([segment(0, 9), segment(10, 19, epochs=((0, 10), (3, 15)))])[1]
    data = pickle.dumps(summary)
    assert pickle.loads(data) == summary
    assert len(data) < 2000
    assert summary.describe() == f"orders-0 [10, 19] {summary.segment_id}"


@pytest.fixture
def store(sqlite_template: Path, tmp_path: Path) -> Iterator[SqlMetadataStore]:
    with open_store(sqlite_copy(sqlite_template, tmp_path), FakeClock()) as opened:
        yield opened


def test_partitions_are_chosen_by_topic_and_number(store: SqlMetadataStore) -> None:
    for topic in ("orders", "clicks"):
        for number in (0, 1, 2):
            add_finished(store, segment(0, 9, tp=TopicPartition(topic, number)))
    store.update_partition_state(
        TopicPartition("clicks", 2), PartitionState.DELETE_PARTITION_MARKED, event_time_ms=1
    )
    every = [r.topic_partition for r in select_partitions(store)]
    assert every == [
        TopicPartition("clicks", 0),
        TopicPartition("clicks", 1),
        TopicPartition("orders", 0),
        TopicPartition("orders", 1),
        TopicPartition("orders", 2),
    ]
    chosen = select_partitions(store, ["orders"], [0, 2])
    assert [r.topic_partition for r in chosen] == [TopicPartition("orders", 0), TopicPartition("orders", 2)]
    with pytest.raises(NotFoundError, match="no partition numbered 7 of topic 'orders'"):
        select_partitions(store, ["orders"], [7])
    with pytest.raises(NotFoundError, match="topic 'payments'"):
        select_partitions(store, ["orders", "payments"])
    with pytest.raises(InvalidTopicNameError):
        select_partitions(store, ["no/such"])


def test_a_plan_reads_from_the_remote_log_start(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 9), segment(10, 19), segment(20, 29))
    store.advance_log_start_offset(TopicPartition("orders", 0), 15)
    (record,) = select_partitions(store)
    plan = plan_partition(store, record)
    assert plan.log_start_offset == 15
    assert [(s.segment.start_offset, s.read_from, s.read_to) for s in plan.segments] == [
        (10, 15, 19),
        (20, 20, 29),
    ]
    everything = plan_partition(store, record, from_log_start=False)
    assert [s.segment.start_offset for s in everything.segments] == [0, 10, 20]
