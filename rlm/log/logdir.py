"""Kafka log directories: partition directories, their segments, and the broker's checkpoints.

A log directory (one entry of ``log.dirs``) holds ``<topic>-<partition>/`` directories and the
checkpoint files ``replication-offset-checkpoint`` (high watermarks),
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``. Directories being
deleted, moved or left stray (``-delete``, ``-future``, ``-stray``) are not partitions of this
broker and are skipped, and so is the KRaft cluster metadata log (``__cluster_metadata-0``), which
is not a topic (:mod:`rlm.log.cluster_metadata` reads it). Everything here only reads.
"""

from __future__ import annotations

import bisect
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rlm.errors import NotFoundError
from rlm.log.checkpoints import (
    EpochEntry,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from rlm.log.model import CLUSTER_METADATA_TOPIC, INT32_MAX, TimestampAndOffset, TopicPartition
from rlm.log.segment import (
    DEFAULT_MAX_INDEX_SIZE,
    STAMP_CHECK_INTERVAL_S,
    Segment,
    SegmentListing,
    segment_listing,
)
from rlm.log.statcache import StatCache
from rlm.log.watch import DirectoryWatcher

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
_NOT_PARTITIONS = ("-delete", "-future", "-stray")
#: Times a listing is read again when a cleaned segment it found being swapped in is swapped in.
_SWAP_LISTINGS = 3


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``orders-0`` → ``("orders", 0)``; None for anything that is not a live partition directory.

    The name splits at its last ``-`` because topic names may themselves contain ``-``.
    """
    if name.endswith(_NOT_PARTITIONS):
        return None
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not (number.isascii() and number.isdigit()) or int(number) > INT32_MAX:
        return None
    return TopicPartition(topic, int(number))


def _what_it_holds(path: Path) -> str:
    """What a directory that is not a partition's holds, for the message that says so."""
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        return f"expected TOPIC-PARTITION: {exc.strerror or exc}"
    partitions = [name for name in names if parse_partition_dir_name(name) and (path / name).is_dir()]
    if partitions:
        return f"it holds the partition directories {_some(partitions)}: name one of them"
    return (
        f"expected TOPIC-PARTITION; it holds {_some(names)}"
        if names
        else "expected TOPIC-PARTITION; it is empty"
    )


def _some(names: list[str], shown: int = 4) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


class PartitionDir:
    """One partition's directory: its segments in offset order, the active one last."""

    def __init__(
        self,
        path: str | Path,
        log_dir: LogDir | None = None,
        *,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    ) -> None:
        self.path = Path(path)
        tp = parse_partition_dir_name(self.path.name)
        if tp is None:
            raise NotFoundError(f"{self.path} is not a partition directory ({_what_it_holds(self.path)})")
        self.tp = tp
        self.log_dir = log_dir if log_dir is not None else LogDir(self.path.parent)
        self.max_index_size = max_index_size
        self._segments: dict[int, Segment] = {}
        self._listing: StatCache[SegmentListing] = StatCache(listings=True, watcher=self.log_dir.watcher)
        self._listed: tuple[SegmentListing, list[Segment]] | None = None
        self._summary: _SegmentSummary | None = None

    def __repr__(self) -> str:
        return f"PartitionDir({str(self.path)!r})"

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def partition(self) -> int:
        return self.tp.partition

    def segments(self) -> list[Segment]:
        """All segments in ascending base offset; Segment objects (and their indexes) are reused.
        A cleaned segment the log cleaner is swapping in is listed in place of the segments it
        replaces (:class:`~rlm.log.segment.SegmentListing`)."""
        for attempt in range(1, _SWAP_LISTINGS + 1):
            listing = self._listing.get(self.path, segment_listing)
            listed = self._listed
            if listed is not None and listed[0] is listing:
                return list(listed[1])  # the listing did not change: the same objects
            try:
                return self._publish(listing)
            except FileNotFoundError:  # the swap completed since: read the directory again
                if attempt == _SWAP_LISTINGS:
                    raise
                self.forget_listing()
        raise AssertionError("unreachable")

    def _publish(self, listing: SegmentListing) -> list[Segment]:
        known = self._segments
        clock = self.log_dir.clock
        current = {
            b: known.get(b) or Segment(self.path, b, max_index_size=self.max_index_size, clock=clock)
            for b in listing.bases
        }
        segments = [current[b] for b in listing.bases]
        if listing.swaps:
            segments = self._with_swaps(segments, listing.swaps)
        # A segment kept from the last listing may have been rewritten under the same base
        # offset (its .log another file: the log cleaner swapped a cleaned segment in, its batches
        # at other positions; a topic deleted and made again), or have rolled (its indexes, if
        # loaded while it was active, lack the last entries the broker added at the roll, and a
        # search that skips it on its largest timestamp must not trust them). Neither may use the
        # old indexes for the rest of a stamp check interval: dealt with before the new listing
        # is published, so that no read nor segment summary of it uses them.
        before = self._listed
        if before is not None:
            was_active = before[1][-1] if before[1] else None
            for segment in segments:
                base = segment.base_offset
                if known.get(base) is not segment:
                    continue
                if before[0].inodes.get(base) != listing.inodes.get(base):
                    segment.invalidate()
                elif segment is was_active and segment is not segments[-1]:
                    segment.recheck()
        self._segments = current
        self._listed = (listing, segments)
        return list(segments)

    def _with_swaps(self, segments: list[Segment], swaps: list[int]) -> list[Segment]:
        """``segments`` with the cleaned segments at ``swaps`` in place of the old segments whose
        offsets they hold (the first old one is gone already; the cleaner renames the others
        next).

        Raises:
            FileNotFoundError: a cleaned segment's ``.swap`` files are gone (the swap completed).
        """
        clock = self.log_dir.clock
        for base in swaps:
            swap = Segment(self.path, base, max_index_size=self.max_index_size, clock=clock, swap=True)
            last = swap.last_offset()
            end = base if last is None else last
            kept = [s for s in segments if not base <= s.base_offset <= end]
            segments = sorted([*kept, swap], key=lambda s: s.base_offset)
        return segments

    def forget_listing(self) -> None:
        """Read the directory again at the next :meth:`segments`: a reader found a listed segment
        gone (the broker deleted it) sooner than the watcher or ``stat`` tells."""
        self._listing.forget(self.path)

    def pinned(self) -> PartitionDir:
        """This directory as one reader sees it: its segments listed, and the broker's checkpoints
        read, once, however often they are asked for. The segments (and their loaded indexes) are
        this directory's own."""
        return _PinnedPartitionDir(self)

    def active_segment(self) -> Segment | None:
        """The last segment, the one the broker appends to."""
        segments = self.segments()
        return segments[-1] if segments else None

    def rolled_segments(self) -> list[Segment]:
        """Every segment but the active one."""
        return self.segments()[:-1]

    def topic_id(self) -> str | None:
        """Topic id from ``partition.metadata``, or None when the file does not exist (read again
        only when the file changed: remote lookups ask for it on every search)."""
        return self.log_dir.partition_metadata.get(self._metadata_path, read_partition_metadata)

    @functools.cached_property
    def _metadata_path(self) -> Path:
        return self.path / PARTITION_METADATA

    def leader_epochs(self) -> list[EpochEntry]:
        """``leader-epoch-checkpoint`` entries (empty when the file does not exist)."""
        return read_leader_epoch_checkpoint(self.path / LEADER_EPOCH_CHECKPOINT)

    def checkpointed_log_start_offset(self) -> int | None:
        """The log start offset the broker checkpointed (after retention or DeleteRecords), or None.

        Unlike :meth:`log_start_offset` this never falls back to the first local segment, whose
        base offset is only the *local* log start once segments are tiered.
        """
        return self.log_dir.log_start_offsets().get(self.tp)

    def log_start_offset(self) -> int:
        """From ``log-start-offset-checkpoint``, else the first segment's base offset (else 0)."""
        checkpointed = self.log_dir.log_start_offsets().get(self.tp)
        segments = self.segments()
        first = segments[0].base_offset if segments else 0
        return max(checkpointed, first) if checkpointed is not None else first

    def high_watermark(self) -> int | None:
        """From ``replication-offset-checkpoint``; None when the partition is not in it."""
        return self.log_dir.high_watermarks().get(self.tp)

    def recovery_point(self) -> int:
        """From ``recovery-point-offset-checkpoint``; 0 when the partition is not in it."""
        return self.log_dir.recovery_points().get(self.tp, 0)

    def log_end_offset(self) -> int:
        """Offset after the last whole batch of the active segment (its base offset if empty)."""
        active = self.active_segment()
        if active is None:
            return 0
        last = active.last_offset()
        return last + 1 if last is not None else active.base_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """Smallest offset ≥ ``starting_offset`` (default: the log start offset) with timestamp ≥ T.

        Segments are taken in offset order, skipping those whose largest timestamp is below T
        (Kafka's ``largestTimestamp``), and, unlike Kafka, the search goes on to the next segment
        when the chosen one has no record at or after ``starting_offset``.
        """
        start = self.log_start_offset() if starting_offset is None else starting_offset
        segments = self.segments()
        for i in range(self._first_candidate(segments, timestamp, start), len(segments)):
            segment = segments[i]
            if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                continue  # wholly below the start offset
            # The active segment's time index lags the broker's appends: never skip it on it.
            if i + 1 < len(segments) and segment.largest_timestamp() < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    def _first_candidate(self, segments: list[Segment], timestamp: int, start: int) -> int:
        """Index of the first segment the search must look at: every segment before it ends below
        ``start`` or has a largest timestamp below ``timestamp``. O(log n) by bisection over base
        offsets and running maxima of the largest timestamps (rebuilt at most every
        ``STAMP_CHECK_INTERVAL_S``, as often as segments look for changed indexes)."""
        owner, key = self._summary_key()
        summary = owner._summary
        now = self.log_dir.clock()
        if summary is None or summary.key is not key or now - summary.built_at >= STAMP_CHECK_INTERVAL_S:
            running = -1
            maxima = []
            for segment in segments[:-1]:  # the active segment is never skipped
                running = max(running, segment.largest_timestamp())
                maxima.append(running)
            summary = _SegmentSummary(key, [s.base_offset for s in segments], maxima, now)
            if key is not None:
                owner._summary = summary
        by_offset = max(bisect.bisect_right(summary.bases, start) - 1, 0)
        return max(by_offset, bisect.bisect_left(summary.running_max, timestamp))

    def _summary_key(self) -> tuple[PartitionDir, object]:
        """Where the segment summary is kept, and the listing it belongs to."""
        listed = self._listed
        return self, listed[0] if listed is not None else None

    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """Kafka's MAX_TIMESTAMP (-3) over the local segments: the first record with the largest
        timestamp, or None when no record has a timestamp."""
        best: Segment | None = None
        best_ts = -1
        segments = self.segments()
        for i, segment in enumerate(segments):
            ts = segment.max_timestamp_and_offset(scan_tail=i + 1 == len(segments)).timestamp
            if ts > best_ts:
                best, best_ts = segment, ts
        if best is None:
            return None
        return best.find_offset_by_timestamp(best_ts)


class _PinnedPartitionDir(PartitionDir):
    """See :meth:`PartitionDir.pinned`."""

    def __init__(self, partition: PartitionDir) -> None:
        # Not PartitionDir.__init__: the long-lived directory already parsed and checked its path.
        self.path = partition.path
        self.tp = partition.tp
        self.log_dir = partition.log_dir
        self.max_index_size = partition.max_index_size
        self._pinned = partition.segments()
        self._owner = partition
        listed = partition._listed
        self._key = listed[0] if listed is not None else None
        self._checkpoints_read = False
        self._high_watermark: int | None = None
        self._log_start: int | None = None

    def segments(self) -> list[Segment]:
        return list(self._pinned)

    def pinned(self) -> PartitionDir:
        return self

    def topic_id(self) -> str | None:
        return self._owner.topic_id()  # read again when the file changes, as the owner's

    def _summary_key(self) -> tuple[PartitionDir, object]:
        return self._owner, self._key

    def _read_checkpoints(self) -> None:
        if not self._checkpoints_read:
            self._high_watermark = super().high_watermark()
            self._log_start = super().checkpointed_log_start_offset()
            self._checkpoints_read = True

    def high_watermark(self) -> int | None:
        self._read_checkpoints()
        return self._high_watermark

    def checkpointed_log_start_offset(self) -> int | None:
        self._read_checkpoints()
        return self._log_start


class _SegmentSummary(NamedTuple):
    key: object
    """The listing (``segment_listing`` result) it was built from."""
    bases: list[int]
    running_max: list[int]
    """For each rolled segment, the largest timestamp of it and every segment before it."""
    built_at: float


class LogDir:
    """A broker log directory (one entry of ``log.dirs``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        watcher: DirectoryWatcher | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.watcher = watcher
        """Tells when the directory's files changed (:mod:`rlm.log.watch`); None: ``stat`` does."""
        self.clock = clock
        """Monotonic seconds: how often segments look whether their index files changed
        (:data:`~rlm.log.segment.STAMP_CHECK_INTERVAL_S`)."""
        self._checkpoints: StatCache[dict[TopicPartition, int]] = StatCache(watcher=watcher)
        self.partition_metadata: StatCache[str | None] = StatCache(watcher=watcher)
        """The topic ids of the partitions' ``partition.metadata`` files, read once per change."""
        # Joined once: the lookups ask for the checkpoints on every call.
        self._high_watermarks_path = self.path / REPLICATION_OFFSET_CHECKPOINT
        self._recovery_points_path = self.path / RECOVERY_POINT_CHECKPOINT
        self._log_start_offsets_path = self.path / LOG_START_OFFSET_CHECKPOINT

    def __repr__(self) -> str:
        return f"LogDir({str(self.path)!r})"

    def partitions(self) -> list[PartitionDir]:
        """Partition directories, sorted by topic then partition."""
        if not self.path.is_dir():
            raise NotFoundError(f"log directory {self.path} does not exist")
        found = []
        for entry in os.scandir(self.path):
            if not entry.is_dir():
                continue
            tp = parse_partition_dir_name(entry.name)
            if tp is not None and tp.topic != CLUSTER_METADATA_TOPIC:
                found.append(PartitionDir(entry.path, self))
        return sorted(found, key=lambda p: p.tp)

    def partition_path(self, topic: str, partition: int) -> Path | None:
        """The directory of ``topic``-``partition`` here, or None: there is none, or it is the
        cluster metadata log's (not a topic's)."""
        if topic == CLUSTER_METADATA_TOPIC:
            return None
        path = self.path / f"{topic}-{partition}"
        return path if path.is_dir() else None

    def partition(self, topic: str, partition: int) -> PartitionDir:
        """The directory of ``topic``-``partition``; NotFoundError when there is none."""
        path = self.partition_path(topic, partition)
        if path is None:
            raise NotFoundError(f"partition {topic}-{partition} not found in {self.path}")
        return PartitionDir(path, self)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return self._checkpoints.get(self._high_watermarks_path, _checkpoint)

    def recovery_points(self) -> dict[TopicPartition, int]:
        return self._checkpoints.get(self._recovery_points_path, _checkpoint)

    def log_start_offsets(self) -> dict[TopicPartition, int]:
        return self._checkpoints.get(self._log_start_offsets_path, _checkpoint)


def _checkpoint(path: Path) -> dict[TopicPartition, int]:
    return {TopicPartition(t, p): o for (t, p), o in read_offset_checkpoint(path).items()}


def open_partition(path: str | Path) -> PartitionDir:
    """Open a partition directory given its path (its parent is taken as the log directory)."""
    path = Path(path)
    if not path.is_dir():
        raise NotFoundError(f"partition directory {path} does not exist")
    return PartitionDir(path)
