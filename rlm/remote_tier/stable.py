"""The last stable offset of a partition's remote tier: where a ``read_committed`` reader of the
tier alone has to stop.

The copier tiers rolled segments below the high watermark, not below the last stable offset, so
the tiered tail may hold records of a transaction whose COMMIT or ABORT marker is still in the
broker's active segment. Until that marker is tiered the records are neither committed nor
aborted: the tier's stable offset is the first offset of the earliest such transaction (raised to
the remote log start offset, as the broker raises its first unstable offset), the rule compaction
follows for its compactable end (:func:`rlm.pipeline.compact.rules.compactable_end`) and the
broker for its LSO (:mod:`rlm.log.stable`).

The transactions open at the end of the tier are found as the broker finds them on load:

* the producer snapshot stored with the last segment (taken when the broker rolled it, so its
  state is that of every offset tiered) gives each producer's open transaction: one ranged read;
* without a readable one, the state is rebuilt from the latest segment whose start state is
  known (the producer snapshot of the segment before it, or offset 0) by a header-only scan of
  the segments from there (ranged reads of headers; only control batches are read whole), each
  batch applied as :func:`rlm.log.recovery.track_transactions` applies it. With no known start
  state at all the scan starts at the first segment with no transaction open, as the broker does
  without a snapshot.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from rlm.errors import CorruptDataError
from rlm.log.byte_source import iter_headers, read_batch_bytes
from rlm.log.recovery import TransactionTracker, track_transactions
from rlm.log.snapshot import decode_snapshot
from rlm.log.stable import first_unstable_offset
from rlm.metastore.model import IndexType
from rlm.remote_tier.read_plan import IndexRef, PartitionPlan, SegmentSummary
from rlm.storage.protocol import RemoteStorage
from rlm.storage.range_source import RangeSource


def tiered_stable_offset(storage: RemoteStorage, plan: PartitionPlan) -> int | None:
    """The first offset of the earliest transaction open at the end of the plan's segments (no
    tiered marker after its records), raised to the remote log start offset; ``None`` when no
    transaction is open there (every tiered record is settled).

    Raises:
        CorruptDataError: A batch of a scanned segment is not valid; the error names the object
            and the position.
        NotFoundError / StorageError: The store lost an object or failed.
    """
    return stable_offset_of(storage, plan.segments, plan.log_start_offset)


def stable_offset_of(
    storage: RemoteStorage, segments: Sequence[SegmentSummary], log_start_offset: int = -1
) -> int | None:
    """:func:`tiered_stable_offset` of a partition's finished ``segments`` (summarized in offset
    order, :func:`rlm.remote_tier.read_plan.summarize`) whose log start offset is ``log_start_offset``
    (-1: none recorded)."""
    read = [s for s in segments if s.read_from <= s.read_to]
    if not read:
        return None
    ongoing = open_transactions(storage, read)
    return first_unstable_offset(ongoing, log_start_offset if log_start_offset >= 0 else None)


def open_transactions(storage: RemoteStorage, read: Sequence[SegmentSummary]) -> dict[int, int]:
    """producer id → first offset of its transaction open after the last of ``read`` (the
    segments a reader reads, in offset order, each read from ``read_from`` to ``read_to``)."""
    last = read[-1]
    own = last.index_ref(IndexType.PRODUCER_SNAPSHOT)
    if own is not None:
        state = _snapshot_state(storage, own)
        if state is not None:
            return state.ongoing
    # The latest segment the scan can start at with the transactions open at its start known.
    first, tracker = 0, TransactionTracker()
    for i in reversed(range(len(read))):
        ref = read[i].previous_snapshot
        known = None if ref is None else _snapshot_state(storage, ref)
        if known is not None or read[i].segment.start_offset == 0:
            first, tracker = i, known or TransactionTracker()
            break
    applied_to = read[first].segment.start_offset
    for summary in read[first:]:
        _scan(storage, summary, tracker, applied_to)
        applied_to = summary.read_to + 1
    return tracker.ongoing


def _snapshot_state(storage: RemoteStorage, ref: IndexRef) -> TransactionTracker | None:
    """The open transactions a stored producer snapshot records; ``None`` when it cannot be read
    (the broker, too, passes over a snapshot it cannot read)."""
    try:
        data = storage.read_range(ref.key, ref.byte_range.position, ref.byte_range.size)
        if len(data) != ref.byte_range.size:
            return None
        return TransactionTracker.from_snapshot(decode_snapshot(data, path=ref.key))
    except CorruptDataError:
        return None


def _scan(storage: RemoteStorage, summary: SegmentSummary, tracker: TransactionTracker, start: int) -> None:
    """Apply to ``tracker`` each batch of the segment holding offsets from ``start`` to the
    segment's ``read_to`` (headers only; control batches read whole)."""
    source = RangeSource(storage, summary.log_key, summary.segment.size_bytes)
    for header in iter_headers(source):
        if header.last_offset < start:
            continue
        if header.base_offset > summary.read_to:
            return
        batch = functools.partial(read_batch_bytes, source, header)
        track_transactions(header, tracker, batch, source.name, verify_crc=True)
