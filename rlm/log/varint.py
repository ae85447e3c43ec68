"""Protocol-Buffers style variable-length integers as Kafka writes them (ByteUtils).

``varint`` is a zig-zag int32 (at most 5 bytes), ``varlong`` a zig-zag int64 (at most 10 bytes).
Decoders take a buffer and a position and return ``(value, next_position)``; they raise
:class:`~rlm.errors.CorruptRecordError` for a value that runs past its maximum length or the buffer.
"""

from __future__ import annotations

from rlm.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview


def read_uvarint(buf: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    """Decode an unsigned varint of at most ``max_bytes`` bytes at ``pos``."""
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptRecordError("varint runs past the end of its data")
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptRecordError(f"varint is too long (more than {max_bytes} bytes)")


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode a zig-zag int32."""
    u, pos = read_uvarint(buf, pos, 5)
    u &= 0xFFFFFFFF  # Kafka shifts the fifth byte in 32-bit arithmetic: its upper bits fall off
    v = (u >> 1) ^ -(u & 1)
    return ((v + 2**31) % 2**32) - 2**31, pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode a zig-zag int64."""
    u, pos = read_uvarint(buf, pos, 10)
    u &= 0xFFFFFFFFFFFFFFFF  # likewise for the tenth byte in 64-bit arithmetic
    v = (u >> 1) ^ -(u & 1)
    return ((v + 2**63) % 2**64) - 2**63, pos


def write_uvarint(u: int, out: bytearray) -> None:
    """Append the unsigned varint ``u`` to ``out``."""
    if u < 0:
        raise ValueError(f"{u} is negative; an unsigned varint needs a masked value")
    while u & ~0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def write_varint(v: int, out: bytearray) -> None:
    """Append the zig-zag int32 ``v`` to ``out``."""
    if not -(2**31) <= v < 2**31:
        raise ValueError(f"{v} does not fit a varint (int32)")
    write_uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF, out)


def write_varlong(v: int, out: bytearray) -> None:
    """Append the zig-zag int64 ``v`` to ``out``."""
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"{v} does not fit a varlong (int64)")
    write_uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def size_of_varint(v: int) -> int:
    """Encoded size of the zig-zag int32 ``v`` in bytes."""
    u = ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF
    size = 1
    while u & ~0x7F:
        size += 1
        u >>= 7
    return size
