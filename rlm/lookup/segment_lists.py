"""A partition's finished remote segments in memory, searched by timestamp without a query.

Every remote lookup starts with "the first finished segment, in offset order, whose max timestamp
is ≥ T and whose end offset is ≥ the first offset wanted"
(:meth:`~rlm.metastore.protocol.MetadataStore.first_segment_for_timestamp`), once per segment it
moves on to. Asking the metadata store costs a query each time (a fraction of a millisecond on
SQLite, a round trip on PostgreSQL), more than the rest of a warm lookup together. So the lookup
service reads the partition's ``COPY_SEGMENT_FINISHED`` segments once (:meth:`SegmentLists.get`)
and answers from them in O(log n) (:meth:`SegmentList.first_for_timestamp`), with the store's
exact semantics, overlapping segments included.

Lifetime: a partition's list is read at the first remote search that needs it (partitions that
only see local lookups never read it) and kept while the store's record of the partition, as the
lookup service's remote-tier summary last read it, is unchanged: its highest copied offset, remote
log start offset, remote size, topic id and lineage (the *version*; a topic created again under
the name, or copies replaced from some offset on and tiered again, to the same offsets and size,
is another). Finished segments with offsets not copied before only appear with a higher highest
copied offset, so a list of the same version lacks at most copies again of offsets a listed
segment holds; retention's deletions advance the log start offset or shrink the size. Either
way the next search reads the list again. What a list of the version at hand may still name, a
segment deleted since the summary was read, is the lookup service's to handle (see
:mod:`rlm.lookup.service`). ``drop`` forgets a list at once.

Bounds: a partition with more than ``max_segments`` finished segments (default
:data:`DEFAULT_MAX_SEGMENTS`) is not kept; its searches ask the store. Whether it is still over
the bound is checked again only after its remote log start offset moved (retention, the only thing
that removes finished segments, advances it first) or after ``drop``, so a large partition is not
listed for nothing at every change. The lists of all partitions together hold at most
``max_total_segments`` segments (default :data:`DEFAULT_MAX_TOTAL_SEGMENTS`, under 2 KiB each):
past it the least recently searched partitions' lists are dropped. Reading a list of 1,000
segments takes about 30 ms on SQLite, what some 50 to 150 searches of the store take.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Hashable, Iterable, Sequence

from rlm.metastore.model import RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore

DEFAULT_MAX_SEGMENTS = 1000
"""Finished segments per partition above which the lookup service asks the store instead."""
DEFAULT_MAX_TOTAL_SEGMENTS = 20_000
"""Segments held in the lists of all partitions together."""


class _MaxTree:
    """Maxima of a sequence of ints: the first position at or after a given one whose value
    reaches a threshold, in O(log n). Prefix maxima answer at once when the first such position
    overall is at or after the given one (always when searching from the start); else a complete
    binary tree of maxima is climbed from the given position."""

    __slots__ = ("_count", "_leaves", "_prefix", "_tree")

    def __init__(self, values: Sequence[int]) -> None:
        self._prefix = list(itertools.accumulate(values, max))
        leaves = 1
        while leaves < len(values):
            leaves *= 2
        floor = min(values, default=0)
        tree = [floor] * (2 * leaves)
        tree[leaves : leaves + len(values)] = values
        for node in range(leaves - 1, 0, -1):
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
        self._leaves = leaves
        self._count = len(values)
        self._tree = tree

    def first_at_least(self, start: int, threshold: int) -> int | None:
        """The first position ≥ ``start`` whose value is ≥ ``threshold``; None when there is none."""
        start = max(start, 0)
        first = bisect.bisect_left(self._prefix, threshold)
        if first >= start:
            return first if first < self._count else None
        if start >= self._count:
            return None
        tree, leaves = self._tree, self._leaves
        node = leaves + start
        # Up: the node, else the nearest subtree wholly to its right, until one reaches the threshold.
        while tree[node] < threshold:
            while node & 1:  # a right child: its parent's right end is already behind
                node >>= 1
                if node == 0:
                    return None
            node += 1
        # Down: the leftmost leaf that reaches it.
        while node < leaves:
            node = 2 * node if tree[2 * node] >= threshold else 2 * node + 1
        position = node - leaves
        return position if position < self._count else None  # the padding, past the last value


class SegmentList:
    """Finished segments of one partition in offset order (start offset, then segment id, as the
    store lists them), searchable by timestamp. Immutable."""

    __slots__ = ("_ends", "_max_timestamps", "_segments", "_starts")

    def __init__(self, segments: Iterable[RemoteSegment]) -> None:
        """Take the segments in the store's offset order.

        Raises:
            ValueError: The segments are not in offset order.
        """
        self._segments = tuple(segments)
        self._starts = [s.start_offset for s in self._segments]
        if any(a > b for a, b in zip(self._starts, self._starts[1:], strict=False)):
            raise ValueError("segments must be in offset order")
        self._ends = _MaxTree([s.end_offset for s in self._segments])
        self._max_timestamps = _MaxTree([s.max_timestamp_ms for s in self._segments])

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> tuple[RemoteSegment, ...]:
        return self._segments

    def first_for_timestamp(self, timestamp_ms: int, *, from_offset: int = 0) -> RemoteSegment | None:
        """The first segment, in offset order, with ``max_timestamp_ms >= timestamp_ms`` and
        ``end_offset >= from_offset``; None when there is none. The answer of
        :meth:`~rlm.metastore.protocol.MetadataStore.first_segment_for_timestamp` over the same
        segments.

        O(log n), plus O(log n) for each segment that starts before ``from_offset``, reaches it,
        and is too old (overlapping copies; usually none).
        """
        low = max(from_offset, 0)
        # Segments starting before `low` come first in offset order; those reaching it qualify
        # when recent enough.
        before = bisect.bisect_left(self._starts, low)
        cursor = 0
        while cursor < before:
            found = self._ends.first_at_least(cursor, low)
            if found is None or found >= before:
                break
            if self._segments[found].max_timestamp_ms >= timestamp_ms:
                return self._segments[found]
            cursor = found + 1
        # Every other segment starts at or after `low`, so it ends there or later.
        found = self._max_timestamps.first_at_least(before, timestamp_ms)
        return None if found is None else self._segments[found]

    def last_holding(self, offset: int, *, starting_after: int) -> RemoteSegment | None:
        """The last segment, in offset order, that holds ``offset`` and starts after
        ``starting_after``; None when there is none. The answer of
        :meth:`~rlm.metastore.protocol.MetadataStore.segment_for_offset` over those segments
        (:func:`rlm.lookup.answer_end.answer_end` asks which copy follows one inside it).

        O(log n), plus one step for each segment starting in that range that ends below
        ``offset`` (overlapping copies; usually none).
        """
        first = bisect.bisect_right(self._starts, starting_after)
        for i in range(bisect.bisect_right(self._starts, offset) - 1, first - 1, -1):
            if self._segments[i].end_offset >= offset:
                return self._segments[i]
        return None


class _Listed:
    """What is known of one partition: its list (None when over the bound), the version and the
    remote log start offset it was read at, and when a search last used it."""

    __slots__ = ("log_start_offset", "segments", "used", "version")

    def __init__(
        self, segments: SegmentList | None, version: Hashable, log_start_offset: int, used: int
    ) -> None:
        self.segments = segments
        self.version = version
        self.log_start_offset = log_start_offset
        self.used = used

    @property
    def size(self) -> int:
        return 0 if self.segments is None else len(self.segments)


class SegmentLists:
    """The in-memory segment lists of the partitions, read from the metadata store on demand.

    Thread-safe: one read of the store at a time per partition; the others wait for its list.
    """

    def __init__(
        self,
        store: MetadataStore,
        *,
        max_segments: int = DEFAULT_MAX_SEGMENTS,
        max_total_segments: int = DEFAULT_MAX_TOTAL_SEGMENTS,
    ) -> None:
        """Args:
        store: Where the segments are listed.
        max_segments: Partitions with more finished segments are not kept (0: none is).
        max_total_segments: Bound on the segments of all lists together.

        Raises:
            ValueError: A bound is negative, or ``max_segments`` is above ``max_total_segments``.
        """
        if not 0 <= max_segments <= max_total_segments:
            raise ValueError(
                f"need 0 <= max_segments <= max_total_segments, got {max_segments}, {max_total_segments}"
            )
        self.store = store
        self.max_segments = max_segments
        self.max_total_segments = max_total_segments
        self._listed: dict[TopicPartition, _Listed] = {}
        self._total = 0
        self._reading: dict[TopicPartition, threading.Lock] = {}
        self._ticks = itertools.count()
        self._lock = threading.Lock()

    @property
    def total_segments(self) -> int:
        """Segments held in the lists now."""
        with self._lock:
            return self._total

    def get(self, tp: TopicPartition, version: Hashable, log_start_offset: int) -> SegmentList | None:
        """The finished segments of ``tp``, read from the store unless the list at hand was read
        at ``version`` (module docstring); None when the partition has more than
        ``max_segments`` of them (then ask the store). ``log_start_offset`` is the remote log
        start offset of that version.

        Raises:
            Any error of :meth:`MetadataStore.list_segments`.
        """
        found = self._usable(tp, version, log_start_offset)
        if found is not None:
            return found.segments
        with self._lock:
            reading = self._reading.setdefault(tp, threading.Lock())
        with reading:
            found = self._usable(tp, version, log_start_offset)
            if found is not None:
                return found.segments
            listed = self._read(tp, version, log_start_offset)
            self._keep(tp, listed)
            return listed.segments

    def _usable(self, tp: TopicPartition, version: Hashable, log_start_offset: int) -> _Listed | None:
        listed = self._listed.get(tp)  # one read of a dict: atomic, no lock needed
        if listed is None:
            return None
        if listed.segments is None:  # over the bound until something was deleted
            usable = listed.log_start_offset == log_start_offset
        else:
            usable = listed.version == version
        if not usable:
            return None
        listed.used = next(self._ticks)
        return listed

    def _read(self, tp: TopicPartition, version: Hashable, log_start_offset: int) -> _Listed:
        used = next(self._ticks)
        if self.max_segments == 0:
            return _Listed(None, version, log_start_offset, used)
        listing = self.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED])
        segments = list(itertools.islice(listing, self.max_segments + 1))
        if len(segments) > self.max_segments:
            return _Listed(None, version, log_start_offset, used)
        return _Listed(SegmentList(segments), version, log_start_offset, used)

    def _keep(self, tp: TopicPartition, listed: _Listed) -> None:
        with self._lock:
            previous = self._listed.pop(tp, None)
            if previous is not None:
                self._total -= previous.size
            while self._listed and self._total + listed.size > self.max_total_segments:
                oldest = min(self._listed, key=lambda other: self._listed[other].used)
                self._total -= self._listed.pop(oldest).size
            self._listed[tp] = listed
            self._total += listed.size

    def drop(self, tp: TopicPartition | None = None) -> None:
        """Forget the list of ``tp`` (of every partition when None): the next search reads it again."""
        with self._lock:
            if tp is None:
                self._listed.clear()
                self._total = 0
            else:
                dropped = self._listed.pop(tp, None)
                if dropped is not None:
                    self._total -= dropped.size
