"""The C heap of ``rlm serve``: freed blocks of a few MiB kept for reuse rather than handed back
to the kernel at once.

A stream makes and frees blocks of hundreds of KiB to a few MiB many times a second: its encoded
pieces (NDJSON lines, Arrow messages), the HTTP server's chunk-framed copy of each, the column
buffers a group of batches is decoded into. glibc's malloc serves a block above its mmap threshold
(128 KiB, raised as such blocks are freed) with a mapping of its own, unmapped when freed, and
hands back the free top of a heap past its trim threshold (twice the mmap threshold): each new
piece then faults in fresh zeroed pages, and unmapping them costs as much again. Measured on an
NDJSON stream of 1000-byte values, that was about a fifth of the server's CPU. ``serve`` keeps
blocks up to :data:`MMAP_THRESHOLD_BYTES` on the heap and up to :data:`TRIM_THRESHOLD_BYTES` free
at a heap's top mapped.

What streams freed is handed back once they have gone idle (:func:`give_back_freed_heap`): a server
that has streamed then returns to near the memory it started with, rather than keeping its burst's.
While they run, it is handed back each time the process has grown by 16 MiB
(:class:`GiveBackWhenGrown`): freed blocks kept between blocks in use would otherwise grow a
stream's heaps well past what it holds.

Either glibc environment variable (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) set
leaves malloc as the environment configures it; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Mapping

MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
"""glibc's own variables for the two thresholds: an operator's choice, kept when set."""
# mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
#: How much the process may grow while streams run before their freed heap is handed back
#: (:class:`GiveBackWhenGrown`), and how often streams' reads have it checked.
GROWN_BYTES = 16 * 1024 * 1024
CHECK_EVERY_READ_BYTES = 16 * 1024 * 1024


def keep_freed_blocks(environ: Mapping[str, str] = os.environ) -> bool:
    """Set glibc malloc's mmap and trim thresholds (module docstring) for the rest of the process.

    Returns:
        Whether they were set: False where either is set in ``environ``, or the C library is not
        glibc.
    """
    if any(name in environ for name in ENVIRONMENT):
        return False
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def give_back_freed_heap() -> bool:
    """Hand the free pages of the C heap back to the kernel (glibc's ``malloc_trim(0)``): what a
    burst of streams freed, which the thresholds above keep mapped while streams run. ``serve``
    calls it when its streams have gone idle (:meth:`rlm.stream.service.RecordStreams.when_idle`).

    Returns:
        Whether memory was handed back: False where none was free, or the C library is not glibc.
    """
    libc = _glibc()
    if libc is None:
        return False
    trim = libc.malloc_trim
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return bool(trim(0))


def resident_bytes() -> int:
    """The process's resident memory (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc, else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (present in glibc alone)
    except (OSError, AttributeError):
        return None
    return libc


def _now(call: Callable[[], None]) -> None:
    call()


class GiveBackWhenGrown:
    """Hands the free heap back (:func:`give_back_freed_heap`) while streams run, once the process's
    resident memory has grown by :data:`GROWN_BYTES` from the least it was seen at since the last
    time it did (or since it was made: memory handed back once streams went idle counts as well):
    ``serve`` calls it every :data:`CHECK_EVERY_READ_BYTES` that streams read, where their read
    ends, and has the heap handed back on the streams' executor (``run``).

    The thresholds keep freed blocks, but not in their place: a stream's pieces and reads are of
    many sizes, each freed block is a size the next does not fit, and a thread's heap grows past
    the blocks in use. A first NDJSON stream of a 1 GiB range (records of 120 KiB) grew a fresh
    ``serve`` by 70-76 MiB, with its two encoding threads' heaps at about 33 MiB each and 0.3 MiB
    of them in use. Handed back on a growth of 16 MiB, it grew by 32 MiB, for the same CPU (3.0 s
    of the server's for the range; the pages are faulted back only as they are used again).
    What streams hold is not freed by it: many streams growing the process at once have it hand
    back once per 16 MiB they add.
    """

    def __init__(
        self,
        grown_bytes: int = GROWN_BYTES,
        *,
        resident: Callable[[], int] = resident_bytes,
        give_back: Callable[[], object] = give_back_freed_heap,
        run: Callable[[Callable[[], None]], object] = _now,
    ) -> None:
        self.grown_bytes = grown_bytes
        self._resident = resident
        self._give_back = give_back
        self._run = run
        self._lock = threading.Lock()
        self._after = resident()
        self._pending = False  # handed to ``run``, not done yet: the checks wait for it
        self.given_back = 0
        """Times the heap was handed back."""

    def __call__(self) -> bool:
        """Have ``run`` hand the heap back (:meth:`hand_back`) if the process has grown by
        ``grown_bytes`` and no hand-back is pending; returns whether it did."""
        with self._lock:
            if self._pending:
                return False
            now = self._resident()
            if now - self._after < self.grown_bytes:
                self._after = min(self._after, now)
                return False
            self._pending = True
        self._run(self.hand_back)
        return True

    def hand_back(self) -> None:
        """Hand the heap back; growth is measured from what the process holds after it."""
        try:
            self._give_back()
        finally:
            with self._lock:
                self.given_back += 1
                self._after = self._resident()
                self._pending = False
