"""The files of a segment's index object against what the ``.log`` says they should hold.

* Offset and time index: equal, entry for entry, to the ones Kafka's recovery builds from the log
  (:class:`rlm.log.recovery.IndexRebuilder`), as the copier uploads them.
* Transaction index: equal to the aborted transactions the log's markers imply, and empty when
  the row says so (jobs skip the transaction index of such a segment). When the open
  transactions at the segment's start are known (the previous segment's producer snapshot, or a
  segment starting at offset 0) every field must match, but for the entry the broker's log
  cleaner keeps for an ABORT marker whose transaction's batches it removed (a copy of a cleaned
  segment keeps the broker's index): its first offset and last stable offset may only be lower
  than those rebuilt. Otherwise a transaction may have begun
  in an earlier segment: the entries must still be the same markers (producer id and last
  offset), and the stored first offset and last stable offset may only be lower than those
  rebuilt without that knowledge.
* Producer snapshot (where present): it must decode, and the transactions it records as open
  must be the ones the log leaves open at the segment's end (exactly when the start state is
  known; otherwise every transaction the log leaves open must be open in it, and every open one
  that began in this segment must begin where the log says). Its other fields depend on producers
  the broker expired, which the log does not show. The copy of a segment Kafka's log cleaner
  rewrote keeps the snapshot taken when the segment rolled: a transaction it holds open from an
  offset no batch holds any more (the cleaner removed that batch) is left out.
  A compaction's output keeps its last input's snapshot, as Kafka's cleaner does, while its log
  lost batches: a transaction's first batches (it then begins later in the log), every batch of
  one (the snapshot names a transaction the log never opens) or, once its horizon passed, the
  marker of one emptied earlier (its start state opens a transaction nothing closes). So a
  transaction the log opens in the segment and leaves open must be open in the snapshot, from
  its first offset in the log or before; one open at the segment's start may be closed in it;
  any other it holds open must begin within the segment's offsets (or before them, when the
  start state is unknown).
* Leader-epoch checkpoint (where present): equal to the row's leader epochs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlm.errors import CorruptDataError, RlmError
from rlm.log.checkpoints import decode_leader_epoch_checkpoint
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.recovery import RebuiltIndexes
from rlm.log.snapshot import decode_snapshot
from rlm.log.txnindex import TransactionIndex
from rlm.metastore.model import IndexType
from rlm.pipeline.reader import SegmentReader
from rlm.pipeline.verify.findings import Findings
from rlm.pipeline.verify.problems import ProblemKind


def check_indexes(
    reader: SegmentReader,
    findings: Findings,
    rebuilt: RebuiltIndexes,
    open_at_end: dict[int, int],
    *,
    start_state_known: bool,
    compacted: bool,
    holes: Sequence[tuple[int, int]] = (),
) -> None:
    """Compare every file of the segment's index object with what ``rebuilt`` says.

    Args:
        reader: The segment's reader (its index object is read by range).
        findings: Where problems go.
        rebuilt: What recovery rebuilt from the whole ``.log``.
        open_at_end: Producer id → first offset of each transaction open at the segment's end.
        start_state_known: Whether the transactions open at the segment's start were known.
        compacted: Whether the segment is a compaction's output.
        holes: The offsets (first, last) between two batches that no batch holds.
    """
    summary = reader.summary
    start = summary.segment.start_offset
    files = _read_files(reader, findings)
    if files is None:
        return
    for kind, stored_cls, built in (
        (IndexType.OFFSET, OffsetIndex, rebuilt.offset_index),
        (IndexType.TIMESTAMP, TimeIndex, rebuilt.time_index),
    ):
        data = files.get(kind)
        if data is None:
            findings.add(
                ProblemKind.INDEX_MISMATCH,
                f"the row lists no {kind.value} index in the index object",
                key=summary.index_key,
            )
            continue
        if data == built.to_bytes():
            continue  # the same bytes: the same entries
        stored = stored_cls.from_bytes(start, data)
        _compare(findings, f"{kind.value} index", list(stored.entries()), list(built.entries()), reader, kind)
    _check_transactions(reader, findings, files.get(IndexType.TRANSACTION), rebuilt, start_state_known)
    _check_snapshot(
        reader,
        findings,
        files.get(IndexType.PRODUCER_SNAPSHOT),
        open_at_end,
        start_state_known,
        compacted,
        holes,
    )
    _check_epochs(reader, findings, files.get(IndexType.LEADER_EPOCH))


def _read_files(reader: SegmentReader, findings: Findings) -> dict[IndexType, bytes] | None:
    """Every file the row lists, read by range; ``None`` (and a problem) when one cannot be read."""
    files: dict[IndexType, bytes] = {}
    for kind, _ in reader.summary.segment.layout.index_ranges:
        try:
            data = reader.read_index(kind)
        except CorruptDataError as exc:
            findings.add(ProblemKind.INDEX_MISMATCH, f"{kind.value} index: {exc.reason}", key=exc.path)
            return None
        except RlmError as exc:
            findings.add(ProblemKind.UNREADABLE, f"{kind.value} index: {exc}", key=reader.summary.index_key)
            return None
        assert data is not None  # listed in the layout
        files[kind] = data
    return files


def _compare(
    findings: Findings,
    what: str,
    stored: Sequence[Any],
    expected: Sequence[Any],
    reader: SegmentReader,
    kind: IndexType,
) -> None:
    if list(stored) == list(expected):
        return
    ref = reader.summary.index_ref(kind)
    position = None if ref is None else ref.byte_range.position
    for i, (ours, theirs) in enumerate(zip(stored, expected, strict=False)):
        if ours != theirs:
            message = f"{what} entry {i} is {tuple(ours)}, the log gives {tuple(theirs)}"
            break
    else:
        message = f"{what} holds {len(stored)} entries, the log gives {len(expected)}"
    findings.add(ProblemKind.INDEX_MISMATCH, message, key=reader.summary.index_key, position=position)


def _check_transactions(
    reader: SegmentReader,
    findings: Findings,
    data: bytes | None,
    rebuilt: RebuiltIndexes,
    start_state_known: bool,
) -> None:
    summary = reader.summary
    try:
        stored = (
            []
            if data is None
            else list(TransactionIndex.from_bytes(summary.segment.start_offset, data).entries())
        )
    except CorruptDataError as exc:
        findings.add(ProblemKind.INDEX_MISMATCH, f"transaction index: {exc.reason}", key=summary.index_key)
        return
    expected = list(rebuilt.txn_index.entries())  # the whole index when the start is known
    if summary.segment.txn_index_empty and (stored or expected):
        # Jobs read the transaction index only of segments whose row says it holds entries: a
        # read_committed reader would keep these aborted transactions' records.
        findings.add(
            ProblemKind.INDEX_MISMATCH,
            "the row says the segment has no aborted transaction, yet its transaction index holds "
            f"{len(stored)} and its markers imply {len(expected)}",
            key=summary.index_key,
        )
    if start_state_known:
        if stored != expected and rebuilt.without_emptied_aborts(stored) == expected:
            return  # entries the broker's log cleaner kept for the markers of emptied aborts
        _compare(findings, "transaction index", stored, expected, reader, IndexType.TRANSACTION)
        return
    # Without the transactions open at the start, an ABORT marker that ends none begun in the
    # segment may end one begun before it (an entry) or one that wrote nothing (none, as in the
    # broker's index): the index holds the entries of the others and some of these, in order.
    possible = rebuilt.txn_entries_if_unknown_start()
    markers = [(t.producer_id, t.last_offset) for t in stored]
    possible_markers = [(t.producer_id, t.last_offset) for t in possible]
    left = iter(possible_markers)
    if not all(marker in left for marker in markers):  # not in the log's order, or no marker's
        _compare(
            findings, "transaction index (markers)", markers, possible_markers, reader, IndexType.TRANSACTION
        )
        return
    missing = [
        (t.producer_id, t.last_offset) for t in expected if (t.producer_id, t.last_offset) not in markers
    ]
    if missing:
        findings.add(
            ProblemKind.INDEX_MISMATCH,
            f"the transaction index has no entry for the aborted transactions (producer id, marker "
            f"offset) {missing}, which the log holds",
            key=summary.index_key,
        )
    by_marker = {(t.producer_id, t.last_offset): t for t in possible}
    for i, ours in enumerate(stored):
        theirs = by_marker[(ours.producer_id, ours.last_offset)]
        if ours.first_offset > theirs.first_offset or ours.last_stable_offset > theirs.last_stable_offset:
            findings.add(
                ProblemKind.INDEX_MISMATCH,
                f"transaction index entry {i} is {tuple(ours)}: its first offset or last stable offset "
                f"is above what the log allows ({theirs.first_offset}, {theirs.last_stable_offset})",
                key=summary.index_key,
            )


def _check_snapshot(
    reader: SegmentReader,
    findings: Findings,
    data: bytes | None,
    open_at_end: dict[int, int],
    start_state_known: bool,
    compacted: bool,
    holes: Sequence[tuple[int, int]],
) -> None:
    if data is None:
        return
    summary = reader.summary
    try:
        entries = decode_snapshot(data, path=summary.index_key)
    except CorruptDataError as exc:
        findings.add(ProblemKind.INDEX_MISMATCH, exc.reason, key=summary.index_key)
        return
    stored = {
        e.producer_id: e.current_txn_first_offset
        for e in entries
        # The copy of a segment Kafka's log cleaner rewrote keeps the snapshot taken when it
        # rolled: a transaction open there whose batches the cleaner removed (its first offset
        # now in a hole of the log) is one the log no longer opens.
        if e.current_txn_first_offset >= 0
        and (e.producer_id in open_at_end or not _in_holes(e.current_txn_first_offset, holes))
    }
    start = summary.segment.start_offset
    if compacted:
        wrong = not _compacted_snapshot_agrees(
            stored, open_at_end, start, summary.segment.end_offset, start_state_known
        )
    elif start_state_known:
        wrong = stored != open_at_end
    else:
        wrong = any(pid not in stored for pid in open_at_end) or any(
            first >= start and open_at_end.get(pid) != first for pid, first in stored.items()
        )
    if wrong:
        findings.add(
            ProblemKind.INDEX_MISMATCH,
            "producer snapshot: open transactions (producer id: first offset) "
            f"{dict(sorted(stored.items()))}, the log leaves open {dict(sorted(open_at_end.items()))}",
            key=summary.index_key,
        )


def _in_holes(offset: int, holes: Sequence[tuple[int, int]]) -> bool:
    return any(first <= offset <= last for first, last in holes)


def _compacted_snapshot_agrees(
    stored: dict[int, int], open_at_end: dict[int, int], start: int, end: int, start_state_known: bool
) -> bool:
    """Whether a compaction's output's snapshot (``stored``) may be its last input's, given the
    transactions its log leaves open (producer id → first offset; see the module's description)."""

    def within(first: int) -> bool:
        # Without the start state, a transaction open in the snapshot may have begun earlier.
        return first <= end and (first >= start or not start_state_known)

    for pid in stored.keys() | open_at_end.keys():
        ours, logs = stored.get(pid), open_at_end.get(pid)
        if logs is None:
            agrees = ours is None or within(ours)
        elif logs >= start:  # opened in the segment: its first batches may have gone
            agrees = ours is not None and within(ours) and ours <= logs
        else:  # open at the start: its marker may have gone, with every batch of it
            agrees = ours is None or ours == logs or within(ours)
        if not agrees:
            return False
    return True


def _check_epochs(reader: SegmentReader, findings: Findings, data: bytes | None) -> None:
    if data is None:
        return
    summary = reader.summary
    try:
        entries = decode_leader_epoch_checkpoint(data, path=summary.index_key)
    except CorruptDataError as exc:
        findings.add(
            ProblemKind.INDEX_MISMATCH, f"leader-epoch checkpoint: {exc.reason}", key=summary.index_key
        )
        return
    row = [(e.epoch, e.start_offset) for e in summary.segment.leader_epochs]
    if [(e.epoch, e.start_offset) for e in entries] != row:
        findings.add(
            ProblemKind.INDEX_MISMATCH,
            f"leader-epoch checkpoint holds {[tuple(e) for e in entries]}, the row {row}",
            key=summary.index_key,
        )
