"""Tiering the broker's log from a diverged copy's cut in one remote copy that reaches past it.

A diverged copy kept below the broker's first local segment may reach past it: its batch holding
the offsets on both sides of the cut is kept whole (:mod:`rlm.tiering.trim`), or is its last, so
that the copy is kept as it is. Reads answer a copy from its start up to the start of the next
copy that reaches further (:func:`rlm.tiering.lineage.read_ranges`): the broker's records from the
cut on answer only once a copy starting at the cut reaches past the kept one. When the broker's
first local segments end at or below the kept copy's end (segments smaller than one of its
batches), they are tiered together, with the first segment that reaches past it, as one copy
(:func:`rlm.tiering.copy_plan.plan_join`).

One segment is tiered as any other (:func:`rlm.tiering.prepare.prepare_segment`: the broker's
files as they are). Of several, each is checked on its own first, so that an error names the
broker's file and position; the new copy's ``.log`` is their bytes end to end, byte for byte,
written under a temporary directory, and its offset and time indexes are rebuilt from it with the
copier's checks. Its transaction index is the broker's indexes' entries one after the other (they
name absolute offsets), or, when one is missing or damaged, rebuilt from the bytes from the
broker's producer snapshot at the cut; its producer snapshot is the broker's at the next
segment's base offset, and its leader epochs the broker's over its offsets, as of any copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlm.log.checkpoints import EpochEntry, topic_id_to_uuid
from rlm.log.files import segment_file_name
from rlm.log.logdir import PartitionDir
from rlm.log.segment import Segment
from rlm.log.txnindex import TransactionIndex
from rlm.metastore.model import TopicPartition
from rlm.tiering.copy_plan import Join
from rlm.tiering.prepare import (
    PreparedSegment,
    assemble,
    check_segment,
    epochs_of_segment,
    prepare_segment,
    producer_snapshot,
    rebuilt_transaction_index,
    transaction_index,
)


def prepare_join(
    partition: PartitionDir,
    join: Join,
    *,
    broker_id: int,
    now_ms: int,
    epochs: list[EpochEntry],
    directory: Path,
) -> PreparedSegment:
    """Check ``join``'s segments and build the copy of them all (see the module); a copy of
    several has its ``.log`` written under ``directory``.

    Raises:
        CorruptRecordError: a segment's bytes fail a check (named by its file and position).
        OSError: the broker deleted a segment meanwhile.
    """
    segments = join.segments
    bases = [s.base_offset for s in segments[1:]] + [join.next_base_offset]
    if len(segments) == 1:
        return prepare_segment(
            partition,
            segments[0],
            next_base_offset=join.next_base_offset,
            broker_id=broker_id,
            now_ms=now_ms,
            epochs=epochs,
        )
    for segment, next_base in zip(segments, bases, strict=True):
        check_segment(segment, next_base_offset=next_base)
    start = segments[0].base_offset
    with (directory / segment_file_name(start, ".log")).open("wb") as out:
        for segment in segments:
            with segment.log_path.open("rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)
    at_start = partition.path / segment_file_name(start, ".snapshot")
    if at_start.exists():  # the transactions open at the cut, for a rebuilt transaction index
        shutil.copyfile(at_start, directory / at_start.name)
    joined = Segment(directory, start)
    checked = check_segment(joined, next_base_offset=join.next_base_offset)
    txn_index = _joined_transaction_index(segments) or rebuilt_transaction_index(partition, joined, checked)
    topic_id = partition.topic_id()
    snapshot = partition.path / segment_file_name(join.next_base_offset, ".snapshot")
    return assemble(
        TopicPartition(partition.topic, partition.partition),
        topic_id_to_uuid(topic_id) if topic_id else None,
        joined,
        checked,
        epochs=epochs_of_segment(epochs, start, join.end_offset, own=checked.rebuilt.epochs),
        txn_index=txn_index,
        snapshot=producer_snapshot(snapshot),
        broker_id=broker_id,
        event_time_ms=now_ms,
    )


def _joined_transaction_index(segments: tuple[Segment, ...]) -> TransactionIndex | None:
    """The broker's transaction indexes of ``segments``, one after the other; None when one is
    missing or damaged."""
    joined = TransactionIndex(segments[0].base_offset)
    for segment in segments:
        index = transaction_index(segment)
        if index is None:
            return None
        try:
            for txn in index.entries():
                joined.append(txn)
        except ValueError:  # entries out of order: not an index to trust
            return None
    return joined
