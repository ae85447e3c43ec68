"""Rebuilding missing or corrupt indexes of a partition, as Kafka's recovery would.

The ``.log`` is never modified: when it holds a corrupt batch, the indexes cover the valid batches
before it and the corruption is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.errors import CorruptDataError
from rlm.log.logdir import PartitionDir
from rlm.log.recovery import DEFAULT_INDEX_INTERVAL_BYTES, TransactionTracker
from rlm.log.segment import Segment, initial_tracker, rebuild_segment_indexes
from rlm.log.verify import verify_segment


@dataclass(frozen=True)
class ReindexResult:
    """What happened to one segment."""

    segment: Segment
    rebuilt: bool
    reason: str
    """Why it was rebuilt (or "indexes are consistent")."""
    error: CorruptDataError | None = None
    """Corruption in the ``.log`` that limited the rebuilt indexes."""


def reindex_partition(
    partition: PartitionDir,
    *,
    force: bool = False,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> list[ReindexResult]:
    """Rebuild the indexes of every segment whose indexes are missing or wrong (all if ``force``)."""
    segments = partition.segments()
    results: list[ReindexResult] = []
    tracker = initial_tracker(segments[0]) if segments else TransactionTracker()
    for i, segment in enumerate(segments):
        state = TransactionTracker(dict(tracker.ongoing))
        problems = [
            p
            for p in verify_segment(segment, deep=False, active=i == len(segments) - 1, tracker=state)
            if not p.path.endswith(".log")
        ]
        rebuilt = rebuild_segment_indexes(segment, index_interval_bytes=index_interval_bytes, tracker=tracker)
        if not force and not problems:
            results.append(ReindexResult(segment, False, "indexes are consistent", rebuilt.error))
            continue
        rebuilt.offset_index.write(segment.index_path)
        rebuilt.time_index.write(segment.time_index_path)
        if len(rebuilt.txn_index) or segment.txn_index_path.exists():
            rebuilt.txn_index.write(segment.txn_index_path)
        segment.invalidate()
        reason = "forced" if force and not problems else "; ".join(str(p) for p in problems)
        results.append(ReindexResult(segment, True, reason, rebuilt.error))
    return results
