"""``rlm spark verify --deep`` of the copy of a segment the broker's log cleaner rewrote: the copy
keeps the broker's transaction index, whose entry of an aborted transaction the cleaner emptied
names an ABORT marker that ends no transaction the log holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import ControlType
from rlm.log.segment import Segment
from rlm.log.writer import ProducerRecord
from rlm.metastore.model import TopicPartition
from rlm.pipeline.verify.job import VerifyOptions
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import verify_tier
from tests.unit.test_verify_cleaned_txn import NOW, TXN, cleaned, remove_batch


def test_the_copy_of_a_cleaned_segment_verifies_healthy(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, lambda logs: cleaned(logs, rolled=2))
    finished = tier.finished(TopicPartition("users", 0))
    assert finished[0].start_offset == 0 and not finished[0].txn_index_empty
    report = verify_tier(tier, VerifyOptions(deep=True), now_ms=NOW)
    assert [str(p) for p in report.problems] == []


def _committed_batch_cleaned(logs: Path) -> None:
    """users-0: producer 7's transaction writes K=k at 1 in [0, 2], K=k is written again at 2, its
    COMMIT is at 3 in [3, 5], where producer 7 writes again; the cleaner then removed the batch
    at 1 (superseded, and not producer 7's last). The producer snapshot at 3, taken at the roll,
    still has the transaction open from 1."""
    with LogDirWriter(logs, clock=lambda: NOW) as writer:
        log = writer.partition("users", 0)
        log.append([ProducerRecord(NOW, b"a", b"1")])  # 0
        log.append([ProducerRecord(NOW, b"k", b"t")], base_sequence=0, transactional=True, **TXN)  # 1
        log.append([ProducerRecord(NOW, b"k", b"2")])  # 2
        log.roll()
        log.append_control(ControlType.COMMIT, **TXN)  # 3
        log.append([ProducerRecord(NOW, b"z", b"z")], base_sequence=1, transactional=True, **TXN)  # 4
        log.append_control(ControlType.COMMIT, **TXN)  # 5
        log.roll()
        log.append([ProducerRecord(NOW, b"c", b"6")])  # 6
        log.roll()
        log.append([ProducerRecord(NOW, b"c", b"7")])  # 7, active
    remove_batch(Segment(logs / "users-0", 0), 1)


def test_the_copy_of_a_segment_whose_open_transactions_batches_were_cleaned_verifies_healthy(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, _committed_batch_cleaned)
    assert [s.start_offset for s in tier.finished(TopicPartition("users", 0))] == [0, 3, 6]
    report = verify_tier(tier, VerifyOptions(deep=True), now_ms=NOW)
    assert [str(p) for p in report.problems] == []
