"""Contract of ``remote_tier_summaries``: many partitions' remote-tier summaries in one batch, each
what the single-partition calls answer; on SQLite and PostgreSQL."""

from __future__ import annotations

import math

from sqlalchemy import insert

from metadata import tier_summaries
from metadata.models import PartitionRow
from metadata.store import SqlMetadataStore
from rlm.metastore import RemoteTierSummary, SegmentState, TopicPartition
from tests.metadata_support import TP, add_finished, counted_statements, segment

OTHER = TopicPartition("payments", 3)
NEVER_SEEN = TopicPartition("never-seen", 0)


def expected(store: SqlMetadataStore, tp: TopicPartition) -> RemoteTierSummary | None:
    """What the single-partition calls say."""
    record = store.get_partition(tp)
    if record is None:
        return None
    finished = list(store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
    return RemoteTierSummary(record, finished[0].start_offset if finished else None, store.max_timestamp(tp))


def test_each_summary_is_what_the_single_partition_calls_answer(store: SqlMetadataStore) -> None:
    add_finished(store, segment(100, 199, 5_000), segment(200, 299, 9_000), segment(300, 399, 7_000))
    store.add_segment(segment(50, 99, 99_999))  # started only: neither first nor max
    store.advance_log_start_offset(TP, 150)
    add_finished(store, segment(0, 9, 42, tp=OTHER))
    deleted = segment(10, 19, 77, tp=OTHER)
    add_finished(store, deleted)
    store.update_segment_state(deleted.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=2)
    only_started = TopicPartition("payments", 4)
    store.add_segment(segment(0, 9, 1, tp=only_started))

    summaries = store.remote_tier_summaries([TP, OTHER, only_started, NEVER_SEEN])

    assert set(summaries) == {TP, OTHER, only_started}
    for tp in (TP, OTHER, only_started):
        assert summaries[tp] == expected(store, tp), tp
    assert (summaries[TP].first_offset, summaries[TP].max_timestamp) == (100, 9_000)
    assert summaries[TP].record.remote_log_start_offset == 150
    assert (summaries[OTHER].first_offset, summaries[OTHER].max_timestamp) == (0, 42)
    assert (summaries[only_started].first_offset, summaries[only_started].max_timestamp) == (None, None)


def test_nothing_asked_nothing_read(store: SqlMetadataStore) -> None:
    with counted_statements(store) as statements:
        assert store.remote_tier_summaries([]) == {}
        assert store.remote_tier_summaries([NEVER_SEEN]) == {}
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1


def test_many_partitions_cost_one_statement_per_chunk_not_one_each(store: SqlMetadataStore) -> None:
    known = [TopicPartition("orders", p) for p in range(tier_summaries.CHUNK + 50)]
    with store.engine.begin() as conn:  # rows of partitions without segments, as a bulk load writes them
        conn.execute(
            insert(PartitionRow), [{"topic": tp.topic, "partition": tp.partition} for tp in known[1:]]
        )
    for tp in (known[0], known[tier_summaries.CHUNK - 1], known[tier_summaries.CHUNK + 3]):
        add_finished(store, segment(tp.partition, tp.partition + 9, tp.partition * 10, tp=tp))
    asked = [*known, *(TopicPartition("unknown", p) for p in range(2_000))]

    with counted_statements(store) as statements:
        summaries = store.remote_tier_summaries(asked)

    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == math.ceil(len(asked) / tier_summaries.CHUNK)
    assert set(summaries) == set(known)
    for tp in (known[0], known[1], known[tier_summaries.CHUNK - 1], known[tier_summaries.CHUNK + 3]):
        assert summaries[tp] == expected(store, tp), tp
    assert summaries[known[1]].first_offset is None and summaries[known[1]].max_timestamp is None
    assert summaries[known[tier_summaries.CHUNK + 3]].max_timestamp == (tier_summaries.CHUNK + 3) * 10
