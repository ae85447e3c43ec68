"""Trimming a diverged remote copy to the offsets the broker's files no longer hold.

After an unclean leader election a remote copy may start below the broker's first local segment
(local retention deleted the segments since) and hold, further on, records the broker's log
diverged from. Its first offsets are held nowhere else; its last ones are not the partition's, and
while they answer, the copier (which resumes above the highest copied offset) never tiers the
broker's records there. :func:`trim_copy` writes the copy's batches below the broker's first
local segment (the cut) as a new remote segment; the store then swaps it in for the old copy and
retires the copies from the cut on in one transaction
(:meth:`~rlm.metastore.protocol.MetadataStore.trim_copies`), and the same copier pass tiers the
broker's log from the cut, as after any replacement (:mod:`rlm.tiering.lineage_keeper`).

The new copy's ``.log`` is the old one's, byte for byte, up to the batch that starts at the cut. A
copy with no batch starting there (one batch holds offsets on both sides) cannot be cut without
splitting a batch, and is kept whole. The new copy's offset and time indexes are rebuilt from its
bytes with the copier's own checks; its transaction index is the old copy's without the
transactions whose markers lie from the cut on (Kafka indexes an aborted transaction in the
segment of its marker); its producer snapshot is the broker's at the cut (the producer state a
reader resuming there needs), absent when the broker has none; its leader epochs are the old
copy's below the cut; it keeps the old copy's event time, so that retention ages it as before.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from rlm.errors import CorruptRecordError
from rlm.log.checkpoints import EpochEntry
from rlm.log.files import segment_file_name
from rlm.log.segment import Segment
from rlm.log.txnindex import TransactionIndex
from rlm.metastore.model import IndexType, RemoteSegment
from rlm.storage.protocol import RemoteStorage
from rlm.storage.range_source import read_index
from rlm.tiering.prepare import PreparedSegment, assemble, check_segment, epochs_of_segment

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_MAGIC_AT = 16
"""Where the magic byte lies in a v2 batch and in a v0/v1 message alike."""
_LAST_OFFSET_DELTA_AT = 23
_HEADER_BYTES = _LAST_OFFSET_DELTA_AT + _LAST_OFFSET_DELTA.size
_SMALLEST_BODY = 14
"""The bytes after the length field of the smallest v0 message."""


class CannotTrimError(Exception):
    """The copy cannot be trimmed at the cut; the message says why."""


def copy_before(pieces: Iterable[bytes], out: BinaryIO, cut: int, *, key: str) -> int:
    """Write the batches of a ``.log`` (read in ``pieces``) before the batch starting at offset
    ``cut`` to ``out``; returns how many bytes that is. Stops reading at that batch.

    Only the batches' offsets and lengths are read here; their bytes are checked afterwards.

    Raises:
        CannotTrimError: no batch starts at ``cut``: one holding it starts below it (or is a legacy
            message set, which names only its last offset), or none reaches it.
        CorruptRecordError: a batch length that cannot be; names ``key`` and the position.
    """
    buffer = bytearray()
    written = 0
    for piece in pieces:
        buffer += piece
        position = 0
        while len(buffer) - position >= _HEADER_BYTES:
            offset, length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
            if length < _SMALLEST_BODY:
                raise CorruptRecordError(
                    f"batch length {length} is too small", path=key, position=written + position
                )
            v2 = buffer[position + _MAGIC_AT] == 2
            last = (
                offset + _LAST_OFFSET_DELTA.unpack_from(buffer, position + _LAST_OFFSET_DELTA_AT)[0]
                if v2
                else offset
            )
            if last >= cut:
                out.write(buffer[:position])
                if v2 and offset == cut:
                    return written + position
                raise CannotTrimError(
                    f"no batch of it starts at offset {cut}: the one at byte {written + position} "
                    f"holds offsets up to {last} and starts below {cut}"
                )
            if len(buffer) - position < _OFFSET_AND_LENGTH.size + length:
                break
            position += _OFFSET_AND_LENGTH.size + length
        out.write(buffer[:position])
        written += position
        del buffer[:position]
    raise CannotTrimError(f"no batch of it reaches offset {cut}")


def trim_copy(
    storage: RemoteStorage,
    copy: RemoteSegment,
    cut: int,
    *,
    snapshot: bytes | None,
    broker_id: int,
    directory: Path,
) -> PreparedSegment:
    """Build the copy of ``copy``'s offsets below ``cut`` (see the module), its ``.log`` written
    under ``directory``; the row is ``COPY_SEGMENT_STARTED``, nothing is stored yet.

    Raises:
        CannotTrimError: no batch of ``copy`` starts at ``cut``, or ``cut`` is not inside it.
        CorruptDataError: the bytes kept fail the copier's checks (named by the temporary file
            and position), or the copy's transaction index cannot be read.
        StorageError: a read failed.
    """
    if not copy.start_offset < cut <= copy.end_offset:
        raise CannotTrimError(f"offset {cut} is not inside it ({copy.start_offset}..{copy.end_offset})")
    path = directory / segment_file_name(copy.start_offset, ".log")
    key = copy.layout.log_key
    with path.open("wb") as out:
        copy_before(storage.stream_range(key, 0, copy.size_bytes), out, cut, key=key)
    segment = Segment(directory, copy.start_offset)
    checked = check_segment(segment, next_base_offset=cut)
    txn_index = TransactionIndex(copy.start_offset)
    stored = None if copy.txn_index_empty else read_index(storage, copy.layout, IndexType.TRANSACTION)
    if stored:
        txn_index = TransactionIndex.from_bytes(copy.start_offset, stored, path=copy.layout.index_key)
        txn_index.truncate_to(cut)
    epochs = [EpochEntry(e.epoch, e.start_offset) for e in copy.leader_epochs]
    return assemble(
        copy.topic_partition,
        copy.topic_id,
        segment,
        checked,
        epochs=epochs_of_segment(epochs, copy.start_offset, cut - 1),
        txn_index=txn_index,
        snapshot=snapshot,
        broker_id=broker_id,
        event_time_ms=copy.event_time_ms,
    )
