"""Knowing that a broker directory changed without asking the filesystem each time: Linux inotify.

Every lookup must see the broker's current segments and checkpoints, which the broker changes at
any time. Asking ``stat`` costs a system call per file per lookup. With an inotify watch on each
directory, one ``ioctl`` (bytes of events pending) tells that nothing changed anywhere since the
last look; when events are pending they name the directories that changed. The kernel queues an
event before the system call that caused it returns, so a look taken after a change always sees
it (``stat`` cannot promise that within one tick of the mtime clock).

A directory that cannot be watched (no inotify on this system, the watch limit reached, a network
filesystem the broker writes from elsewhere, watching switched off) gets no token, and the caller
falls back to ``stat``. The composition root opens one watcher (:func:`open_watcher`) and passes it
to the caches that should use it; ``log.dirs.watch: false`` opens none.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import fcntl
import os
import struct
import termios
import threading

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_MASK_ADD = 0x20000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

ENTRIES = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF
"""What changes a directory's listing."""
CONTENTS = ENTRIES | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE
"""What also changes the files in it."""
_GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED

_EVENT = struct.Struct("iIII")
"""wd, mask, cookie, len (of the name that follows)."""
DEFAULT_MAX_WATCHES = 8192
"""Directories watched at most; more fall back to ``stat``."""


class DirectoryWatcher:
    """Change tokens for directories from one inotify instance. Thread-safe.

    Raises OSError on construction when inotify is not available.
    """

    def __init__(self, *, max_watches: int = DEFAULT_MAX_WATCHES) -> None:
        libc_name = ctypes.util.find_library("c")
        self._libc = ctypes.CDLL(libc_name, use_errno=True)
        for name in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
            if not hasattr(self._libc, name):
                raise OSError(f"no {name} in {libc_name}: inotify is not available")
        self._libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._max_watches = max_watches
        self._lock = threading.Lock()
        self._pending = array.array("i", [0])
        self._open()
        # A forked child shares the parent's instance (and its events): it gets its own.
        os.register_at_fork(after_in_child=self._reopen_in_child)

    def _reopen_in_child(self) -> None:
        self._lock = threading.Lock()
        if self._fd >= 0:
            os.close(self._fd)
            self._open()

    def _open(self) -> None:
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"inotify_init1: {os.strerror(errno)}")
        self._fd = fd
        self._paths: dict[str, int] = {}
        """Directory → watch descriptor."""
        self._masks: dict[int, int] = {}
        self._generations: dict[int, int] = {}
        self._counter = 0

    def close(self) -> None:
        """Stop watching everything; idempotent."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._paths.clear()
            self._masks.clear()
            self._generations.clear()

    def token(self, directory: str, *, contents: bool = False) -> int | None:
        """A value that stays the same while nothing in ``directory`` changes, and never comes
        back once something has: an entry created, deleted or renamed, and with ``contents`` a
        file in it written or its attributes changed. None when the directory cannot be watched.
        """
        with self._lock:
            if self._fd < 0:
                return None
            self._drain()
            wd = self._paths.get(directory)
            mask = CONTENTS if contents else ENTRIES
            if wd is None or self._masks[wd] & mask != mask:
                wd = self._watch(directory, mask)
                if wd is None:
                    return None
            return self._generations[wd]

    def watched(self) -> int:
        """How many directories are watched."""
        with self._lock:
            return len(self._paths)

    def _watch(self, directory: str, mask: int) -> int | None:
        if directory not in self._paths and len(self._paths) >= self._max_watches:
            return None
        wd: int = self._libc.inotify_add_watch(
            self._fd, os.fsencode(directory), mask | IN_ONLYDIR | IN_MASK_ADD
        )
        if wd < 0:
            return None  # gone, not a directory, no permission, or the system's watch limit
        self._paths[directory] = wd
        self._masks[wd] = self._masks.get(wd, 0) | mask
        # A new generation: whatever was read before this watch existed may be stale.
        self._counter += 1
        self._generations[wd] = self._counter
        return wd

    def _drain(self) -> None:
        fcntl.ioctl(self._fd, termios.FIONREAD, self._pending, True)
        if not self._pending[0]:
            return
        try:
            data = os.read(self._fd, max(self._pending[0], 4096))
        except BlockingIOError:
            return
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _, name_len = _EVENT.unpack_from(data, pos)
            pos += _EVENT.size + name_len
            self._counter += 1
            if mask & IN_Q_OVERFLOW:  # events were lost: everything may have changed
                for known in self._generations:
                    self._generations[known] = self._counter
                continue
            if wd in self._generations:
                self._generations[wd] = self._counter
                if mask & _GONE:
                    self._forget(wd, removed=bool(mask & IN_IGNORED))

    def _forget(self, wd: int, *, removed: bool) -> None:
        """Stop watching ``wd``: its directory was deleted or moved (the path may name another one
        later, watched anew)."""
        if not removed:
            self._libc.inotify_rm_watch(self._fd, wd)
        self._masks.pop(wd, None)
        self._generations.pop(wd, None)
        for path in [p for p, known in self._paths.items() if known == wd]:
            del self._paths[path]


def open_watcher(enabled: bool = True, *, max_watches: int = DEFAULT_MAX_WATCHES) -> DirectoryWatcher | None:
    """A watcher for a process's caches of the broker's files (``log.dirs.watch``), built by the
    composition root and passed to them; None when watching is off or inotify is not available
    (not Linux, or no instance left): the caches then use ``stat``. Close it when done."""
    if not enabled:
        return None
    try:
        return DirectoryWatcher(max_watches=max_watches)
    except OSError:
        return None
