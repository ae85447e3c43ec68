"""The leader epochs a copied segment is labelled with (rlm.tiering.prepare.epochs_of_segment).

They come from the broker's leader-epoch cache, and from the segment's own batches where the cache
starts above the segment: a broker cuts the cache at its new log start at once (DeleteRecords, or
its local retention), while the segments below stay on disk until its next retention check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.log.checkpoints import EpochEntry, read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from rlm.log.logdir import LogDir
from rlm.metastore.model import LeaderEpochEntry, TopicPartition
from rlm.tiering.prepare import epochs_of_segment, prepare_segment
from tests.tiering_support import WRITER_NOW_MS, SegmentPlan, write_scripted_log_dir


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


def labels(*pairs: tuple[int, int]) -> tuple[LeaderEpochEntry, ...]:
    return tuple(LeaderEpochEntry(epoch, start) for epoch, start in pairs)


@pytest.mark.parametrize(
    ("cache", "own", "start", "end", "expected"),
    [
        # The cache covers the segment: its entries, the first moved to the segment's start.
        (entries((2, 0), (3, 15)), entries((2, 10), (3, 15)), 10, 19, labels((2, 10), (3, 15))),
        (entries((2, 0), (3, 15)), (), 10, 19, labels((2, 10), (3, 15))),
        # The cache was cut at 17 (truncateFromStart moved epoch 3's entry up to it): the
        # segment's own batches say what wrote 10..16.
        (entries((3, 17)), entries((2, 10), (3, 15)), 10, 19, labels((2, 10), (3, 15))),
        (entries((3, 17)), entries((2, 0)), 0, 9, labels((2, 0))),
        (entries((3, 17), (4, 25)), entries((3, 20), (4, 25)), 20, 29, labels((3, 20), (4, 25))),
        # No cache: the batches alone.
        ((), entries((5, 30), (6, 34)), 30, 39, labels((5, 30), (6, 34))),
        # Neither tells (legacy v0/v1 batches carry no epoch): epoch 0, or the cache's first
        # epoch moved back to the segment's start, as before.
        ((), (), 0, 9, labels((0, 0))),
        (entries((3, 17)), (), 10, 19, labels((3, 10))),
    ],
)
def test_epochs_of_a_segment(
    cache: list[EpochEntry],
    own: list[EpochEntry],
    start: int,
    end: int,
    expected: tuple[LeaderEpochEntry, ...],
) -> None:
    assert epochs_of_segment(cache, start, end, own=own) == expected


def test_a_segment_below_a_cut_cache_is_labelled_by_its_batches(tmp_path: Path) -> None:
    """DeleteRecords to 17: the broker's cache is cut to ``3 17`` while segments 0..9 and 10..19
    are still on disk. Their rows carry the epochs that wrote them (2, then 3 from 15), not an
    epoch 0 that never led the log, nor epoch 3 stretched back over epoch 2's records."""
    tp = TopicPartition("orders", 0)
    plans = [
        SegmentPlan(10, WRITER_NOW_MS - 5000, (2,)),
        SegmentPlan(10, WRITER_NOW_MS - 4000, (2, 3)),
        SegmentPlan(10, WRITER_NOW_MS - 3000, (3,)),
    ]
    write_scripted_log_dir(tmp_path, {tp: plans})
    partition = LogDir(tmp_path).partition("orders", 0)
    checkpoint = partition.path / "leader-epoch-checkpoint"
    assert read_leader_epoch_checkpoint(checkpoint) == entries((2, 0), (3, 15))
    write_leader_epoch_checkpoint(checkpoint, entries((3, 17)))
    cache = read_leader_epoch_checkpoint(checkpoint)

    segments = partition.segments()
    labelled = [
        prepare_segment(
            partition, segment, broker_id=1, now_ms=WRITER_NOW_MS, epochs=cache, next_base_offset=following
        ).remote.leader_epochs
        for segment, following in zip(segments[:3], (10, 20, 30), strict=True)
    ]

    assert labelled == [labels((2, 0)), labels((2, 10), (3, 15)), labels((3, 20))]
