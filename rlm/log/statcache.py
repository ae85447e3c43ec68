"""Reading a file or directory again only when it changed (its size, mtime or inode).

The broker rewrites checkpoints by renaming a new file into place and adds or removes segment
files; both change what ``stat`` says. A change within the same clock tick as the read it follows
would not show in the mtime, though, so a result read within a second of the file's mtime is
"racy": it is reused for at most ``RACY_REUSE_S`` and then read again (rather than at every call,
which for a checkpoint the broker rewrites every few seconds would mean parsing it on every
lookup for a second after each rewrite).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")
_RACY_NS = 1_000_000_000
RACY_REUSE_S = 0.05
"""How long a racy result is reused: the longest an in-place change within one mtime tick goes
unseen."""


class _Entry(NamedTuple, Generic[T]):
    stamp: tuple[int, int, int]
    value: T
    racy_until_ns: int
    """Monotonic deadline for a racy result; 0 for a settled one."""


class StatCache(Generic[T]):
    """``get(path, load)`` returns ``load(path)``, reusing the last result while ``path`` is unchanged."""

    def __init__(self, *, racy_reuse_s: float = RACY_REUSE_S) -> None:
        self._entries: dict[Path, _Entry[T]] = {}
        self._lock = threading.Lock()
        self._racy_reuse_ns = int(racy_reuse_s * 1e9)

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
            self._entries[path] = _Entry(stamp, value, until)
        return value
