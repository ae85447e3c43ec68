"""Rebuilding missing or corrupt indexes of a partition, as Kafka's recovery would.

The ``.log`` is never modified, and neither are the indexes of a segment whose ``.log`` holds a
corrupt batch: rebuilt, they would cover only the batches before it (what the broker keeps when
it truncates the log there), and the indexes the broker wrote may still be right past it (an
aborted transaction dropped from the transaction index would hand its records to
``read_committed`` readers). The corruption is reported instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.errors import CorruptDataError
from rlm.log.logdir import PartitionDir
from rlm.log.recovery import DEFAULT_INDEX_INTERVAL_BYTES, RebuiltIndexes, TransactionTracker
from rlm.log.segment import Segment, first_tracker, rebuild_segment_indexes
from rlm.log.validate import Problem
from rlm.log.verify import next_tracker, verify_segment


@dataclass(frozen=True)
class ReindexResult:
    """What happened to one segment."""

    segment: Segment
    rebuilt: bool
    reason: str
    """Why it was rebuilt (or "indexes are consistent")."""
    corruption: Problem | None = None
    """The first problem of the segment's ``.log``: its indexes were left as they are."""


def reindex_partition(
    partition: PartitionDir,
    *,
    force: bool = False,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> list[ReindexResult]:
    """Rebuild the indexes of every segment whose indexes are missing or wrong (all if ``force``),
    but for segments whose ``.log`` is corrupt, which are left as they are."""
    segments = partition.segments()
    results: list[ReindexResult] = []
    tracker = first_tracker(segments)
    for i, segment in enumerate(segments):
        active = i == len(segments) - 1
        state = None if tracker is None else TransactionTracker(dict(tracker.ongoing))
        problems = list(verify_segment(segment, deep=False, active=active, tracker=state))
        damage = [p for p in problems if p.path == str(segment.log_path)]
        known = tracker is not None
        rebuilt = rebuild_segment_indexes(
            segment, index_interval_bytes=index_interval_bytes, tracker=tracker or TransactionTracker()
        )
        # A torn tail of the active segment is a batch still being written, not damage.
        if rebuilt.error is not None or (damage and not active):
            corruption = damage[0] if damage else _as_problem(rebuilt.error, segment)
            results.append(ReindexResult(segment, False, "its .log is corrupt", corruption))
        else:
            results.append(_rewrite(segment, problems, rebuilt, force=force, txn_known=known))
        if not active:
            damaged = rebuilt.error is not None or bool(damage)
            tracker = next_tracker(tracker, segments[i + 1], damaged=damaged)
    return results


def _rewrite(
    segment: Segment, problems: list[Problem], rebuilt: RebuiltIndexes, *, force: bool, txn_known: bool
) -> ReindexResult:
    """Write the rebuilt indexes of a segment whose ``.log`` is sound when they differ (or ``force``).

    ``txn_known``: the open transactions at the segment's start are known; without them (after a
    corrupt segment, with no producer snapshot) the transaction index is left as it is.
    """
    wrong = [p for p in problems if p.path != str(segment.log_path)]
    if not force and not wrong:
        return ReindexResult(segment, False, "indexes are consistent")
    # A missing index is made with the owner and mode of the broker's .log.
    rebuilt.offset_index.write(segment.index_path, like=segment.log_path)
    rebuilt.time_index.write(segment.time_index_path, like=segment.log_path)
    if txn_known and (len(rebuilt.txn_index) or segment.txn_index_path.exists()):
        rebuilt.txn_index.write(segment.txn_index_path, like=segment.log_path)
    segment.invalidate()
    reason = "; ".join(str(p) for p in wrong) if wrong else "forced"
    if not txn_known:
        reason += "; transaction index left as it is: the transactions open at its start are unknown"
    return ReindexResult(segment, True, reason)


def _as_problem(error: CorruptDataError | None, segment: Segment) -> Problem:
    assert error is not None
    return Problem(error.path or str(segment.log_path), error.position, error.reason)
