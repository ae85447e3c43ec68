"""Across one partition's finished segments: every offset held, once, from the remote log start on.

Judged from the metadata alone (no object is read):

* Gaps: offsets after the first finished segment that no finished segment holds, up to the
  highest offset ever copied (offsets copied above the last finished segment are a gap too: the
  copier never copies them again).
  :func:`judge_gap` is the one place a gap is judged: offsets an operator or the copier recorded
  as skipped (``rlm copy skip``, or deleted by the broker before they were tiered) are explained,
  and only the offsets of a gap that no skipped range covers are a problem.
* Overlaps: legal only as a takeover copy leaves them. The copier copies a segment only when it
  ends above the highest copied offset, so the later copy (in offset order) ends past every copy
  before it, and starts anywhere at or above their start: it may start inside the last copied
  segment (the new leader rolled its segments elsewhere). Within the offsets both hold, the later
  copy's leader epoch is never below the earlier one's: equal, they hold the same replicated
  records; higher, the new leader's log diverged after an unclean election and its records are
  the ones the log kept. A copy lying wholly inside earlier ones, or one whose epochs go back, is
  an overlap no takeover explains.
* Leader epochs: a segment starting above the offsets held before it starts in a leader epoch at
  least that of the last offset before it (a log's epochs never go back; one that does is another
  leader's diverged log stitched to this one).
* The remote log start offset: no finished segment lies wholly below it (retention advances it
  and then deletes them), the first one above it starts at or below it (else the offsets between
  are a gap), and it is at most one past the highest offset ever copied.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from rlm.metastore.model import PartitionRecord, RemoteSegment, SkippedRange, TopicPartition
from rlm.pipeline.verify.problems import Problem, ProblemKind
from rlm.remote_tier.read_plan import in_offset_order


def _range(segment: RemoteSegment) -> str:
    return f"[{segment.start_offset}, {segment.end_offset}]"


def judge_gap(
    tp: TopicPartition,
    first: int,
    last: int,
    *,
    before: RemoteSegment | None,
    after: RemoteSegment | None,
    skipped: Sequence[SkippedRange] = (),
) -> list[Problem]:
    """The problems of offsets ``first`` … ``last``, which no finished segment holds.

    The one place gaps are judged: the offsets the partition's skipped ranges cover are explained
    (the report lists those ranges); each run of offsets none covers is one problem.

    Args:
        tp: The partition.
        first: The gap's first offset.
        last: The gap's last offset.
        before: The segment holding the offsets just below (``None`` when the gap starts at the
            remote log start offset).
        after: The segment starting right after the gap (``None`` when the gap runs to the
            highest offset ever copied, ``last``: no finished segment holds the tail).
        skipped: The partition's skipped ranges, in any order.
    """
    if after is None:
        start = (
            f"from the remote log start offset {first}"
            if before is None
            else f"after segment {_range(before)}"
        )
        where = f"{start}, up to the highest copied offset {last},"
    elif before is None:
        where = f"between the remote log start offset {first} and segment {_range(after)}"
    else:
        where = f"between segments {_range(before)} and {_range(after)}"
    named = after if after is not None else before
    problems = []
    for low, high in uncovered(first, last, skipped):
        part = "" if (low, high) == (first, last) else f" of the gap {first}..{last}"
        problems.append(
            Problem(
                ProblemKind.GAP,
                tp.topic,
                tp.partition,
                f"offsets {low}..{high} ({high - low + 1}){part} {where} are in no finished segment "
                "and no skipped range",
                segment_id=None if named is None else str(named.segment_id),
                offset=low,
            )
        )
    return problems


def uncovered(first: int, last: int, skipped: Sequence[SkippedRange]) -> list[tuple[int, int]]:
    """The runs of offsets in ``[first, last]`` that no range of ``skipped`` covers, ascending."""
    runs = []
    at = first
    for skip in sorted(skipped, key=lambda r: r.start_offset):
        if skip.end_offset < at or not skip.overlaps(at, last):
            continue
        if skip.start_offset > at:
            runs.append((at, skip.start_offset - 1))
        at = skip.end_offset + 1
        if at > last:
            return runs
    runs.append((at, last))
    return runs


def epoch_at(segment: RemoteSegment, offset: int) -> int:
    """The leader epoch the row says wrote ``offset`` (the last epoch starting at or before it)."""
    starts = [entry.start_offset for entry in segment.leader_epochs]
    at = max(0, bisect.bisect_right(starts, offset) - 1)
    return segment.leader_epochs[at].epoch


def judge_overlap(tp: TopicPartition, earlier: RemoteSegment, later: RemoteSegment) -> Problem | None:
    """Whether ``later``, which starts inside ``earlier`` and ends past it, overlaps legally: its
    leader epoch is at least ``earlier``'s at every offset both hold (see the module's rule)."""
    low, high = later.start_offset, min(earlier.end_offset, later.end_offset)
    points = {low} | {
        entry.start_offset
        for entry in (*earlier.leader_epochs, *later.leader_epochs)
        if low < entry.start_offset <= high
    }
    for point in sorted(points):
        ours, theirs = epoch_at(later, point), epoch_at(earlier, point)
        if ours < theirs:
            return Problem(
                ProblemKind.OVERLAP,
                tp.topic,
                tp.partition,
                f"segment {_range(later)} overlaps {_range(earlier)} (segment {earlier.segment_id}) "
                f"with leader epoch {ours} at offset {point} where the earlier copy has {theirs}: "
                "a later copy never has an older epoch",
                segment_id=str(later.segment_id),
                offset=point,
            )
    return None


def _epoch_back(tp: TopicPartition, before: RemoteSegment, after: RemoteSegment) -> list[Problem]:
    """A problem when ``after``, which starts above ``before``'s last offset, starts in an older
    leader epoch than that offset's: a log's epochs never go back, so its records are another
    leader's history (a log diverged after an unclean election), stitched to this one."""
    if not after.leader_epochs or not before.leader_epochs:
        return []
    ours, theirs = epoch_at(after, after.start_offset), epoch_at(before, before.end_offset)
    if ours >= theirs:
        return []
    return [
        Problem(
            ProblemKind.LEADER_EPOCH,
            tp.topic,
            tp.partition,
            f"segment {_range(after)} starts in leader epoch {ours} at offset {after.start_offset}, "
            f"below epoch {theirs} of offset {before.end_offset} in segment {_range(before)} "
            f"(segment {before.segment_id}): a log's leader epochs never go back",
            segment_id=str(after.segment_id),
            offset=after.start_offset,
        )
    ]


def continuity_problems(
    tp: TopicPartition,
    finished: Sequence[RemoteSegment],
    record: PartitionRecord | None,
    skipped: Sequence[SkippedRange] = (),
    *,
    log_start_after: int | None = None,
) -> list[Problem]:
    """Gaps no skipped range explains, overlaps no takeover explains, and disagreements with the
    remote log start offset.

    ``record`` is read before the segments, ``log_start_after`` (the remote log start offset)
    after them: retention advances it before it deletes, so the segments it deleted before they
    were read lie below the later one, and the offsets from there on are judged for gaps; a
    segment lies wholly below the earlier one only when retention left it behind.
    """
    problems: list[Problem] = []
    ordered = in_offset_order(finished)
    log_start = -1 if record is None else record.remote_log_start_offset
    gaps_from = log_start if log_start_after is None else max(log_start, log_start_after)
    live = []
    for segment in ordered:
        if log_start >= 0 and segment.end_offset < log_start:
            problems.append(
                Problem(
                    ProblemKind.LOG_START,
                    tp.topic,
                    tp.partition,
                    f"finished segment {_range(segment)} lies wholly below the remote log start "
                    f"offset {log_start}: no reader reaches it (retention should have deleted it)",
                    segment_id=str(segment.segment_id),
                    offset=segment.start_offset,
                )
            )
        else:
            live.append(segment)
    if record is not None and log_start > record.highest_copied_offset + 1:
        problems.append(
            Problem(
                ProblemKind.LOG_START,
                tp.topic,
                tp.partition,
                f"the remote log start offset {log_start} is past the highest offset ever copied, "
                f"{record.highest_copied_offset}",
                offset=log_start,
            )
        )
    problems += _tail_gap(tp, live, record, gaps_from, skipped)
    if not live:
        return problems
    if gaps_from >= 0 and live[0].start_offset > gaps_from:
        problems += judge_gap(
            tp, gaps_from, live[0].start_offset - 1, before=None, after=live[0], skipped=skipped
        )
    covering = [live[0]]
    for segment in live[1:]:
        reach = max(covering, key=lambda s: s.end_offset)
        if segment.start_offset > reach.end_offset + 1:
            problems += judge_gap(
                tp,
                reach.end_offset + 1,
                segment.start_offset - 1,
                before=reach,
                after=segment,
                skipped=skipped,
            )
        if segment.start_offset > reach.end_offset:
            problems += _epoch_back(tp, reach, segment)
        elif segment.end_offset <= reach.end_offset:
            problems.append(
                Problem(
                    ProblemKind.OVERLAP,
                    tp.topic,
                    tp.partition,
                    f"segment {_range(segment)} lies wholly inside offsets {_range(reach)} already "
                    f"held by segment {reach.segment_id}: a duplicate copy (a takeover copy ends "
                    "past what was copied before it)",
                    segment_id=str(segment.segment_id),
                    offset=segment.start_offset,
                )
            )
            continue
        else:
            for earlier in covering:
                if earlier.end_offset >= segment.start_offset:
                    overlap = judge_overlap(tp, earlier, segment)
                    if overlap is not None:
                        problems.append(overlap)
        covering = [s for s in (*covering, segment) if s.end_offset >= segment.start_offset]
    return problems


def _tail_gap(
    tp: TopicPartition,
    live: Sequence[RemoteSegment],
    record: PartitionRecord | None,
    log_start: int,
    skipped: Sequence[SkippedRange],
) -> list[Problem]:
    """The offsets above every finished segment (and at or above ``log_start``) up to the highest
    offset ever copied: the copier never copies them again (it copies above that offset), so
    their segment was lost."""
    if record is None:
        return []
    highest = record.highest_copied_offset
    reach = max((s.end_offset for s in live), default=-1)
    before = max(live, key=lambda s: s.end_offset) if live else None
    first = max(reach + 1, log_start, 0)
    if first > highest:
        return []
    return judge_gap(tp, first, highest, before=before, after=None, skipped=skipped)
