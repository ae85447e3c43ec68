"""Reading a file or directory again only when it changed.

A directory watcher (:mod:`rlm.log.watch`, inotify) says so without a system call per file: a
cached result is reused while the token of the directory holding the file (of the directory
itself, for a listing) is unchanged. Where no watch can be had, ``stat`` says so: its size, mtime
or inode changed. The broker rewrites checkpoints by renaming a new file into place and adds or
removes segment files; both change what ``stat`` says. A change within the same clock tick as the
read it follows would not show in the mtime, though, so a result read within a second of the
file's mtime is "racy": it is reused for at most ``RACY_REUSE_S`` and then read again (rather than
at every call, which for a checkpoint the broker rewrites every few seconds would mean parsing it
on every lookup for a second after each rewrite).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from rlm.log.watch import DirectoryWatcher

T = TypeVar("T")
_RACY_NS = 1_000_000_000
RACY_REUSE_S = 0.05
"""How long a racy result is reused: the longest an in-place change within one mtime tick goes
unseen (when ``stat`` is the judge)."""


class _Entry(NamedTuple, Generic[T]):
    stamp: tuple[int, int, int] | None
    """From ``stat``; None when the watcher's token judges the entry."""
    value: T
    racy_until_ns: int
    """Monotonic deadline for a racy result; 0 for a settled one."""
    token: int | None = None
    """The watcher's token for ``directory`` when the entry was read; None when judged by stat."""
    directory: str = ""
    """The directory whose token judges the entry."""


class StatCache(Generic[T]):
    """``get(path, load)`` returns ``load(path)``, reusing the last result while ``path`` is unchanged.

    ``listings`` caches say what is in directories (``path`` is the directory, and only entries
    added, removed or renamed in it change it); the others, what is in files.
    """

    def __init__(
        self,
        *,
        racy_reuse_s: float = RACY_REUSE_S,
        listings: bool = False,
        watcher: DirectoryWatcher | None = None,
    ) -> None:
        self._entries: dict[Path, _Entry[T]] = {}
        self._lock = threading.Lock()
        self._racy_reuse_ns = int(racy_reuse_s * 1e9)
        self._listings = listings
        self._watcher = watcher

    def get(self, path: Path, load: Callable[[Path], T]) -> T:
        watcher = self._watcher
        if watcher is not None:
            found = self._entries.get(path)
            directory = found.directory if found is not None else self._directory_of(path)
            token = watcher.token(directory, contents=not self._listings)
            if token is not None:
                if found is not None and found.token == token:
                    return found.value
                value = load(path)  # the token was taken first: a change while loading shows next time
                with self._lock:
                    self._entries[path] = _Entry(None, value, 0, token, directory)
                return value
        return self._get_by_stat(path, load)

    def forget(self, path: Path) -> None:
        """Drop what is kept of ``path``: the next :meth:`get` loads it (a caller that found the
        result out of date, before the watcher or ``stat`` could tell)."""
        with self._lock:
            self._entries.pop(path, None)

    def _directory_of(self, path: Path) -> str:
        return str(path if self._listings else path.parent)

    def _get_by_stat(self, path: Path, load: Callable[[Path], T]) -> T:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            with self._lock:
                self._entries.pop(path, None)
            return load(path)
        stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            found = self._entries.get(path)
        if (
            found is not None
            and found.stamp == stamp
            and (not found.racy_until_ns or time.monotonic_ns() < found.racy_until_ns)
        ):
            return found.value
        value = load(path)
        racy = time.time_ns() - st.st_mtime_ns <= _RACY_NS
        until = time.monotonic_ns() + self._racy_reuse_ns if racy else 0
        with self._lock:
            self._entries[path] = _Entry(stamp, value, until, None, self._directory_of(path))
        return value
