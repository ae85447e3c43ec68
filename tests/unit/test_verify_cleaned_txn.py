"""``rlm log verify`` of a segment the broker's log cleaner rewrote: the cleaner removes an aborted
transaction's batches and keeps its ABORT marker, and the cleaned segment's transaction index
keeps the transaction's entry as it was (``CleanedTransactionMetadata`` appends the original
``AbortedTxn`` when it keeps the marker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import PartitionDir
from rlm.log.model import ControlType
from rlm.log.segment import Segment, rebuild_segment_indexes
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.log.verify import verify_partition
from rlm.log.writer import ProducerRecord

NOW = 1_700_000_000_000
TXN: dict[str, Any] = {"producer_id": 7, "producer_epoch": 0}


def cleaned(root: Path, *, rolled: int = 1) -> PartitionDir:
    """users-0: [0, 3] holds a record, producer 7's aborted transaction (its batch at 1, its marker
    at 2) and a record; ``rolled`` segments of one record follow, then an active one; the cleaner
    then removed the batch at 1."""
    with LogDirWriter(root, clock=lambda: NOW) as writer:
        log = writer.partition("users", 0)
        log.append([ProducerRecord(NOW, b"a", b"1")])  # 0
        log.append([ProducerRecord(NOW, b"k", b"t")], base_sequence=0, transactional=True, **TXN)  # 1
        log.append_control(ControlType.ABORT, **TXN)  # 2
        log.append([ProducerRecord(NOW, b"b", b"2")])  # 3
        for offset in range(4, 4 + rolled + 1):
            log.roll()
            log.append([ProducerRecord(NOW, b"c", str(offset).encode())])
    partition = PartitionDir(root / "users-0")
    segment = Segment(partition.path, 0)
    assert list(segment.transaction_index().entries()) == [AbortedTxn(7, 1, 2, 3)]
    remove_batch(segment, 1)
    return partition


def remove_batch(segment: Segment, base_offset: int) -> None:
    """Remove the batch starting at ``base_offset`` from ``segment``, as the cleaner does, with the
    offset and time indexes of what is left (the transaction index is left as it is)."""
    data = segment.log_path.read_bytes()
    (removed,) = [h for h in iter_headers(BytesSource(data)) if h.base_offset == base_offset]
    segment.log_path.write_bytes(data[: removed.position] + data[removed.end_position :])
    rebuilt = rebuild_segment_indexes(segment)
    rebuilt.offset_index.write(segment.index_path)
    rebuilt.time_index.write(segment.time_index_path)


def test_a_cleaned_segment_keeping_an_emptied_aborts_entry_verifies_healthy(tmp_path: Path) -> None:
    partition = cleaned(tmp_path / "logs")
    assert [str(p) for p in verify_partition(partition)] == []


def test_an_entry_for_a_marker_the_log_does_not_hold_is_still_reported(tmp_path: Path) -> None:
    partition = cleaned(tmp_path / "logs")
    index = TransactionIndex(0)
    index.append(AbortedTxn(7, 1, 2, 3))
    index.append(AbortedTxn(8, 1, 3, 4))  # offset 3 is no marker
    index.write(Segment(partition.path, 0).txn_index_path)
    (problem,) = verify_partition(partition)
    assert problem.path.endswith("00000000000000000000.txnindex")
