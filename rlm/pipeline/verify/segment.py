"""Checks of one finished segment, run on an executor (one task per segment).

Without ``deep``: both objects exist and have the sizes the row records (two HEADs).

With ``deep`` every byte of the ``.log`` object is read, streamed in chunks: each batch's CRC,
offsets increasing from batch to batch, each batch's leader epoch the one the row says wrote its
offsets, the first and last offsets and the largest timestamp equal to the row's; then every file
of the index object against the one rebuilt from the log (:mod:`rlm.pipeline.verify.indexes`).

A compaction's output (its index object's metadata says so: ``rlm-compaction``, see
:mod:`rlm.storage.description`) keeps its first input's start offset and its last input's end
offset whatever survives, as Kafka's cleaner does: its batches need only lie within the row's
offsets (the partition's rows holding every offset once is judged across them,
:mod:`rlm.pipeline.verify.continuity`). A copier's segment holds every batch of its offsets, so a
first or last offset that is not the row's is damage there.

A batch failing its CRC may have any header field damaged, so when one does the comparisons that
trust the headers (offset range, max timestamp, indexes) are left out: the CRC problem is the
finding. The same holds when the object cannot be cut into whole batches.

The headers of a chunk's whole v2 batches are read, and their CRCs checked, in one call
(:func:`rlm.log.walk.walk_v2_headers`); a batch whose CRC holds and that is not transactional is
checked and indexed from its header alone. Any other batch (a CRC mismatch, a transactional or
control batch, a legacy one) is cut out and checked on its own, as every batch once was.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import pyarrow as pa

from rlm.errors import CorruptDataError, RlmError
from rlm.log.batches import crc_valid, first_offset
from rlm.log.recovery import IndexRebuilder, TransactionTracker
from rlm.log.snapshot import decode_snapshot
from rlm.log.v2 import parse_v2_header
from rlm.metastore.model import ByteRange, RemoteSegment
from rlm.pipeline.reader import DEFAULT_CHUNK_BYTES, BatchRun, RawBatch, SegmentReader
from rlm.pipeline.stage import Stage, arrow_schema, batch_of
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.findings import Findings
from rlm.pipeline.verify.indexes import check_indexes
from rlm.pipeline.verify.problems import PROBLEM_TYPE, Problem, ProblemKind, problem_row
from rlm.remote_tier.read_plan import IndexRef, SegmentSummary
from rlm.storage.description import read_compaction
from rlm.storage.protocol import RemoteStorage

#: The attribute bit of a transactional v2 batch.
_TRANSACTIONAL = 0x10

#: One row per segment: what was read and what was found.
RESULT_SCHEMA = arrow_schema(
    pa.field("segment_id", pa.string()),
    pa.field("bytes_read", pa.int64()),
    pa.field("batches", pa.int64()),
    pa.field("problems", pa.list_(PROBLEM_TYPE)),
)


class SegmentCheck(NamedTuple):
    """What checking one segment found."""

    segment_id: str
    bytes_read: int
    """Bytes read from the objects (0 without ``deep``)."""
    batches: int
    problems: list[Problem]


@dataclass
class _Scan:
    """What a read of the ``.log`` learned."""

    trusted: bool
    """Every batch passed its CRC and the object was whole batches: the headers can be trusted."""
    batches: int
    first_offset: int | None
    last_offset: int | None
    rebuilder: IndexRebuilder
    start_state_known: bool
    holes: list[tuple[int, int]] = field(default_factory=list)
    """The offsets between two batches that no batch holds (first, last): what a cleaner removed."""


class _Epochs:
    """The row's leader epochs, asked per offset."""

    def __init__(self, row: RemoteSegment) -> None:
        self._starts = [entry.start_offset for entry in row.leader_epochs]
        self._epochs = [entry.epoch for entry in row.leader_epochs]
        # The offsets [low, high) of the entry last asked for, and its epoch: batches come in
        # offset order, most in the range of the one before.
        self._low = self._high = 0
        self._epoch = -1

    def at(self, offset: int) -> int:
        if self._low <= offset < self._high:
            return self._epoch
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        self._epoch = self._epochs[i]
        self._low = self._starts[i] if i > 0 else -(2**63)
        self._high = self._starts[i + 1] if i + 1 < len(self._starts) else 2**63
        return self._epoch


def check_segment(
    storage: RemoteStorage, summary: SegmentSummary, *, deep: bool, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> SegmentCheck:
    """Check one segment (see the module's description); never raises for what it finds."""
    findings = Findings(summary)
    row = summary.segment
    reader = SegmentReader(storage, summary, chunk_bytes=chunk_bytes)
    index_expected = max((r.end for _, r in row.layout.index_ranges), default=0)
    with ThreadPoolExecutor(5, "rlm-verify") as pool:
        # Every small read at once (the index object's metadata tells a compaction's output), and
        # the index files (the object, one read) and the previous segment's producer snapshot
        # fetched while the .log streams: round trips overlap.
        sizes = [pool.submit(storage.object_size, key) for key in (summary.log_key, summary.index_key)]
        index: Future[None] | None = None
        metadata: Future[dict[str, str] | None] | None = None
        if deep:
            metadata = pool.submit(storage.object_metadata, summary.index_key)
            index = pool.submit(reader.fetch, IndexRef(summary.index_key, ByteRange(0, index_expected)))
            if summary.previous_snapshot is not None:
                pool.submit(reader.fetch, summary.previous_snapshot).result()
        try:
            log_size, index_size = (size.result() for size in sizes)
        except RlmError as exc:
            findings.add(ProblemKind.UNREADABLE, f"cannot look at the objects: {exc}", key=summary.log_key)
            return SegmentCheck(summary.segment_id, 0, 0, findings.problems())
        compacted = metadata is not None and _compaction_output(metadata, findings, summary.index_key)
        return _check(
            reader, findings, (log_size, index_size), index_expected, index, deep=deep, compacted=compacted
        )


def _compaction_output(metadata: Future[dict[str, str] | None], findings: Findings, key: str) -> bool:
    """Whether the index object's metadata marks the segment a compaction's output (pending or
    swapped: a failed swapped mark leaves it pending). Metadata that cannot be read is a problem,
    and the segment is then checked as a copier's."""
    try:
        found = metadata.result()
    except RlmError as exc:
        findings.add(
            ProblemKind.UNREADABLE,
            f"cannot read the index object's metadata ({exc}): the segment is checked as the copier's",
            key=key,
        )
        return False
    return found is not None and read_compaction(found) is not None


def _check(
    reader: SegmentReader,
    findings: Findings,
    sizes: tuple[int | None, int | None],
    index_expected: int,
    index: Future[None] | None,
    *,
    deep: bool,
    compacted: bool,
) -> SegmentCheck:
    """The checks once the objects' sizes are known (``index`` is the fetch of the index object,
    waited for before the index files are compared; ``compacted``: the segment is a compaction's
    output)."""
    summary = reader.summary
    log_size, index_size = sizes
    row = summary.segment
    for key, size, expected, what in (
        (summary.log_key, log_size, row.size_bytes, ".log"),
        (summary.index_key, index_size, index_expected, "index"),
    ):
        if size is None:
            findings.add(ProblemKind.MISSING_OBJECT, f"the segment's {what} object is missing", key=key)
        elif size != expected:
            findings.add(
                ProblemKind.SIZE_MISMATCH,
                f"the {what} object holds {size} bytes, the row says {expected}",
                key=key,
            )
    if not deep or log_size is None:
        return SegmentCheck(summary.segment_id, reader.bytes_read, 0, findings.problems())
    scan = _scan(reader, findings, log_size)
    if scan.trusted:
        _check_log(row, scan, findings, summary.log_key, compacted=compacted)
        if index_size is not None:
            if index is not None:
                index.result()
            check_indexes(
                reader,
                findings,
                scan.rebuilder.finish(),
                dict(scan.rebuilder.tracker.ongoing),
                start_state_known=scan.start_state_known,
                compacted=compacted,
                holes=scan.holes,
            )
    return SegmentCheck(summary.segment_id, reader.bytes_read, scan.batches, findings.problems())


def _start_state(reader: SegmentReader) -> tuple[TransactionTracker, bool]:
    """The transactions open at the segment's start, and whether they are known."""
    summary = reader.summary
    ref = summary.previous_snapshot
    if ref is not None:
        try:
            return TransactionTracker.from_snapshot(decode_snapshot(reader.read_ref(ref), path=ref.key)), True
        except RlmError:
            pass  # the previous segment's own check reports its index object
    return TransactionTracker(), summary.segment.start_offset == 0


def _scan(reader: SegmentReader, findings: Findings, size: int) -> _Scan:
    """Read every batch of the ``.log`` object (``size`` bytes, as the store reports it)."""
    row = reader.summary.segment
    key = reader.summary.log_key
    tracker, known = _start_state(reader)
    scan = _Scan(True, 0, None, None, IndexRebuilder(row.start_offset, tracker=tracker), known)
    walk = _Walk(scan, findings, _Epochs(row), key, row.start_offset - 1)
    try:
        for item in reader.runs(size):
            if isinstance(item, RawBatch):
                walk.batch(item)
            else:
                walk.run(item)
    except CorruptDataError as exc:
        scan.trusted = False
        findings.add(ProblemKind.CORRUPT_BATCH, exc.reason, key=key, position=exc.position)
    except RlmError as exc:
        scan.trusted = False
        findings.add(ProblemKind.UNREADABLE, f"reading the .log object failed: {exc}", key=key)
    return scan


class _Walk:
    """The checks of each batch in turn, and the index rebuild, over a ``.log``'s batches."""

    def __init__(self, scan: _Scan, findings: Findings, epochs: _Epochs, key: str, previous: int) -> None:
        self.scan = scan
        self.findings = findings
        self.epochs = epochs
        self.key = key
        self.previous = previous
        """The largest last offset so far (below the segment's start offset before any batch)."""

    def run(self, run: BatchRun) -> None:
        """A run of well-formed v2 batches: those whose CRC holds and that are not transactional
        are checked from their headers alone; any other goes through :meth:`batch`."""
        scan, rebuilder = self.scan, self.scan.rebuilder
        for h in run.headers:
            first = h.base_offset
            if not h.crc_ok or h.attributes & _TRANSACTIONAL or first < 0:
                header = parse_v2_header(run.data, h.pos, run.position + h.pos)
                self.batch(RawBatch(header, run.data[h.pos : h.pos + h.size]))
                continue
            scan.batches += 1
            if first <= self.previous:
                self._out_of_order(first, run.position + h.pos)
            elif first > self.previous + 1 and scan.first_offset is not None:
                scan.holes.append((self.previous + 1, first - 1))
            if scan.first_offset is None:
                scan.first_offset = first
            self.previous = max(self.previous, h.last_offset)
            scan.last_offset = self.previous
            if h.leader_epoch >= 0:
                self._check_epoch(h.leader_epoch, first, h.last_offset, run.position + h.pos)
            rebuilder.add_plain(h.size, first, h.last_offset, h.leader_epoch, h.max_timestamp)

    def batch(self, raw: RawBatch) -> None:
        """Any one batch, from its header and bytes."""
        scan, header = self.scan, raw.header
        scan.batches += 1
        if not crc_valid(raw.data, raw.local_header):
            scan.trusted = False
            self.findings.add(
                ProblemKind.CORRUPT_BATCH,
                f"CRC mismatch: the batch's bytes do not match its stored checksum 0x{header.crc:08x}",
                key=self.key,
                position=header.position,
                offset=header.last_offset,
            )
            return
        first = first_offset(raw.data, raw.local_header, verify_crc=False)
        if first <= self.previous:
            self._out_of_order(first, header.position)
        elif first > self.previous + 1 and scan.first_offset is not None:
            scan.holes.append((self.previous + 1, first - 1))
        if scan.first_offset is None:
            scan.first_offset = first
        self.previous = max(self.previous, header.last_offset)
        scan.last_offset = self.previous
        if header.magic >= 2 and header.leader_epoch >= 0:  # legacy batches carry no leader epoch
            self._check_epoch(header.leader_epoch, header.base_offset, header.last_offset, header.position)
        try:
            scan.rebuilder.add(header, raw.data, self.key)
        except CorruptDataError as exc:
            scan.trusted = False
            self.findings.add(ProblemKind.CORRUPT_BATCH, exc.reason, key=self.key, position=header.position)

    def _out_of_order(self, first: int, position: int) -> None:
        self.findings.add(
            ProblemKind.OFFSET_ORDER,
            f"the batch starts at offset {first}, not above {self.previous}, the last offset before it",
            key=self.key,
            position=position,
            offset=first,
        )

    def _check_epoch(self, leader_epoch: int, base_offset: int, last_offset: int, position: int) -> None:
        for offset in (base_offset, last_offset):
            expected = self.epochs.at(offset)
            if leader_epoch != expected:
                self.findings.add(
                    ProblemKind.LEADER_EPOCH,
                    f"the batch has leader epoch {leader_epoch}, the row says epoch {expected} "
                    f"wrote offset {offset}",
                    key=self.key,
                    position=position,
                    offset=offset,
                )
                return


def _check_log(row: RemoteSegment, scan: _Scan, findings: Findings, key: str, *, compacted: bool) -> None:
    """The batches' offsets and largest timestamp against the row's: a compaction's output's
    batches within its offsets, a copier's segment's from its first to its last. Either holds a
    batch (an output that lost every record keeps a header-only one at its last offset)."""
    if scan.first_offset is None or scan.last_offset is None:
        findings.add(ProblemKind.OFFSET_RANGE, "the .log object holds no batch", key=key)
        return
    first, last = scan.first_offset, scan.last_offset
    if first < row.start_offset or (first > row.start_offset and not compacted):
        where = "before the row's start offset" if compacted else "the row's start offset is"
        findings.add(
            ProblemKind.OFFSET_RANGE,
            f"the first batch starts at offset {first}, {where} {row.start_offset}",
            key=key,
            offset=first,
        )
    if last > row.end_offset or (last < row.end_offset and not compacted):
        where = "after the row's end offset" if compacted else "the row's end offset is"
        findings.add(
            ProblemKind.OFFSET_RANGE,
            f"the last batch ends at offset {last}, {where} {row.end_offset}",
            key=key,
            offset=last,
        )
    largest = scan.rebuilder.max_timestamp
    if largest != row.max_timestamp_ms:
        findings.add(
            ProblemKind.MAX_TIMESTAMP,
            f"the largest batch timestamp is {largest} (offset {scan.rebuilder.offset_of_max_timestamp}), "
            f"the row's max timestamp is {row.max_timestamp_ms}",
            key=key,
            offset=scan.rebuilder.offset_of_max_timestamp,
        )


def verify_task(
    storage: RemoteStorage, summary: SegmentSummary, *, deep: bool, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pa.RecordBatch]:
    """The stage task: one row of :data:`RESULT_SCHEMA` for the segment."""
    found = check_segment(storage, summary, deep=deep, chunk_bytes=chunk_bytes)
    row = {
        "segment_id": found.segment_id,
        "bytes_read": found.bytes_read,
        "batches": found.batches,
        "problems": [problem_row(p) for p in found.problems],
    }
    yield batch_of(RESULT_SCHEMA, [row])


def verify_stage(storage: StorageSpec, *, deep: bool, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Stage:
    """The per-segment stage of ``rlm spark verify``."""
    name = "verify (deep)" if deep else "verify"
    return Stage(name, RESULT_SCHEMA, partial(verify_task, deep=deep, chunk_bytes=chunk_bytes), storage)
