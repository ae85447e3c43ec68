"""Opening files beneath a directory, never through a symlink that leads out of it.

The filesystem store checks every key's path before using it: the key's parts are checked already
(:func:`~rlm.storage.layout.validate_key`), but a symlink inside the root could still point out of
it. ``os.path.realpath`` answers that with an ``lstat`` per path component and a good deal of
Python, some 20 µs, most of what a read of a cached object costs. Linux's ``openat2`` with
``RESOLVE_BENEATH`` (5.6+) makes the kernel refuse, in the same call that opens the file, any
resolution that leaves the directory, so the check costs nothing and cannot race with a symlink
swapped in between the check and the open.

Where ``openat2`` is not there (an older kernel, a seccomp filter that refuses it, another
architecture), :class:`Beneath` falls back to ``realpath`` and ``open``, as before.

The two differ at the edges only: ``openat2`` also refuses an absolute symlink that points back
inside the directory (:class:`OutsideError`) and a "magic link" such as ``/proc/self/fd/N``
(``ELOOP``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
#: ``openat2``'s number where the kernel uses the generic system call table (5.6+).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine()) if sys.platform == "linux" else None
#: Attempts when the kernel reports a concurrent rename during resolution (EAGAIN).
_RACE_ATTEMPTS = 3


class OutsideError(OSError):
    """The path resolves outside the directory."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_syscall() -> Callable[..., int] | None:
    if _SYS_OPENAT2 is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    # syscall() is variadic; on the two architectures above, integer and pointer arguments pass
    # as they would to a prototyped function, and these types widen each to the register's width.
    function.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    call: Callable[..., int] = function
    return call


_syscall = _load_syscall()


class _Support:
    """Whether ``openat2`` may be tried: cleared once it is found missing or refused, after which
    every open uses the fallback."""

    __slots__ = ("usable",)

    def __init__(self) -> None:
        self.usable = _syscall is not None


_support = _Support()


class _Held:
    """The directory held open, and how many opens are using it right now."""

    __slots__ = ("fd", "identity", "retired", "users")

    def __init__(self, fd: int, identity: tuple[int, int]) -> None:
        self.fd = fd
        self.identity = identity
        self.users = 0
        self.retired = False


def _close_all(fds: set[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


class Beneath:
    """Opens paths relative to one directory, refusing any that resolves outside it. Thread-safe.

    The directory is held open; if it is replaced (removed and made again), the next open that
    finds nothing notices and opens the new one. A held directory is closed only once no open is
    using it, so an open never resolves against a descriptor number reused for something else.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._real = Path(os.path.realpath(self.directory))
        self._lock = threading.Lock()
        self._held: _Held | None = None
        self._open_fds: set[int] = set()
        weakref.finalize(self, _close_all, self._open_fds)
        self._hows: dict[int, _OpenHow] = {}

    def _take(self) -> _Held:
        with self._lock:
            held = self._held
            if held is None:
                fd = os.open(self.directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                found = os.fstat(fd)
                held = self._held = _Held(fd, (found.st_dev, found.st_ino))
                self._open_fds.add(fd)
            held.users += 1
            return held

    def _give_back(self, held: _Held) -> None:
        with self._lock:
            held.users -= 1
            if held.retired and held.users == 0:
                self._close(held)

    def _retire(self, held: _Held) -> None:
        """Stop handing out ``held``; it is closed once its last user gives it back. Call with the
        lock held."""
        if self._held is held:
            self._held = None
        if not held.retired:
            held.retired = True
            if held.users == 0:
                self._close(held)

    def _close(self, held: _Held) -> None:
        self._open_fds.discard(held.fd)
        os.close(held.fd)

    def _replaced(self, held: _Held) -> bool:
        """Whether the directory's path now names another directory than ``held`` (which is then
        retired)."""
        try:
            found = os.stat(self.directory)
        except OSError:
            return False
        with self._lock:
            if held.identity == (found.st_dev, found.st_ino):
                return False
            self._retire(held)
            return True

    def close(self) -> None:
        """Let go of the directory (once the opens under way are done); a later open takes it
        again. Idempotent."""
        with self._lock:
            if self._held is not None:
                self._retire(self._held)

    def open(self, relative: str, flags: int = os.O_RDONLY) -> int:
        """Open ``relative`` (a path without ``..`` parts) under the directory; returns the fd.

        Raises:
            OutsideError: The path resolves outside the directory.
            OSError: As ``os.open`` (FileNotFoundError and the like).
        """
        if _support.usable:
            fd = self._openat2(relative, flags | os.O_CLOEXEC)
            if fd is not None:
                return fd
        return self._open_checked(relative, flags)

    def _openat2(self, relative: str, flags: int) -> int | None:
        """The fd, or None when ``openat2`` cannot be used here."""
        how = self._hows.get(flags)
        if how is None:
            how = self._hows.setdefault(flags, _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS))
        name = os.fsencode(relative)
        retried = False
        attempts = 0
        while True:
            assert _syscall is not None
            held = self._take()
            try:
                fd = _syscall(_SYS_OPENAT2, held.fd, name, ctypes.byref(how), ctypes.sizeof(how))
                code = ctypes.get_errno()
            finally:
                self._give_back(held)
            if fd >= 0:
                return int(fd)
            if code == errno.EINTR:
                continue
            if code == errno.EAGAIN and attempts < _RACE_ATTEMPTS:
                attempts += 1
                continue
            if code in (errno.ENOSYS, errno.EPERM, errno.E2BIG, errno.EINVAL):
                # Not there, refused by a filter, or flags this kernel does not know.
                _support.usable = False
                return None
            if code == errno.EXDEV:
                raise OutsideError(code, f"{relative!r} resolves outside {self.directory}")
            if code == errno.ENOENT and not retried and self._replaced(held):
                retried = True
                continue
            if code == errno.EAGAIN:
                return self._open_checked(relative, flags)
            raise OSError(code, os.strerror(code), str(self.directory / relative))

    def checked_path(self, relative: str) -> Path:
        """The path of ``relative`` under the directory, once ``realpath`` shows that it stays
        inside (for callers that need a path, not an fd: renames, deletes; racy as any such check).

        Raises:
            OutsideError: The path resolves outside the directory.
        """
        path = self.directory / relative
        if not Path(os.path.realpath(path)).is_relative_to(self._real):
            raise OutsideError(errno.EXDEV, f"{relative!r} resolves outside {self.directory}")
        return path

    def _open_checked(self, relative: str, flags: int) -> int:
        return os.open(self.checked_path(relative), flags | os.O_CLOEXEC)
