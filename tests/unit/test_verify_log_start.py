"""``rlm log verify`` and ``rlm log reindex`` of a partition whose log no longer starts at offset 0
(retention deleted its first segments): the transactions open at its first segment's start are
known from the producer snapshot named after it, and unknown without one (the broker keeps no
snapshot of every segment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm.log.dirwriter import LogDirWriter
from rlm.log.files import segment_file_name
from rlm.log.logdir import PartitionDir
from rlm.log.model import ControlType
from rlm.log.reindex import reindex_partition
from rlm.log.verify import verify_partition
from rlm.log.writer import ProducerRecord

NOW = 1_700_000_000_000
TXN: dict[str, Any] = {"producer_id": 7, "producer_epoch": 0}


def _partition(root: Path) -> PartitionDir:
    """users-0: producer 7's transaction begins in [0, 1] and is aborted in [2, 4]; another one
    begins and aborts in [2, 4]; [5, 5] closes the rolled segments."""
    with LogDirWriter(root, clock=lambda: NOW) as writer:
        log = writer.partition("users", 0)
        log.append([ProducerRecord(NOW, b"a", b"1")])  # 0
        log.append([ProducerRecord(NOW, b"k", b"t")], base_sequence=0, transactional=True, **TXN)  # 1
        log.roll()
        log.append([ProducerRecord(NOW, b"k", b"u")], base_sequence=1, transactional=True, **TXN)  # 2
        log.append_control(ControlType.ABORT, **TXN)  # 3
        log.append([ProducerRecord(NOW, b"b", b"2")])  # 4
        log.roll()
        log.append([ProducerRecord(NOW, b"c", b"3")])  # 5
    return PartitionDir(root / "users-0")


def _delete_first_segment(partition: PartitionDir) -> None:
    """What retention leaves: the first segment's files gone, with its producer snapshot."""
    for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
        (partition.path / segment_file_name(0, suffix)).unlink(missing_ok=True)


def test_a_partition_whose_first_segments_are_gone_verifies_healthy(tmp_path: Path) -> None:
    partition = _partition(tmp_path / "logs")
    assert verify_partition(partition) == []
    _delete_first_segment(partition)
    assert [s.base_offset for s in partition.segments()] == [2, 5]
    assert verify_partition(partition) == []  # the snapshot at 2 says producer 7's began at 1
    (partition.path / segment_file_name(2, ".snapshot")).unlink()
    assert [str(p) for p in verify_partition(partition)] == []  # unknown: not checked


def test_reindex_keeps_the_transaction_index_of_an_unknown_start(tmp_path: Path) -> None:
    partition = _partition(tmp_path / "logs")
    _delete_first_segment(partition)
    (partition.path / segment_file_name(2, ".snapshot")).unlink()
    txnindex = partition.path / segment_file_name(2, ".txnindex")
    before = txnindex.read_bytes()
    assert len(before) == 34  # producer 7's, from offset 1
    reindex_partition(partition, force=True)
    assert txnindex.read_bytes() == before


def test_a_damaged_transaction_index_is_the_only_problem_found(tmp_path: Path) -> None:
    # The transactions the first segment leaves open are still carried to the next one when its
    # own transaction index cannot be read.
    partition = _partition(tmp_path / "logs")
    damaged = partition.path / segment_file_name(0, ".txnindex")
    damaged.write_bytes(b"zzz")
    assert [(p.path, p.message) for p in verify_partition(partition)] == [
        (str(damaged), "3 trailing bytes do not form a whole entry")
    ]
