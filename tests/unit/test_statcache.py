"""StatCache: reuse while a file is unchanged, notice every change ``stat`` can show at once, and
bound how long a change within one mtime tick (a "racy" read) goes unseen."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlm.log.statcache import StatCache


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
    cache: StatCache[str] = StatCache()
    load = CountingLoad()
    assert [cache.get(path, load) for _ in range(5)] == ["a"] * 5
    assert load.calls == 1


def test_a_file_renamed_into_place_is_seen_at_once_even_within_its_tick(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_text("a")
    cache: StatCache[str] = StatCache()
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
    patient: StatCache[str] = StatCache(racy_reuse_s=3600)
    brief: StatCache[str] = StatCache(racy_reuse_s=0.01)
    load = CountingLoad()
    assert patient.get(path, load) == brief.get(path, load) == "a"
    stat = path.stat()
    path.write_text("b")  # same size, same inode
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime: stat cannot tell
    time.sleep(0.05)
    assert patient.get(path, load) == "a"  # a racy read is reused while its time lasts
    assert brief.get(path, load) == "b"  # and read again after it


def test_a_missing_file_is_loaded_every_time(tmp_path: Path) -> None:
    cache: StatCache[str] = StatCache()
    load = CountingLoad()
    path = tmp_path / "absent"
    assert cache.get(path, load) == "<missing>"
    assert cache.get(path, load) == "<missing>"
    assert load.calls == 2
    path.write_text("now")
    assert cache.get(path, load) == "now"
