"""Trimming a diverged remote copy to the offsets the broker's files no longer hold.

After an unclean leader election a remote copy may start below the broker's first local segment
(local retention deleted the segments since) and hold, further on, records the broker's log
diverged from. Its first offsets are held nowhere else; its last ones are not the partition's, and
while they answer, the copier (which resumes above the highest copied offset) never tiers the
broker's records there. :func:`trim_copy` writes the copy's batches below the broker's first
local segment (the cut) as a new remote segment; the store then swaps it in for the old copy and
retires the copies from the cut on in one transaction
(:meth:`~rlm.metastore.protocol.MetadataStore.trim_copies`), and the same copier pass tiers the
broker's log from the cut, as after any replacement (:mod:`rlm.tiering.lineage_keeper`). The
copies from the cut on are marked retired on the remote tier before that transaction, the old
copy only after it (:func:`rlm.storage.marks.mark_retired`): a pass that fails before the swap
deletes the new copy, and the old one alone holds its first offsets again. The new copy names the
old one in its index object's metadata (``rlm-replaces``, :mod:`rlm.storage.description`), stored
with it before the swap: a store rebuilt from the objects while both copies are there (the copier
died between the swap and the old copy's mark, or before the swap) makes the new copy the row and
the old one an orphan (:mod:`rlm.pipeline.rebuild.job`), so that the old leader's records past the
cut never answer again. Before the swap as after it, that leaves the old copy's records from the
cut on to the broker: up to where its log diverged they are its own, in its files from the cut
(its first local segment) on and tiered again from there; the others are the old leader's.

The new copy's ``.log`` is the old one's, byte for byte, up to the batch that starts at the cut.
Where one batch holds offsets on both sides of the cut (the logs diverged before the broker's
first local offset, and batched differently), that batch is kept whole, and the new copy reaches
past the cut: the broker's segment tiered from the cut then reaches further still, and reads
answer from it from the cut on (the read rule of overlapping copies,
:func:`rlm.tiering.lineage.read_ranges`; the broker's first segments are tiered together as one
copy where the first one alone does not reach that far, :mod:`rlm.tiering.join`). A copy whose
batch at the cut is its last is the same copy cut there: it is kept as it is, and the broker's log
is tiered from the cut in the same way.

The new copy's offset and time indexes are rebuilt from its bytes with the copier's own checks;
its transaction index is the old copy's without the transactions whose markers lie past its end
(Kafka indexes an aborted transaction in the segment of its marker); its producer snapshot is the
broker's at the cut (the producer state a reader resuming there needs) when it ends just below
the cut, else absent, as it is when the broker has none; its leader epochs are the old copy's up
to its end; it keeps the old copy's event time, so that retention ages it as before.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from rlm.errors import CorruptDataError, CorruptRecordError
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
_LEGACY_ATTRIBUTES_AT = 17
_V2_HEADER_BYTES = _LAST_OFFSET_DELTA_AT + _LAST_OFFSET_DELTA.size
"""The bytes of a v2 batch read here: through its last offset delta."""
_SMALLEST_BODY = 14
"""The bytes after the length field of the smallest v0 message."""


class CannotTrimError(Exception):
    """The copy cannot be trimmed at the cut; the message says why."""


class NoShorterCopyError(CannotTrimError):
    """The copy cut there would be the same copy: its batch holding the offset before the cut
    holds its last offset. It is kept as it is; the broker's log is tiered from the cut in a copy
    reaching past it (:mod:`rlm.tiering.join`)."""


def copy_below(
    pieces: Iterable[bytes], out: BinaryIO, cut: int, *, first_offset: int, key: str
) -> tuple[int, int]:
    """Write the batches of a ``.log`` (read in ``pieces``) that hold offsets below ``cut`` to
    ``out``; returns how many bytes that is and the last offset they hold (``first_offset`` - 1
    for none). Stops reading at the first batch that holds none.

    A batch holding offsets on both sides of ``cut`` is written whole, and is the last: the copy
    it ends then reaches past ``cut`` (a legacy compressed message set, which names only its last
    offset, is taken as one). Only the batches' offsets and lengths are read here; their bytes are
    checked afterwards.

    Raises:
        CannotTrimError: no batch reaches ``cut``.
        CorruptRecordError: a batch length that cannot be; names ``key`` and the position.
    """
    buffer = bytearray()
    written = 0
    last_kept = first_offset - 1
    for piece in pieces:
        buffer += piece
        position = 0
        while len(buffer) - position > _MAGIC_AT:
            offset, length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
            if length < _SMALLEST_BODY:
                raise CorruptRecordError(
                    f"batch length {length} is too small", path=key, position=written + position
                )
            v2 = buffer[position + _MAGIC_AT] == 2
            if len(buffer) - position < (_V2_HEADER_BYTES if v2 else _LEGACY_ATTRIBUTES_AT + 1):
                break
            if v2:
                first = offset
                last = offset + _LAST_OFFSET_DELTA.unpack_from(buffer, position + _LAST_OFFSET_DELTA_AT)[0]
            else:  # a v0/v1 message names its offset; a compressed one its inner messages' last
                first = offset if buffer[position + _LEGACY_ATTRIBUTES_AT] & 0x07 == 0 else -1
                last = offset
            if first >= cut:
                out.write(buffer[:position])
                return written + position, last_kept
            size = _OFFSET_AND_LENGTH.size + length
            if len(buffer) - position < size:
                break  # the batch is read whole first
            position += size
            last_kept = last
            if last >= cut:
                out.write(buffer[:position])
                return written + position, last_kept
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
    """Build the copy of ``copy``'s batches holding offsets below ``cut`` (see the module), its
    ``.log`` written under ``directory``, naming ``copy`` as the one it replaces; the row is
    ``COPY_SEGMENT_STARTED``, nothing is stored yet.

    Raises:
        NoShorterCopyError: the copy cut there would be the same copy.
        CannotTrimError: ``cut`` is not inside it.
        CorruptDataError: the bytes kept fail the copier's checks (named by the copy's object
            and position), or the copy's transaction index cannot be read.
        StorageError: a read failed.
    """
    if not copy.start_offset < cut <= copy.end_offset:
        raise CannotTrimError(f"offset {cut} is not inside it ({copy.start_offset}..{copy.end_offset})")
    path = directory / segment_file_name(copy.start_offset, ".log")
    key = copy.layout.log_key
    with path.open("wb") as out:
        pieces = storage.stream_range(key, 0, copy.size_bytes)
        _, last = copy_below(pieces, out, cut, first_offset=copy.start_offset, key=key)
    if last >= copy.end_offset:
        raise NoShorterCopyError(
            f"its batch holding offset {cut - 1} holds offsets up to its last, {copy.end_offset}: "
            "a copy cut there would be the same copy"
        )
    if last < copy.start_offset:
        raise CannotTrimError(f"none of its batches holds an offset below {cut}")
    segment = Segment(directory, copy.start_offset)
    try:
        checked = check_segment(segment, next_base_offset=last + 1)
    except CorruptDataError as exc:  # the kept bytes lie at the same positions in the copy's object
        raise CorruptDataError(exc.reason, path=key, position=exc.position) from exc
    txn_index = TransactionIndex(copy.start_offset)
    stored = None if copy.txn_index_empty else read_index(storage, copy.layout, IndexType.TRANSACTION)
    if stored:
        txn_index = TransactionIndex.from_bytes(copy.start_offset, stored, path=copy.layout.index_key)
        txn_index.truncate_to(last + 1)
    epochs = [EpochEntry(e.epoch, e.start_offset) for e in copy.leader_epochs]
    prepared = assemble(
        copy.topic_partition,
        copy.topic_id,
        segment,
        checked,
        epochs=epochs_of_segment(epochs, copy.start_offset, last, own=checked.rebuilt.epochs),
        txn_index=txn_index,
        snapshot=snapshot if last + 1 == cut else None,
        broker_id=broker_id,
        event_time_ms=copy.event_time_ms,
    )
    return replace(prepared, replaces=copy.segment_id)
