"""StatCache: reuse while a file is unchanged. Judged by ``stat``: notice every change ``stat`` can
show at once, and bound how long a change within one mtime tick (a "racy" read) goes unseen.
Judged by a directory watcher: notice every change at once, with no ``stat`` at all."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.log.statcache import StatCache
from rlm.log.watch import DirectoryWatcher


class CountingLoad:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path: Path) -> str:
        self.calls += 1
        return path.read_text() if path.exists() else "<missing>"


def _age(path: Path, seconds: float) -> None:
    then = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(then, then))


def test_a_settled_file_is_read_once_while_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")
    _age(path, 10)
    cache: StatCache[str] = StatCache(watcher=None)
    load = CountingLoad()
    assert [cache.get(path, load) for _ in range(5)] == ["a"] * 5
    assert load.calls == 1


def test_a_file_renamed_into_place_is_seen_at_once_even_within_its_tick(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")
    cache: StatCache[str] = StatCache(watcher=None)
    load = CountingLoad()
    assert cache.get(path, load) == "a"
    stat = path.stat()
    replacement = tmp_path / "checkpoint.tmp"
    replacement.write_text("b")
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime
    os.replace(replacement, path)  # a new inode, as the broker's checkpoint writes make
    assert cache.get(path, load) == "b"


def test_an_in_place_change_within_the_tick_is_seen_after_the_racy_reuse(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")
    patient: StatCache[str] = StatCache(racy_reuse_s=3600, watcher=None)
    brief: StatCache[str] = StatCache(racy_reuse_s=0.01, watcher=None)
    load = CountingLoad()
    assert patient.get(path, load) == brief.get(path, load) == "a"
    stat = path.stat()
    path.write_text("b")  # same size, same inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime: stat cannot tell
    time.sleep(0.05)
    assert patient.get(path, load) == "a"  # a racy read is reused while its time lasts
    assert brief.get(path, load) == "b"  # and read again after it


def test_a_missing_file_is_loaded_every_time(tmp_path: Path) -> None:
    cache: StatCache[str] = StatCache(watcher=None)
    load = CountingLoad()
    path = tmp_path / "absent"
    assert cache.get(path, load) == "<missing>"
    assert cache.get(path, load) == "<missing>"
    assert load.calls == 2
    path.write_text("now")
    assert cache.get(path, load) == "now"


# -- judged by a directory watcher -----------------------------------------------------------


@pytest.fixture
def watcher() -> Iterator[DirectoryWatcher]:
    found = DirectoryWatcher()
    yield found
    found.close()


def test_watched_a_file_is_read_once_while_unchanged_even_within_its_tick(
    tmp_path: Path, watcher: DirectoryWatcher
) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")  # just written: stat would have to read it again and again
    cache: StatCache[str] = StatCache(watcher=watcher)
    load = CountingLoad()
    assert [cache.get(path, load) for _ in range(5)] == ["a"] * 5
    assert load.calls == 1


def test_watched_an_in_place_change_stat_cannot_see_is_seen_at_once(
    tmp_path: Path, watcher: DirectoryWatcher
) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")
    _age(path, 10)
    cache: StatCache[str] = StatCache(watcher=watcher)
    load = CountingLoad()
    assert cache.get(path, load) == "a"
    stat = path.stat()
    path.write_text("b")  # same size, same inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    assert cache.get(path, load) == "b"
    assert cache.get(path, load) == "b"
    assert load.calls == 2


def test_watched_a_file_renamed_into_place_and_a_missing_one_created(
    tmp_path: Path, watcher: DirectoryWatcher
) -> None:
    cache: StatCache[str] = StatCache(watcher=watcher)
    load = CountingLoad()
    path = tmp_path / "checkpoint"
    assert cache.get(path, load) == cache.get(path, load) == "<missing>"
    assert load.calls == 1  # a missing file stays missing until its directory changes
    replacement = tmp_path / "checkpoint.tmp"
    replacement.write_text("b")
    assert cache.get(path, load) == "<missing>"
    os.replace(replacement, path)
    assert cache.get(path, load) == "b"


def test_watched_listing_changes_with_entries_not_with_writes(
    tmp_path: Path, watcher: DirectoryWatcher
) -> None:
    (tmp_path / "00.log").write_text("x")
    cache: StatCache[list[str]] = StatCache(listings=True, watcher=watcher)
    calls = []

    def listing(path: Path) -> list[str]:
        calls.append(path)
        return sorted(os.listdir(path))

    assert cache.get(tmp_path, listing) == ["00.log"]
    (tmp_path / "00.log").write_text("appended")  # the active segment grows: no new listing
    assert cache.get(tmp_path, listing) == ["00.log"]
    assert len(calls) == 1
    (tmp_path / "10.log").write_text("")
    assert cache.get(tmp_path, listing) == ["00.log", "10.log"]
    (tmp_path / "00.log").unlink()
    assert cache.get(tmp_path, listing) == ["10.log"]
    assert len(calls) == 3


def test_a_cache_of_an_unwatchable_directory_falls_back_to_stat(tmp_path: Path) -> None:
    watcher = DirectoryWatcher(max_watches=0)
    try:
        path = tmp_path / "checkpoint"
        path.write_text("a")
        _age(path, 10)
        cache: StatCache[str] = StatCache(watcher=watcher)
        load = CountingLoad()
        assert cache.get(path, load) == cache.get(path, load) == "a"
        assert load.calls == 1
        path.write_text("bb")
        assert cache.get(path, load) == "bb"
    finally:
        watcher.close()


def test_a_forgotten_result_is_loaded_again_though_nothing_shows_a_change(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")
    patient: StatCache[str] = StatCache(racy_reuse_s=3600, watcher=None)
    load = CountingLoad()
    assert patient.get(path, load) == "a"
    stat = path.stat()
    path.write_text("b")  # in place, same size, its mtime put back: stat shows nothing
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert patient.get(path, load) == "a"
    patient.forget(path)
    assert patient.get(path, load) == "b"
    assert load.calls == 2
