"""Record batches of any magic: one entry point that peeks at the magic byte and dispatches.

Every batch, whatever its version, starts with ``baseOffset:int64 batchLength:int32`` and has its
magic at byte 16, so a reader needs 17 bytes to choose the v0/v1 or the v2 parser.
"""

from __future__ import annotations

from rlm.errors import CorruptRecordError
from rlm.log import legacy, v2
from rlm.log.model import MAGIC_OFFSET, BatchHeader, Record

Buffer = bytes | bytearray | memoryview


def _legacy_view(buf: Buffer) -> bytes | memoryview:
    return memoryview(buf) if isinstance(buf, bytearray) else buf


def parse_header(buf: Buffer, pos: int, position: int | None = None) -> BatchHeader:
    """Parse the header of the batch at ``pos``.

    A v2 batch needs its 61 header bytes in ``buf``; a legacy entry needs all of its bytes.
    ``position`` overrides the position reported in the header (see :func:`v2.parse_v2_header`).
    """
    magic = buf[pos + MAGIC_OFFSET]
    if magic == 2:
        return v2.parse_v2_header(buf, pos, position)
    if magic in (0, 1):
        header = legacy.parse_legacy_header(_legacy_view(buf), pos)
        return header if position is None else header._replace(position=position)
    raise CorruptRecordError(f"unknown magic byte {magic} (expected 0, 1 or 2)")


def crc_valid(buf: Buffer, header: BatchHeader) -> bool:
    """Whether the batch's stored checksum matches its bytes (CRC-32C for v2, CRC-32 for v0/v1)."""
    if header.magic >= 2:
        return v2.crc_valid(buf, header)
    return legacy.legacy_crc_valid(_legacy_view(buf), header.position, header.size)


def decode_batch(buf: Buffer, header: BatchHeader, *, verify_crc: bool = True) -> list[Record]:
    """Decode the records of one batch; ``header.position`` indexes ``buf``."""
    if header.magic >= 2:
        return v2.decode_v2(buf, header, verify_crc=verify_crc)
    return legacy.decode_legacy(_legacy_view(buf), header, verify_crc=verify_crc)


def first_offset(buf: Buffer, header: BatchHeader, *, verify_crc: bool = True) -> int:
    """The offset of the batch's first record, Kafka's ``baseOffset()``: the header's, but for a
    legacy compressed wrapper, which names only its last offset, its first inner message's (the
    wrapper is decompressed); the last offset for a batch holding no record.

    Raises:
        CorruptRecordError: a wrapper that cannot be decoded.
    """
    if header.base_offset >= 0:
        return header.base_offset
    records = decode_batch(buf, header, verify_crc=verify_crc)
    return records[0].offset if records else header.last_offset


def find_record(
    buf: Buffer,
    header: BatchHeader,
    timestamp: int,
    start_offset: int,
    *,
    verify_crc: bool = True,
    at: int | None = None,
) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the first record of the batch with timestamp ≥ ``timestamp`` and
    offset ≥ ``start_offset`` (a timestamp search's step), or None. The batch starts at ``at`` in
    ``buf`` (default ``header.position``).
    """
    if header.magic >= 2:
        return v2.find_v2(buf, header, timestamp, start_offset, verify_crc=verify_crc, at=at)
    if at is not None and at != header.position:
        header = header._replace(position=at)
    for record in decode_batch(buf, header, verify_crc=verify_crc):
        if record.timestamp >= timestamp and record.offset >= start_offset:
            return record.timestamp, record.offset
    return None
