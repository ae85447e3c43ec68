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
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (present in glibc alone)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
