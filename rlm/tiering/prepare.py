"""Turning a rolled local segment into what the remote tier stores: the metadata row and the
index object.

The segment's bytes are checked first, in the one pass that rebuilds its indexes, with the checks
``rlm log verify`` makes of a ``.log`` (:mod:`rlm.log.validate`: sizes, CRCs, offsets strictly
increasing and inside the segment's range, the last batch whole, nothing after it), and they must
hold every offset of the range the segment's name and its successor's give it (a topic tiered by
Kafka is never compacted, so a rolled segment has no missing offsets). A segment that fails is
never tiered; the error names the file and the byte position. The offsets come from those bytes,
never from the local index: the offset and time indexes uploaded are the ones Kafka's recovery
builds from the ``.log`` (identical to a healthy broker's), so a missing or damaged local index
does not matter; the max timestamp is that time index's last entry.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.checkpoints import EpochEntry, encode_leader_epoch_checkpoint, topic_id_to_uuid
from rlm.log.files import segment_file_name
from rlm.log.logdir import PartitionDir
from rlm.log.recovery import RebuiltIndexes
from rlm.log.segment import Segment, initial_tracker, rebuild_segment_indexes
from rlm.log.snapshot import decode_snapshot
from rlm.log.stable import open_transactions_at
from rlm.log.txnindex import TransactionIndex
from rlm.log.validate import BatchChecker
from rlm.metastore.model import (
    IndexType,
    LeaderEpochEntry,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)
from rlm.storage.layout import IndexBlob, segment_keys

log = logging.getLogger("rlm.copier")


@dataclass(frozen=True)
class PreparedSegment:
    """A validated local segment ready for upload."""

    remote: RemoteSegment
    """The metadata row, in ``COPY_SEGMENT_STARTED``."""
    log_path: Path
    index_blob: IndexBlob
    log_crc32c: int
    """CRC-32C of the ``.log`` bytes that passed the checks: the upload must send exactly these
    (a file changed after it was checked is refused, never tiered)."""
    replaces: uuid.UUID | None = None
    """The copy it replaces, for a trim's copy (:mod:`rlm.tiering.trim`): named in its index
    object's metadata (:func:`rlm.storage.description.describe`)."""


def prepare_segment(
    partition: PartitionDir,
    segment: Segment,
    *,
    broker_id: int,
    now_ms: int,
    epochs: list[EpochEntry],
    next_base_offset: int | None = None,
) -> PreparedSegment:
    """Check ``segment``'s bytes and build its metadata row and index object.

    Args:
        next_base_offset: the base offset of the segment after it: the segment's offsets must be
            below it and reach it (the copier always gives it). None for a segment on its own,
            whose range then ends with its last batch.

    Raises:
        CorruptRecordError: the bytes fail a check, or do not hold every offset up to
            ``next_base_offset - 1``; the message names the file and the position.
        OSError: the broker deleted the segment meanwhile.
    """
    checked = check_segment(segment, next_base_offset=next_base_offset)
    topic_id_text = partition.topic_id()
    # Kafka uploads the producer snapshot taken when the next segment was rolled.
    snapshot = partition.path / segment_file_name(checked.end_offset + 1, ".snapshot")
    return assemble(
        TopicPartition(partition.topic, partition.partition),
        topic_id_to_uuid(topic_id_text) if topic_id_text else None,
        segment,
        checked,
        epochs=epochs_of_segment(epochs, segment.base_offset, checked.end_offset, own=checked.rebuilt.epochs),
        txn_index=transaction_index(segment) or rebuilt_transaction_index(partition, segment, checked),
        snapshot=producer_snapshot(snapshot),
        broker_id=broker_id,
        event_time_ms=now_ms,
    )


def producer_snapshot(path: Path) -> bytes | None:
    """The producer snapshot file at ``path`` as a copy stores it; None when there is none that
    can be read.

    The broker writes the snapshot named after a new segment in place (not renamed into place),
    after it created that segment's file: a copy made in between reads its first bytes, or none.
    Those bytes are no snapshot, and the copy would keep them for good. A snapshot that cannot be
    read is therefore left out, as a missing one is (readers of the tier then find the producer
    state from the segments), and as the broker passes over one it cannot read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        decode_snapshot(data, path=path)
    except CorruptDataError as exc:
        log.warning("producer snapshot left out of the copy: %s", exc)
        return None
    return data


@dataclass(frozen=True)
class CheckedSegment:
    """A segment's ``.log`` that passed the checks, with the indexes rebuilt from it."""

    rebuilt: RebuiltIndexes
    end_offset: int
    size: int
    crc32c: int


def check_segment(segment: Segment, *, next_base_offset: int | None) -> CheckedSegment:
    """Check ``segment``'s bytes and rebuild its indexes (see :func:`prepare_segment`).

    Raises:
        CorruptRecordError: as :func:`prepare_segment`.
        OSError: the file is gone.
    """
    path = str(segment.log_path)
    checker = BatchChecker(path, segment.base_offset, next_base_offset=next_base_offset, checksum=True)
    rebuilt = rebuild_segment_indexes(
        segment, tracker=initial_tracker(segment), stop_at_corruption=False, checker=checker
    )
    size = segment.size()
    for problem in checker.finish(size):
        raise problem.error()
    start = segment.base_offset
    end = rebuilt.next_offset - 1 if next_base_offset is None else next_base_offset - 1
    if next_base_offset is None and rebuilt.next_offset == start:
        raise CorruptRecordError("the rolled segment holds no batch", path=path, position=size)
    if rebuilt.next_offset <= end:
        held = "no batch" if rebuilt.next_offset == start else f"offsets up to {rebuilt.next_offset - 1}"
        raise CorruptRecordError(
            f"offsets {rebuilt.next_offset}..{end} are missing: the segment holds {held}, the next "
            f"segment starts at offset {end + 1}",
            path=path,
            position=size,
        )
    return CheckedSegment(rebuilt, end, size, checker.crc32c)


def assemble(
    tp: TopicPartition,
    topic_id: uuid.UUID | None,
    segment: Segment,
    checked: CheckedSegment,
    *,
    epochs: tuple[LeaderEpochEntry, ...],
    txn_index: TransactionIndex,
    snapshot: bytes | None,
    broker_id: int,
    event_time_ms: int,
) -> PreparedSegment:
    """The metadata row (``COPY_SEGMENT_STARTED``, a new segment id) and the index object of a
    checked segment, with the leader epochs, transaction index and producer snapshot given."""
    start = segment.base_offset
    segment_id = uuid.uuid4()
    keys = segment_keys(tp.topic, topic_id, tp.partition, start, segment_id)
    blob = IndexBlob.build(
        {
            IndexType.OFFSET: checked.rebuilt.offset_index.to_bytes(),
            IndexType.TIMESTAMP: checked.rebuilt.time_index.to_bytes(),
            IndexType.TRANSACTION: txn_index.to_bytes() if len(txn_index) else None,
            IndexType.PRODUCER_SNAPSHOT: snapshot,
            IndexType.LEADER_EPOCH: encode_leader_epoch_checkpoint(
                EpochEntry(e.epoch, e.start_offset) for e in epochs
            ),
        }
    )
    remote = RemoteSegment(
        segment_id=segment_id,
        topic_partition=tp,
        topic_id=topic_id,
        start_offset=start,
        end_offset=checked.end_offset,
        max_timestamp_ms=checked.rebuilt.max_timestamp,
        size_bytes=checked.size,
        broker_id=broker_id,
        event_time_ms=event_time_ms,
        leader_epochs=epochs,
        layout=blob.layout(keys),
        txn_index_empty=len(txn_index) == 0,
        state=SegmentState.COPY_SEGMENT_STARTED,
    )
    return PreparedSegment(remote, segment.log_path, blob, checked.crc32c)


def epochs_of_segment(
    entries: Sequence[EpochEntry], start: int, end: int, *, own: Sequence[EpochEntry] = ()
) -> tuple[LeaderEpochEntry, ...]:
    """The leader epochs that wrote ``[start, end]``: the epoch in force at ``start`` (moved to
    begin there) and every epoch that began inside the range.

    ``entries`` is the broker's leader-epoch cache. Offsets before its first entry take the epochs
    of ``own``, those the segment's batches carry: a broker cuts its cache at its log start
    (``truncateFromStart``, which moves the first kept entry up to it) as soon as the log start
    moves, while the segments below it stay on disk until its next retention check. Epoch 0 when
    neither tells (legacy v0/v1 batches carry no epoch).
    """
    known = [e for e in entries if e.epoch >= 0]
    if not known or known[0].start_offset > start:
        first = known[0].start_offset if known else end + 1
        known = [e for e in own if e.epoch >= 0 and e.start_offset < first] + known
    before = [e for e in known if e.start_offset <= start]
    inside = [e for e in known if start < e.start_offset <= end]
    first_epoch = before[-1].epoch if before else (inside[0].epoch if inside else 0)
    result = [LeaderEpochEntry(first_epoch, start)]
    for entry in inside:
        if entry.epoch > result[-1].epoch:
            result.append(LeaderEpochEntry(entry.epoch, entry.start_offset))
    return tuple(result)


def rebuilt_transaction_index(
    partition: PartitionDir, segment: Segment, checked: CheckedSegment
) -> TransactionIndex:
    """The transaction index of ``segment`` rebuilt from its bytes, for when the broker's cannot be
    used (``segment`` may be a copy of ``partition``'s log from its base offset on).

    An entry needs the transactions open at the segment's start: an aborted transaction's first
    offset may lie before it, and an entry's last stable offset is the first offset of the earliest
    other one open. Where the producer snapshot at its base offset did not give them (none, or
    unreadable), they are found as the broker's producer state has them there
    (:func:`rlm.log.stable.open_transactions_at`) and the index is rebuilt with them: an entry
    reading a later first offset or last stable offset than the log's would have a
    ``read_committed`` read miss the abort and hand out its records.

    Raises:
        CorruptDataError: a batch of ``partition`` scanned for the open transactions is corrupt.
    """
    rebuilt = checked.rebuilt.txn_index
    if not len(rebuilt) and not checked.rebuilt.lone_aborts:  # no ABORT marker at all
        return rebuilt
    tracker = open_transactions_at(partition, segment.base_offset)
    if tracker.ongoing == initial_tracker(segment).ongoing:
        return rebuilt
    return rebuild_segment_indexes(segment, tracker=tracker, stop_at_corruption=False).txn_index


def transaction_index(segment: Segment) -> TransactionIndex | None:
    """The broker's transaction index of ``segment``; None when it is missing or damaged.

    The broker's own index knows transactions that began in deleted segments, which an index
    rebuilt from the segment's bytes alone does not."""
    if not segment.txn_index_path.exists():
        return None
    try:
        index = segment.transaction_index()
        index.sanity_check()
    except CorruptDataError:
        return None  # rebuilt from the log instead
    return index
