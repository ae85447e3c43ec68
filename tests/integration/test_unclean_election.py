"""Remote copies of a log that an unclean leader election truncated, on SQLite + filesystem and
PostgreSQL + S3.

The old leader led epoch 5 from offset 20 and its copier tiered offsets 0..39. The new leader,
elected from outside the in-sync replicas, never had epoch 5: its log holds the same records up to
19, then its own, written in epoch 6. Kafka truncates every replica to the new leader's log; the
remote tier must not keep answering the old leader's records for offsets 20..39, nor leave the new
leader's untiered below the highest copied offset.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.log.logdir import PARTITION_METADATA, LogDir
from rlm.metastore.model import SegmentState, TopicPartition
from tests.tiering_support import (
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    set_log_start_offsets,
    write_scripted_log_dir,
)

TP = TopicPartition("orders", 0)
LABELS = {"topic": "orders", "partition": "0"}
TieringFactory = Callable[..., Tiering]


def plans(*epochs: int) -> list[SegmentPlan]:
    return [
        SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i, leader_epochs=(epoch,))
        for i, epoch in enumerate(epochs)
    ]


def write_log(log_dir: Path, *epochs: int) -> None:
    """Write the partition's log (the same records while the epochs agree), keeping its topic id."""
    metadata = log_dir / f"{TP.topic}-{TP.partition}" / PARTITION_METADATA
    topic_id = metadata.read_bytes() if metadata.exists() else None
    if log_dir.exists():
        shutil.rmtree(log_dir)
    write_scripted_log_dir(log_dir, {TP: plans(*epochs)}, seed=7)
    if topic_id is not None:
        metadata.write_bytes(topic_id)


OLD_LEADER = (4, 4, 5, 5)
NEW_LEADER = (4, 4, 6, 6, 6)


@pytest.fixture
def tiered(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> tuple[Tiering, Path]:
    """The old leader's offsets 0..39 tiered, then its log replaced by the new leader's."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, *OLD_LEADER)
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 4
    write_log(log_dir, *NEW_LEADER)
    return tiering, log_dir


def spans(tiering: Tiering) -> list[tuple[int, int, tuple[int, ...]]]:
    return [
        (s.start_offset, s.end_offset, tuple(e.epoch for e in s.leader_epochs)) for s in tiering.finished(TP)
    ]


def test_the_old_leaders_copies_are_replaced_by_the_new_leaders_log(tiered: tuple[Tiering, Path]) -> None:
    tiering, log_dir = tiered
    old = {s.segment_id for s in tiering.finished(TP) if s.start_offset >= 20}

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 3)
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]
    assert {s.segment_id for s in tiering.segments(TP, SegmentState.DELETE_SEGMENT_STARTED)} == old
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 2
    found = tiering.store.segment_for_offset(TP, 25)
    assert found is not None and found.segment_id not in old
    tiering.copier().run_once()  # the retired copies' objects are deleted as any others
    # Every finished copy is byte for byte the new leader's segment, and nothing else is left.
    assert_invariants(tiering.store, tiering.storage, [log_dir])

    # The old leader's replica, back before it truncates its log, replaces nothing.
    write_log(log_dir, *OLD_LEADER)
    assert tiering.copier().run_once()[0].error is None
    assert spans(tiering)[2:] == [(20, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 2


def test_copies_holding_offsets_the_log_no_longer_has_are_kept_and_reported(
    tiered: tuple[Tiering, Path], caplog: pytest.LogCaptureFixture
) -> None:
    tiering, log_dir = tiered
    set_log_start_offsets(log_dir, {TP: 25})  # offsets 20..24 are now held only by the old copy
    assert LogDir(log_dir).partition(TP.topic, TP.partition).log_start_offset() == 25

    copier = tiering.copier()  # one sidecar's, pass after pass
    with caplog.at_level(logging.ERROR, logger="rlm.copier"):
        outcomes = [copier.run_once()[0] for _ in range(2)]

    # Only the copy of 20..29 holds offsets the log no longer has: the one after it, which the
    # local log holds wholly, is replaced by the new leader's records.
    assert [(o.error, o.copied_segments) for o in outcomes] == [(None, 2), (None, 0)]
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,)), (30, 39, (6,)), (40, 49, (6,))]
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 1
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 1
    reported = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(reported) == 1  # once per divergence, not every pass
    assert "from offset 25" in reported[0] and "below the local log's start 25" in reported[0]
    assert "up to 29" in reported[0]
    found = tiering.store.segment_for_offset(TP, 35)
    assert found is not None and [e.epoch for e in found.leader_epochs] == [6]


def test_a_replica_that_has_not_truncated_yet_tiers_none_of_its_old_records(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    assert tiering.copier().run_once()[0].copied_segments == 3  # the new leader's log, up to 49
    new_leader = spans(tiering)
    # The old leader's replica, back before it truncates its log, holds more of epoch 5 than the
    # remote tier holds: none of it is the partition's log.
    write_log(log_dir, *OLD_LEADER, 5, 5, 5)

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 0)
    assert outcome.skipped is not None and "leader epoch" in outcome.skipped
    assert spans(tiering) == new_leader
