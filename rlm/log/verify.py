"""Verification of log files: every file kind ``rlm log dump`` reads.

A ``.log`` gets the batch checks the copier makes before tiering it (:mod:`rlm.log.validate`) and
its record structure; its indexes are checked against it, producer snapshots and index files on
their own. Each problem names the file, the byte position (or index entry) and what is wrong, so
an operator can find it with ``rlm log dump``. Files that are not the broker's are skipped with a
warning. Verification only reads.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import CorruptDataError, NotFoundError
from rlm.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from rlm.log.files import offset_file_offsets, parse_base_offset, segment_file_name, warn_stray
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.logdir import LogDir, PartitionDir, parse_partition_dir_name
from rlm.log.model import CLUSTER_METADATA_DIR, BatchHeader
from rlm.log.recovery import TransactionTracker
from rlm.log.segment import (
    Segment,
    first_tracker,
    index_entry_problem,
    initial_tracker,
    rebuild_segment_indexes,
    segment_base_offsets,
)
from rlm.log.snapshot import read_snapshot
from rlm.log.stable import snapshot_offsets
from rlm.log.txnindex import TransactionIndex
from rlm.log.validate import BatchChecker, Problem

#: The files a broker's log directory holds from its first start, partitions or not.
LOG_DIR_FILES = (
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
#: The directory of a log directory Kafka's ``LogManager`` skips (tiered storage's index cache).
REMOTE_INDEX_CACHE_DIR = "remote-log-index-cache"
_MARKED_DIR_SUFFIXES = ("-delete", "-future", "-stray")
#: ``DELETE_DIR_PATTERN``, ``FUTURE_DIR_PATTERN`` and ``STRAY_DIR_PATTERN`` of Kafka's ``LocalLog``.
_MARKED_DIR = re.compile(r"\S+-\S+\.\S+-(?:delete|future|stray)", re.ASCII)
#: What Java's ``Integer.parseInt`` reads: a sign, then decimal digits of any script (its
#: ``Character.digit``, as Python's ``int``); the int32 range is checked apart.
_JAVA_INT = re.compile(r"[+-]?\d+")
#: The file kinds verify (and ``rlm log dump``) reads.
FILE_KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
__all__ = [
    "FILE_KINDS",
    "Problem",
    "next_tracker",
    "verify_file",
    "verify_partition",
    "verify_path",
    "verify_segment",
]


@dataclass
class _Scan:
    """The batches of a ``.log`` its indexes are checked against: those before the first corrupt
    one (what Kafka's recovery keeps). Index entries past it are not checked: the corruption is
    the problem, and the broker rebuilds them when it truncates the log there."""

    headers: list[BatchHeader]
    running_max: list[int]
    corrupt_at: int | None = None
    """Position of the first batch that failed a check, if any."""


def verify_path(path: str | Path, *, deep: bool = True) -> list[Problem]:
    """Verify a log directory, a partition directory, or one file of any kind ``rlm log dump`` reads.

    Raises:
        InvalidFileNameError: a file is not named after an offset.
        NotFoundError: a directory holding segments is not named as a partition's (no partition
            of a log directory, nor a partition directory), or a directory holds nothing of a
            broker's (no partition directory, no ``meta.properties`` nor checkpoint file).
        CorruptDataError: a file of a kind verify does not know.
    """
    path = Path(path)
    if path.is_file():
        return verify_file(path, deep=deep)
    if parse_partition_dir_name(path.name) is not None and segment_base_offsets(path):
        return verify_partition(PartitionDir(path), deep=deep)
    problems: list[Problem] = []
    partitions = LogDir(path).partitions()
    if not partitions and segment_base_offsets(path):
        raise NotFoundError(
            f"{path} holds segments but is not named as Kafka names a partition's directory "
            "(TOPIC-PARTITION): verify a copy under such a name, or its .log files one by one"
        )
    # Not a topic's, but the same segment format: a log directory's verify covers it too.
    metadata_log = path / CLUSTER_METADATA_DIR
    if metadata_log.is_dir():
        partitions.append(PartitionDir(metadata_log))
    if not partitions and not any((path / name).exists() for name in LOG_DIR_FILES):
        raise NotFoundError(
            f"{path} is not a Kafka log directory (it holds no partition directory and none of "
            f"{', '.join(LOG_DIR_FILES)}) nor a partition directory: nothing to verify"
        )
    problems.extend(_directories_kafka_refuses(path))
    for partition in partitions:
        problems.extend(verify_partition(partition, deep=deep))
    return problems


def _directories_kafka_refuses(log_dir: Path) -> Iterator[Problem]:
    """The directories of a log directory the broker will not start on: Kafka's ``LogManager``
    fails the whole log directory on one its ``parseTopicPartitionName`` cannot read (an ext4
    ``lost+found``, a partition's copy under another name)."""
    for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
        if entry.is_dir() and entry.name != REMOTE_INDEX_CACHE_DIR and not _kafka_reads_dir_name(entry.name):
            yield Problem(
                entry.path,
                None,
                "not named TOPIC-PARTITION (nor TOPIC-PARTITION.ID-delete, -future or -stray): the "
                "broker refuses to load the log directory while it holds it; move it out",
            )


def _kafka_reads_dir_name(name: str) -> bool:
    """Whether Kafka's ``UnifiedLog.parseTopicPartitionName`` reads a directory's name."""
    if name.endswith(_MARKED_DIR_SUFFIXES):
        if _MARKED_DIR.fullmatch(name) is None:
            return False
        name = name[: name.rindex(".")]
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or _JAVA_INT.fullmatch(number) is None:
        return False
    return -(2**31) <= int(number) <= 2**31 - 1


def verify_file(path: Path, *, deep: bool = True) -> list[Problem]:
    """Verify one file: a ``.log`` (its batches and its indexes), an index or a producer snapshot."""
    if path.suffix not in FILE_KINDS:
        raise CorruptDataError(f"verify takes a directory or a {', '.join(FILE_KINDS)} file, not {path.name}")
    base = parse_base_offset(path)
    if path.suffix == ".log":
        return list(verify_segment(Segment(path.parent, base), deep=deep, active=False))
    return list(verify_index_file(path, base))


def verify_index_file(path: Path, base_offset: int) -> Iterator[Problem]:
    """Read an index or snapshot file as ``rlm log dump`` does, and check it on its own."""
    try:
        if path.suffix == ".index":
            OffsetIndex.load(path, base_offset).sanity_check(path)
        elif path.suffix == ".timeindex":
            TimeIndex.load(path, base_offset).sanity_check(path)
        elif path.suffix == ".txnindex":
            TransactionIndex.load(path, base_offset).sanity_check(path)
        else:
            read_snapshot(path)
    except CorruptDataError as exc:
        yield Problem(str(path), exc.position, exc.reason)


def verify_partition(partition: PartitionDir, *, deep: bool = True) -> list[Problem]:
    """Verify every segment of a partition, the order of offsets across segments and its producer
    snapshots; index files without their ``.log`` are skipped with a warning."""
    problems: list[Problem] = []
    segments = partition.segments()
    tracker = first_tracker(segments)
    for i, segment in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        found = list(
            verify_segment(
                segment, deep=deep, active=following is None, tracker=tracker, next_base_offset=following
            )
        )
        problems.extend(found)
        if following is not None:
            damaged = any(p.path == str(segment.log_path) for p in found)
            tracker = next_tracker(tracker, segments[i + 1], damaged=damaged)
    for offset in snapshot_offsets(partition.path):
        problems.extend(verify_index_file(partition.path / segment_file_name(offset, ".snapshot"), offset))
    bases = {s.base_offset for s in segments}
    for suffix in (".index", ".timeindex", ".txnindex"):
        for offset in offset_file_offsets(partition.path, suffix):
            if offset not in bases:
                warn_stray(partition.path / segment_file_name(offset, suffix), "no .log of that offset")
    return problems


def next_tracker(
    tracker: TransactionTracker | None, segment: Segment, *, damaged: bool
) -> TransactionTracker | None:
    """The open transactions at the start of ``segment``, given ``tracker`` as the scan of the
    segment before it left it.

    After a damaged ``.log`` (the scan stopped at its corrupt batch) or an unknown state (None),
    they are read from ``segment``'s producer snapshot; without one they are unknown (None), and
    its transaction index can be neither checked nor rebuilt.
    """
    if not damaged and tracker is not None:
        return tracker
    return initial_tracker(segment) if segment.path(".snapshot").exists() else None


def verify_segment(
    segment: Segment,
    *,
    deep: bool = True,
    active: bool = False,
    tracker: TransactionTracker | None = None,
    next_base_offset: int | None = None,
) -> Iterator[Problem]:
    """Yield the problems of one segment: batches first (:mod:`rlm.log.validate`), then its indexes."""
    checker = BatchChecker(
        str(segment.log_path), segment.base_offset, deep=deep, next_base_offset=next_base_offset
    )
    scan = _Scan([], [])
    running = -1
    with segment.open() as source:
        for header, _, problems in checker.batches_of(source):
            yield from problems
            if problems and scan.corrupt_at is None:
                scan.corrupt_at = header.position
            if scan.corrupt_at is None:
                running = max(running, header.max_timestamp)
                scan.headers.append(header)
                scan.running_max.append(running)
    if checker.framing_error:
        yield checker.problems[-1]
        return
    yield from checker.finish(segment.size(), active=active)
    yield from _verify_offset_index(segment, scan)
    yield from _verify_time_index(segment, scan, active)
    yield from _verify_txn_index(segment, tracker, scan)


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
    entries = [e for e in index.entries() if scan.corrupt_at is None or e.position < scan.corrupt_at]
    # Each entry's batch: the last one starting at or before its position (it must start there).
    found = [bisect_right(positions, entry.position) - 1 for entry in entries]
    segment_end = scan.headers[-1].last_offset if scan.headers else segment.base_offset - 1
    with segment.open() as source:
        for i, entry in enumerate(entries):
            batch = scan.headers[found[i]] if found[i] >= 0 else None
            end = segment_end
            if (
                i + 1 < len(entries)
                and found[i + 1] > 0
                and positions[found[i + 1]] == entries[i + 1].position
            ):
                # The append the entry was written for ends before the next entry's batch.
                end = scan.headers[found[i + 1] - 1].last_offset
            problem = index_entry_problem(
                entry, batch, source, base_offset=segment.base_offset, end_offset=end
            )
            if problem is not None:
                yield Problem(str(path), None, f"entry {i} ({entry.offset}, {entry.position}) {problem}")


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
        if at >= len(scan.headers) and scan.corrupt_at is not None:
            break  # an entry of the batches from the corrupt one on
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
    if not active and segment_max >= 0 and scan.corrupt_at is None:
        last = index.last_entry if len(index) else None
        if last is None or last.timestamp != segment_max:
            yield Problem(
                str(path),
                None,
                f"last entry should hold the segment's max timestamp {segment_max} (found {last})",
            )


def _verify_txn_index(segment: Segment, tracker: TransactionTracker | None, scan: _Scan) -> Iterator[Problem]:
    """Check the transaction index against the aborted transactions the log implies; first, the
    transaction markers the batch checks pass but Kafka's recovery cannot read (it truncates the
    segment there, as the rebuild stops there)."""
    index_problem: Problem | None = None
    if segment.txn_index_path.exists():
        try:
            index = segment.transaction_index()
            index.sanity_check()
        except CorruptDataError as exc:
            index_problem = Problem(str(segment.txn_index_path), exc.position, exc.reason)
    # Without the transactions open at the segment's start (None) the markers are read all the same.
    rebuilt = rebuild_segment_indexes(segment, tracker=TransactionTracker() if tracker is None else tracker)
    if rebuilt.error is not None and scan.corrupt_at is None:
        error = rebuilt.error
        yield Problem(error.path or str(segment.log_path), error.position, error.reason)
    if index_problem is not None:
        yield index_problem
        return
    if tracker is None:
        return  # aborted transactions can only be checked with the partition's earlier segments
    found = list(segment.transaction_index().entries()) if segment.txn_index_path.exists() else []
    if rebuilt.error is not None:
        # The rebuild stopped at the corrupt batch: only the transactions ended before it count.
        found = [entry for entry in found if entry.last_offset < rebuilt.next_offset]
    expected = list(rebuilt.txn_index.entries())
    if found != expected and rebuilt.without_emptied_aborts(found) != expected:
        yield Problem(
            str(segment.txn_index_path),
            None,
            f"transaction index has {len(found)} entries, the log implies {len(expected)} "
            f"aborted transactions",
        )
