"""One log segment: ``<base>.log`` with its offset, time and transaction indexes.

Reads follow Kafka's ``LogSegment``: the time index gives a lower-bound offset for a timestamp,
the offset index a byte position for an offset, and a header-only scan of the ``.log`` from there
finds the batch; only that batch is decoded. A segment whose indexes are missing or damaged has
them rebuilt in memory from its ``.log`` (:func:`rebuild_segment_indexes`, built on
:mod:`rlm.log.recovery`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from rlm.errors import CorruptDataError, CorruptIndexError
from rlm.log.batches import decode_batch, find_record, first_offset
from rlm.log.byte_source import ByteSource, FileSource, iter_header_windows, iter_headers, read_batch_bytes
from rlm.log.checkpoints import EpochEntry
from rlm.log.files import offset_file_offsets, offset_files, segment_file_name
from rlm.log.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from rlm.log.model import V2_HEADER_SIZE, BatchHeader, Record, TimestampAndOffset
from rlm.log.recovery import DEFAULT_INDEX_INTERVAL_BYTES, RebuiltIndexes, TransactionTracker, rebuild_indexes
from rlm.log.snapshot import read_snapshot
from rlm.log.txnindex import TransactionIndex
from rlm.log.validate import BatchChecker

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
#: How often a segment looks whether its index files changed on disk.
STAMP_CHECK_INTERVAL_S = 0.1
#: What the broker's log cleaner names a cleaned segment's files while it swaps it in.
SWAP_SUFFIX = ".swap"
#: The files of a segment that the cleaner swaps in (``LogSegment.changeFileSuffixes``).
SWAPPED_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
#: What a timestamp search reads first from the indexed position (then twice as much each time).
SEARCH_WINDOW_BYTES = 16 * 1024


class Segment:
    """A segment of one partition, named by its base offset.

    Index files are loaded on first use and kept; :meth:`invalidate` drops them (a broker may have
    appended to the active segment). Whether the files changed is looked at most every
    ``STAMP_CHECK_INTERVAL_S`` of ``clock`` (monotonic seconds), or at once by :meth:`recheck`. A
    missing or unreadable index is rebuilt in memory from the ``.log`` — nothing in the broker's
    directory is ever written by reads.
    """

    def __init__(
        self,
        directory: str | Path,
        base_offset: int,
        *,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        clock: Callable[[], float] = time.monotonic,
        swap: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.swap = swap
        """Its files are a cleaned segment's still named ``.swap`` (:class:`SegmentListing`)."""
        self.max_index_size = max_index_size
        self._clock = clock
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._stamp: tuple[int, ...] | None = None
        self._log_size = -1
        """The ``.log``'s size when the indexes were loaded or last checked."""
        self._checked_at = 0.0
        # The last time-index entry of the index it was read from: asked for on every lookup.
        self._max_entry: tuple[TimeIndex, TimestampOffset] | None = None
        self.log_path = self.path(".log")
        self.index_path = self.path(".index")
        self.time_index_path = self.path(".timeindex")
        self.txn_index_path = self.path(".txnindex")

    def __repr__(self) -> str:
        swap = ", swap=True" if self.swap else ""
        return f"Segment({str(self.directory)!r}, {self.base_offset}{swap})"

    def path(self, suffix: str) -> Path:
        """Path of this segment's file with ``suffix`` (``.log``, ``.index``, ...)."""
        if self.swap and suffix in SWAPPED_SUFFIXES:
            suffix += SWAP_SUFFIX
        return self.directory / segment_file_name(self.base_offset, suffix)

    def size(self) -> int:
        """Size of the ``.log`` in bytes."""
        return self.log_path.stat().st_size

    def open(self) -> FileSource:
        """Open the ``.log`` for reading."""
        return FileSource(self.log_path)

    def headers(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Yield every whole batch's header from ``start_position`` (header-only scan)."""
        with self.open() as source:
            yield from iter_headers(source, start_position)

    def invalidate(self) -> None:
        """Forget loaded indexes so the next use reads them again."""
        self._offset_index = None
        self._time_index = None
        self._stamp = None

    def _file_stamp(self) -> tuple[int, ...]:
        # Size and mtime of both index files: the broker trims and rewrites them when it rolls.
        stamp: list[int] = []
        for path in (self.index_path, self.time_index_path):
            try:
                st = os.stat(path)
                stamp += (st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                stamp += (-1, -1)
        return tuple(stamp)

    def _current(self) -> None:
        # Looked at most every STAMP_CHECK_INTERVAL_S: lookups ask for the indexes many times a
        # second. A segment that rolled is looked at sooner, when a listing shows the roll
        # (PartitionDir.segments): until then searches take it for the active one and never skip it.
        if self._stamp is None:
            return
        if self._clock() - self._checked_at < STAMP_CHECK_INTERVAL_S:
            return
        self.recheck()

    def recheck(self) -> None:
        """Look now whether the index files changed, and if so forget the loaded indexes.

        For a segment that stopped being the active one: the broker completed and trimmed its
        indexes when it rolled (its time index only then names the segment's largest timestamp),
        and a search trusting the indexes loaded before would skip records.
        """
        if self._stamp is None:
            return
        self._checked_at = self._clock()
        log_size = self._log_size_now()
        if self._stamp != self._file_stamp() or log_size < self._log_size:
            self.invalidate()
        else:
            self._log_size = log_size

    def _log_size_now(self) -> int:
        """The ``.log``'s size now (-1 when it is gone). It only grows while the segment is
        appended to; a broker truncating it (a leader change) leaves its index files as they were
        (it moves their end back in memory), so only the ``.log`` getting shorter tells."""
        try:
            return os.stat(self.log_path).st_size
        except FileNotFoundError:
            return -1

    def offset_index(self) -> OffsetIndex:
        """The offset index, from its file or, when missing or corrupt, rebuilt from the ``.log``.

        Reloaded when the index files changed (a roll trims them). The active segment's indexes
        may lag the ``.log``: their entries stay valid lower bounds, and searches scan forward.
        """
        self._current()
        if self._offset_index is None:
            self._load_indexes()
        assert self._offset_index is not None
        return self._offset_index

    def time_index(self) -> TimeIndex:
        """The time index, from its file or, when missing or corrupt, rebuilt from the ``.log``."""
        self._current()
        if self._time_index is None:
            self._load_indexes()
        assert self._time_index is not None
        return self._time_index

    def read_position(self, offset: int, entry: OffsetPosition, source: ByteSource) -> int:
        """Where a read of ``offset`` starts in the ``.log`` open as ``source``: the position of
        ``entry`` (the offset index's lookup of ``offset``) when a batch Kafka can have indexed
        by it starts there (:func:`index_entry_problem`); else the position the index read again
        gives, else the start of the file.

        A broker truncating its log (a leader change) moves the end of its indexes back in memory
        without writing their files, and a first append after it adds no entry: the files and
        their stamps stay as they were, and indexes loaded before keep entries past the
        truncation whose positions no longer hold their offsets (past the end of the file, or
        inside another batch). A read from there would skip the records or frame garbage.
        """
        if entry.position == 0 or self._holds(entry, source):
            return entry.position
        self.invalidate()  # loaded again, with the checks of a load
        again = self.offset_index().lookup(offset)
        return again.position if again.position == 0 or self._holds(again, source) else 0

    def _holds(self, entry: OffsetPosition, source: ByteSource) -> bool:
        """Whether a batch Kafka can have indexed by ``entry`` starts at its position."""
        try:
            batch = next(iter_headers(source, entry.position, window_bytes=V2_HEADER_SIZE), None)
            problem = index_entry_problem(
                entry, batch, source, base_offset=self.base_offset, end_offset=entry.offset
            )
        except CorruptDataError:
            return False
        return problem is None

    def transaction_index(self) -> TransactionIndex:
        """The transaction index (empty when the file does not exist)."""
        if not self.txn_index_path.exists():
            return TransactionIndex(self.base_offset)
        return TransactionIndex.load(self.txn_index_path, self.base_offset)

    def _load_indexes(self) -> None:
        # Stamped before reading: files the broker changes while they are read differ from the
        # stamp at the next check, and are read again.
        stamp = self._file_stamp()
        log_size = self._log_size_now()
        try:
            offset_index = OffsetIndex.load(
                self.index_path, self.base_offset, max_index_size=self.max_index_size
            )
            time_index = TimeIndex.load(
                self.time_index_path, self.base_offset, max_index_size=self.max_index_size
            )
            offset_index.sanity_check()
            time_index.sanity_check()
            self._check_last_entry(offset_index)
        except (FileNotFoundError, CorruptDataError):
            rebuilt = rebuild_segment_indexes(self, stop_at_corruption=True)
            offset_index, time_index = rebuilt.offset_index, rebuilt.time_index
        self._offset_index, self._time_index = offset_index, time_index
        self._stamp = stamp
        self._log_size = log_size
        self._checked_at = self._clock()

    def _check_last_entry(self, index: OffsetIndex) -> None:
        """Refuse an offset index whose last entry Kafka cannot have written
        (:func:`index_entry_problem`): searches start from its entries, and one past the end of
        the ``.log`` or inside a batch would make them miss records or read garbage as a header.
        The batches from the entry on are scanned (headers only) for the segment's last offset."""
        if not len(index):
            return
        entry = index.last_entry
        problem, _ = self._scan_from_entry(entry)
        if problem is not None:
            raise CorruptIndexError(
                f"last entry ({entry.offset}, {entry.position}) {problem}", path=str(self.index_path)
            )

    def _scan_from_entry(self, entry: OffsetPosition) -> tuple[str | None, BatchHeader | None]:
        """What is wrong with ``entry`` (None if nothing), and the segment's last whole batch,
        scanned from the entry's position.

        Raises:
            CorruptDataError: a batch from there on cannot be framed.
        """
        with self.open() as source:
            headers = iter_headers(source, entry.position)
            batch = last = next(headers, None)
            for last in headers:  # noqa: B007 (the last one is wanted)
                pass
            end = self.base_offset - 1 if last is None else last.last_offset
            problem = index_entry_problem(entry, batch, source, base_offset=self.base_offset, end_offset=end)
        return problem, last

    def max_timestamp_and_offset(self, *, scan_tail: bool = False) -> TimestampOffset:
        """Largest timestamp in the segment and its batch's last offset (last time-index entry).

        ``(-1, base_offset)`` when no batch has a timestamp. With ``scan_tail`` (the active
        segment, whose time index lags what the broker appended) the batches after that entry are
        scanned too.
        """
        index = self.time_index()
        cached = self._max_entry
        if cached is not None and cached[0] is index:
            best = cached[1]
        else:
            best = index.last_entry if len(index) else TimestampOffset(-1, self.base_offset)
            self._max_entry = (index, best)
        if scan_tail:
            start = self.offset_index().lookup(best.offset).position
            for header in self.headers(start):
                if header.max_timestamp > best.timestamp:
                    best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    def largest_timestamp(self, *, scan_tail: bool = False) -> int:
        """Kafka's ``largestTimestamp``: the max timestamp, or the ``.log`` mtime when there is none."""
        max_ts = self.max_timestamp_and_offset(scan_tail=scan_tail).timestamp
        if max_ts >= 0:
            return max_ts
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def last_offset(self) -> int | None:
        """Last offset of the segment's last whole batch, or None when it holds none.

        Scanned from the last offset-index entry when that entry is one Kafka can have written
        (:func:`index_entry_problem`); an entry that is not (a damaged or stale index: past the
        end of the file, inside a batch, past the offsets there) is not trusted and the whole
        ``.log`` is scanned.
        """
        index = self.offset_index()
        if len(index):
            try:
                problem, last = self._scan_from_entry(index.last_entry)
                if problem is None and last is not None:
                    return last.last_offset
            except CorruptDataError:
                pass  # the entry points inside a batch: scan from the start
        last_header = None
        for last_header in self.headers():  # noqa: B007 (the last one is wanted)
            pass
        return last_header.last_offset if last_header is not None else None

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """First batch from ``start_position`` whose last offset is ≥ ``offset``, or None."""
        for header in self.headers(start_position):
            if header.last_offset >= offset:
                return header
        return None

    def position_for_offset(self, offset: int) -> BatchHeader | None:
        """The batch holding ``offset`` (or the first after it), found via the offset index."""
        return self.translate_offset(offset, self.offset_index().lookup(offset).position)

    def read_records(
        self,
        header: BatchHeader,
        source: FileSource | None = None,
    ) -> list[Record]:
        """Decode the records of the batch ``header`` describes."""
        own = source is None
        src = self.open() if source is None else source
        try:
            data = read_batch_bytes(src, header)
            try:
                return decode_batch(data, header._replace(position=0))
            except CorruptDataError as exc:
                raise exc.at(str(self.log_path), header.position) from exc
        finally:
            if own:
                src.close()

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """Smallest offset ≥ ``starting_offset`` whose record timestamp is ≥ ``timestamp`` (§5.2).

        Returns the record's timestamp and offset and its batch's leader epoch (-1 if unknown), or
        None when no record in this segment qualifies.
        """
        start = self.base_offset if starting_offset is None else starting_offset
        hint = self.time_index().lookup(timestamp)
        entry = self.offset_index().lookup(max(hint.offset, start))
        with self.open() as source:
            position = self.read_position(max(hint.offset, start), entry, source)
            # The answer is usually within an index interval (4 KiB by default) of the position.
            headers = iter_header_windows(
                source, position, first_window_bytes=SEARCH_WINDOW_BYTES, skip_below=(timestamp, start)
            )
            for header, window, window_start in headers:
                if header.max_timestamp < timestamp or header.last_offset < start:
                    continue  # a legacy batch
                at = header.position - window_start
                if at + header.size <= len(window):
                    data = window  # read with the headers already
                else:
                    data, at = read_batch_bytes(source, header), 0
                try:
                    found = find_record(data, header, timestamp, start, at=at)
                except CorruptDataError as exc:
                    raise exc.at(str(self.log_path), header.position) from exc
                if found is not None:
                    epoch = header.leader_epoch if header.leader_epoch >= 0 else -1
                    return TimestampAndOffset(found[0], found[1], epoch)
        return None


def index_entry_problem(
    entry: OffsetPosition,
    batch: BatchHeader | None,
    source: ByteSource,
    *,
    base_offset: int,
    end_offset: int,
) -> str | None:
    """Why ``entry`` cannot be an offset-index entry Kafka wrote, or None when it can be.

    ``LogSegment.append`` keys the entry of an append by the append's largest offset at the
    position where the append starts; a follower appends a fetched chunk of several batches at
    once, and a broker before Kafka 2.0 keyed by the append's first offset. So the entry points at
    the start of a batch (``batch``, the one found at its position, None if none) and names an
    offset from that batch's first offset up to the last offset of the batches the append can have
    held: ``end_offset``, the segment's last offset (or the last before the batch the next entry
    points at). Any such entry keeps lookups right: every offset at or above it is held by that
    batch or a later one.

    Args:
        entry: The entry.
        batch: The batch found at ``entry.position``.
        source: The ``.log``, read only when the entry names an offset below the batch's last and
            the batch is a legacy wrapper, whose first offset is found by decoding it
            (:func:`batch_first_offset`).
        base_offset: The segment's base offset.
        end_offset: The largest offset the entry can name.
    """
    if batch is None or batch.position != entry.position or batch.last_offset < base_offset:
        return "does not point at a batch"
    if entry.offset > end_offset:
        return f"is past the batches it can cover (which end at offset {end_offset})"
    if entry.offset < batch.last_offset:
        first = batch_first_offset(source, batch)
        if entry.offset < first:
            return f"is below the batch there (offsets {first}..{batch.last_offset})"
    return None


def batch_first_offset(source: ByteSource, batch: BatchHeader) -> int:
    """The batch's first offset: a legacy compressed wrapper's first inner message's, which a
    broker before Kafka 2.0 keyed its index entry by (the first offset of the append; 2.0 keys by
    the last). The wrapper is decoded only then; one that cannot be, has its last offset (the
    batch checks report it)."""
    if batch.base_offset >= 0:
        return batch.base_offset
    data = read_batch_bytes(source, batch)
    try:
        return first_offset(data, batch._replace(position=0), verify_crc=False)
    except CorruptDataError:
        return batch.last_offset


def segment_base_offsets(directory: str | Path) -> list[int]:
    """Base offsets of the ``.log`` files in a partition directory, ascending; stray ``*.log``
    entries are skipped with a warning (:func:`rlm.log.files.offset_file_offsets`)."""
    return offset_file_offsets(directory, ".log")


class SegmentListing(NamedTuple):
    """A partition directory's segments as one read of it found them."""

    bases: list[int]
    """Base offsets of the ``.log`` files, ascending."""
    swaps: list[int]
    """Base offsets of cleaned segments being swapped in (``<base>.log.swap``) whose ``.log``
    is gone, ascending. The log cleaner renames the old segments' files ``.deleted``, then the
    cleaned one's from ``.swap`` to their names (``LocalLog.replaceSegments``): in between, only
    the ``.swap`` files hold those offsets, as the broker's own view of its log says (it holds
    the cleaned segment from before the renames). A broker that stopped in between completes
    the swap when it starts again."""
    inodes: dict[int, int]
    """Base offset → inode number of each ``.log``: a segment rewritten under the same base
    offset (the cleaner's swap, a topic deleted and made again) has another."""


def segment_listing(directory: str | Path) -> SegmentListing:
    """The segments of a partition directory (:class:`SegmentListing`), from one read of it."""
    found = offset_files(directory, (".log", ".log" + SWAP_SUFFIX))
    logs = found[".log"]
    swaps = sorted(b for b in found[".log" + SWAP_SUFFIX] if b not in logs)
    return SegmentListing(sorted(logs), swaps, logs)


def initial_tracker(segment: Segment) -> TransactionTracker:
    """Open transactions at the start of ``segment``, from the snapshot named after its base offset."""
    snapshot = segment.path(".snapshot")
    if snapshot.exists():
        try:
            return TransactionTracker.from_snapshot(read_snapshot(snapshot))
        except CorruptDataError:
            pass  # a corrupt snapshot is ignored, as the broker does
    return TransactionTracker()


def first_tracker(segments: Sequence[Segment]) -> TransactionTracker | None:
    """Open transactions at the start of a partition's first segment (``segments`` in offset
    order): none when the log starts at offset 0, else those of the snapshot named after it;
    ``None`` (unknown) without one, as when retention deleted the segments before it (a broker
    does not keep a snapshot of every segment)."""
    if not segments:
        return None
    first = segments[0]
    if first.base_offset == 0 or first.path(".snapshot").exists():
        return initial_tracker(first)
    return None


def rebuild_segment_indexes(
    segment: Segment,
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    tracker: TransactionTracker | None = None,
    epochs: list[EpochEntry] | None = None,
    stop_at_corruption: bool = True,
    checker: BatchChecker | None = None,
) -> RebuiltIndexes:
    """Rebuild ``segment``'s indexes from its ``.log`` as Kafka's recovery does; nothing is written.

    :func:`rlm.log.recovery.rebuild_indexes` over the segment's file, with the segment's base
    offset and maximum index size; the other arguments are passed on (see there).
    """
    with segment.open() as source:
        return rebuild_indexes(
            source,
            segment.base_offset,
            max_index_size=segment.max_index_size,
            index_interval_bytes=index_interval_bytes,
            tracker=tracker,
            epochs=epochs,
            stop_at_corruption=stop_at_corruption,
            checker=checker,
        )
