"""Checks of one segment, in this process (no Spark): each file of the index object, leader epochs
and offset order against the log, on a tier with transactions committed and aborted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.produce import ProduceSpec, produce
from rlm.log.snapshot import decode_snapshot, encode_snapshot
from rlm.log.txnindex import TransactionIndex
from rlm.metastore.model import IndexType, TopicPartition
from rlm.pipeline.verify.problems import Problem, ProblemKind
from rlm.pipeline.verify.segment import check_segment
from rlm.remote_tier.read_plan import SegmentSummary, plan_partition, select_partitions
from rlm.storage.protocol import RemoteStorage
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

#: One partition, a third of the batches transactional: aborted transactions in several segments.
SPEC = ProduceSpec(
    topics=1,
    partitions=1,
    records=900,
    segment_bytes=12 * 1024,
    max_batch_records=20,
    transaction_ratio=0.4,
    seed=3,
)
TP = TopicPartition("orders", 0)


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, lambda logs: produce(logs, SPEC))


def _summaries(tier: Tier) -> list[SegmentSummary]:
    with tier.open_store() as store:
        (record,) = select_partitions(store)
        return list(plan_partition(store, record).segments)


def _check(tier: Tier, summary: SegmentSummary, *, chunk_bytes: int = 8 << 20) -> list[Problem]:
    storage = tier.open_storage()
    try:
        return check_segment(storage, summary, deep=True, chunk_bytes=chunk_bytes).problems
    finally:
        storage.close()


def _rewrite(tier: Tier, summary: SegmentSummary, kind: IndexType, change: Callable[[bytes], bytes]) -> None:
    """Replace one file of the segment's index object by ``change`` of it (same length)."""
    storage = tier.open_storage()
    try:
        layout = summary.segment.layout
        found = layout.index_range(kind)
        assert found is not None
        size = storage.object_size(layout.index_key)
        assert size is not None
        data = bytearray(storage.read_range(layout.index_key, 0, size))
        new = change(bytes(data[found.position : found.end]))
        assert len(new) == found.size
        data[found.position : found.end] = new
        storage.put_object(layout.index_key, bytes(data))
    finally:
        storage.close()


def _patch_log(storage: RemoteStorage, summary: SegmentSummary, at: int, value: bytes) -> None:
    data = bytearray(storage.read_range(summary.log_key, 0, summary.segment.size_bytes))
    data[at : at + len(value)] = value
    storage.put_object(summary.log_key, bytes(data))


def _with_aborts(summaries: list[SegmentSummary]) -> SegmentSummary:
    return next(s for s in summaries[1:] if not s.segment.txn_index_empty)


def _only(problems: list[Problem], kind: ProblemKind) -> Problem:
    assert [p.kind for p in problems] == [kind], problems
    return problems[0]


def test_healthy_segments_pass_whatever_the_chunk_size(tier: Tier) -> None:
    summaries = _summaries(tier)
    assert len(summaries) >= 4 and sum(not s.segment.txn_index_empty for s in summaries) >= 2
    for summary in summaries:
        assert _check(tier, summary) == []
        assert _check(tier, summary, chunk_bytes=999) == []


def test_an_offset_index_entry_that_is_not_the_logs(tier: Tier) -> None:
    summary = _summaries(tier)[1]

    def move(data: bytes) -> bytes:
        index = OffsetIndex.from_bytes(summary.segment.start_offset, data)
        assert len(index) >= 2
        return data[:12] + (int.from_bytes(data[12:16], "big") + 1).to_bytes(4, "big") + data[16:]

    _rewrite(tier, summary, IndexType.OFFSET, move)
    problem = _only(_check(tier, summary), ProblemKind.INDEX_MISMATCH)
    assert problem.message.startswith("offset index entry 1 is (")
    assert problem.object_key == summary.index_key


def test_a_time_index_entry_that_is_not_the_logs(tier: Tier) -> None:
    summary = _summaries(tier)[2]

    def later(data: bytes) -> bytes:
        assert len(TimeIndex.from_bytes(summary.segment.start_offset, data)) >= 1
        return (int.from_bytes(data[:8], "big") + 5).to_bytes(8, "big") + data[8:]

    _rewrite(tier, summary, IndexType.TIMESTAMP, later)
    assert _only(_check(tier, summary), ProblemKind.INDEX_MISMATCH).message.startswith(
        "timestamp index entry 0"
    )


def test_transaction_index_entries_are_what_the_markers_imply(tier: Tier) -> None:
    summary = _with_aborts(_summaries(tier))
    assert summary.start_state_known
    unknown = dataclasses.replace(summary, previous_snapshot=None)
    assert _check(tier, unknown) == []  # without the start state, the healthy index still passes

    def lso_later(data: bytes) -> bytes:
        entries = list(TransactionIndex.from_bytes(0, data).entries())
        index = TransactionIndex(summary.segment.start_offset)
        for i, txn in enumerate(entries):
            index.append(txn._replace(last_stable_offset=txn.last_stable_offset + 1) if i == 0 else txn)
        return index.to_bytes()

    _rewrite(tier, summary, IndexType.TRANSACTION, lso_later)
    assert _only(_check(tier, summary), ProblemKind.INDEX_MISMATCH).message.startswith(
        "transaction index entry 0"
    )
    assert "above what the log allows" in _only(_check(tier, unknown), ProblemKind.INDEX_MISMATCH).message


def test_open_transactions_in_the_producer_snapshot_are_the_logs(tier: Tier) -> None:
    summary = _summaries(tier)[2]

    def reopen(data: bytes) -> bytes:
        entries = decode_snapshot(data)
        assert entries
        first = entries[0]
        wrong = -1 if first.current_txn_first_offset >= 0 else summary.segment.start_offset
        return encode_snapshot([first._replace(current_txn_first_offset=wrong), *entries[1:]])

    _rewrite(tier, summary, IndexType.PRODUCER_SNAPSHOT, reopen)
    assert _only(_check(tier, summary), ProblemKind.INDEX_MISMATCH).message.startswith("producer snapshot")


def test_the_leader_epoch_checkpoint_is_the_rows(tier: Tier) -> None:
    summary = _summaries(tier)[1]

    def other_epoch(data: bytes) -> bytes:
        version, count, first, *rest = data.decode().split("\n")
        epoch, start = first.split(" ")
        assert len(epoch) == 1
        return "\n".join([version, count, f"{(int(epoch) + 1) % 10} {start}", *rest]).encode()

    _rewrite(tier, summary, IndexType.LEADER_EPOCH, other_epoch)
    problem = _only(_check(tier, summary), ProblemKind.INDEX_MISMATCH)
    assert problem.message.startswith("leader-epoch checkpoint holds [(")


def test_batches_of_another_leader_epoch_or_out_of_order(tier: Tier) -> None:
    """The base offset and leader epoch fields are not covered by the CRC: only these checks
    can tell."""
    first, second = _summaries(tier)[1:3]
    storage = tier.open_storage()
    try:
        for summary, field in ((first, "epoch"), (second, "offset")):
            data = storage.read_range(summary.log_key, 0, summary.segment.size_bytes)
            headers = list(iter_headers(BytesSource(data)))
            middle = headers[len(headers) // 2]
            if field == "epoch":
                _patch_log(
                    storage, summary, middle.position + 12, (middle.leader_epoch + 4).to_bytes(4, "big")
                )
            else:
                previous = headers[len(headers) // 2 - 1]
                _patch_log(storage, summary, middle.position, previous.base_offset.to_bytes(8, "big"))
    finally:
        storage.close()
    epoch = _check(tier, first)
    assert ProblemKind.LEADER_EPOCH in [p.kind for p in epoch]
    assert {p.kind for p in epoch} <= {ProblemKind.LEADER_EPOCH, ProblemKind.INDEX_MISMATCH}
    order = _check(tier, second)
    assert ProblemKind.OFFSET_ORDER in [p.kind for p in order]


def test_a_row_saying_no_transaction_was_aborted_is_the_logs(tier: Tier) -> None:
    # Jobs read the transaction index only of segments whose row says it is not empty: a row
    # saying so wrongly has a read_committed export keep the aborted records.
    summary = _with_aborts(_summaries(tier))
    wrong = dataclasses.replace(summary, segment=dataclasses.replace(summary.segment, txn_index_empty=True))
    problem = _only(_check(tier, wrong), ProblemKind.INDEX_MISMATCH)
    assert "the row says the segment has no aborted transaction" in problem.message
    assert problem.object_key == summary.index_key
