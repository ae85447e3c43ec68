"""Reading a file or directory again only when it changed (its size, mtime or inode).

The broker rewrites checkpoints by renaming a new file into place and adds or removes segment
files; both change what ``stat`` says. A result read within a second of the file's mtime is not
kept, because a change in the same clock tick would not show in the mtime.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
_RACY_NS = 1_000_000_000


class StatCache(Generic[T]):
    """``get(path, load)`` returns ``load(path)``, reusing the last result while ``path`` is unchanged."""

    def __init__(self) -> None:
        self._entries: dict[Path, tuple[tuple[int, int, int], T]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path, load: Callable[[Path], T]) -> T:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            with self._lock:
                self._entries.pop(path, None)
            return load(path)
        stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            found = self._entries.get(path)
        if found is not None and found[0] == stamp:
            return found[1]
        value = load(path)
        if time.time_ns() - st.st_mtime_ns > _RACY_NS:
            with self._lock:
                self._entries[path] = (stamp, value)
        return value
