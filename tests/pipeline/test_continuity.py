"""Offsets across a partition's finished segments: gaps, overlaps a takeover explains or not, and
the remote log start offset."""

from __future__ import annotations

import dataclasses

import pytest

from rlm.metastore.model import PartitionRecord, RemoteSegment, SkipKind, SkippedRange, TopicPartition
from rlm.pipeline.verify import continuity
from rlm.pipeline.verify.continuity import continuity_problems
from rlm.pipeline.verify.problems import Problem, ProblemKind
from tests.metadata_support import TP, segment

#: A record's highest copied offset standing for the end of the last segment checked with it.
LAST_END = -2


def _record(log_start: int = -1, highest: int = LAST_END) -> PartitionRecord:
    return PartitionRecord(TP, log_start, highest, 0, None, None)


def _continuity(
    segments: list[RemoteSegment], record: PartitionRecord, skipped: list[SkippedRange] | None = None
) -> list[Problem]:
    """:func:`continuity_problems`, the highest copied offset ``LAST_END`` made the segments' end."""
    if record.highest_copied_offset == LAST_END:
        highest = max((s.end_offset for s in segments), default=-1)
        record = dataclasses.replace(record, highest_copied_offset=highest)
    return continuity_problems(TP, segments, record, skipped or [])


def _problems(*segments: RemoteSegment, record: PartitionRecord | None = None) -> list[Problem]:
    return _continuity(list(segments), record if record is not None else _record())


def _kinds(problems: list[Problem]) -> list[ProblemKind]:
    return [p.kind for p in problems]


def test_contiguous_segments_are_fine() -> None:
    assert _problems(segment(0, 9), segment(10, 19), segment(20, 29)) == []
    assert continuity_problems(TP, [], None) == []


def test_a_gap_names_its_offsets_and_both_neighbours() -> None:
    before, after = segment(0, 9), segment(20, 29)
    (gap,) = _problems(after, before)
    assert gap.kind is ProblemKind.GAP
    assert gap.offset == 10 and gap.segment_id == str(after.segment_id)
    assert "offsets 10..19 (10) between segments [0, 9] and [20, 29]" in gap.message


def test_gaps_are_judged_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []

    def explained(tp: TopicPartition, first: int, last: int, **neighbours: object) -> list[Problem]:
        seen.append((first, last))
        return []

    monkeypatch.setattr(continuity, "judge_gap", explained)
    assert _problems(segment(0, 9), segment(20, 29), segment(40, 49)) == []
    assert seen == [(10, 19), (30, 39)]


def _skip(start: int, end: int, kind: SkipKind = SkipKind.OPERATOR) -> SkippedRange:
    return SkippedRange(TP, start, end, kind, "segment cannot be repaired", 0)


def test_a_gap_a_skipped_range_covers_is_explained() -> None:
    segments = [segment(0, 9), segment(20, 29)]
    assert _continuity(segments, _record(), [_skip(10, 19)]) == []
    assert _continuity(segments, _record(), [_skip(10, 14), _skip(15, 25)]) == []
    assert _continuity(segments, _record(), [_skip(5, 40, SkipKind.NOT_IN_LOCAL_LOG)]) == []


def test_only_the_offsets_no_skipped_range_covers_are_a_gap() -> None:
    segments = [segment(0, 9), segment(30, 39)]
    skipped = [_skip(20, 22), _skip(13, 15), _skip(100, 110)]
    problems = _continuity(segments, _record(), skipped)
    assert [(p.kind, p.offset) for p in problems] == [
        (ProblemKind.GAP, 10),
        (ProblemKind.GAP, 16),
        (ProblemKind.GAP, 23),
    ]
    assert "offsets 10..12 (3) of the gap 10..29 between segments [0, 9] and [30, 39]" in problems[0].message
    assert "offsets 16..19 (4) of the gap" in problems[1].message
    assert "offsets 23..29 (7) of the gap" in problems[2].message


def test_a_skipped_range_explains_a_gap_at_the_remote_log_start() -> None:
    segments = [segment(50, 59)]
    assert _continuity(segments, _record(log_start=40), [_skip(0, 49)]) == []
    (gap,) = _continuity(segments, _record(log_start=40), [_skip(45, 49)])
    assert gap.offset == 40 and "offsets 40..44 (5) of the gap 40..49" in gap.message


def test_a_takeover_copy_may_start_inside_the_last_one() -> None:
    earlier = segment(0, 99, epochs=((0, 0), (1, 60)))
    same_records = segment(50, 199, epochs=((0, 50), (1, 60), (2, 150)))
    assert _problems(earlier, same_records) == []
    diverged = segment(80, 199, epochs=((3, 80),))  # an unclean election: a newer epoch from 80 on
    assert _problems(earlier, diverged) == []
    longer_from_the_same_start = segment(0, 150, epochs=((0, 0), (1, 60)))
    assert _problems(earlier, longer_from_the_same_start) == []


def test_a_later_copy_with_an_older_epoch_is_not_explained() -> None:
    earlier = segment(0, 99, epochs=((0, 0), (2, 60)))
    later = segment(50, 199, epochs=((1, 50),))
    (problem,) = _problems(earlier, later)
    assert problem.kind is ProblemKind.OVERLAP and problem.offset == 60
    assert "leader epoch 1 at offset 60 where the earlier copy has 2" in problem.message


def test_a_copy_wholly_inside_others_is_not_explained() -> None:
    inner = segment(10, 20)
    (problem,) = _problems(segment(0, 99), inner, segment(100, 150))
    assert problem.kind is ProblemKind.OVERLAP and problem.segment_id == str(inner.segment_id)
    assert "wholly inside offsets [0, 99]" in problem.message
    (duplicate,) = _problems(segment(0, 99), segment(0, 99))
    assert duplicate.kind is ProblemKind.OVERLAP


def test_segments_wholly_below_the_log_start_are_reported() -> None:
    below = segment(0, 9)
    (problem,) = _problems(below, segment(10, 19), record=_record(log_start=10))
    assert problem.kind is ProblemKind.LOG_START and problem.segment_id == str(below.segment_id)
    # The log start inside the first segment is what retention leaves after a takeover overlap.
    assert _problems(segment(0, 9), segment(10, 19), record=_record(log_start=5)) == []


def test_offsets_between_the_log_start_and_the_first_segment_are_a_gap() -> None:
    (gap,) = _problems(segment(20, 29), record=_record(log_start=12))
    assert gap.kind is ProblemKind.GAP
    assert "offsets 12..19 (8) between the remote log start offset 12 and segment [20, 29]" in gap.message


def test_the_log_start_cannot_pass_what_was_ever_copied() -> None:
    (problem,) = _problems(record=_record(log_start=50, highest=29))
    assert (
        problem.kind is ProblemKind.LOG_START and "past the highest offset ever copied, 29" in problem.message
    )
    assert _problems(record=_record(log_start=30, highest=29)) == []  # everything was deleted


def test_offsets_copied_past_the_last_finished_segment_are_a_gap() -> None:
    # The store says offsets up to 39 were copied (the copier never copies them again), yet no
    # finished segment holds 30..39: the tail's segment was lost.
    last = segment(20, 29)
    (gap,) = _problems(segment(10, 19), last, record=_record(highest=39))
    assert gap.kind is ProblemKind.GAP and gap.offset == 30 and gap.segment_id == str(last.segment_id)
    assert "offsets 30..39 (10) after segment [20, 29], up to the highest copied offset 39" in gap.message
    # Every finished segment gone while the remote log start offset says nothing was deleted.
    (gone,) = _problems(record=_record(log_start=10, highest=39))
    assert gone.kind is ProblemKind.GAP and gone.offset == 10 and gone.segment_id is None
    assert "offsets 10..39 (30) from the remote log start offset 10" in gone.message
    # The tail ends where the copies do; a log start past them all is what retention leaves.
    assert _problems(segment(10, 19), last, record=_record(highest=29)) == []
    assert _problems(record=_record(log_start=40, highest=39)) == []


def test_the_log_start_read_after_the_segments_judges_the_gaps_below_them() -> None:
    # Retention advanced the log start to 10 and deleted [0, 9] after the record was read, before
    # the segments were: no gap below [10, 19]; one above it is still a gap.
    segments = [segment(10, 19), segment(30, 39)]
    record = _record(log_start=0, highest=39)
    (gap,) = continuity_problems(TP, segments, record, [], log_start_after=10)
    assert gap.kind is ProblemKind.GAP and gap.offset == 20
    # Every segment deleted so: no tail gap either.
    assert continuity_problems(TP, [], record, [], log_start_after=40) == []
    # A segment below the log start read before the segments is one retention left behind.
    (below,) = continuity_problems(
        TP, [segment(0, 9), segment(10, 19)], _record(10, 19), [], log_start_after=10
    )
    assert below.kind is ProblemKind.LOG_START


def test_a_leader_epoch_going_back_at_a_segment_boundary_is_reported() -> None:
    # [100, 199] is another leader's log after an unclean election (epoch 4 where the tier already
    # holds epoch 5 below it): the tier stitches two histories together.
    earlier = segment(0, 99, epochs=((3, 0), (5, 80)))
    stitched = segment(100, 199, epochs=((4, 100), (6, 151)))
    (problem,) = _problems(earlier, stitched)
    assert problem.kind is ProblemKind.LEADER_EPOCH and problem.offset == 100
    assert problem.segment_id == str(stitched.segment_id)
    assert "leader epoch 4 at offset 100, below epoch 5 of offset 99" in problem.message
    # Across a gap too; an epoch that stays or rises is fine.
    assert _kinds(_problems(earlier, segment(120, 199, epochs=((4, 120),)))) == [
        ProblemKind.GAP,
        ProblemKind.LEADER_EPOCH,
    ]
    assert _problems(earlier, segment(100, 199, epochs=((5, 100), (6, 151)))) == []
    assert _problems(earlier, segment(100, 199, epochs=((7, 100),))) == []
