"""Verification of log files: CRCs, record structure, offset order, and index consistency.

Each problem names the file, the byte position (or index entry) and what is wrong, so an operator
can find it with ``rlm log dump``. Verification only reads.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rlm.errors import CorruptDataError
from rlm.log.batches import crc_valid, decode_batch
from rlm.log.files import parse_base_offset
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.logdir import LogDir, PartitionDir, parse_partition_dir_name
from rlm.log.model import BatchHeader
from rlm.log.recovery import TransactionTracker, initial_tracker, rebuild_segment_indexes
from rlm.log.segment import Segment
from rlm.log.source import iter_headers, read_batch_bytes


class Problem(NamedTuple):
    """One thing found wrong."""

    path: str
    position: int | None
    message: str

    def __str__(self) -> str:
        where = self.path if self.position is None else f"{self.path}: position {self.position}"
        return f"{where}: {self.message}"


@dataclass
class _Scan:
    headers: list[BatchHeader]
    running_max: list[int]
    valid_bytes: int
    size: int


def verify_path(path: str | Path, *, deep: bool = True) -> list[Problem]:
    """Verify a ``.log`` file, a partition directory or a whole log directory."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".log":
            raise CorruptDataError(f"verify takes a .log file or a directory, not {path.name}")
        segment = Segment(path.parent, parse_base_offset(path.name))
        return list(verify_segment(segment, deep=deep, active=False))
    if parse_partition_dir_name(path.name) is not None and any(path.glob("*.log")):
        return verify_partition(PartitionDir(path), deep=deep)
    problems: list[Problem] = []
    for partition in LogDir(path).partitions():
        problems.extend(verify_partition(partition, deep=deep))
    return problems


def verify_partition(partition: PartitionDir, *, deep: bool = True) -> list[Problem]:
    """Verify every segment of a partition, and the order of offsets across segments."""
    problems: list[Problem] = []
    segments = partition.segments()
    tracker = initial_tracker(segments[0]) if segments else TransactionTracker()
    previous_end = -1
    for i, segment in enumerate(segments):
        active = i == len(segments) - 1
        if segment.base_offset <= previous_end:
            problems.append(
                Problem(
                    str(segment.log_path),
                    None,
                    f"segment base offset {segment.base_offset} is not above the previous "
                    f"segment's last offset {previous_end}",
                )
            )
        problems.extend(verify_segment(segment, deep=deep, active=active, tracker=tracker))
        rebuilt_next = _last_offset(segment)
        if rebuilt_next is not None:
            previous_end = rebuilt_next
    return problems


def _last_offset(segment: Segment) -> int | None:
    last = None
    try:
        for header in segment.headers():
            last = header.last_offset
    except CorruptDataError:
        return last
    return last


def verify_segment(
    segment: Segment,
    *,
    deep: bool = True,
    active: bool = False,
    tracker: TransactionTracker | None = None,
) -> Iterator[Problem]:
    """Yield the problems of one segment: batches first, then its indexes."""
    log = str(segment.log_path)
    scan = _Scan([], [], 0, segment.size())
    last_offset = segment.base_offset - 1
    running = -1
    with segment.open() as source:
        try:
            for header in iter_headers(source):
                data = read_batch_bytes(source, header)
                local = header._replace(position=0)
                if not crc_valid(data, local):
                    yield Problem(log, header.position, f"CRC mismatch (stored 0x{header.crc:08x})")
                elif deep:
                    try:
                        decode_batch(data, local, verify_crc=False)
                    except CorruptDataError as exc:
                        yield Problem(log, header.position, exc.reason)
                first = header.base_offset if header.base_offset >= 0 else header.last_offset
                if first <= last_offset:
                    yield Problem(
                        log,
                        header.position,
                        f"offsets go backwards: batch starts at {first} after offset {last_offset}",
                    )
                last_offset = max(last_offset, header.last_offset)
                running = max(running, header.max_timestamp)
                scan.headers.append(header)
                scan.running_max.append(running)
                scan.valid_bytes = header.end_position
        except CorruptDataError as exc:
            yield Problem(log, exc.position, exc.reason)
            return
    if scan.valid_bytes < scan.size:
        kind = "a torn tail (a batch still being written)" if active else "trailing bytes"
        yield Problem(log, scan.valid_bytes, f"{scan.size - scan.valid_bytes} bytes of {kind}")
    yield from _verify_offset_index(segment, scan)
    yield from _verify_time_index(segment, scan, active)
    yield from _verify_txn_index(segment, tracker)


def _verify_offset_index(segment: Segment, scan: _Scan) -> Iterator[Problem]:
    path = segment.index_path
    if not path.exists():
        if scan.headers:
            yield Problem(str(path), None, "offset index is missing (run `rlm log reindex`)")
        return
    try:
        index = OffsetIndex.load(path, segment.base_offset, max_index_size=segment.max_index_size)
        index.sanity_check(path)
    except CorruptDataError as exc:
        yield Problem(str(path), exc.position, exc.reason)
        return
    positions = [h.position for h in scan.headers]
    for i, entry in enumerate(index.entries()):
        at = bisect_right(positions, entry.position) - 1
        if at < 0 or positions[at] != entry.position:
            yield Problem(
                str(path),
                None,
                f"entry {i} ({entry.offset}, {entry.position}) does not point at a batch",
            )
            continue
        batch = scan.headers[at]
        first = batch.base_offset if batch.base_offset >= 0 else batch.last_offset
        if entry.offset < first:
            yield Problem(
                str(path),
                None,
                f"entry {i} ({entry.offset}, {entry.position}) is below the batch there "
                f"(offsets {first}..{batch.last_offset})",
            )


def _verify_time_index(segment: Segment, scan: _Scan, active: bool) -> Iterator[Problem]:
    path = segment.time_index_path
    if not path.exists():
        if scan.headers:
            yield Problem(str(path), None, "time index is missing (run `rlm log reindex`)")
        return
    try:
        index = TimeIndex.load(path, segment.base_offset, max_index_size=segment.max_index_size)
        index.sanity_check(path)
    except CorruptDataError as exc:
        yield Problem(str(path), exc.position, exc.reason)
        return
    last_offsets = [h.last_offset for h in scan.headers]
    for i, entry in enumerate(index.entries()):
        at = bisect_right(last_offsets, entry.offset - 1)
        if at >= len(scan.headers):
            yield Problem(
                str(path),
                None,
                f"entry {i} ({entry.timestamp}, {entry.offset}) is past the log end",
            )
            continue
        if scan.running_max[at] != entry.timestamp:
            yield Problem(
                str(path),
                None,
                f"entry {i} ({entry.timestamp}, {entry.offset}) disagrees with the log: the largest "
                f"timestamp up to that batch is {scan.running_max[at]}",
            )
    segment_max = scan.running_max[-1] if scan.running_max else -1
    if not active and segment_max >= 0:
        last = index.last_entry if len(index) else None
        if last is None or last.timestamp != segment_max:
            yield Problem(
                str(path),
                None,
                f"last entry should hold the segment's max timestamp {segment_max} (found {last})",
            )


def _verify_txn_index(segment: Segment, tracker: TransactionTracker | None) -> Iterator[Problem]:
    if tracker is None:
        return  # aborted transactions can only be checked with the partition's earlier segments
    rebuilt = rebuild_segment_indexes(segment, tracker=tracker)
    found = list(segment.transaction_index().entries()) if segment.txn_index_path.exists() else []
    expected = list(rebuilt.txn_index.entries())
    if found != expected:
        yield Problem(
            str(segment.txn_index_path),
            None,
            f"transaction index has {len(found)} entries, the log implies {len(expected)} "
            f"aborted transactions",
        )
