"""Which local segments a copy pass tiers next, and what it must record as skipped first (pure).

A rolled segment's offset range is taken from names, never from its local index: it starts at its
base offset and ends just below the next segment's base offset (Kafka's ``RemoteLogManager`` uses
``nextSegmentBaseOffset - 1`` too), so the rolled segments tile the local log without holes. The
copier then checks the segment's bytes against that range before uploading (a rolled segment of a
tiered topic holds every offset of its range: Kafka tiers no compacted topic).

The remote tier accounts for every offset from where it starts up to :func:`covered_through`:
each is in a segment that was copied (even if retention deleted it since) or in a range recorded as
skipped. Copying resumes just above, so it never moves past an offset it did not copy, and it
stops at a segment it cannot copy (the copier's business) until that is repaired or skipped.

One hole cannot be copied whatever anyone does: offsets below the first local segment, or below
the broker's log start offset, that were never tiered. The broker deleted them (retention,
``DeleteRecords``, or an operator) before rlm could copy them; Kafka's own tiering then starts
from the local log start offset. rlm does the same but does not jump silently: the plan names the
hole, and the copier records it as a skipped range (visible in ``/v1/topics``) before copying on.
A partition that has never been tiered has no such hole: its remote tier starts with its first
copy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlm.log.segment import Segment
from rlm.metastore.model import SkippedRange


@dataclass(frozen=True)
class Candidate:
    """A rolled segment to copy, with the offset range its name gives it."""

    segment: Segment
    end_offset: int
    """The next segment's base offset - 1."""

    @property
    def next_base_offset(self) -> int:
        return self.end_offset + 1


@dataclass(frozen=True)
class Gap:
    """Offsets the local log no longer holds and the remote tier never got."""

    start_offset: int
    end_offset: int
    reason: str


@dataclass(frozen=True)
class CopyPlan:
    """What a pass copies, in order, and the hole to record before it."""

    next_offset: int
    """The first offset the remote tier does not account for yet."""
    candidates: tuple[Candidate, ...]
    """Rolled segments wholly below the high watermark holding offsets from ``next_offset`` on."""
    gap: Gap | None = None

    @property
    def lag_segments(self) -> int:
        return len(self.candidates)

    def lag_bytes(self) -> int:
        """Bytes of the candidates' ``.log`` files (0 for one deleted meanwhile)."""
        total = 0
        for candidate in self.candidates:
            try:
                total += candidate.segment.size()
            except FileNotFoundError:
                continue
        return total


def covered_through(highest_copied_offset: int, skipped: Iterable[SkippedRange]) -> int:
    """The last offset of the run the remote tier accounts for: the highest copied offset, carried
    on through the skipped ranges that start at or below the offset after it; -1 for none."""
    covered = highest_copied_offset
    for skip in sorted(skipped, key=lambda s: s.start_offset):
        if skip.start_offset > covered + 1:
            break  # a range recorded ahead of the copier: it applies once the copier gets there
        covered = max(covered, skip.end_offset)
    return covered


def plan_copy(
    segments: Sequence[Segment],
    *,
    high_watermark: int | None,
    covered: int,
    log_start_offset: int | None,
    skipped: Sequence[SkippedRange] = (),
) -> CopyPlan:
    """The segments to tier after offset ``covered``, oldest first.

    Args:
        segments: every segment of the partition in base offset order, the active one last.
        high_watermark: from the broker's checkpoint; nothing is copied without one.
        covered: what :func:`covered_through` says.
        log_start_offset: the broker's checkpointed log start offset (None when unknown).
            Segments wholly below it are not copied: their records are deleted already.
        skipped: the partition's skipped ranges; a segment wholly inside one is not copied.
    """
    next_offset = covered + 1
    candidates: list[Candidate] = []
    first_kept: int | None = None
    for segment, following in itertools.pairwise(segments):
        end = following.base_offset - 1
        if end < next_offset or (log_start_offset is not None and end < log_start_offset):
            continue
        if first_kept is None:
            first_kept = segment.base_offset
        if high_watermark is None or end >= high_watermark:
            break  # not fully replicated yet; the later segments are newer still
        if any(s.start_offset <= segment.base_offset and end <= s.end_offset for s in skipped):
            continue
        candidates.append(Candidate(segment, end))
    gap = None
    if covered >= 0 and first_kept is not None and first_kept > next_offset:
        # Up to the local log, or to a range recorded as skipped already (the next pass goes on).
        ahead = [s.start_offset for s in skipped if next_offset < s.start_offset < first_kept]
        end = min([first_kept, *ahead]) - 1
        gap = Gap(next_offset, end, _gap_reason(segments[0].base_offset, log_start_offset, next_offset))
        if end < first_kept - 1:
            candidates = []  # copying now would pass the rest of the hole: the next pass records it
    return CopyPlan(next_offset, tuple(candidates), gap)


@dataclass(frozen=True)
class Join:
    """Rolled segments tiered as one remote copy: the broker's log from the offset a diverged copy
    was cut at (:mod:`rlm.tiering.trim`), up to the first segment that reaches past that copy, so
    that the new copy answers from the cut on (the read rule of overlapping copies)."""

    segments: tuple[Segment, ...]
    end_offset: int
    """The last segment's next segment's base offset - 1."""

    @property
    def next_base_offset(self) -> int:
        return self.end_offset + 1


def plan_join(
    segments: Sequence[Segment], *, start: int, past: int, high_watermark: int | None
) -> Join | None:
    """The rolled segments from the one at ``start`` up to the first that ends past ``past``, all
    wholly below the high watermark; None while they do not reach there yet, or when no segment
    starts at ``start`` (the broker deleted it meanwhile: the next pass decides again).

    Args:
        segments: every segment of the partition in base offset order, the active one last.
    """
    run: list[Segment] = []
    for segment, following in itertools.pairwise(segments):
        if segment.base_offset < start:
            continue
        if not run and segment.base_offset != start:
            return None
        end = following.base_offset - 1
        if high_watermark is None or end >= high_watermark:
            return None  # not fully replicated yet
        run.append(segment)
        if end > past:
            return Join(tuple(run), end)
    return None


def _gap_reason(local_start: int, log_start_offset: int | None, next_offset: int) -> str:
    if log_start_offset is not None and log_start_offset > next_offset:
        return (
            f"below the broker's log start offset {log_start_offset}: deleted (retention or "
            "DeleteRecords) before it was tiered"
        )
    return f"not in the local log, which starts at offset {local_start}: deleted before it was tiered"
