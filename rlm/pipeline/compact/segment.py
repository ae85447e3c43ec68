"""Output segments: which input segments merge into one, and writing one (no Spark).

An output segment replaces consecutive input segments of one partition that compaction changes
(a record removed, a batch given a delete horizon), merged while their estimated output stays
within ``segment.bytes``. Its base offset is its first input's, its end offset its last input's;
its offset, time and transaction indexes are built as Kafka's recovery builds them, from the
bytes written (the transactions open at its start come from the producer snapshot taken there or,
without one, from the aborted transactions spanning its start, so that a kept ABORT marker's
entry still covers its records before the output); its producer snapshot is its last input's
(compaction keeps every producer's last data batch, so the producer state at its end is unchanged) and
its leader epochs are its inputs'.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlm.log.aborted import AbortedIndex
from rlm.log.batches import parse_header
from rlm.log.checkpoints import EpochEntry, encode_leader_epoch_checkpoint
from rlm.log.recovery import IndexRebuilder, TransactionTracker
from rlm.log.snapshot import decode_snapshot
from rlm.metastore.model import IndexType, LeaderEpochEntry, RemoteSegment, SegmentState
from rlm.pipeline.compact.rewrite import Counts, Keep, RewriteParams, empty_batch, rewrite_batches
from rlm.pipeline.reader import SegmentReader
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.description import PENDING, describe
from rlm.storage.layout import IndexBlob, segment_keys
from rlm.storage.protocol import RemoteStorage


@dataclass(frozen=True)
class SegmentChange:
    """What compaction would change in one input segment (from the decisions, before writing)."""

    removed: int
    """Records removed."""
    stamped: int
    """Records kept whose batch gets a delete horizon."""
    kept: int
    total: int

    @property
    def changed(self) -> bool:
        return self.removed > 0 or self.stamped > 0


@dataclass(frozen=True)
class OutputPlan:
    """One output segment to write: its inputs, id and what to keep of them. Picklable."""

    inputs: tuple[SegmentSummary, ...]
    segment_id: uuid.UUID
    params: RewriteParams

    @property
    def start_offset(self) -> int:
        return self.inputs[0].segment.start_offset

    @property
    def end_offset(self) -> int:
        return self.inputs[-1].segment.end_offset

    def describe(self) -> str:
        """``orders-0 [0, 999] (3 segments)``: how messages name the output."""
        tp = self.inputs[0].topic_partition
        return f"{tp} [{self.start_offset}, {self.end_offset}] ({len(self.inputs)} input segments)"

    def object_keys(self) -> tuple[str, str]:
        """The ``.log`` and index object keys of the output."""
        first = self.inputs[0].segment
        tp = first.topic_partition
        found = segment_keys(tp.topic, first.topic_id, tp.partition, self.start_offset, self.segment_id)
        return found.log_key, found.indexes_key


def group_segments(
    segments: Sequence[SegmentSummary], changes: Sequence[SegmentChange], end: int, segment_bytes: int
) -> list[list[SegmentSummary]]:
    """Runs of consecutive changed segments, each run cut so that its estimated output size (the
    input size scaled by the share of records kept) stays within ``segment_bytes`` (a run has at
    least one segment). Segments read only in part (overlapping copies, the log start inside
    them) or starting past the compactable ``end`` are left as they are.

    The segment holding ``end`` is rewritten like those before it, its batches past ``end`` copied
    as they are (Kafka's cleaner cleans the segment holding its upper bound too): the rules count
    its records at or below ``end`` as compacted, so a record of it that lost to a tombstone of an
    earlier segment must go with it, or removing that tombstone later would bring the record's
    value back."""
    groups: list[list[SegmentSummary]] = []
    current: list[SegmentSummary] = []
    size = 0.0
    for summary, change in zip(segments, changes, strict=True):
        s = summary.segment
        if not (summary.read_whole and s.start_offset <= end and change.changed):
            if current:
                groups.append(current)
            current, size = [], 0.0
            continue
        estimate = s.size_bytes * (change.kept / change.total if change.total else 1.0)
        contiguous = bool(current) and current[-1].segment.end_offset + 1 == s.start_offset
        if current and (not contiguous or size + estimate > segment_bytes):
            groups.append(current)
            current, size = [], 0.0
        current.append(summary)
        size += estimate
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True)
class WrittenSegment:
    """An output segment written to the store (or only built, in a dry run)."""

    row: RemoteSegment
    """Its metadata row (``COPY_SEGMENT_STARTED``; the swap records it finished)."""
    counts: Counts


def merged_epochs(inputs: Sequence[SegmentSummary]) -> tuple[LeaderEpochEntry, ...]:
    """The leader epochs of the inputs' rows, in order, each epoch once."""
    epochs: list[LeaderEpochEntry] = []
    for summary in inputs:
        for entry in summary.segment.leader_epochs:
            if not epochs or entry.epoch > epochs[-1].epoch:
                epochs.append(entry)
    return tuple(epochs)


def open_at_start(storage: RemoteStorage, first: SegmentSummary) -> TransactionTracker:
    """The transactions open at the start of ``first``: from the producer snapshot taken there.
    Without one (the later of two overlapping copies starts where no copy ends) the aborted
    transactions spanning the start are open there: their markers' entries then start where
    their transactions did, as the copied transaction indexes say, not at the markers."""
    if first.previous_snapshot is None:
        start = first.segment.start_offset
        return TransactionTracker(
            {t.producer_id: t.first_offset for t in first.aborted if t.first_offset < start <= t.last_offset}
        )
    reader = SegmentReader(storage, first)
    return TransactionTracker.from_snapshot(
        decode_snapshot(reader.read_ref(first.previous_snapshot), path=first.previous_snapshot.key)
    )


def write_output(
    storage: RemoteStorage, plan: OutputPlan, keep: Keep, *, now_ms: int, write: bool = True
) -> WrittenSegment:
    """Rewrite the plan's inputs into one segment, build its index object and (unless ``write``
    is false) store both objects under the output's keys.

    Raises:
        CorruptDataError: An input batch fails its CRC or cannot be decoded; the error names the
            object and the position. Nothing is stored.
        StorageError: A read or a put failed.
    """
    first = plan.inputs[0]
    tp = first.topic_partition
    counts = Counts()
    tracker = open_at_start(storage, first)
    epochs = merged_epochs(plan.inputs)
    rebuilder = IndexRebuilder(plan.start_offset, tracker=tracker)
    log_key, index_key = plan.object_keys()
    fd, path = tempfile.mkstemp(prefix="rlm-compact-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as out:
            position = 0
            for summary in plan.inputs:
                reader = SegmentReader(storage, summary)
                aborted = AbortedIndex(summary.aborted)
                for data in rewrite_batches(
                    tp, reader.batches(), keep, plan.params, aborted, summary.log_key, counts
                ):
                    header = parse_header(data, 0, position)
                    rebuilder.add(header, data, log_key)
                    out.write(data)
                    position += len(data)
            if position == 0 and counts.last_header is not None:
                # Every batch went: a header-only batch keeps the range's last offset in place.
                data = empty_batch(counts.last_header)
                rebuilder.add(parse_header(data, 0, 0), data, log_key)
                out.write(data)
                position = len(data)
        rebuilt = rebuilder.finish()
        last_reader = SegmentReader(storage, plan.inputs[-1])
        snapshot = last_reader.read_index(IndexType.PRODUCER_SNAPSHOT)
        blob = IndexBlob.build(
            {
                IndexType.OFFSET: rebuilt.offset_index.to_bytes(),
                IndexType.TIMESTAMP: rebuilt.time_index.to_bytes(),
                IndexType.TRANSACTION: rebuilt.txn_index.to_bytes() if len(rebuilt.txn_index) else None,
                IndexType.PRODUCER_SNAPSHOT: snapshot,
                IndexType.LEADER_EPOCH: encode_leader_epoch_checkpoint(
                    EpochEntry(e.epoch, e.start_offset) for e in epochs
                ),
            }
        )
        keys = segment_keys(
            tp.topic, first.segment.topic_id, tp.partition, plan.start_offset, plan.segment_id
        )
        row = RemoteSegment(
            segment_id=plan.segment_id,
            topic_partition=tp,
            topic_id=first.segment.topic_id,
            start_offset=plan.start_offset,
            end_offset=plan.end_offset,
            max_timestamp_ms=rebuilt.max_timestamp,
            size_bytes=position,
            broker_id=first.segment.broker_id,
            # Records without timestamps are judged by retention by the event time: the inputs'
            # newest age carries over, as Kafka's cleaner keeps the last-modified time.
            event_time_ms=now_ms
            if rebuilt.max_timestamp >= 0
            else max(i.segment.age_ms() for i in plan.inputs),
            leader_epochs=epochs,
            layout=blob.layout(keys),
            txn_index_empty=len(rebuilt.txn_index) == 0,
            state=SegmentState.COPY_SEGMENT_STARTED,
        )
        if write:
            storage.put_object(log_key, Path(path), size=position)
            # Described like the copier's, so that rebuild-metadata restores the row without
            # reading: the bytes alone would not give the end offset of a segment whose last
            # batches were compacted away. Pending until the swap: a rebuild before it chooses
            # the inputs.
            storage.put_object(index_key, blob.data, metadata=describe(row, compaction=PENDING))
        return WrittenSegment(row, counts)
    finally:
        os.unlink(path)
