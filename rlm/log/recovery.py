"""Rebuilding a segment's indexes from its ``.log`` exactly as Kafka's ``LogSegment.recover`` does.

Per batch: validate it (size, CRC, offsets: :mod:`rlm.log.validate`), keep the running maximum
timestamp, add an offset-index entry (keyed by the batch's last offset) and a time-index entry
whenever more than ``index.interval.bytes`` were read since the last entry, and finally append the
time index's closing ``(max timestamp, its batch's last offset)`` entry. Aborted transactions go to the
transaction index and leader epochs to the epoch cache.

:class:`IndexRebuilder` does this one batch at a time for a ``.log`` read from anywhere (a remote
object streamed in chunks); :func:`rebuild_indexes` runs it over any byte source (for a local
segment's file: :func:`rlm.log.segment.rebuild_segment_indexes`). This module does not know
:class:`~rlm.log.segment.Segment`: :mod:`rlm.log.segment` builds on it, not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlm.errors import CorruptDataError
from rlm.log.batches import Buffer, decode_batch
from rlm.log.byte_source import ByteSource
from rlm.log.checkpoints import EpochEntry
from rlm.log.index import DEFAULT_MAX_INDEX_SIZE, OffsetIndex, TimeIndex
from rlm.log.model import BatchHeader, ControlType
from rlm.log.snapshot import ProducerStateEntry
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.log.v2 import parse_control_record
from rlm.log.validate import BatchChecker

DEFAULT_INDEX_INTERVAL_BYTES = 4096


@dataclass
class TransactionTracker:
    """Open transactions per producer id, carried from one segment to the next during recovery."""

    ongoing: dict[int, int] = field(default_factory=dict)
    """producer id → first offset of its open transaction."""

    @classmethod
    def from_snapshot(cls, entries: list[ProducerStateEntry]) -> TransactionTracker:
        """Seed from a producer snapshot taken at the segment's base offset."""
        return cls(
            {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}
        )

    def begin(self, producer_id: int, offset: int) -> None:
        self.ongoing.setdefault(producer_id, offset)

    def end(self, producer_id: int, marker_offset: int, aborted: bool) -> AbortedTxn | None:
        """Close the producer's transaction; returns the index entry when it was aborted.

        A marker with no transaction open (the producer wrote no data to the partition before
        aborting, or the marker is a retry) ends nothing: Kafka's ``ProducerAppendInfo`` emits a
        completed transaction only for one that holds data, so neither the broker's transaction
        index nor its recovery has an entry for it.
        """
        first = self.ongoing.pop(producer_id, None)
        if not aborted or first is None:
            return None
        return AbortedTxn(producer_id, first, marker_offset, self._stable_after(marker_offset))

    def lone_abort(self, producer_id: int, marker_offset: int) -> AbortedTxn:
        """The entry an ABORT marker ending no open transaction would have, had its transaction
        begun at the marker: what is known of an abort whose transaction may have begun before
        the segment when the transactions open at its start are not (see
        :attr:`RebuiltIndexes.lone_aborts`)."""
        return AbortedTxn(producer_id, marker_offset, marker_offset, self._stable_after(marker_offset))

    def _stable_after(self, marker_offset: int) -> int:
        return min(self.ongoing.values(), default=marker_offset + 1)


@dataclass
class RebuiltIndexes:
    """What recovery of one segment produced."""

    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    valid_bytes: int
    """Bytes of whole, valid batches from the start of the ``.log``."""
    next_offset: int
    """Offset after the last valid batch (the base offset if there is none)."""
    epochs: list[EpochEntry]
    max_timestamp: int
    offset_of_max_timestamp: int
    error: CorruptDataError | None = None
    """The corruption recovery stopped at, if any (Kafka truncates the log there)."""
    lone_aborts: list[AbortedTxn] = field(default_factory=list)
    """The ABORT markers that ended no transaction open by the tracker, as
    :meth:`TransactionTracker.lone_abort` gives them. Kafka indexes none of them (an aborted
    transaction that wrote nothing); where the transactions open at the segment's start are not
    known, one of them may end a transaction begun before it, which the broker's index holds."""

    def without_emptied_aborts(self, entries: list[AbortedTxn]) -> list[AbortedTxn]:
        """``entries`` (a transaction index's) without those of ABORT markers that end no
        transaction the log holds (:attr:`lone_aborts`).

        Kafka's log cleaner removes an aborted transaction's batches and keeps its marker (until
        the delete horizon passes) with the transaction's entry as the index held it: its first
        offset (and, when other transactions' batches went too, its last stable offset) may then
        lie below what the log left gives, never above.
        """
        lone = {(t.producer_id, t.last_offset): t for t in self.lone_aborts}

        def emptied(entry: AbortedTxn) -> bool:
            bound = lone.get((entry.producer_id, entry.last_offset))
            return (
                bound is not None
                and entry.first_offset <= bound.first_offset
                and entry.last_stable_offset <= bound.last_stable_offset
            )

        return [entry for entry in entries if not emptied(entry)]

    def txn_entries_if_unknown_start(self) -> list[AbortedTxn]:
        """The transaction index's entries and the lone aborts, in marker order: an entry for every
        ABORT marker, for checks made without the transactions open at the segment's start."""
        return sorted([*self.txn_index.entries(), *self.lone_aborts], key=lambda t: t.last_offset)


class IndexRebuilder:
    """Kafka's ``LogSegment.recover`` one batch at a time, for a ``.log`` read from anywhere.

    Feed it every batch of a segment in file order with :meth:`add`, then call :meth:`finish`.
    It builds the indexes exactly as :func:`rebuild_indexes` does and validates nothing:
    the caller decides what to do with a bad CRC or an offset out of place (recovery stops there,
    a scrubber reports it and goes on).
    """

    def __init__(
        self,
        base_offset: int,
        *,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        tracker: TransactionTracker | None = None,
        epochs: list[EpochEntry] | None = None,
    ) -> None:
        """Start a rebuild of the segment at ``base_offset``.

        Args:
            base_offset: The segment's base offset.
            max_index_size: The topic's ``segment.index.bytes``.
            index_interval_bytes: The topic's ``index.interval.bytes``.
            tracker: Open transactions at the segment's start; updated in place.
            epochs: The leader-epoch cache so far; new epochs are appended to a copy.
        """
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(base_offset, max_index_size=max_index_size)
        self.time_index = TimeIndex(base_offset, max_index_size=max_index_size)
        self.txn_index = TransactionIndex(base_offset)
        self.tracker = tracker if tracker is not None else TransactionTracker()
        self.epochs = list(epochs or [])
        self.lone_aborts: list[AbortedTxn] = []
        self.valid_bytes = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._last_index_entry = 0

    def add(self, header: BatchHeader, batch: Buffer | Callable[[], Buffer], name: str) -> None:
        """Apply the next batch of the segment.

        Args:
            header: The batch's header (its position is only used in error messages).
            batch: The batch's bytes, or a function returning them (read for control batches only).
            name: The file or object the batch is read from, for error messages.

        Raises:
            CorruptDataError: A control batch cannot be decoded (its leader epoch is applied
                already, as in Kafka's recovery, which stops there).
        """
        if header.magic >= 2:
            self._epoch(header.leader_epoch, header.base_offset)
            for aborted in track_transactions(header, self.tracker, batch, name, lone=self.lone_aborts):
                self.txn_index.append(aborted)
        self._advance(header.size, header.last_offset, header.max_timestamp)

    def add_plain(
        self, size: int, base_offset: int, last_offset: int, leader_epoch: int, max_timestamp: int
    ) -> None:
        """:meth:`add` for a v2 batch that is not transactional (its bytes are not needed), given
        the fields of its header that count."""
        self._epoch(leader_epoch, base_offset)
        self._advance(size, last_offset, max_timestamp)

    def _epoch(self, leader_epoch: int, base_offset: int) -> None:
        if leader_epoch >= 0 and (not self.epochs or leader_epoch > self.epochs[-1].epoch):
            self.epochs.append(EpochEntry(leader_epoch, base_offset))

    def _advance(self, size: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self.valid_bytes - self._last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, self.valid_bytes)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._last_index_entry = self.valid_bytes
        self.valid_bytes += size
        self.next_offset = last_offset + 1

    def finish(self, error: CorruptDataError | None = None) -> RebuiltIndexes:
        """Close the time index with the segment's max timestamp and return what was rebuilt.

        ``error`` is the corruption the caller stopped at, if any; it is reported in the result.
        """
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        return RebuiltIndexes(
            self.offset_index,
            self.time_index,
            self.txn_index,
            self.valid_bytes,
            self.next_offset,
            self.epochs,
            self.max_timestamp,
            self.offset_of_max_timestamp,
            error,
            self.lone_aborts,
        )


def rebuild_indexes(
    source: ByteSource,
    base_offset: int,
    *,
    max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    tracker: TransactionTracker | None = None,
    epochs: list[EpochEntry] | None = None,
    stop_at_corruption: bool = True,
    checker: BatchChecker | None = None,
) -> RebuiltIndexes:
    """Rebuild the indexes of the segment at ``base_offset`` whose ``.log`` bytes ``source`` holds.

    The source may be a local segment's file (:func:`rlm.log.segment.rebuild_segment_indexes`), a
    ``.log`` in memory (:class:`rlm.log.byte_source.BytesSource`), a remote object
    (:class:`rlm.storage.range_source.RangeSource`) or any other byte source. Each batch is validated by
    ``checker`` (by default Kafka's recovery checks: size, CRC, offsets increasing and fitting the
    segment) before it is applied; nothing is written to disk.

    Args:
        source: the segment's ``.log`` bytes.
        base_offset: the segment's base offset.
        max_index_size: the topic's ``segment.index.bytes``.
        index_interval_bytes: the topic's ``index.interval.bytes``.
        tracker: open transactions at the segment's start (from the previous segment's recovery or
            the producer snapshot named after this segment's base offset).
        epochs: the leader-epoch cache so far; new epochs are appended to a copy.
        stop_at_corruption: stop at the first invalid batch and report it in ``error`` (Kafka's
            recovery); when False the error is raised.
        checker: the checks each batch must pass (see :mod:`rlm.log.validate`); by default
            Kafka's recovery checks, without decoding records. It is left holding the end of the
            scan, for :meth:`~rlm.log.validate.BatchChecker.finish`.
    """
    rebuilder = IndexRebuilder(
        base_offset,
        max_index_size=max_index_size,
        index_interval_bytes=index_interval_bytes,
        tracker=tracker,
        epochs=epochs,
    )
    checker = checker if checker is not None else BatchChecker(source.name, base_offset)
    error: CorruptDataError | None = None
    try:
        for header, data, problems in checker.batches_of(source):
            if problems:
                raise problems[0].error()
            rebuilder.add(header, data, source.name)
        if checker.framing_error:
            raise checker.problems[-1].error()
    except CorruptDataError as exc:
        if not stop_at_corruption:
            raise
        error = exc
    return rebuilder.finish(error)


def track_transactions(
    header: BatchHeader,
    tracker: TransactionTracker,
    batch: Buffer | Callable[[], Buffer],
    name: str,
    *,
    verify_crc: bool = False,
    lone: list[AbortedTxn] | None = None,
) -> list[AbortedTxn]:
    """Apply one batch to ``tracker`` the way Kafka's producer state does.

    A transactional data batch begins its producer's transaction unless one is open; each COMMIT
    or ABORT record of a control batch ends it at the record's offset. Batches without a producer
    id and non-transactional ones change nothing.

    Args:
        header: the batch's header.
        tracker: the open transactions, updated in place.
        batch: the whole batch's bytes, or a function returning them (called for control batches
            only, so a header-only scan reads no data batch).
        name: the file (or object) the batch is read from, for error messages.
        verify_crc: check a control batch's CRC before decoding it.
        lone: where to add the ABORT markers that end no open transaction
            (:meth:`TransactionTracker.lone_abort`).

    Returns:
        The aborted transactions the batch ended, as transaction-index entries.

    Raises:
        CorruptDataError: a control batch cannot be read or decoded; it names ``name`` and the
            batch's position.
    """
    if not header.is_transactional or header.producer_id < 0:
        return []
    if not header.is_control:
        tracker.begin(header.producer_id, header.base_offset)
        return []
    data = batch() if callable(batch) else batch
    try:
        records = decode_batch(data, header._replace(position=0), verify_crc=verify_crc)
        markers = [(record.offset, parse_control_record(record).type) for record in records]
    except CorruptDataError as exc:
        raise exc.at(name, header.position) from exc
    aborted: list[AbortedTxn] = []
    for offset, control_type in markers:
        if control_type in (ControlType.ABORT, ControlType.COMMIT):
            is_abort = control_type == ControlType.ABORT
            if lone is not None and is_abort and header.producer_id not in tracker.ongoing:
                lone.append(tracker.lone_abort(header.producer_id, offset))
            entry = tracker.end(header.producer_id, offset, is_abort)
            if entry is not None:
                aborted.append(entry)
    return aborted
