"""The remote index cache over a filesystem store: hits, bounds, restarts, corruption, single flight."""

from __future__ import annotations

import os
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter

from rlm.errors import ConfigError, NotFoundError, StorageUnavailableError
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.lookup.cache_entry import ENTRY_HEADER_BYTES, verify_entry
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import (
    IndexType,
    LeaderEpochEntry,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)
from rlm.metrics import Metrics
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.layout import IndexBlob, segment_keys

#: Longest a test waits for another thread before failing instead of hanging (never reached when
#: the code works; no assertion depends on it).
DEADLOCK_GUARD_S = 30
DATA = 1000
ENTRY = ENTRY_HEADER_BYTES + DATA
SNAPSHOT = IndexType.PRODUCER_SNAPSHOT
TS = 1_700_000_000_000


class CountingStorage(DelegatingStorage):
    """A RemoteStorage over a FilesystemStorage that records ranged reads and can hold them."""

    def __init__(self, inner: FilesystemStorage) -> None:
        super().__init__(inner)
        self.reads: list[tuple[str, int, int]] = []
        self.entered = threading.Event()
        """Set when a read starts."""
        self.gate: threading.Event | None = None
        """When set, reads wait for the event before going on."""
        self.barrier: threading.Barrier | None = None
        """When set, every read waits at the barrier (proves reads run at the same time)."""
        self.error: Exception | None = None
        """When set, reads raise it."""
        self._lock = threading.Lock()

    def read_range(self, key: str, start: int, length: int) -> bytes:
        with self._lock:
            self.reads.append((key, start, length))
        self.entered.set()
        if self.barrier is not None:
            self.barrier.wait(DEADLOCK_GUARD_S)
        if self.gate is not None and not self.gate.wait(DEADLOCK_GUARD_S):
            raise AssertionError("the test never opened the gate")
        if self.error is not None:
            raise self.error
        return self.inner.read_range(key, start, length)


class SignallingCounter(Counter):
    """A counter that releases a semaphore at every increment, so a test can wait for N of them."""

    def __init__(self, name: str, signal: threading.Semaphore) -> None:
        super().__init__(name, "test copy", registry=None)
        self._signal = signal

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        super().inc(amount, exemplar)
        self._signal.release()


@pytest.fixture
def remote(tmp_path: Path) -> CountingStorage:
    return CountingStorage(FilesystemStorage(tmp_path / "remote"))


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def open_cache(
    cache_dir: Path, remote: CountingStorage, metrics: Metrics
) -> Iterator[Callable[..., RemoteIndexCache]]:
    """Opens caches over ``cache_dir`` (``max_bytes`` etc. as keywords); closes them at the end."""
    opened: list[RemoteIndexCache] = []

    def make(**kwargs: Any) -> RemoteIndexCache:
        cache = RemoteIndexCache(cache_dir, remote, metrics, **kwargs)
        opened.append(cache)
        return cache

    yield make
    for cache in opened:
        cache.close()


def put_segment(
    storage: CountingStorage, files: dict[IndexType, bytes], start_offset: int = 0
) -> RemoteSegment:
    """Upload an index object holding ``files``; returns the segment that refers to it."""
    segment_id = uuid.uuid4()
    keys = segment_keys("t", None, 0, start_offset, segment_id)
    blob = IndexBlob.build(files)
    storage.inner.put_object(keys.indexes_key, blob.data)
    return RemoteSegment(
        segment_id=segment_id,
        topic_partition=TopicPartition("t", 0),
        topic_id=None,
        start_offset=start_offset,
        end_offset=start_offset + 999,
        max_timestamp_ms=TS,
        size_bytes=100_000,
        broker_id=1,
        event_time_ms=TS,
        leader_epochs=(LeaderEpochEntry(0, start_offset),),
        layout=blob.layout(keys),
        txn_index_empty=True,
        state=SegmentState.COPY_SEGMENT_FINISHED,
    )


def blob_segment(storage: CountingStorage, size: int = DATA, seed: int = 0) -> tuple[RemoteSegment, bytes]:
    """A segment whose producer snapshot is ``size`` random bytes (the cache does not parse it)."""
    data = random.Random(seed).randbytes(size)
    return put_segment(storage, {IndexType.OFFSET: b"\0" * 8, SNAPSHOT: data}), data


def indexed_segment(storage: CountingStorage, start_offset: int = 1000) -> tuple[RemoteSegment, bytes, bytes]:
    """A segment with a real offset index and time index; returns it and the two files."""
    offsets, times = OffsetIndex(start_offset), TimeIndex(start_offset)
    for i in range(1, 51):
        offsets.append(start_offset + 10 * i, 4096 * i)
        times.maybe_append(TS + 1000 * i, start_offset + 10 * i)
    offset_bytes, time_bytes = offsets.to_bytes(), times.to_bytes()
    files = {IndexType.OFFSET: offset_bytes, IndexType.TIMESTAMP: time_bytes}
    return put_segment(storage, files, start_offset), offset_bytes, time_bytes


def sample(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


def entry_files(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def entry_path(directory: Path, segment: RemoteSegment, kind: IndexType) -> Path:
    return directory / f"{segment.segment_id}.{kind.value}"


# -- hits and misses --------------------------------------------------------------------------


def test_a_miss_reads_the_range_once_and_a_hit_reads_nothing(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, metrics: Metrics
) -> None:
    cache = open_cache()
    segment, data = blob_segment(remote)
    cold, warm = FetchStats(), FetchStats()
    assert cache.get(segment, SNAPSHOT, cold) == data
    assert cache.get(segment, SNAPSHOT, warm) == data
    byte_range = segment.layout.index_range(SNAPSHOT)
    assert byte_range is not None
    assert remote.reads == [(segment.layout.index_key, byte_range.position, byte_range.size)]
    assert (cold.gets, cold.bytes, warm.gets, warm.bytes) == (1, DATA, 0, 0)
    assert (cache.entries, cache.size_bytes) == (1, ENTRY)
    assert sample(metrics, "rlm_index_cache_hits_total") == 1
    assert sample(metrics, "rlm_index_cache_misses_total") == 1
    assert sample(metrics, "rlm_index_cache_remote_gets_total") == 1
    assert sample(metrics, "rlm_index_cache_remote_bytes_total") == DATA
    assert sample(metrics, "rlm_index_cache_size_bytes") == ENTRY
    assert sample(metrics, "rlm_index_cache_entries") == 1


def test_absent_and_empty_index_files_need_no_read(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    cache = open_cache()
    segment = put_segment(remote, {IndexType.OFFSET: b"", IndexType.TIMESTAMP: b""})
    assert cache.get(segment, IndexType.TRANSACTION) is None
    assert cache.get(segment, IndexType.OFFSET) == b""
    assert len(cache.offset_index(segment)) == 0
    assert remote.reads == []
    assert cache.entries == 0


def test_a_missing_index_object_is_an_error_and_nothing_is_cached(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, cache_dir: Path
) -> None:
    cache = open_cache()
    segment, _ = blob_segment(remote)
    remote.inner.delete_objects([segment.layout.index_key])
    with pytest.raises(NotFoundError):
        cache.get(segment, SNAPSHOT)
    assert cache.entries == 0
    assert entry_files(cache_dir) == []


# -- bound and eviction -----------------------------------------------------------------------


def test_least_recently_used_entries_are_evicted_by_bytes(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, metrics: Metrics
) -> None:
    cache = open_cache(max_bytes=3 * ENTRY)
    (a, _), (b, _), (c, _), (d, _) = (blob_segment(remote, seed=i) for i in range(4))
    for segment in (a, b, c, a):  # a is used again: b is now the least recently used
        cache.get(segment, SNAPSHOT)
    cache.get(d, SNAPSHOT)
    assert (cache.entries, cache.size_bytes) == (3, 3 * ENTRY)
    assert sample(metrics, "rlm_index_cache_evictions_total") == 1
    reads = len(remote.reads)
    for segment in (a, c, d):
        cache.get(segment, SNAPSHOT)
    assert len(remote.reads) == reads
    cache.get(b, SNAPSHOT)
    assert len(remote.reads) == reads + 1


def test_an_entry_bigger_than_the_bound_is_returned_but_not_kept(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, cache_dir: Path
) -> None:
    cache = open_cache(max_bytes=ENTRY - 1)
    segment, data = blob_segment(remote)
    assert cache.get(segment, SNAPSHOT) == data
    assert cache.get(segment, SNAPSHOT) == data
    assert len(remote.reads) == 2
    assert (cache.entries, cache.size_bytes) == (0, 0)
    assert entry_files(cache_dir) == []


def test_resize_evicts_at_once(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, metrics: Metrics
) -> None:
    cache = open_cache(max_bytes=3 * ENTRY)
    segments = [blob_segment(remote, seed=i)[0] for i in range(3)]
    for segment in segments:
        cache.get(segment, SNAPSHOT)
    cache.resize(ENTRY)
    assert (cache.entries, cache.size_bytes, cache.max_bytes) == (1, ENTRY, ENTRY)
    assert sample(metrics, "rlm_index_cache_evictions_total") == 2
    cache.get(segments[-1], SNAPSHOT)
    assert len(remote.reads) == 3
    with pytest.raises(ValueError, match="negative"):
        cache.resize(-1)


def test_remove_forgets_every_index_of_a_segment(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, cache_dir: Path
) -> None:
    cache = open_cache()
    removed, _, _ = indexed_segment(remote)
    kept, _, _ = indexed_segment(remote)
    first = cache.offset_index(removed)
    cache.time_index(removed)
    cache.offset_index(kept)
    cache.remove(removed.segment_id)
    assert cache.entries == 1
    assert entry_files(cache_dir) == [f"{kept.segment_id}.offset"]
    assert cache.offset_index(removed) is not first
    cache.offset_index(kept)
    assert len(remote.reads) == 4


def test_a_segment_removed_during_its_load_is_not_kept(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, cache_dir: Path
) -> None:
    cache = open_cache()
    segment, data = blob_segment(remote)
    remote.gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(cache.get, segment, SNAPSHOT)
        assert remote.entered.wait(DEADLOCK_GUARD_S)
        cache.remove(segment.segment_id)
        remote.gate.set()
        assert loading.result(DEADLOCK_GUARD_S) == data
    assert cache.entries == 0
    assert entry_files(cache_dir) == []


# -- restarts and corruption ------------------------------------------------------------------


def test_a_new_cache_over_the_same_directory_serves_without_remote_reads(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    first = open_cache()
    stored = [blob_segment(remote, seed=i) for i in range(2)]
    for segment, _ in stored:
        first.get(segment, SNAPSHOT)
    first.close()
    remote.reads.clear()
    second = open_cache()
    assert (second.entries, second.size_bytes) == (2, 2 * ENTRY)
    for segment, data in stored:
        assert second.get(segment, SNAPSHOT) == data
    assert remote.reads == []


def test_a_restart_keeps_the_least_recently_used_order(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    first = open_cache()
    a, b, c = (blob_segment(remote, seed=i)[0] for i in range(3))
    for segment in (a, b, c, a):
        first.get(segment, SNAPSHOT)
    first.close()
    remote.reads.clear()
    second = open_cache(max_bytes=2 * ENTRY)  # startup evicts b, the least recently used
    assert second.entries == 2
    second.get(c, SNAPSHOT)
    second.get(a, SNAPSHOT)
    assert remote.reads == []
    second.get(b, SNAPSHOT)
    assert len(remote.reads) == 1


def _flip_data_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[ENTRY_HEADER_BYTES + 17] ^= 0x40
    path.write_bytes(bytes(raw))


def _flip_magic(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0x01
    path.write_bytes(bytes(raw))


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 10)


def _empty(path: Path) -> None:
    os.truncate(path, 0)


def _delete(path: Path) -> None:
    path.unlink()


DAMAGE = [_flip_data_byte, _flip_magic, _truncate, _empty, _delete]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_entry_is_refetched(
    damage: Callable[[Path], None],
    open_cache: Callable[..., RemoteIndexCache],
    remote: CountingStorage,
    metrics: Metrics,
    cache_dir: Path,
) -> None:
    cache = open_cache()
    segment, data = blob_segment(remote)
    cache.get(segment, SNAPSHOT)
    damage(entry_path(cache_dir, segment, SNAPSHOT))
    assert cache.get(segment, SNAPSHOT) == data
    assert len(remote.reads) == 2
    assert sample(metrics, "rlm_index_cache_corrupt_entries_total") == 1
    verify_entry(entry_path(cache_dir, segment, SNAPSHOT))
    assert cache.get(segment, SNAPSHOT) == data
    assert len(remote.reads) == 2
    assert (cache.entries, cache.size_bytes) == (1, ENTRY)


def test_startup_drops_damaged_entries_and_temporary_files(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, metrics: Metrics, cache_dir: Path
) -> None:
    first = open_cache()
    (damaged, data), (intact, _) = blob_segment(remote, seed=1), blob_segment(remote, seed=2)
    first.get(damaged, SNAPSHOT)
    first.get(intact, SNAPSHOT)
    first.close()
    _flip_data_byte(entry_path(cache_dir, damaged, SNAPSHOT))
    leftover = cache_dir / f"{intact.segment_id}.offset.0123abcd.tmp"
    leftover.write_bytes(b"half an entry")
    foreign = cache_dir / "notes.txt"
    foreign.write_bytes(b"not an entry")
    remote.reads.clear()
    second = open_cache()
    assert (second.entries, second.size_bytes) == (1, ENTRY)
    assert not leftover.exists()
    assert not entry_path(cache_dir, damaged, SNAPSHOT).exists()
    assert foreign.exists()
    assert sample(metrics, "rlm_index_cache_corrupt_entries_total") == 1
    assert second.get(damaged, SNAPSHOT) == data
    assert len(remote.reads) == 1


# -- single flight and concurrency ------------------------------------------------------------


def test_concurrent_gets_of_a_missing_key_share_one_remote_read(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, metrics: Metrics
) -> None:
    callers = 8
    missed = threading.Semaphore(0)
    metrics.index_cache_misses = SignallingCounter("rlm_index_cache_misses_total", missed)
    cache = open_cache()
    segment, data = blob_segment(remote)
    remote.gate = threading.Event()
    start = threading.Barrier(callers)

    def fetch() -> tuple[bytes | None, FetchStats]:
        stats = FetchStats()
        start.wait(DEADLOCK_GUARD_S)
        return cache.get(segment, SNAPSHOT, stats), stats

    with ThreadPoolExecutor(callers) as pool:
        futures = [pool.submit(fetch) for _ in range(callers)]
        # The read is held, so no caller can hit: each one either owns the load or waits for it.
        for _ in range(callers):
            assert missed.acquire(timeout=DEADLOCK_GUARD_S)
        remote.gate.set()
        results = [future.result(DEADLOCK_GUARD_S) for future in futures]
    assert len(remote.reads) == 1
    assert [got for got, _ in results] == [data] * callers
    assert sum(stats.gets for _, stats in results) == 1
    assert sum(stats.bytes for _, stats in results) == DATA
    assert cache.entries == 1


@pytest.mark.parametrize("same_segment", [False, True], ids=["two-segments", "two-kinds"])
def test_different_keys_load_in_parallel(
    same_segment: bool, open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    cache = open_cache()
    first, offset_bytes, time_bytes = indexed_segment(remote)
    second = first if same_segment else indexed_segment(remote)[0]
    second_kind = IndexType.TIMESTAMP if same_segment else IndexType.OFFSET
    remote.barrier = threading.Barrier(2)  # each read waits for the other to be in flight too
    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(cache.get, first, IndexType.OFFSET)
        two = pool.submit(cache.get, second, second_kind)
        assert one.result(DEADLOCK_GUARD_S) == offset_bytes
        assert two.result(DEADLOCK_GUARD_S) == (time_bytes if same_segment else offset_bytes)
    assert len(remote.reads) == 2
    assert cache.entries == 2


def test_a_failed_load_reaches_every_waiter_and_caches_nothing(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, metrics: Metrics, cache_dir: Path
) -> None:
    callers = 5
    missed = threading.Semaphore(0)
    metrics.index_cache_misses = SignallingCounter("rlm_index_cache_misses_total", missed)
    cache = open_cache()
    segment, data = blob_segment(remote)
    remote.gate = threading.Event()
    remote.error = StorageUnavailableError("store unreachable")
    with ThreadPoolExecutor(callers) as pool:
        futures = [pool.submit(cache.get, segment, SNAPSHOT) for _ in range(callers)]
        for _ in range(callers):
            assert missed.acquire(timeout=DEADLOCK_GUARD_S)
        remote.gate.set()
        errors = [future.exception(DEADLOCK_GUARD_S) for future in futures]
    assert all(isinstance(error, StorageUnavailableError) for error in errors)
    assert len(remote.reads) == 1
    assert (cache.entries, cache.size_bytes) == (0, 0)
    assert entry_files(cache_dir) == []
    assert sample(metrics, "rlm_index_cache_load_errors_total") == 1
    remote.gate, remote.error = None, None
    assert cache.get(segment, SNAPSHOT) == data
    assert len(remote.reads) == 2


# -- parsed indexes ---------------------------------------------------------------------------


def test_parsed_indexes_equal_rlm_log_parsing_and_are_memoized(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    cache = open_cache()
    segment, offset_bytes, time_bytes = indexed_segment(remote, start_offset=1000)
    expected_offsets = OffsetIndex.from_bytes(1000, offset_bytes)
    expected_times = TimeIndex.from_bytes(1000, time_bytes)
    offsets, times = cache.offset_index(segment), cache.time_index(segment)
    assert list(offsets.entries()) == list(expected_offsets.entries())
    assert list(times.entries()) == list(expected_times.entries())
    assert offsets.lookup(1255) == expected_offsets.lookup(1255) == (1250, 4096 * 25)
    assert times.lookup(TS + 7_500) == expected_times.lookup(TS + 7_500) == (TS + 7_000, 1070)
    assert cache.offset_index(segment) is offsets
    assert cache.time_index(segment) is times
    assert len(remote.reads) == 2


def test_the_parsed_memo_is_bounded(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    first, offset_bytes, _ = indexed_segment(remote)
    second, _, _ = indexed_segment(remote)
    cache = open_cache(parsed_max_bytes=len(offset_bytes))
    parsed = cache.offset_index(first)
    assert cache.offset_index(first) is parsed
    cache.offset_index(second)  # pushes the first out of the memo; its file stays on disk
    again = cache.offset_index(first)
    assert again is not parsed
    assert list(again.entries()) == list(parsed.entries())
    assert len(remote.reads) == 2


def test_an_index_the_segment_lacks_cannot_be_parsed(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    cache = open_cache()
    segment = put_segment(remote, {SNAPSHOT: b"x"})
    with pytest.raises(NotFoundError, match="no offset index"):
        cache.offset_index(segment)
    with pytest.raises(NotFoundError, match="no timestamp index"):
        cache.time_index(segment)
    assert remote.reads == []


# -- lifecycle --------------------------------------------------------------------------------


def test_close_is_idempotent_and_a_closed_cache_refuses_gets(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage
) -> None:
    cache = open_cache()
    segment, _ = blob_segment(remote)
    cache.close()
    cache.close()
    with pytest.raises(RuntimeError, match="closed"):
        cache.get(segment, SNAPSHOT)
    assert remote.reads == []


def test_one_directory_serves_one_cache_at_a_time(open_cache: Callable[..., RemoteIndexCache]) -> None:
    first = open_cache()
    with pytest.raises(ConfigError, match="in use"):
        open_cache()
    first.close()
    assert open_cache().entries == 0


def test_a_cache_opened_on_demand_takes_its_directory_at_the_first_read(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, cache_dir: Path
) -> None:
    lazy = open_cache(open_now=False)
    assert not cache_dir.exists()
    lazy.remove(uuid.uuid4())  # nothing to forget before it is opened
    other = open_cache()  # the directory is free: another process's cache takes it
    segment, data = blob_segment(remote)
    with pytest.raises(ConfigError, match="in use"):
        lazy.get(segment, SNAPSHOT)
    assert remote.reads == []
    other.close()
    assert lazy.get(segment, SNAPSHOT) == data
    with pytest.raises(ConfigError, match="in use"):
        open_cache()
    lazy.close()
    with pytest.raises(RuntimeError, match="closed"):
        lazy.get(segment, SNAPSHOT)


def test_a_private_cache_never_takes_the_shared_directory_and_removes_its_own(
    open_cache: Callable[..., RemoteIndexCache], remote: CountingStorage, cache_dir: Path
) -> None:
    private = open_cache(open_now=False, private=True)
    segment, data = blob_segment(remote)
    assert private.get(segment, SNAPSHOT) == data
    assert private.get(segment, SNAPSHOT) == data
    assert private.entries == 1 and len(remote.reads) == 1
    own = private.directory
    assert own != cache_dir and not cache_dir.exists()
    shared = open_cache()  # a server starting meanwhile takes the shared directory
    assert shared.directory == cache_dir
    private.close()
    assert not own.exists()
    assert shared.get(segment, SNAPSHOT) == data


def test_negative_bounds_are_refused(open_cache: Callable[..., RemoteIndexCache]) -> None:
    with pytest.raises(ValueError, match="negative"):
        open_cache(max_bytes=-1)
    with pytest.raises(ValueError, match="negative"):
        open_cache(parsed_max_bytes=-1)
