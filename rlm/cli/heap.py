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

Either glibc environment variable (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) set
leaves malloc as the environment configures it; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
"""glibc's own variables for the two thresholds: an operator's choice, kept when set."""
# mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


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


def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc, else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (present in glibc alone)
    except (OSError, AttributeError):
        return None
    return libc
