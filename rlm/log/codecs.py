"""Kafka's compression codecs, framed exactly as the Java client and broker frame them.

``compress`` writes what Kafka writes; ``decompress`` reads what Kafka reads. Every failure of
``decompress`` (garbage, truncation, an unknown codec id, zstd in a v0/v1 message, output larger
than ``max_size``) is a :class:`~rlm.errors.CorruptRecordError` naming the codec; callers locate it
with ``err.at(path, position)``.

Output is bounded before it is produced: each reader works out an upper bound of the decompressed
size from the framing (block counts, declared lengths) and, when that bound passes ``max_size``,
decompresses in bounded steps, so a decompression bomb fails without exhausting memory.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from functools import lru_cache

import cramjam
import lz4.frame
import zstandard
from isal import isal_zlib

from rlm.errors import CorruptRecordError
from rlm.log.model import Codec

#: Default ceiling of one decompressed payload.
DEFAULT_MAX_SIZE = 256 << 20

Data = bytes | memoryview

_NAMES = {
    Codec.NONE: "none",
    Codec.GZIP: "gzip",
    Codec.SNAPPY: "snappy",
    Codec.LZ4: "lz4",
    Codec.ZSTD: "zstd",
}

_I32BE = struct.Struct(">i")
_U32LE = struct.Struct("<I")
_U64LE = struct.Struct("<Q")


def _too_large(name: str, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"{name} payload decompresses to more than {max_size} bytes")


# --- gzip ---------------------------------------------------------------------------------------
# An RFC 1952 member (Java's GZIPOutputStream). Java's GZIPInputStream goes on with a following
# member and ignores trailing bytes that do not start one; so do we.

_GZIP_MEMBER_START = b"\x1f\x8b\x08"


def _gzip_compress(data: Data, magic: int) -> bytes:
    return zlib.compress(data, zlib.Z_DEFAULT_COMPRESSION, 31)


def _gzip_decompress(data: Data, magic: int, max_size: int) -> bytes:
    if not len(data):
        raise CorruptRecordError("gzip payload is empty")
    parts: list[bytes] = []
    total = 0
    rest: Data = data
    try:
        while True:
            inflater = zlib.decompressobj(31)
            chunk = inflater.decompress(rest, max_size - total + 1)
            total += len(chunk)
            if total > max_size:
                raise _too_large("gzip", max_size)
            if not inflater.eof:
                raise CorruptRecordError("gzip payload is truncated")
            parts.append(chunk)
            tail = inflater.unused_data
            if not tail.startswith(_GZIP_MEMBER_START):
                break
            rest = tail
    except zlib.error as exc:
        raise CorruptRecordError(f"gzip payload is corrupt: {exc}") from exc
    return parts[0] if len(parts) == 1 else b"".join(parts)


# --- snappy: xerial snappy-java stream framing ----------------------------------------------------
# Header, 16 bytes:
#   magic          8 bytes   82 53 4E 41 50 50 59 00 (0x82 "SNAPPY" 0x00)
#   version        int32 BE  1
#   min_compatible int32 BE  1
# then, repeated until the end:
#   block_length   int32 BE  length of the raw snappy block that follows
#   block          bytes     raw snappy block of at most 32 KiB of input
# snappy-java also reads a bare raw snappy block (no header), and a header repeated between blocks
# (concatenated streams). Version fields are not checked: some producers write them little-endian.

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_HEADER_BYTES = _XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)
_XERIAL_BLOCK_INPUT = 32 * 1024


def _snappy_compress(data: Data, magic: int) -> bytes:
    view = memoryview(data)
    parts: list[bytes | cramjam.Buffer] = [_XERIAL_HEADER_BYTES]
    for start in range(0, len(view), _XERIAL_BLOCK_INPUT):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_INPUT])
        parts.append(_I32BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Data, magic: int, max_size: int) -> bytes:
    view = memoryview(data)
    n = len(view)
    if n == 0:
        return b""  # an empty stream holds no data (snappy-java reads it as such)
    try:
        if n < _XERIAL_HEADER.size or view[:8] != _XERIAL_MAGIC:
            if cramjam.snappy.decompress_raw_len(view) > max_size:
                raise _too_large("snappy", max_size)
            return bytes(cramjam.snappy.decompress_raw(view))
        parts = []
        total = 0
        pos = _XERIAL_HEADER.size
        while pos < n:
            if view[pos : pos + 8] == _XERIAL_MAGIC and n - pos >= _XERIAL_HEADER.size:
                pos += _XERIAL_HEADER.size
                continue
            if n - pos < 4:
                raise CorruptRecordError("snappy payload is truncated inside a block length")
            (length,) = _I32BE.unpack_from(view, pos)
            pos += 4
            if length < 0 or length > n - pos:
                raise CorruptRecordError(
                    f"snappy block length {length} does not fit the {n - pos} bytes left"
                )
            block = view[pos : pos + length]
            pos += length
            total += cramjam.snappy.decompress_raw_len(block)
            if total > max_size:
                raise _too_large("snappy", max_size)
            parts.append(cramjam.snappy.decompress_raw(block))
        return b"".join(parts)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy payload is corrupt: {exc}") from exc


# --- lz4: one LZ4 frame (Kafka's Lz4BlockOutputStream / Lz4BlockInputStream) -------------------
# Frame header, 7 bytes (15 with a content size):
#   magic         uint32 LE  0x184D2204 (bytes 04 22 4D 18)
#   FLG           uint8      bits 7-6 version (01), 5 block independence, 4 block checksum,
#                            3 content size present, 2 content checksum, 1-0 reserved (0)
#   BD            uint8      bit 7 reserved, bits 6-4 max block size code (4-7), 3-0 reserved
#   content_size  uint64 LE  only when FLG bit 3 is set
#   HC            uint8      (xxh32(FLG..content_size, seed 0) >> 8) & 0xFF
# Blocks, repeated:
#   size          uint32 LE  bit 31 set: stored uncompressed; 0: end mark
#   data          bytes      at most the max block size
#   checksum      uint32 LE  only when FLG bit 4 is set
# then, after the end mark, a 4-byte content checksum when FLG bit 2 is set.
# Kafka writes FLG 0x60 and BD 0x40, so every frame starts 04 22 4D 18 60 40 82. For magic 0 it
# writes (and on reading skips) an HC wrongly computed over the magic bytes too, giving
# 04 22 4D 18 60 40 1A.

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_END_MARK = 0
_LZ4_END_MARK_BYTES = bytes(4)
_LZ4_STORED = 0x80000000


def _xxh32(data: bytes) -> int:
    """XXH32 (seed 0) of fewer than 16 bytes: a frame descriptor, with the magic at most 14."""
    p1, p2, p3, p4, p5, m = 2654435761, 2246822519, 3266489917, 668265263, 374761393, 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    n, pos = len(data), 0
    if n >= 16:
        raise ValueError("_xxh32 covers inputs shorter than 16 bytes only")
    acc = (p5 + n) & m
    while pos + 4 <= n:
        (word,) = _U32LE.unpack_from(data, pos)
        acc = rotl((acc + word * p3) & m, 17) * p4 & m
        pos += 4
    for byte in data[pos:]:
        acc = rotl((acc + byte * p5) & m, 11) * p1 & m
    acc = (acc ^ (acc >> 15)) * p2 & m
    acc = (acc ^ (acc >> 13)) * p3 & m
    return acc ^ (acc >> 16)


@lru_cache(maxsize=64)
def _lz4_header_checksum(descriptor: bytes) -> int:
    return (_xxh32(descriptor) >> 8) & 0xFF


_LZ4_BROKEN_HC = bytes([_lz4_header_checksum(_LZ4_MAGIC + b"\x60\x40")])


def _lz4_compress(data: Data, magic: int) -> bytes:
    frame: bytes = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        block_checksum=False,
        content_checksum=False,
        store_size=False,
    )
    if magic == 0:
        return b"".join((frame[:6], _LZ4_BROKEN_HC, memoryview(frame)[7:]))
    return frame


def _lz4_decompress(data: Data, magic: int, max_size: int) -> bytes:
    view = memoryview(data)
    n = len(view)
    if n < 7:
        raise CorruptRecordError(f"lz4 payload of {n} bytes is shorter than a frame header")
    if view[:4] != _LZ4_MAGIC:
        raise CorruptRecordError(f"lz4 payload does not start with the frame magic: {view[:4].hex()}")
    flg, bd = view[4], view[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4 frame version {flg >> 6} is not supported")
    if not flg & 0x20:
        raise CorruptRecordError("lz4 frame uses linked (dependent) blocks, which Kafka rejects")
    if flg & 0x03 or bd & 0x8F or (bd >> 4) < 4:
        raise CorruptRecordError(f"lz4 frame descriptor is invalid: FLG 0x{flg:02x} BD 0x{bd:02x}")
    max_block = 1 << (2 * (bd >> 4) + 8)
    header_len = 15 if flg & 0x08 else 7
    if n < header_len:
        raise CorruptRecordError("lz4 frame header is truncated")
    hc = _lz4_header_checksum(bytes(view[4 : header_len - 1]))
    stored_hc = view[header_len - 1]
    if magic > 0 and stored_hc != hc:
        raise CorruptRecordError(
            f"lz4 frame header checksum mismatch: stored 0x{stored_hc:02x}, computed 0x{hc:02x}"
        )
    bound, end, mark = _lz4_scan_blocks(view, header_len, flg, max_block)
    if flg & 0x08:
        (content_size,) = _U64LE.unpack_from(view, 6)
        if content_size > bound:
            raise CorruptRecordError(f"lz4 frame declares {content_size} bytes its blocks lack")
        bound = content_size
    frame: Data = view
    if stored_hc != hc or view[mark : mark + 4] != _LZ4_END_MARK_BYTES:
        # Given to liblz4 as it reads them: magic 0's header checksum, which Kafka does not
        # verify, correct, and an end mark with the stored bit set as the plain one (liblz4 would
        # read an empty block and go on), the frame ending there.
        frame = b"".join(
            (
                view[: header_len - 1],
                bytes([hc]),
                view[header_len:mark],
                _LZ4_END_MARK_BYTES,
                view[mark + 4 : end],
            )
        )
    try:
        if bound <= max_size:
            out: bytes = lz4.frame.decompress(frame)
            return out
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out = decompressor.decompress(frame, max_length=max_size + 1)
    except (RuntimeError, ValueError) as exc:
        raise CorruptRecordError(f"lz4 payload is corrupt: {exc}") from exc
    if len(out) > max_size:
        raise _too_large("lz4", max_size)
    if not decompressor.eof:
        raise CorruptRecordError("lz4 frame is truncated")
    return out


def _lz4_scan_blocks(view: memoryview, pos: int, flg: int, max_block: int) -> tuple[int, int, int]:
    """Walk the block sizes: (bound of the decompressed size, position just past the frame,
    position of the end mark). A size of 0 ends the frame whatever its stored bit says, as
    Kafka's ``Lz4BlockInputStream.readBlock`` masks the bit first."""
    n = len(view)
    trailer = 4 if flg & 0x10 else 0
    blocks = 0
    while True:
        if n - pos < 4:
            raise CorruptRecordError("lz4 frame is truncated: no end mark")
        (size,) = _U32LE.unpack_from(view, pos)
        size &= ~_LZ4_STORED & 0xFFFFFFFF
        if size == _LZ4_END_MARK:
            break
        pos += 4
        if size > max_block:
            raise CorruptRecordError(f"lz4 block of {size} bytes exceeds the {max_block}-byte max")
        pos += size + trailer
        blocks += 1
    mark = pos
    pos += 4
    if flg & 0x04:
        pos += 4
    if pos > n:
        raise CorruptRecordError("lz4 frame is truncated")
    return blocks * max_block, pos, mark


# --- zstd: one Zstandard frame (zstd-jni streams; Kafka allows it only with magic 2) -------------
# Frame (RFC 8878):
#   magic              uint32 LE  0xFD2FB528 (bytes 28 B5 2F FD)
#   descriptor         uint8      bits 7-6 content-size field size code, 5 single segment,
#                                 3 reserved (0), 2 content checksum, 1-0 dictionary id size code
#   window_descriptor  uint8      absent in single-segment frames
#   dictionary_id      0/1/2/4 bytes
#   content_size       0/1/2/4/8 bytes LE (the 2-byte form is offset by 256)
# Blocks, each a 3-byte LE header (bit 0 last block, bits 2-1 type: 0 raw, 1 RLE, 2 compressed,
# bits 23-3 size) then size bytes (1 byte for RLE); each regenerates at most 128 KiB. A 4-byte
# checksum follows the last block when flagged. Skippable frames (magic 0x184D2A5?) are skipped.

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)
_ZSTD_CONTENT_SIZE_SIZES = (0, 2, 4, 8)
_ZSTD_LEVEL = 3  # Kafka's default compression.zstd.level
_ZSTD_READ_CHUNK = 1 << 20

# zstd contexts are costly to create and unsafe to share between threads: keep one per thread.
_zstd_contexts = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    compressor: zstandard.ZstdCompressor | None = getattr(_zstd_contexts, "compressor", None)
    if compressor is None:
        compressor = _zstd_contexts.compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_zstd_contexts, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_contexts.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_compress(data: Data, magic: int) -> bytes:
    out: bytes = _zstd_compressor().compress(data)
    return out


def _zstd_truncated() -> CorruptRecordError:
    return CorruptRecordError("zstd frame is truncated")


def _zstd_scan_frame(view: memoryview, pos: int) -> tuple[int, int, bool]:
    """Walk one frame from ``pos``: (bound of its output, its end, whether its size is declared)."""
    n = len(view)
    if n - pos < 6:
        raise _zstd_truncated()
    descriptor = view[pos + 4]
    if descriptor & 0x08:
        raise CorruptRecordError("zstd frame header has its reserved bit set")
    single_segment = descriptor & 0x20
    size_code = descriptor >> 6
    size_len = 1 if single_segment and size_code == 0 else _ZSTD_CONTENT_SIZE_SIZES[size_code]
    pos += 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_SIZES[descriptor & 0x03]
    if n - pos < size_len:
        raise _zstd_truncated()
    content_size = int.from_bytes(view[pos : pos + size_len], "little") if size_len else -1
    if size_len == 2:
        content_size += 256
    pos += size_len
    bound = 0
    while True:
        if n - pos < 3:
            raise _zstd_truncated()
        block_header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        block_type = (block_header >> 1) & 0x03
        block_size = block_header >> 3
        if block_type == 3:
            raise CorruptRecordError("zstd frame has a block of the reserved type 3")
        pos += 3 + (1 if block_type == 1 else block_size)
        bound += _ZSTD_BLOCK_MAX if block_type == 2 else block_size
        if block_header & 0x01:
            break
    if descriptor & 0x04:
        pos += 4
    if pos > n:
        raise _zstd_truncated()
    if content_size > bound:
        raise CorruptRecordError(f"zstd frame declares {content_size} bytes its blocks lack")
    return (content_size if content_size >= 0 else bound), pos, content_size >= 0


def _zstd_decompress(data: Data, magic: int, max_size: int) -> bytes:
    view = memoryview(data)
    n = len(view)
    if n == 0:
        raise CorruptRecordError("zstd payload is empty")
    frames: list[tuple[int, int, int, bool]] = []
    total_bound = 0
    pos = 0
    while pos < n:
        if n - pos < 4:
            raise _zstd_truncated()
        (frame_magic,) = _U32LE.unpack_from(view, pos)
        if frame_magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            if n - pos < 8:
                raise _zstd_truncated()
            pos += 8 + _U32LE.unpack_from(view, pos + 4)[0]
            continue
        if frame_magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"zstd payload has no frame magic at byte {pos}")
        bound, end, sized = _zstd_scan_frame(view, pos)
        frames.append((pos, end, bound, sized))
        total_bound += bound
        pos = end
    if pos > n:
        raise _zstd_truncated()
    decompressor = _zstd_decompressor()
    try:
        if total_bound <= max_size:
            # max_output_size applies to frames without a declared size (0 = use the declared one)
            parts = [
                decompressor.decompress(view[start:end], max_output_size=0 if sized else bound or 1)
                for start, end, bound, sized in frames
            ]
            out: bytes = parts[0] if len(parts) == 1 else b"".join(parts)
            return out
        return _zstd_stream(decompressor, view, max_size)
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"zstd payload is corrupt: {exc}") from exc


def _zstd_stream(decompressor: zstandard.ZstdDecompressor, view: memoryview, max_size: int) -> bytes:
    parts = []
    total = 0
    with decompressor.stream_reader(view, read_across_frames=True) as reader:
        while chunk := reader.read(_ZSTD_READ_CHUNK):
            total += len(chunk)
            if total > max_size:
                raise _too_large("zstd", max_size)
            parts.append(chunk)
    return b"".join(parts)


# --- dispatch -----------------------------------------------------------------------------------


def _none_compress(data: Data, magic: int) -> bytes:
    return bytes(data)


def _none_decompress(data: Data, magic: int, max_size: int) -> bytes:
    if len(data) > max_size:
        raise _too_large("none", max_size)
    return bytes(data)


_COMPRESSORS: dict[int, Callable[[Data, int], bytes]] = {
    Codec.NONE: _none_compress,
    Codec.GZIP: _gzip_compress,
    Codec.SNAPPY: _snappy_compress,
    Codec.LZ4: _lz4_compress,
    Codec.ZSTD: _zstd_compress,
}
_DECOMPRESSORS: dict[int, Callable[[Data, int, int], bytes]] = {
    Codec.NONE: _none_decompress,
    Codec.GZIP: _gzip_decompress,
    Codec.SNAPPY: _snappy_decompress,
    Codec.LZ4: _lz4_decompress,
    Codec.ZSTD: _zstd_decompress,
}


def _check_codec(codec: int, magic: int) -> None:
    if codec not in _NAMES:
        raise CorruptRecordError(f"unknown compression codec id {int(codec)}")
    if codec == Codec.ZSTD and magic < 2:
        raise CorruptRecordError(f"zstd compression is not allowed with magic {magic} (v0/v1)")


def compress(codec: Codec, data: bytes | memoryview, *, magic: int = 2) -> bytes:
    """Compress ``data`` the way Kafka frames ``codec`` for message format ``magic``.

    Args:
        codec: The codec; ``Codec.NONE`` returns the bytes unchanged.
        data: The uncompressed bytes (concatenated records or inner messages).
        magic: Message format of the batch; 0 selects Kafka's magic-0 LZ4 header checksum, and
            zstd needs 2.

    Returns:
        gzip: one RFC 1952 member; snappy: xerial stream framing with 32 KiB blocks; lz4: one
        frame with independent 64 KiB blocks; zstd: one frame.

    Raises:
        CorruptRecordError: ``codec`` is unknown, or zstd was asked for with magic 0 or 1.
    """
    _check_codec(codec, magic)
    return _COMPRESSORS[codec](data, magic)


def decompress(
    codec: Codec, data: bytes | memoryview, *, magic: int = 2, max_size: int = DEFAULT_MAX_SIZE
) -> bytes:
    """Decompress a payload ``codec`` framed as Kafka frames it.

    Args:
        codec: The codec id from the batch attributes (an unknown id 5-7 is corruption).
        data: The compressed payload.
        magic: Message format of the batch holding it (LZ4 header checksum, zstd rules).
        max_size: Largest output accepted; a payload decompressing to more is rejected without
            producing all of it.

    Returns:
        The decompressed bytes.

    Raises:
        CorruptRecordError: the payload is not valid for ``codec`` (the message says why).
    """
    _check_codec(codec, magic)
    return _DECOMPRESSORS[codec](data, magic, max_size)


# --- the common frames, fast ---------------------------------------------------------------------
# What Kafka's clients write (one gzip member, a xerial snappy stream, one lz4 frame with Kafka's
# descriptor, one zstd frame declaring its size) decompressed with the fewest checks that still
# decide exactly as :func:`decompress`: a payload framed any other way raises, and the caller then
# asks :func:`decompress`, which accepts or rejects it and says why.

_LZ4_KAFKA_HEADER = _LZ4_MAGIC + b"\x60\x40\x82"  # FLG 0x60, BD 0x40 (64 KiB blocks), its checksum
_LZ4_KAFKA_BLOCK = 64 * 1024
_ZSTD_MAGIC_BYTES = _U32LE.pack(_ZSTD_MAGIC)


class NotPlainError(ValueError):
    """A payload the fast path leaves to :func:`decompress`."""


def _gzip_plain(view: memoryview) -> bytes:
    # ISA-L's inflate decodes the same streams as zlib's at about twice the speed; the reference
    # (decompress) stays on zlib, and the tests check that the two never differ.
    inflater = isal_zlib.decompressobj(31)
    out = inflater.decompress(view, DEFAULT_MAX_SIZE + 1)
    if not inflater.eof or inflater.unused_data or len(out) > DEFAULT_MAX_SIZE:
        raise NotPlainError("gzip")
    return out


def _snappy_plain(view: memoryview) -> bytes:
    n = len(view)
    if n < _XERIAL_HEADER.size or view[:8] != _XERIAL_MAGIC:  # else a raw block, or nothing
        raise NotPlainError("snappy")
    parts = []
    total = 0
    pos = _XERIAL_HEADER.size
    while pos < n:
        if view[pos : pos + 8] == _XERIAL_MAGIC:  # a repeated header
            raise NotPlainError("snappy")
        (length,) = _I32BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > n - pos:
            raise NotPlainError("snappy")
        block = view[pos : pos + length]
        pos += length
        total += cramjam.snappy.decompress_raw_len(block)
        if total > DEFAULT_MAX_SIZE:
            raise NotPlainError("snappy")
        parts.append(cramjam.snappy.decompress_raw(block))
    return b"".join(parts)


def _lz4_plain(view: memoryview) -> bytes:
    if view[:7] != _LZ4_KAFKA_HEADER:
        raise NotPlainError("lz4")
    n = len(view)
    pos = 7
    blocks = 0
    while True:
        (size,) = _U32LE.unpack_from(view, pos)  # struct.error past the end
        pos += 4
        if size == _LZ4_END_MARK:
            break
        size &= ~_LZ4_STORED & 0xFFFFFFFF
        if size == _LZ4_END_MARK:
            raise NotPlainError("lz4")  # Kafka's end mark with the stored bit, liblz4's empty block
        if size > _LZ4_KAFKA_BLOCK:
            raise NotPlainError("lz4")
        pos += size
        blocks += 1
    if pos != n or blocks * _LZ4_KAFKA_BLOCK > DEFAULT_MAX_SIZE:
        raise NotPlainError("lz4")
    out: bytes = lz4.frame.decompress(view)
    return out


def _zstd_plain(view: memoryview) -> bytes:
    if view[:4] != _ZSTD_MAGIC_BYTES:
        raise NotPlainError("zstd")
    size = zstandard.frame_content_size(view)
    if not 0 < size <= DEFAULT_MAX_SIZE:  # an empty frame may hide bytes after it
        raise NotPlainError("zstd")
    out: bytes = _zstd_decompressor().decompress(view, allow_extra_data=False)
    return out


def _none_plain(view: memoryview) -> bytes:
    raise NotPlainError("none")  # an uncompressed batch has nothing to decompress


PLAIN_DECOMPRESSORS: tuple[Callable[[memoryview], bytes], ...] = (
    _none_plain,
    _gzip_plain,
    _snappy_plain,
    _lz4_plain,
    _zstd_plain,
)
"""By codec id: the fast decompression of the frames Kafka's clients write (module section above).
Each returns what :func:`decompress` returns for a v2 payload (``max_size`` the default) or raises
(any exception: the caller then asks :func:`decompress`, which says what is wrong)."""


PlainCalls = tuple[Callable[..., object], ...]


def plain_calls() -> PlainCalls:
    """The library calls with which the C log walk (:mod:`rlm.log._decode`) decompresses the frames
    of :data:`PLAIN_DECOMPRESSORS`, walking the framing itself: gzip's ``decompressobj``, snappy's
    raw ``decompress_raw_into``, lz4's ``frame.decompress``, zstd's ``frame_content_size`` and this
    thread's decompressor's ``decompress``."""
    calls: PlainCalls | None = getattr(_zstd_contexts, "plain_calls", None)
    if calls is None:
        calls = _zstd_contexts.plain_calls = (
            isal_zlib.decompressobj,
            cramjam.snappy.decompress_raw_into,
            lz4.frame.decompress,
            zstandard.frame_content_size,
            _zstd_decompressor().decompress,
        )
    return calls


def decompress_v2(codec: Codec, data: memoryview) -> bytes:
    """:func:`decompress` for a v2 payload (``max_size`` the default), the common frames fast."""
    try:
        return PLAIN_DECOMPRESSORS[codec](data)
    except Exception:  # any failure: the reference decides and says why
        return decompress(codec, data)
