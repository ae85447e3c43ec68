"""The last stable offset (LSO) of a partition, computed from its files as the broker keeps it.

A ``READ_COMMITTED`` reader sees the log up to the LSO instead of the high watermark. Kafka keeps
it as ``min(high watermark, first unstable offset)`` (``UnifiedLog.updateHighWatermarkMetadata``),
where the first unstable offset is the first offset of the earliest transaction that is still
open or whose COMMIT/ABORT marker is at or above the high watermark
(``ProducerStateManager.firstUnstableOffset``), raised to the log start offset
(``maybeIncrementFirstUnstableOffset``). With no unstable transaction the LSO is the high
watermark.

Only markers below the high watermark settle a transaction, so the state that matters is the set
of transactions open just before the high watermark: every batch at or above it either starts a
transaction whose first offset is not below the high watermark or is a marker that settles
nothing yet. That state is rebuilt like the broker's producer state on load:

* the latest producer snapshot (``<offset>.snapshot``) at or below the high watermark gives each
  producer's open transaction (``currentTxnFirstOffset``); a corrupt one is passed over for the
  next older, as the broker deletes it. A snapshot above the high watermark is not used: markers
  below it but at or above the high watermark would already count as settled in it. With no
  usable snapshot the scan starts at the first segment;
* a header-only scan from there to the high watermark applies each batch: a transactional data
  batch begins its producer's transaction unless one is open, a COMMIT or ABORT marker (only
  control batches are read whole) ends it.

:class:`StableOffsetTracker` keeps that state per partition so that repeated calls cost a few
``stat`` calls: the scan resumes where it stopped while the log only grew and the high watermark
only rose, and starts over on any other change (a segment removed, a file truncated or rewritten,
the high watermark going back). Everything here only reads.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rlm.errors import CorruptDataError
from rlm.log.byte_source import FileSource, iter_headers, read_batch_bytes
from rlm.log.files import offset_file_offsets, segment_file_name
from rlm.log.logdir import PartitionDir
from rlm.log.model import V2_HEADER_SIZE, BatchHeader
from rlm.log.recovery import TransactionTracker, track_transactions
from rlm.log.segment import Segment
from rlm.log.snapshot import SNAPSHOT_SUFFIX, read_snapshot


class ProducerSnapshotState(NamedTuple):
    """The open transactions a producer snapshot records."""

    offset: int
    """The snapshot's offset: the state is that of the log up to this offset (exclusive)."""
    ongoing: dict[int, int]
    """producer id → first offset of its open transaction."""


def snapshot_offsets(directory: str | Path) -> list[int]:
    """Offsets of the ``.snapshot`` files in a partition directory, ascending (strays skipped)."""
    return offset_file_offsets(directory, SNAPSHOT_SUFFIX)


def latest_snapshot(directory: str | Path, limit: int) -> ProducerSnapshotState | None:
    """The open transactions of the latest readable snapshot at or below ``limit``, or None.

    A snapshot that is corrupt or disappears while being read is passed over for the next older
    one, as the broker deletes a snapshot it cannot read and loads the one before.
    """
    directory = Path(directory)
    for offset in reversed(snapshot_offsets(directory)):
        if offset > limit:
            continue
        path = directory / segment_file_name(offset, SNAPSHOT_SUFFIX)
        try:
            entries = read_snapshot(path)
        except (FileNotFoundError, CorruptDataError):
            continue
        return ProducerSnapshotState(offset, dict(TransactionTracker.from_snapshot(entries).ongoing))
    return None


def first_unstable_offset(ongoing: Mapping[int, int], log_start_offset: int | None = None) -> int | None:
    """The earliest open transaction's first offset, raised to ``log_start_offset``; None if none.

    ``ongoing`` maps producer ids to the first offsets of their open transactions.
    """
    first = min(ongoing.values(), default=None)
    if first is None:
        return None
    return first if log_start_offset is None else max(first, log_start_offset)


def stable_offset(high_watermark: int, first_unstable: int | None) -> int:
    """``min(high watermark, first unstable offset)``: the high watermark when nothing is unstable."""
    return high_watermark if first_unstable is None else min(high_watermark, first_unstable)


class _Anchor(NamedTuple):
    """The last batch a scan applied, checked again before the scan resumes after it."""

    segment_base: int
    position: int
    base_offset: int
    last_offset: int
    crc: int


@dataclass
class _ScanState:
    """Open transactions below ``high_watermark`` and where the scan that found them stopped."""

    bases: tuple[int, ...]
    """Base offsets of the segments when the scan last ran."""
    tracker: TransactionTracker
    skip_below: int
    """Batches whose last offset is below this (the snapshot's offset) are already in the state."""
    segment_index: int
    """Index in ``bases`` of the segment the scan resumes in."""
    position: int
    """Byte position in that segment where the scan resumes."""
    high_watermark: int
    """Batches starting below this have been applied."""
    anchor: _Anchor | None = None
    active_stamp: tuple[int, int, int] | None = None
    """Size, mtime and inode of the last segment's ``.log`` when the state was last brought up to
    date."""


def _start_position(segment: Segment, offset: int) -> int:
    """A byte position in ``segment`` at or before the batch holding ``offset``.

    The offset index is used only when its file exists: a missing one would be rebuilt from the
    whole ``.log``, which costs more than scanning from its start.
    """
    if offset <= segment.base_offset or not segment.index_path.exists():
        return 0
    return segment.offset_index().lookup(offset).position


def _new_state(partition: PartitionDir, segments: Sequence[Segment], high_watermark: int) -> _ScanState:
    bases = tuple(s.base_offset for s in segments)
    snapshot = latest_snapshot(partition.path, high_watermark)
    if snapshot is None:
        return _ScanState(bases, TransactionTracker(), -1, 0, 0, high_watermark)
    index = max((i for i, base in enumerate(bases) if base <= snapshot.offset), default=0)
    position = _start_position(segments[index], snapshot.offset)
    tracker = TransactionTracker(dict(snapshot.ongoing))
    return _ScanState(bases, tracker, snapshot.offset, index, position, high_watermark)


def _advance(state: _ScanState, segments: Sequence[Segment], high_watermark: int) -> None:
    """Apply every batch from the scan's position that starts below ``high_watermark``.

    The scan stops at the first batch at or above the high watermark or at the end of the last
    segment (a batch still being written is left for the next call).
    """
    state.high_watermark = high_watermark
    index = state.segment_index
    while True:
        segment = segments[index]
        with segment.open() as source:
            for header in iter_headers(source, state.position):
                first = header.base_offset if header.base_offset >= 0 else header.last_offset
                if first >= high_watermark:
                    state.segment_index = index
                    return
                if header.last_offset >= state.skip_below:
                    batch = functools.partial(read_batch_bytes, source, header)
                    track_transactions(header, state.tracker, batch, source.name, verify_crc=True)
                state.position = header.end_position
                state.anchor = _Anchor(
                    segment.base_offset, header.position, header.base_offset, header.last_offset, header.crc
                )
        state.segment_index = index
        if index + 1 == len(segments):
            return
        index += 1
        state.position = 0


def _anchor_holds(anchor: _Anchor, segment: Segment) -> bool:
    """Whether the batch a scan last applied is still where it was, with the same offsets and CRC."""
    try:
        with FileSource(segment.log_path) as source:
            header = next(iter_headers(source, anchor.position, window_bytes=V2_HEADER_SIZE), None)
    except (FileNotFoundError, CorruptDataError):
        return False
    return header is not None and _same_batch(anchor, header)


def _same_batch(anchor: _Anchor, header: BatchHeader) -> bool:
    return (header.base_offset, header.last_offset, header.crc) == (
        anchor.base_offset,
        anchor.last_offset,
        anchor.crc,
    )


def _can_resume(state: _ScanState, segments: Sequence[Segment], high_watermark: int) -> bool:
    """Whether the log only grew since ``state`` was taken and the high watermark did not go back."""
    bases = tuple(s.base_offset for s in segments)
    if high_watermark < state.high_watermark or bases[: len(state.bases)] != state.bases:
        return False
    try:
        if segments[state.segment_index].size() < state.position:
            return False
    except FileNotFoundError:
        return False
    if state.anchor is None:
        return True
    anchor_segment = segments[state.bases.index(state.anchor.segment_base)]
    return _anchor_holds(state.anchor, anchor_segment)


def open_transactions_at(partition: PartitionDir, offset: int) -> TransactionTracker:
    """The transactions open just before ``offset``, as the broker's producer state has them there:
    the latest readable snapshot at or below it, then the batches from there up to it (from the
    first segment when no snapshot is usable, as the broker loads a log without snapshots).

    Raises:
        CorruptDataError: a batch in the scanned range is corrupt; the error names the ``.log``
            and the byte position.
    """
    segments = [s for s in partition.segments() if s.base_offset < offset]
    snapshot = latest_snapshot(partition.path, offset)
    if not segments or (snapshot is not None and snapshot.offset == offset):
        return TransactionTracker(dict(snapshot.ongoing) if snapshot is not None else {})
    state = _new_state(partition, segments, offset)
    _advance(state, segments, offset)
    return state.tracker


def last_stable_offset(
    partition: PartitionDir, high_watermark: int, log_start_offset: int | None = None
) -> int:
    """The last stable offset of ``partition`` for ``high_watermark``, computed afresh.

    ``min(high watermark, first unstable offset)`` where the first unstable offset (raised to the
    log start offset: ``log_start_offset`` or the checkpointed one, whichever is higher) is that
    of the earliest transaction open or settled at or above the high watermark. Repeated calls
    should go through a :class:`StableOffsetTracker` instead.

    Raises:
        CorruptDataError: a batch in the scanned range is corrupt; the error names the ``.log``
            and the byte position.
    """
    segments = partition.segments()
    if not segments:
        return high_watermark
    state = _new_state(partition, segments, high_watermark)
    _advance(state, segments, high_watermark)
    unstable = first_unstable_offset(state.tracker.ongoing, _log_start(partition, log_start_offset))
    return stable_offset(high_watermark, unstable)


def _log_start(partition: PartitionDir, given: int | None) -> int | None:
    """The higher of ``given`` and the checkpointed log start offset; None if neither is known."""
    known = [o for o in (given, partition.checkpointed_log_start_offset()) if o is not None]
    return max(known, default=None)


@dataclass
class StableOffsetStats:
    """How a :class:`StableOffsetTracker` answered."""

    hits: int = 0
    """Answers from the kept state without reading the log."""
    resumed: int = 0
    """Scans that went on from where the previous one stopped."""
    full_scans: int = 0
    """Scans from the latest snapshot (or the log start)."""


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    state: _ScanState | None = None


class StableOffsetTracker:
    """Last stable offsets of partitions, kept between calls and brought up to date cheaply.

    The state of each partition (by directory path) is the open transactions below the high
    watermark of the last call and where its scan stopped. A call that finds the segment list, the
    last segment's size, mtime and inode and the high watermark of the previous call answers from
    it without reading the log. When the log only grew and the high watermark did not go back
    (checked by reading the header of the last batch applied again), only the batches after the
    previous scan are read; anything else starts a new scan. Thread-safe; calls for one partition
    are serialized.
    """

    def __init__(self) -> None:
        self._entries: dict[Path, _Entry] = {}
        self._lock = threading.Lock()
        self.stats = StableOffsetStats()

    def last_stable_offset(
        self, partition: PartitionDir, high_watermark: int, log_start_offset: int | None = None
    ) -> int:
        """The last stable offset of ``partition`` for ``high_watermark`` (see :func:`last_stable_offset`).

        Raises:
            CorruptDataError: a batch in the scanned range is corrupt; the error names the
                ``.log`` and the byte position. The partition's state is dropped.
        """
        segments = partition.segments()
        if not segments:
            self.forget(partition)
            return high_watermark
        log_start = _log_start(partition, log_start_offset)
        with self._lock:
            entry = self._entries.setdefault(partition.path, _Entry())
        with entry.lock:
            state = self._current_state(entry, partition, segments, high_watermark)
            unstable = first_unstable_offset(state.tracker.ongoing, log_start)
        return stable_offset(high_watermark, unstable)

    def _current_state(
        self, entry: _Entry, partition: PartitionDir, segments: Sequence[Segment], high_watermark: int
    ) -> _ScanState:
        st = os.stat(segments[-1].log_path)
        active_stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
        state = entry.state
        bases = tuple(s.base_offset for s in segments)
        if (
            state is not None
            and state.high_watermark == high_watermark
            and state.bases == bases
            and state.active_stamp == active_stamp
        ):
            with self._lock:
                self.stats.hits += 1
            return state
        entry.state = None
        if state is not None and _can_resume(state, segments, high_watermark):
            with self._lock:
                self.stats.resumed += 1
            state.bases = bases
        else:
            with self._lock:
                self.stats.full_scans += 1
            state = _new_state(partition, segments, high_watermark)
        _advance(state, segments, high_watermark)
        state.active_stamp = active_stamp
        entry.state = state
        return state

    def forget(self, partition: PartitionDir) -> None:
        """Drop what is kept for ``partition`` (e.g. when it leaves this broker)."""
        with self._lock:
            self._entries.pop(partition.path, None)

    def clear(self) -> None:
        """Drop what is kept for every partition."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        """Number of partitions with kept state."""
        with self._lock:
            return len(self._entries)
