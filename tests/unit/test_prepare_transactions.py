"""The transaction index the copier uploads when the broker's cannot be used (rlm.tiering.prepare).

It is rebuilt from the segment's bytes. An aborted transaction may have begun in an earlier
segment, and an entry's last stable offset is the first offset of the earliest other transaction
still open: both need the transactions open at the segment's start. Without a producer snapshot
at its base offset, they are found as the broker's producer state has them (the latest snapshot
below, then the batches from there), so the index uploaded is the broker's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.log.files import segment_file_name
from rlm.log.logdir import PartitionDir
from rlm.log.model import ControlType
from rlm.log.stable import open_transactions_at
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType
from rlm.tiering.prepare import prepare_segment
from tests.clock import FakeClock

NOW = 1_700_000_000_000


def write_log(directory: Path) -> None:
    """Producer 1's transaction begins at 0 and is aborted at 7, in the second segment (4..9),
    where producer 2's transaction (4..5) is aborted at 6 while producer 1's is still open; two
    plain records roll a third segment at 10."""
    log = PartitionAppender(directory, TopicConfig(), clock=FakeClock(NOW))

    def records(n: int) -> list[ProducerRecord]:
        return [ProducerRecord(NOW + i, b"k", b"v" * 20) for i in range(n)]

    def data(producer_id: int, n: int) -> None:
        log.append(records(n), producer_id=producer_id, producer_epoch=0, transactional=True)

    def abort(producer_id: int) -> None:
        log.append_control(ControlType.ABORT, producer_id=producer_id, producer_epoch=0)

    data(1, 2)
    log.append(records(2))
    log.roll()
    data(2, 2)
    abort(2)
    abort(1)
    log.append(records(2))
    log.roll()
    log.append(records(2))
    log.close()


BROKERS = [AbortedTxn(2, 4, 6, 0), AbortedTxn(1, 0, 7, 8)]


def uploaded_entries(partition: PartitionDir) -> list[AbortedTxn]:
    """The transaction index entries of the index object the copier builds for segment 4..9."""
    segment = partition.segments()[1]
    prepared = prepare_segment(partition, segment, broker_id=1, now_ms=NOW, epochs=[], next_base_offset=10)
    ranges = dict(prepared.index_blob.ranges)
    where = ranges[IndexType.TRANSACTION]
    data = prepared.index_blob.data[where.position : where.position + where.size]
    return list(TransactionIndex.from_bytes(4, data).entries())


def remove(path: Path) -> None:
    path.unlink()


def damage(path: Path) -> None:
    path.write_bytes(b"\x00" * 7)


@pytest.mark.parametrize(
    "snapshot_at_4",
    [pytest.param(None, id="kept"), pytest.param(remove, id="missing"), pytest.param(damage, id="corrupt")],
)
@pytest.mark.parametrize("txn_index", [remove, damage], ids=["missing", "corrupt"])
def test_a_rebuilt_transaction_index_is_the_brokers(
    tmp_path: Path, snapshot_at_4: Callable[[Path], None] | None, txn_index: Callable[[Path], None]
) -> None:
    directory = tmp_path / "orders-0"
    write_log(directory)
    partition = PartitionDir(directory)
    second = partition.segments()[1]
    assert list(second.transaction_index().entries()) == BROKERS
    assert uploaded_entries(partition) == BROKERS  # the broker's own index

    txn_index(second.txn_index_path)
    if snapshot_at_4 is not None:
        snapshot_at_4(directory / segment_file_name(4, ".snapshot"))
    second.invalidate()

    assert uploaded_entries(PartitionDir(directory)) == BROKERS


def test_the_transactions_open_at_an_offset_are_the_brokers(tmp_path: Path) -> None:
    directory = tmp_path / "orders-0"
    write_log(directory)
    for offset in (4, 10):
        (directory / segment_file_name(offset, ".snapshot")).unlink()
    partition = PartitionDir(directory)

    opened = {offset: open_transactions_at(partition, offset).ongoing for offset in (0, 1, 4, 5, 6, 7, 8, 12)}

    assert opened == {0: {}, 1: {1: 0}, 4: {1: 0}, 5: {1: 0, 2: 4}, 6: {1: 0, 2: 4}, 7: {1: 0}, 8: {}, 12: {}}
