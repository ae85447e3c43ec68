"""What a copy pass tiers next (``rlm.tiering.copy_plan``): ranges from names, never from indexes, and
never a silent jump over offsets the remote tier does not account for."""

from __future__ import annotations

from pathlib import Path

from rlm.log.segment import Segment
from rlm.metastore.model import SkipKind, SkippedRange, TopicPartition
from rlm.tiering.copy_plan import covered_through, plan_copy, plan_join

TP = TopicPartition("orders", 0)


def _segments(tmp_path: Path, *bases: int) -> list[Segment]:
    # Only names matter to the plan; no file is read (a missing file has no size: lag 0 bytes).
    return [Segment(tmp_path, base) for base in bases]


def _skip(start: int, end: int) -> SkippedRange:
    return SkippedRange(TP, start, end, SkipKind.OPERATOR, "test", 0)


def test_coverage_runs_through_adjacent_skipped_ranges_only() -> None:
    assert covered_through(-1, []) == -1
    assert covered_through(99, [_skip(100, 199), _skip(200, 250)]) == 250
    assert covered_through(99, [_skip(150, 199)]) == 99  # ahead of the copier: not yet
    assert covered_through(99, [_skip(40, 60)]) == 99  # behind it: nothing to carry on
    assert covered_through(-1, [_skip(0, 9)]) == 9


def test_ranges_come_from_the_next_segment_base_and_stop_at_the_high_watermark(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 0, 100, 200, 300, 400)
    plan = plan_copy(segments, high_watermark=300, covered=-1, log_start_offset=None)
    assert [(c.segment.base_offset, c.end_offset) for c in plan.candidates] == [
        (0, 99),
        (100, 199),
        (200, 299),
    ]
    assert plan.gap is None and plan.next_offset == 0
    # The high watermark is exclusive: a segment ending at it is not fully replicated.
    assert len(plan_copy(segments, high_watermark=299, covered=-1, log_start_offset=None).candidates) == 2
    assert plan_copy(segments, high_watermark=None, covered=-1, log_start_offset=None).candidates == ()


def test_copying_resumes_after_what_is_covered_even_inside_a_segment(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 0, 100, 200, 300)
    plan = plan_copy(segments, high_watermark=1000, covered=149, log_start_offset=None)
    assert [c.segment.base_offset for c in plan.candidates] == [100, 200]
    assert plan.next_offset == 150 and plan.gap is None


def test_segments_wholly_inside_a_skipped_range_are_not_copied(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 0, 100, 200, 300, 400)
    skipped = [_skip(200, 299)]
    plan = plan_copy(segments, high_watermark=1000, covered=99, log_start_offset=None, skipped=skipped)
    assert [c.segment.base_offset for c in plan.candidates] == [100, 300]


def test_a_hole_below_the_local_log_is_named_not_jumped(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 300, 400, 500)
    plan = plan_copy(segments, high_watermark=1000, covered=199, log_start_offset=None)
    assert plan.gap is not None
    assert (plan.gap.start_offset, plan.gap.end_offset) == (200, 299)
    assert "not in the local log, which starts at offset 300" in plan.gap.reason
    assert [c.segment.base_offset for c in plan.candidates] == [300, 400]


def test_a_hole_below_the_log_start_offset_says_so(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 200, 300, 400, 500)
    plan = plan_copy(segments, high_watermark=1000, covered=199, log_start_offset=350)
    assert plan.gap is not None
    assert (plan.gap.start_offset, plan.gap.end_offset) == (200, 299)
    assert "below the broker's log start offset 350" in plan.gap.reason
    assert [c.segment.base_offset for c in plan.candidates] == [300, 400]


def test_a_partition_never_tiered_starts_where_its_local_log_does(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 300, 400, 500)
    plan = plan_copy(segments, high_watermark=1000, covered=-1, log_start_offset=None)
    assert plan.gap is None
    assert [c.segment.base_offset for c in plan.candidates] == [300, 400]
    started_late = plan_copy(segments, high_watermark=1000, covered=-1, log_start_offset=450)
    assert started_late.gap is None
    assert [c.segment.base_offset for c in started_late.candidates] == [400]


def test_a_hole_split_by_a_skipped_range_is_recorded_before_anything_is_copied(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 300, 400, 500)
    plan = plan_copy(
        segments, high_watermark=1000, covered=99, log_start_offset=None, skipped=[_skip(150, 199)]
    )
    assert plan.gap is not None and (plan.gap.start_offset, plan.gap.end_offset) == (100, 149)
    assert plan.candidates == ()  # copying 300.. now would pass 200..299, not recorded yet


def test_a_join_runs_from_the_cut_to_the_first_segment_reaching_past_the_kept_copy(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 25, 28, 35, 45, 55)
    join = plan_join(segments, start=25, past=29, high_watermark=100)
    assert join is not None and [s.base_offset for s in join.segments] == [25, 28]
    assert (join.end_offset, join.next_base_offset) == (34, 35)
    alone = plan_join(segments, start=25, past=26, high_watermark=100)  # the first reaches past it
    assert alone is not None and [s.base_offset for s in alone.segments] == [25]
    # A segment ending just at the kept copy's end does not reach past it.
    longer = plan_join(segments, start=25, past=34, high_watermark=100)
    assert longer is not None and [s.base_offset for s in longer.segments] == [25, 28, 35]


def test_a_join_waits_for_rolled_segments_below_the_high_watermark(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 25, 28, 35)  # 35 is the active segment
    assert plan_join(segments, start=25, past=34, high_watermark=100) is None
    assert plan_join(segments, start=25, past=29, high_watermark=34) is None  # 28..34 not replicated
    assert plan_join(segments, start=25, past=29, high_watermark=35) is not None
    assert plan_join(segments, start=25, past=29, high_watermark=None) is None


def test_a_join_needs_a_segment_starting_at_the_cut(tmp_path: Path) -> None:
    segments = _segments(tmp_path, 20, 28, 35, 45)
    assert plan_join(segments, start=25, past=29, high_watermark=100) is None  # the cut is inside one
    assert plan_join(segments[1:], start=25, past=29, high_watermark=100) is None  # deleted since
    join = plan_join(segments, start=28, past=29, high_watermark=100)
    assert join is not None and [s.base_offset for s in join.segments] == [28]
