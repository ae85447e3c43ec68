"""The headers of a run of whole v2 batches, read in one call: a scrubber's inner loop.

:func:`walk_v2_headers` reads, from a position of a log's bytes, the header of every batch that
lies whole in the buffer, is v2 and is well-formed, and checks each one's CRC-32C, stopping before
the first batch that is not (its caller cuts that one with the ordinary parsers, which say what
is wrong). The loop is defined here in Python, the reference; :mod:`rlm.log._decode` runs the same
loop in C when it is built.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from rlm.log.model import LOG_OVERHEAD, MAGIC_OFFSET, MIN_SIZE_FIELD, V2_HEADER_SIZE, Codec
from rlm.log.v2 import ATTRIBUTES_OFFSET, HEADER

try:
    from rlm.log import _decode
except ImportError:  # built without a C compiler: the Python reference alone
    _decode = None  # type: ignore[assignment]

Buffer = bytes | bytearray | memoryview

ACCELERATED = _decode is not None
"""Whether :func:`walk_v2_headers` runs in C."""

_SIZE_FIELD = struct.Struct(">i")
_INT64_MAX = 2**63 - 1


class V2Header(NamedTuple):
    """What a scrubber needs of one v2 batch's header, and whether its CRC holds."""

    pos: int
    """Where the batch starts in the buffer walked."""
    size: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    attributes: int
    max_timestamp: int
    producer_id: int
    crc_ok: bool


def walk_v2_headers(buf: Buffer, pos: int, end: int, position: int, total: int) -> tuple[int, list[V2Header]]:
    """The headers of the batches from ``buf[pos]`` on, and where the walk stopped.

    ``buf[pos]`` is byte ``position`` of an object of ``total`` bytes. Every batch that lies whole
    in ``buf[:end]`` and in the object, is v2 and has a header :func:`rlm.log.v2.parse_v2_header`
    accepts is read; the walk stops before the first that is not (fewer than 12 bytes left, a size
    field below the minimum, a batch running past ``end`` or ``total``, another magic, a malformed
    header): the caller reads that one itself. Nothing is raised for what the bytes hold.
    """
    if _decode is not None:
        stop, headers = _decode.walk_v2_headers(buf, pos, end, position, total)
        return stop, [V2Header._make(h) for h in headers]
    return walk_v2_headers_py(buf, pos, end, position, total)


def walk_v2_headers_py(
    buf: Buffer, pos: int, end: int, position: int, total: int
) -> tuple[int, list[V2Header]]:
    """:func:`walk_v2_headers` in Python (the reference)."""
    if not 0 <= pos <= end <= len(buf):
        raise ValueError("pos and end must lie in the buffer, pos <= end")
    view = memoryview(buf)
    headers: list[V2Header] = []
    p = pos
    while end - p >= LOG_OVERHEAD:
        size = _SIZE_FIELD.unpack_from(buf, p + 8)[0] + LOG_OVERHEAD
        if size - LOG_OVERHEAD < MIN_SIZE_FIELD:
            break
        if position + (p - pos) + size > total or size > end - p or buf[p + MAGIC_OFFSET] != 2:
            break
        if size < V2_HEADER_SIZE:
            break
        base, _, epoch, _, crc, attrs, last_delta, _, max_ts, pid, _, _, count = HEADER.unpack_from(buf, p)
        if count < 0 or last_delta < 0 or attrs & 0x07 > Codec.ZSTD or base + last_delta > _INT64_MAX:
            break
        crc_ok = crc32c.crc32c(view[p + ATTRIBUTES_OFFSET : p + size]) == crc
        headers.append(V2Header(p, size, base, base + last_delta, epoch, attrs, max_ts, pid, crc_ok))
        p += size
    return p, headers
