"""The remote index cache: index files of remote segments, kept on local disk.

Kafka's ``RemoteIndexCache``: an offset-for-timestamp lookup in a remote segment needs its time
and offset indexes, and fetching them for every lookup would cost two GETs each time. The cache
keeps each fetched index file on local disk, keyed by ``(segment id, index type)``; a segment's
indexes never change once copied, so an entry never goes stale, only away (evicted, or removed
when this process deletes the segment: retention, a topic's deletion, the copier's cleanup).

On disk, one file per entry, written under a temporary name and renamed into place, with its
length and CRC-32C in a header (:mod:`rlm.lookup.cache_entry`). Every read checks both, so a
damaged or truncated entry is never served: it is deleted and fetched again.

Recency survives restarts as the file's mtime: every hit sets it from a clock that never repeats
or goes back within a process, and startup rebuilds the LRU order by sorting on it. Startup also
deletes ``*.tmp`` leftovers and entries that fail their check, then evicts down to the bound.
A ``.lock`` file held with ``flock`` keeps a second cache (in this or another process) out of the
directory. A ``private`` cache (the one-shot commands': ``rlm lookup``, ``rlm copy``, ``rlm
retention``) never takes the shared directory, so an ``rlm serve`` starting or restarting beside
one is never refused: it keeps its entries in a temporary directory of its own, created at the
first read of a remote index and removed when it closes.

Concurrency: one lock guards the bookkeeping and the directory's names (renames, unlinks, mtimes);
data is read and written outside it. A miss registers a load for its key; a ``get`` of a key that
is being loaded waits for that load instead of issuing its own GET (single flight), and a failed
load hands its error to every waiter and leaves nothing behind. Loads of different keys run in
parallel. At most one of "an entry" and "a load in flight" exists per key, which is what lets a
reader that finds a damaged file drop it without racing a concurrent refetch.

Parsed indexes (:meth:`RemoteIndexCache.offset_index`, :meth:`RemoteIndexCache.time_index`) are
memoized in memory in an LRU bounded by ``parsed_max_bytes`` (a parsed index takes about as many
bytes as its file), so a hot segment is not parsed at every lookup. A memo hit reads no file and
counts as neither a hit nor a miss.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from types import TracebackType
from typing import TypeVar
from uuid import UUID

from rlm.errors import CorruptDataError, NotFoundError
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.lookup.cache_entry import (
    ENTRY_HEADER_BYTES,
    TMP_SUFFIX,
    EntryKey,
    entry_name,
    lock_directory,
    parse_entry_name,
    read_entry,
    unlink_quietly,
    verify_entry,
    write_temporary,
)
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import IndexType, RemoteSegment
from rlm.metrics import Metrics
from rlm.storage.protocol import RemoteStorage
from rlm.storage.range_source import read_index

_log = logging.getLogger(__name__)

#: ``remote.log.index.file.cache.total.size.bytes`` default.
DEFAULT_MAX_BYTES = 1 << 30
#: Default bound of the in-memory memo of parsed indexes.
DEFAULT_PARSED_MAX_BYTES = 64 << 20

_Index = TypeVar("_Index", OffsetIndex, TimeIndex)
_MemoKey = tuple[int, str]
"""A parsed index's key in the memo: the segment id as an int and the index type's value (hashed
without calling into Python, unlike :data:`EntryKey`)."""
_OFFSET = IndexType.OFFSET.value
_TIMESTAMP = IndexType.TIMESTAMP.value


class _Entry:
    """An entry on disk: its file's size. Compared by identity."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class _Load:
    """One remote load in flight; every ``get`` of its key waits for it."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._data = b""
        self._error: BaseException | None = None
        self.discard = False
        """Set when the segment was removed meanwhile: the result is returned, not kept."""

    def finish(self, data: bytes) -> None:
        self._data = data
        self._done.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def wait(self) -> bytes:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._data


class RemoteIndexCache:
    """Index files of remote segments on local disk, bounded in bytes, least recently used out.

    Bound by ``remote.log.index.file.cache.total.size.bytes``. Thread-safe. One cache per
    directory at a time.
    """

    def __init__(
        self,
        directory: Path,
        storage: RemoteStorage,
        metrics: Metrics,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        parsed_max_bytes: int = DEFAULT_PARSED_MAX_BYTES,
        open_now: bool = True,
        private: bool = False,
    ) -> None:
        """Open the cache in ``directory`` (created when missing) and load what it holds.

        Args:
            directory: Where the entries are kept; nothing else should write there. Not touched
                by a ``private`` cache.
            storage: Where index objects are fetched from on a miss (not owned: not closed here).
            metrics: Where hits, misses, evictions and remote reads are counted.
            max_bytes: Bound on the bytes of the entry files, headers included.
            parsed_max_bytes: Bound on the bytes of the parsed indexes kept in memory.
            open_now: Open the directory now; when False, at the first :meth:`get` (whose
                errors are then the ones below).
            private: Keep the entries in a new temporary directory instead of ``directory``,
                created when the cache opens and removed by :meth:`close`: for a one-shot
                command, which must never keep a server from taking the shared directory.

        Raises:
            ValueError: A bound is negative.
            ConfigError: Another cache uses ``directory`` (and not ``private``).
            OSError: ``directory`` cannot be created or read.
        """
        if max_bytes < 0 or parsed_max_bytes < 0:
            raise ValueError(f"cache bounds must not be negative: {max_bytes}, {parsed_max_bytes}")
        self._directory = Path(directory)
        self._storage = storage
        self._metrics = metrics
        self._max_bytes = max_bytes
        self._parsed_max_bytes = parsed_max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[EntryKey, _Entry] = OrderedDict()  # least recently used first
        self._total = 0
        self._loads: dict[EntryKey, _Load] = {}
        self._parsed: OrderedDict[_MemoKey, tuple[OffsetIndex | TimeIndex, int]] = OrderedDict()
        self._parsed_total = 0
        self._last_stamp_ns = 0
        self._closed = False
        self._lock_fd = -1
        self._opening = threading.Lock()
        self._private = private
        self._temporary: Path | None = None
        """The temporary directory of a private cache once opened, removed by close()."""
        if open_now:
            self._open()

    def _open(self) -> None:
        """Take the directory and load what it holds, once (before any entry is used)."""
        if self._lock_fd >= 0:
            return
        with self._opening:
            if self._lock_fd >= 0:
                return
            with self._lock:
                self._check_open()
            if self._private:
                self._temporary = self._directory = Path(tempfile.mkdtemp(prefix="rlm-index-cache-"))
                _log.info(
                    "remote indexes kept in a temporary directory, %s, removed at exit", self._directory
                )
            else:
                self._directory.mkdir(parents=True, exist_ok=True)
            fd = lock_directory(self._directory)
            try:
                self._recover()
            except BaseException:
                os.close(fd)
                raise
            with self._lock:
                self._lock_fd = fd

    def _recover(self) -> None:
        found: list[tuple[int, str, EntryKey, int]] = []
        with os.scandir(self._directory) as listing:
            for item in listing:
                if not item.is_file(follow_symlinks=False):
                    continue
                path = Path(item.path)
                if item.name.endswith(TMP_SUFFIX):
                    unlink_quietly(path)  # a write cut short; its rename never happened
                    continue
                key = parse_entry_name(item.name)
                if key is None:
                    continue
                try:
                    verify_entry(path)
                except (CorruptDataError, OSError) as exc:
                    _log.warning("dropping index cache entry: %s", exc)
                    self._metrics.index_cache_corrupt_entries.inc()
                    unlink_quietly(path)
                    continue
                stat = item.stat(follow_symlinks=False)
                found.append((stat.st_mtime_ns, item.name, key, stat.st_size))
        found.sort()
        with self._lock:
            for _, _, key, size in found:
                self._entries[key] = _Entry(size)
                self._total += size
            self._last_stamp_ns = found[-1][0] if found else 0
            self._evict()
            self._publish()

    # -- reading --------------------------------------------------------------------------

    def get(self, segment: RemoteSegment, kind: IndexType, stats: FetchStats | None = None) -> bytes | None:
        """The bytes of one index file of ``segment``: from disk, else with one ranged GET.

        Args:
            segment: The remote segment.
            kind: Which of its index files.
            stats: Counts the GET, when this call issues one.

        Returns:
            The file's bytes; ``None`` when the segment has no such file.

        Raises:
            NotFoundError: The segment's index object is missing from remote storage.
            CorruptIndexError: The index object is shorter than the segment's layout says.
            StorageError: The remote read failed (the same error reaches every waiting caller).
            RuntimeError: The cache is closed.
        """
        byte_range = segment.layout.index_range(kind)
        if byte_range is None:
            return None
        if byte_range.size == 0:
            return b""
        self._open()
        key = (segment.segment_id, kind)
        while True:
            found = self._find(key)
            if isinstance(found, _Entry):
                data = self._read(key, found, byte_range.size)
                if data is not None:
                    self._metrics.index_cache_hits.inc()
                    return data
                continue  # the entry was dropped: load it again
            load, owner = found
            return self._load(segment, kind, load, stats) if owner else load.wait()

    def _find(self, key: EntryKey) -> _Entry | tuple[_Load, bool]:
        """The entry of ``key`` (marked used), else the load to wait for and whether this caller owns it."""
        with self._lock:
            self._check_open()
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._touch(key)
                return entry
            self._metrics.index_cache_misses.inc()
            load = self._loads.get(key)
            if load is not None:
                return load, False
            load = self._loads[key] = _Load()
            return load, True

    def offset_index(self, segment: RemoteSegment, stats: FetchStats | None = None) -> OffsetIndex:
        """The parsed offset index of ``segment``; do not modify it (it is shared).

        Raises:
            NotFoundError: The segment has no offset index, or its index object is missing.
            Any error of :meth:`get`.
        """
        return self._parsed_index(segment, IndexType.OFFSET, _OFFSET, OffsetIndex, stats)

    def time_index(self, segment: RemoteSegment, stats: FetchStats | None = None) -> TimeIndex:
        """The parsed time index of ``segment``; do not modify it (it is shared).

        Raises:
            NotFoundError: The segment has no time index, or its index object is missing.
            Any error of :meth:`get`.
        """
        return self._parsed_index(segment, IndexType.TIMESTAMP, _TIMESTAMP, TimeIndex, stats)

    def _parsed_index(
        self,
        segment: RemoteSegment,
        kind: IndexType,
        kind_value: str,
        cls: type[_Index],
        stats: FetchStats | None,
    ) -> _Index:
        memo_key = (segment.segment_id.int, kind_value)
        with self._lock:
            memo = self._parsed.get(memo_key)
            if memo is not None:
                self._parsed.move_to_end(memo_key)
        if memo is not None and isinstance(memo[0], cls):
            return memo[0]
        data = self.get(segment, kind, stats)
        if data is None:
            raise NotFoundError(f"remote segment {segment.segment_id} has no {kind.value} index")
        index = cls.from_bytes(segment.start_offset, data, path=segment.layout.index_key)
        key = (segment.segment_id, kind)
        with self._lock:
            # Only what is cached on disk is memoized, so a segment removed meanwhile stays out.
            fits = len(data) <= self._parsed_max_bytes
            if fits and key in self._entries and memo_key not in self._parsed:
                self._parsed[memo_key] = (index, len(data))
                self._parsed_total += len(data)
                while self._parsed_total > self._parsed_max_bytes:
                    _, (_, size) = self._parsed.popitem(last=False)
                    self._parsed_total -= size
        return index

    def _read(self, key: EntryKey, entry: _Entry, expected: int) -> bytes | None:
        """The entry's data; ``None`` when it was damaged or gone (it is dropped then)."""
        path = self._path(key)
        try:
            data = read_entry(path)
            if len(data) == expected:
                return data
            problem: Exception = CorruptDataError(
                f"holds {len(data)} bytes, the segment's index has {expected}", path=str(path)
            )
        except (CorruptDataError, OSError) as exc:
            problem = exc
        with self._lock:
            if self._entries.get(key) is entry:  # else another reader dropped it already
                self._drop(key)
                self._publish()
                self._metrics.index_cache_corrupt_entries.inc()
                _log.warning("index cache entry unusable, fetching it again: %s", problem)
        return None

    def _load(self, segment: RemoteSegment, kind: IndexType, load: _Load, stats: FetchStats | None) -> bytes:
        key = (segment.segment_id, kind)
        try:
            data = read_index(self._storage, segment.layout, kind)
            if data is None:  # get() found the range in this very layout
                raise NotFoundError(f"remote segment {segment.segment_id} has no {kind.value} index")
        except BaseException as exc:
            with self._lock:
                del self._loads[key]
            self._metrics.index_cache_load_errors.inc()
            load.fail(exc)
            raise
        try:
            self._metrics.index_cache_remote_gets.inc()
            self._metrics.index_cache_remote_bytes.inc(len(data))
            if stats is not None:
                stats.add(len(data))
            self._store(key, load, data)
        finally:
            load.finish(data)
        return data

    def _store(self, key: EntryKey, load: _Load, data: bytes) -> None:
        """Write a loaded entry and index it; a disk problem costs only the caching."""
        size = ENTRY_HEADER_BYTES + len(data)
        tmp: Path | None = None
        if size <= self._max_bytes:  # an entry bigger than the whole cache is returned, not kept
            try:
                tmp = write_temporary(self._directory, key, data)
            except OSError as exc:
                _log.warning("cannot write index cache entry for %s: %s", entry_name(key), exc)
        with self._lock:
            del self._loads[key]
            if tmp is None:
                return
            if not (self._closed or load.discard) and size <= self._max_bytes:
                try:
                    os.replace(tmp, self._path(key))
                except OSError as exc:
                    _log.warning("cannot rename index cache entry %s: %s", tmp, exc)
                else:
                    self._entries[key] = _Entry(size)
                    self._total += size
                    self._touch(key)
                    self._evict()
                    self._publish()
                    return
            unlink_quietly(tmp)

    # -- bookkeeping (the lock is held) ---------------------------------------------------

    def _path(self, key: EntryKey) -> Path:
        return self._directory / entry_name(key)

    def _touch(self, key: EntryKey) -> None:
        """Record a use of ``key`` in its file's mtime, from a clock that never repeats."""
        stamp = max(time.time_ns(), self._last_stamp_ns + 1)
        self._last_stamp_ns = stamp
        with contextlib.suppress(OSError):  # a missing file is found, and dropped, on read
            os.utime(self._path(key), ns=(stamp, stamp))

    def _drop(self, key: EntryKey) -> None:
        entry = self._entries.pop(key)
        self._total -= entry.size
        unlink_quietly(self._path(key))

    def _evict(self) -> None:
        while self._total > self._max_bytes:
            self._drop(next(iter(self._entries)))
            self._metrics.index_cache_evictions.inc()

    def _publish(self) -> None:
        self._metrics.index_cache_size_bytes.set(self._total)
        self._metrics.index_cache_entries.set(len(self._entries))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the remote index cache is closed")

    # -- management -----------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def max_bytes(self) -> int:
        """The bound on the bytes of the entry files."""
        return self._max_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes of the entry files, headers included."""
        with self._lock:
            return self._total

    @property
    def entries(self) -> int:
        """Number of entries on disk."""
        with self._lock:
            return len(self._entries)

    def resize(self, max_bytes: int) -> None:
        """Change the bound (``remote.log.index.file.cache.total.size.bytes`` is dynamic); evicts at once.

        Raises:
            ValueError: ``max_bytes`` is negative.
        """
        if max_bytes < 0:
            raise ValueError(f"cache bound must not be negative: {max_bytes}")
        with self._lock:
            self._max_bytes = max_bytes
            self._evict()
            self._publish()

    def remove(self, segment_id: UUID) -> None:
        """Forget every index of a segment (it was deleted); a load in flight is not kept.

        A cache not opened yet does nothing: its files of the segment, if any, are evicted in
        time like any entry no longer asked for."""
        with self._lock:
            for kind in IndexType:
                key = (segment_id, kind)
                if key in self._entries:
                    self._drop(key)
                load = self._loads.get(key)
                if load is not None:
                    load.discard = True
                memo = self._parsed.pop((segment_id.int, kind.value), None)
                if memo is not None:
                    self._parsed_total -= memo[1]
            self._publish()

    def close(self) -> None:
        """Stop serving and release the directory; entries stay on disk for the next start (but in
        a temporary directory, which is removed). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._parsed.clear()
            self._parsed_total = 0
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1
            if self._temporary is not None:
                shutil.rmtree(self._temporary, ignore_errors=True)

    def __enter__(self) -> RemoteIndexCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
