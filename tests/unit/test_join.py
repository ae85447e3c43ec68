"""The broker's segments tiered as one copy (``rlm.tiering.join.prepare_join``): their bytes end to
end, indexes rebuilt from them, the broker's transaction indexes and producer snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.errors import CorruptRecordError
from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.checkpoints import EpochEntry
from rlm.log.dirwriter import LogDirWriter
from rlm.log.index import OffsetIndex
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import ControlType
from rlm.log.txnindex import TransactionIndex
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, LeaderEpochEntry
from rlm.tiering.copy_plan import plan_join
from rlm.tiering.join import prepare_join
from rlm.tiering.prepare import PreparedSegment

NOW_MS = 1_700_000_000_000


def transactional_partition(log_dir: Path) -> PartitionDir:
    """Segments at 0, 10, 14, 21, 30 and 32 (active); producer 7 aborts 10..12 at 13, producer 8
    begins at 14 and aborts at 24, in the next segment; epoch 3 from 0, 4 from 20."""
    writer = LogDirWriter(log_dir, clock=lambda: NOW_MS, default_config=TopicConfig(segment_bytes=1 << 30))
    log = writer.partition("orders", 0, leader_epoch=3)

    def records(first: int, end: int) -> list[ProducerRecord]:
        # Values of 2000 bytes: offset index entries every few batches (every 4096 bytes).
        return [ProducerRecord(NOW_MS - 100 + i, None, b"%2000d" % i) for i in range(first, end)]

    def transactional(producer_id: int, first: int, end: int) -> None:
        log.append(
            records(first, end),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=first,
            transactional=True,
        )

    log.append(records(0, 10))
    log.roll()
    transactional(7, 10, 13)
    log.append_control(ControlType.ABORT, producer_id=7, producer_epoch=0)
    log.roll()
    transactional(8, 14, 17)
    log.append(records(17, 20))
    log.leader_epoch = 4
    log.append(records(20, 21))
    log.roll()
    log.append(records(21, 24))
    log.append_control(ControlType.ABORT, producer_id=8, producer_epoch=0)
    log.append(records(25, 30))
    log.roll()
    log.append(records(30, 32))
    log.roll()
    log.append(records(32, 34))
    writer.close()
    partition = LogDir(log_dir).partition("orders", 0)
    assert [s.base_offset for s in partition.segments()] == [0, 10, 14, 21, 30, 32]
    return partition


def prepared_join(partition: PartitionDir, directory: Path, *, past: int, start: int = 10) -> PreparedSegment:
    join = plan_join(partition.segments(), start=start, past=past, high_watermark=34)
    assert join is not None
    return prepare_join(
        partition,
        join,
        broker_id=1,
        now_ms=NOW_MS,
        epochs=[EpochEntry(3, 0), EpochEntry(4, 20)],
        directory=directory,
    )


def test_segments_are_joined_byte_for_byte_with_indexes_rebuilt_and_the_brokers_transactions(
    tmp_path: Path,
) -> None:
    partition = transactional_partition(tmp_path / "logs")
    out = tmp_path / "out"
    out.mkdir()

    prepared = prepared_join(partition, out, past=20)

    joined = b"".join(s.log_path.read_bytes() for s in partition.segments()[1:4])
    assert prepared.log_path.parent == out and prepared.log_path.read_bytes() == joined
    remote = prepared.remote
    assert (remote.start_offset, remote.end_offset, remote.size_bytes) == (10, 29, len(joined))
    assert remote.leader_epochs == (LeaderEpochEntry(3, 10), LeaderEpochEntry(4, 20))
    headers = list(iter_headers(BytesSource(joined)))
    assert remote.max_timestamp_ms == max(h.max_timestamp for h in headers) == NOW_MS  # the abort marker's
    # Both aborted transactions, as the broker indexed them in the segments of their markers.
    txns = TransactionIndex.from_bytes(10, prepared.index_blob.extract(IndexType.TRANSACTION) or b"")
    brokers = [t for s in partition.segments()[1:4] for t in s.transaction_index().entries()]
    assert list(txns.entries()) == brokers
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in brokers] == [(7, 10, 13), (8, 14, 24)]
    snapshot = partition.path / "00000000000000000030.snapshot"
    assert prepared.index_blob.extract(IndexType.PRODUCER_SNAPSHOT) == snapshot.read_bytes()
    # Every offset index entry names a batch of the joined bytes holding its offset.
    starts = {h.position: h for h in headers}
    index = OffsetIndex.from_bytes(10, prepared.index_blob.extract(IndexType.OFFSET) or b"")
    entries = list(index.entries())
    assert len(entries) >= 3 and all(
        e.position in starts and starts[e.position].last_offset >= e.offset for e in entries
    )


@pytest.mark.parametrize("snapshot_at_the_cut", [True, False], ids=["snapshot", "no-snapshot"])
def test_a_missing_transaction_index_is_rebuilt_from_the_bytes_and_the_transactions_open_at_the_cut(
    tmp_path: Path, snapshot_at_the_cut: bool
) -> None:
    partition = transactional_partition(tmp_path / "logs")
    brokers = list(partition.segments()[3].transaction_index().entries())
    (partition.path / "00000000000000000021.txnindex").unlink()
    if not snapshot_at_the_cut:
        (partition.path / "00000000000000000021.snapshot").unlink()
    out = tmp_path / "out"
    out.mkdir()

    # Producer 8's transaction, open at 21 since 14, is aborted at 24: the snapshot at 21 says so,
    # and without it the batches from the snapshot before do.
    prepared = prepared_join(partition, out, start=21, past=29)

    assert (prepared.remote.start_offset, prepared.remote.end_offset) == (21, 31)
    txns = TransactionIndex.from_bytes(21, prepared.index_blob.extract(IndexType.TRANSACTION) or b"")
    assert list(txns.entries()) == brokers
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in brokers] == [(8, 14, 24)]


def test_one_segment_reaching_past_is_tiered_as_the_brokers_files(tmp_path: Path) -> None:
    partition = transactional_partition(tmp_path / "logs")
    out = tmp_path / "out"
    out.mkdir()

    prepared = prepared_join(partition, out, past=12)

    assert prepared.log_path == partition.segments()[1].log_path and not list(out.iterdir())
    assert (prepared.remote.start_offset, prepared.remote.end_offset) == (10, 13)


def test_a_segment_failing_the_checks_is_named_by_the_brokers_file(tmp_path: Path) -> None:
    partition = transactional_partition(tmp_path / "logs")
    damaged = partition.segments()[2].log_path
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF  # a record's byte: the batch's CRC fails
    damaged.write_bytes(bytes(data))
    out = tmp_path / "out"
    out.mkdir()

    with pytest.raises(CorruptRecordError) as caught:
        prepared_join(partition, out, past=20)

    assert caught.value.path == str(damaged) and "CRC" in str(caught.value)
    assert not list(out.iterdir())
