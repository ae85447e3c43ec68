"""DirectoryWatcher: a directory's token changes with every change in it, and only then; a deleted
and re-made directory is watched anew; lost events change every token; what cannot be watched gets
no token."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlm.log import watch
from rlm.log.watch import DirectoryWatcher


@pytest.fixture
def watcher() -> Iterator[DirectoryWatcher]:
    found = DirectoryWatcher()
    yield found
    found.close()


def _token(watcher: DirectoryWatcher, path: Path, *, contents: bool = False) -> int:
    token = watcher.token(str(path), contents=contents)
    assert token is not None
    return token


def test_the_token_holds_while_nothing_changes(tmp_path: Path, watcher: DirectoryWatcher) -> None:
    (tmp_path / "a").write_text("x")
    first = _token(watcher, tmp_path)
    (tmp_path / "a").read_text()
    os.listdir(tmp_path)
    assert _token(watcher, tmp_path) == first
    assert watcher.watched() == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda d: (d / "new.log").write_text(""),
        lambda d: (d / "a").unlink(),
        lambda d: (d / "a").rename(d / "a.deleted"),
        lambda d: (d / "sub").mkdir(),
    ],
    ids=["create", "delete", "rename", "mkdir"],
)
def test_every_change_of_entries_changes_the_token(
    tmp_path: Path, watcher: DirectoryWatcher, change: Callable[[Path], object]
) -> None:
    (tmp_path / "a").write_text("x")
    before = _token(watcher, tmp_path)
    change(tmp_path)
    after = _token(watcher, tmp_path)
    assert after != before
    assert _token(watcher, tmp_path) == after


def test_writes_change_the_token_of_contents_only(tmp_path: Path, watcher: DirectoryWatcher) -> None:
    entries_dir, contents_dir = tmp_path / "entries", tmp_path / "contents"
    for d in (entries_dir, contents_dir):
        d.mkdir()
        (d / "f").write_text("x")
    entries, contents = _token(watcher, entries_dir), _token(watcher, contents_dir, contents=True)
    for d in (entries_dir, contents_dir):
        with open(d / "f", "a") as out:
            out.write("more")
    assert _token(watcher, entries_dir) == entries
    assert _token(watcher, contents_dir, contents=True) != contents


def test_asking_for_contents_later_starts_a_new_generation(tmp_path: Path, watcher: DirectoryWatcher) -> None:
    entries = _token(watcher, tmp_path)
    contents = _token(watcher, tmp_path, contents=True)
    assert contents != entries  # reads made while only entries were watched may miss a write
    with open(tmp_path / "f", "w") as out:
        out.write("x")
    assert _token(watcher, tmp_path, contents=True) != contents


def test_a_directory_deleted_and_made_again_is_watched_anew(
    tmp_path: Path, watcher: DirectoryWatcher
) -> None:
    d = tmp_path / "orders-0"
    d.mkdir()
    first = _token(watcher, d)
    shutil.rmtree(d)
    assert watcher.token(str(d)) is None  # nothing there to watch
    d.mkdir()
    second = _token(watcher, d)
    assert second != first
    (d / "0.log").write_text("")
    assert _token(watcher, d) != second


def test_a_directory_moved_away_is_no_longer_what_its_path_means(
    tmp_path: Path, watcher: DirectoryWatcher
) -> None:
    d = tmp_path / "orders-0"
    d.mkdir()
    first = _token(watcher, d)
    d.rename(tmp_path / "orders-0.moved")
    d.mkdir()
    second = _token(watcher, d)
    assert second != first
    (tmp_path / "orders-0.moved" / "x").write_text("")  # the old directory, no longer watched
    assert _token(watcher, d) == second


def test_lost_events_change_every_token(tmp_path: Path, watcher: DirectoryWatcher) -> None:
    busy, quiet = tmp_path / "busy", tmp_path / "quiet"
    busy.mkdir()
    quiet.mkdir()
    quiet_token = _token(watcher, quiet)
    _token(watcher, busy)
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    path = busy / "f"
    for _ in range(queued // 2 + 10):  # two events each, never drained: the queue overflows
        path.touch()
        path.unlink()
    assert _token(watcher, quiet) != quiet_token


def test_what_cannot_be_watched_gets_no_token(tmp_path: Path) -> None:
    bounded = DirectoryWatcher(max_watches=1)
    try:
        a, b = tmp_path / "a", tmp_path / "b"
        a.mkdir()
        b.mkdir()
        (tmp_path / "file").write_text("")
        assert bounded.token(str(tmp_path / "missing")) is None
        assert bounded.token(str(tmp_path / "file")) is None  # not a directory
        assert bounded.token(str(a)) is not None
        assert bounded.token(str(b)) is None  # over the bound
    finally:
        bounded.close()
    assert bounded.token(str(a)) is None  # closed


def test_watching_off_opens_no_watcher() -> None:
    assert watch.open_watcher(False) is None
    found = watch.open_watcher(True)
    assert found is not None
    other = watch.open_watcher(True)
    try:
        assert other is not None and other is not found, "each composition root opens its own"
    finally:
        found.close()
        if other is not None:
            other.close()
