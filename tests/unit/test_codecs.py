"""rlm.log.codecs: Kafka's framing of each codec, cross-checked with kafka-python's kafka.codec."""

from __future__ import annotations

import gzip
import io
import random
import struct
import types
from typing import cast

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log.batches import decode_batch, parse_header
from rlm.log.codecs import compress, decompress
from rlm.log.columns import COLUMNS, ColumnBuffers, append_batch, append_log
from rlm.log.model import Codec, Record
from rlm.log.v2 import encode_v2_batch

_rng = random.Random(20240601)
PAYLOADS = {
    "empty": b"",
    "small": b"kafka tiered storage",
    # Over 64 KiB: several LZ4 blocks and xerial blocks, partly incompressible.
    "over-64KiB": _rng.randbytes(30_000) + b"abc" * 20_000 + _rng.randbytes(20_000),
    # An exact multiple of snappy-java's 32 KiB block input.
    "32KiB-multiple": (b"0123456789abcdef" * 2048 + _rng.randbytes(32 * 1024)) * 2,
}
CODEC_MAGICS = [(c, m) for c in Codec for m in (0, 1, 2) if not (c is Codec.ZSTD and m < 2)]
COMPRESSED_MAGICS = [(c, m) for c, m in CODEC_MAGICS if c is not Codec.NONE]
NAMES = {Codec.GZIP: "gzip", Codec.SNAPPY: "snappy", Codec.LZ4: "lz4", Codec.ZSTD: "zstd"}
XERIAL_HEADER = bytes.fromhex("82534e41505059000000000100000001")
KAFKA_LZ4_HEADER = bytes.fromhex("04224d18604082")
# HC computed by the xxHash reference library over 04 22 4D 18 60 40 (Kafka's magic-0 quirk).
KAFKA_LZ4_HEADER_MAGIC0 = bytes.fromhex("04224d1860401a")


# --- round trips and structure ------------------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize(("codec", "magic"), CODEC_MAGICS)
def test_round_trip(codec: Codec, magic: int, payload: bytes) -> None:
    compressed = compress(codec, payload, magic=magic)
    assert decompress(codec, compressed, magic=magic) == payload
    assert decompress(codec, memoryview(b"xx" + compressed)[2:], magic=magic) == payload
    assert compress(codec, memoryview(payload), magic=magic) == compressed


def test_none_is_identity() -> None:
    assert compress(Codec.NONE, b"abc") == b"abc"
    assert decompress(Codec.NONE, memoryview(b"abc")) == b"abc"


@pytest.mark.parametrize(
    ("codec", "magic", "prefix"),
    [
        (Codec.GZIP, 2, b"\x1f\x8b\x08"),
        (Codec.SNAPPY, 2, XERIAL_HEADER),
        (Codec.SNAPPY, 0, XERIAL_HEADER),
        (Codec.LZ4, 2, KAFKA_LZ4_HEADER),
        (Codec.LZ4, 1, KAFKA_LZ4_HEADER),
        (Codec.LZ4, 0, KAFKA_LZ4_HEADER_MAGIC0),
        (Codec.ZSTD, 2, b"\x28\xb5\x2f\xfd"),
    ],
)
def test_structural_prefix(codec: Codec, magic: int, prefix: bytes) -> None:
    for payload in PAYLOADS.values():
        assert compress(codec, payload, magic=magic).startswith(prefix)


def test_snappy_blocks_hold_at_most_32kib() -> None:
    payload = PAYLOADS["over-64KiB"]
    framed = compress(Codec.SNAPPY, payload)
    pos, sizes = 16, []
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        sizes.append(len(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(framed)
    assert sizes[:-1] == [32 * 1024] * (len(sizes) - 1)
    assert sum(sizes) == len(payload)


def test_lz4_frame_is_single_with_independent_64kib_blocks() -> None:
    frame = compress(Codec.LZ4, PAYLOADS["over-64KiB"])
    info = lz4.frame.get_frame_info(frame)
    assert info["block_size"] == 64 * 1024
    assert not info["block_linked"]
    assert not info["content_checksum"]
    assert info["content_size"] == 0
    assert frame.endswith(b"\x00\x00\x00\x00")  # the one end mark closes the payload


def test_snappy_reads_a_bare_raw_block() -> None:
    payload = PAYLOADS["over-64KiB"]
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(Codec.SNAPPY, raw) == payload


def test_snappy_reads_concatenated_xerial_streams_and_empty_stream() -> None:
    a, b = PAYLOADS["small"], PAYLOADS["32KiB-multiple"]
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, a) + compress(Codec.SNAPPY, b)) == a + b
    assert decompress(Codec.SNAPPY, b"") == b""


def test_gzip_reads_any_member_and_concatenated_members() -> None:
    payload = PAYLOADS["over-64KiB"]
    out = io.BytesIO()
    with gzip.GzipFile(filename="batch.bin", mode="wb", fileobj=out, mtime=1700000000) as f:
        f.write(payload)
    named = out.getvalue()
    assert decompress(Codec.GZIP, named) == payload
    assert decompress(Codec.GZIP, named + gzip.compress(b"tail")) == payload + b"tail"


def test_zstd_reads_frames_without_content_size_and_concatenated_frames() -> None:
    payload = PAYLOADS["over-64KiB"]
    stream = zstandard.ZstdCompressor(level=3).compressobj()
    unsized = stream.compress(payload) + stream.flush()
    assert zstandard.frame_content_size(unsized) == -1
    assert decompress(Codec.ZSTD, unsized) == payload
    sized = compress(Codec.ZSTD, b"more")
    assert decompress(Codec.ZSTD, unsized + sized) == payload + b"more"


# --- kafka-python cross-checks ------------------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_kafka_python_snappy(kafka_python_codecs: types.ModuleType, payload: bytes) -> None:
    kc = kafka_python_codecs
    assert decompress(Codec.SNAPPY, kc.snappy_encode(payload)) == payload
    assert decompress(Codec.SNAPPY, kc.snappy_encode(payload, xerial_compatible=False)) == payload
    ours = compress(Codec.SNAPPY, payload)
    assert ours == kc.snappy_encode(payload)  # same framing, same 32 KiB blocks
    if payload:  # kafka-python needs more than the 16-byte header to detect the framing
        assert kc.snappy_decode(ours) == payload


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("magic", [1, 2])
def test_kafka_python_lz4(kafka_python_codecs: types.ModuleType, magic: int, payload: bytes) -> None:
    kc = kafka_python_codecs
    assert decompress(Codec.LZ4, kc.lz4_encode(payload), magic=magic) == payload
    assert kc.lz4_decode(compress(Codec.LZ4, payload, magic=magic)) == payload


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_kafka_python_lz4_old_kafka_magic0(kafka_python_codecs: types.ModuleType, payload: bytes) -> None:
    kc = kafka_python_codecs
    theirs = kc.lz4_encode_old_kafka(payload)
    assert theirs.startswith(KAFKA_LZ4_HEADER_MAGIC0)
    assert decompress(Codec.LZ4, theirs, magic=0) == payload
    ours = compress(Codec.LZ4, payload, magic=0)
    assert kc.lz4_decode_old_kafka(ours) == payload
    with pytest.raises(CorruptRecordError, match="lz4 frame header checksum mismatch"):
        decompress(Codec.LZ4, ours, magic=1)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_kafka_python_gzip_and_zstd(kafka_python_codecs: types.ModuleType, payload: bytes) -> None:
    kc = kafka_python_codecs
    assert decompress(Codec.GZIP, kc.gzip_encode(payload)) == payload
    assert kc.gzip_decode(compress(Codec.GZIP, payload)) == payload
    assert decompress(Codec.ZSTD, kc.zstd_encode(payload)) == payload
    assert kc.zstd_decode(compress(Codec.ZSTD, payload)) == payload


def test_lz4_magic0_reader_accepts_a_correct_header_checksum_too() -> None:
    # Kafka skips the header checksum of magic-0 frames, whichever way it was computed.
    frame = compress(Codec.LZ4, PAYLOADS["small"], magic=2)
    assert decompress(Codec.LZ4, frame, magic=0) == PAYLOADS["small"]


# --- rejection ------------------------------------------------------------------------------------


def test_lz4_linked_blocks_are_rejected() -> None:
    payload = PAYLOADS["over-64KiB"]
    linked = lz4.frame.compress(payload, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=True)
    assert lz4.frame.decompress(linked) == payload
    with pytest.raises(CorruptRecordError, match="lz4 frame uses linked"):
        decompress(Codec.LZ4, linked)


@pytest.mark.parametrize(("codec", "magic"), COMPRESSED_MAGICS)
def test_garbage_is_corrupt_and_names_the_codec(codec: Codec, magic: int) -> None:
    garbage = b"\xff\xfe this is not a compressed payload \x00\x01" * 3
    with pytest.raises(CorruptRecordError, match=NAMES[codec]):
        decompress(codec, garbage, magic=magic)


@pytest.mark.parametrize(("codec", "magic"), COMPRESSED_MAGICS)
def test_truncated_is_corrupt_and_names_the_codec(codec: Codec, magic: int) -> None:
    payload = _rng.randbytes(3000) * 3  # one snappy block: any cut lands inside it
    compressed = compress(codec, payload, magic=magic)
    for cut in (1, 5, len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CorruptRecordError, match=NAMES[codec]):
            decompress(codec, compressed[:cut], magic=magic)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_empty_payload_is_corrupt(codec: Codec) -> None:
    with pytest.raises(CorruptRecordError, match=NAMES[codec]):
        decompress(codec, b"")


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_ids_are_corrupt(codec_id: int) -> None:
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec id {codec_id}"):
        decompress(cast(Codec, codec_id), b"data")
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec id {codec_id}"):
        compress(cast(Codec, codec_id), b"data")


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_refused_with_v0_and_v1(magic: int) -> None:
    frame = compress(Codec.ZSTD, b"data")
    with pytest.raises(CorruptRecordError, match="zstd"):
        decompress(Codec.ZSTD, frame, magic=magic)
    with pytest.raises(CorruptRecordError, match="zstd"):
        compress(Codec.ZSTD, b"data", magic=magic)


def test_zstd_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="zstd payload has no frame magic"):
        decompress(Codec.ZSTD, compress(Codec.ZSTD, b"data") + b"junk")


def test_lz4_block_checksum_error_is_corrupt() -> None:
    frame = bytearray(
        lz4.frame.compress(PAYLOADS["small"], block_linked=False, block_checksum=True, store_size=False)
    )
    frame[-6] ^= 0xFF  # inside the block checksum
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Codec.LZ4, bytes(frame))


#: A block size word of 0 with the stored bit set: Kafka's Lz4BlockInputStream masks the bit
#: before it looks for the end mark, so this ends the frame (liblz4 reads it as an empty block).
LZ4_STORED_END_MARK = struct.pack("<I", 0x80000000)


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("name", ["small", "over-64KiB"])
@pytest.mark.parametrize(
    "after", [b"", struct.pack("<I", 0x80000003) + b"xyz" + bytes(4)], ids=["end", "more"]
)
def test_lz4_end_mark_with_the_stored_bit_ends_the_frame_as_in_kafka(
    magic: int, name: str, after: bytes
) -> None:
    frame = compress(Codec.LZ4, PAYLOADS[name], magic=magic)
    assert frame[-4:] == bytes(4)
    assert decompress(Codec.LZ4, frame[:-4] + LZ4_STORED_END_MARK + after, magic=magic) == PAYLOADS[name]


def test_v2_lz4_batch_whose_end_mark_has_the_stored_bit_reads_as_kafka_reads_it() -> None:
    records = [Record(7 + i, 1_700_000_000_000 + i, b"k", b"v" * (40 * i)) for i in range(30)]
    batch = encode_v2_batch(records, codec=Codec.LZ4)
    assert batch[-4:] == bytes(4)
    for after in (b"", struct.pack("<I", 0x80000003) + b"xyz" + bytes(4)):
        patched = bytearray(batch[:-4] + LZ4_STORED_END_MARK + after)
        struct.pack_into(">i", patched, 8, len(patched) - 12)
        struct.pack_into(">I", patched, 17, crc32c.crc32c(bytes(patched[21:])))
        header = parse_header(patched, 0)
        assert decode_batch(bytes(patched), header) == records
        cols = ColumnBuffers()
        append_batch(cols, bytes(patched), header, first_offset=0, last_offset=2**63 - 1, batch_no=0)
        assert cols.rows == len(records)
        walked, reference = ColumnBuffers(), ColumnBuffers()  # the C log walk, its native lz4 too
        append_log(walked, bytes(patched), first_offset=0, last_offset=2**63 - 1)
        append_log(reference, bytes(patched), first_offset=0, last_offset=2**63 - 1, in_c=False)
        assert walked.rows == reference.rows == len(records)
        assert [bytes(walked.view(c)) for c in range(len(COLUMNS))] == [
            bytes(reference.view(c)) for c in range(len(COLUMNS))
        ]


# --- decompression bombs ------------------------------------------------------------------------

LIMIT = 1 << 20


@pytest.mark.parametrize(("codec", "magic"), CODEC_MAGICS)
def test_output_over_max_size_is_rejected(codec: Codec, magic: int) -> None:
    at_limit = compress(codec, bytes(LIMIT), magic=magic)
    assert decompress(codec, at_limit, magic=magic, max_size=LIMIT) == bytes(LIMIT)
    over = compress(codec, bytes(LIMIT + 1), magic=magic)
    with pytest.raises(CorruptRecordError, match="decompresses to more than 1048576 bytes"):
        decompress(codec, over, magic=magic, max_size=LIMIT)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_bomb_far_over_max_size_is_rejected(codec: Codec) -> None:
    bomb = compress(codec, bytes(64 << 20))
    assert len(bomb) < (1 << 20)
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decompress(codec, bomb, max_size=LIMIT)


def _zstd_rle_frame(blocks: int) -> bytes:
    """A zstd frame without content size (128 KiB window) of RLE blocks of 128 KiB each."""
    headers = [(128 * 1024) << 3 | 1 << 1 | (i == blocks - 1) for i in range(blocks)]
    return b"\x28\xb5\x2f\xfd\x00\x38" + b"".join(h.to_bytes(3, "little") + b"\x07" for h in headers)


def test_unsized_zstd_bombs_are_rejected() -> None:
    assert decompress(Codec.ZSTD, _zstd_rle_frame(3)) == b"\x07" * (384 * 1024)
    rle_bomb = _zstd_rle_frame(1000)  # 4 KB that expand to 125 MiB
    with pytest.raises(CorruptRecordError, match="zstd payload decompresses to more than"):
        decompress(Codec.ZSTD, rle_bomb, max_size=LIMIT)
    stream = zstandard.ZstdCompressor(level=3).compressobj()
    bomb = stream.compress(bytes(32 << 20)) + stream.flush()
    with pytest.raises(CorruptRecordError, match="zstd payload decompresses to more than"):
        decompress(Codec.ZSTD, bomb, max_size=LIMIT)


def test_declared_sizes_past_max_size_are_rejected_before_decompressing() -> None:
    # A raw snappy block whose length varint claims 512 MiB.
    with pytest.raises(CorruptRecordError, match="snappy payload decompresses to more than"):
        decompress(Codec.SNAPPY, b"\x80\x80\x80\x80\x02" + b"\x00" * 20, max_size=LIMIT)
    # A zstd frame declaring 1 TiB of content, followed by one raw block of 3 bytes.
    frame = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 40) + b"\x19\x00\x00abc"
    with pytest.raises(CorruptRecordError, match="zstd frame declares 1099511627776 bytes"):
        decompress(Codec.ZSTD, frame, max_size=LIMIT)
    # An LZ4 frame declaring more content than its blocks can hold.
    lying = lz4.frame.compress(b"abc", block_linked=False, store_size=True)
    lying = lying[:6] + struct.pack("<Q", 1 << 40) + lying[14:]
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Codec.LZ4, lying, magic=0, max_size=LIMIT)


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CODEC_MAGICS), st.binary(max_size=70_000) | st.text().map(str.encode))
def test_round_trip_property(codec_magic: tuple[Codec, int], payload: bytes) -> None:
    codec, magic = codec_magic
    assert decompress(codec, compress(codec, payload, magic=magic), magic=magic) == payload


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(COMPRESSED_MAGICS),
    st.binary(min_size=1, max_size=3000),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_damaged_payload_decodes_or_is_corrupt(
    codec_magic: tuple[Codec, int],
    payload: bytes,
    flips: list[tuple[int, int]],
    cut: int,
) -> None:
    codec, magic = codec_magic
    damaged = bytearray(compress(codec, payload, magic=magic))
    for where, value in flips:
        damaged[where % len(damaged)] = value
    del damaged[max(1, len(damaged) - cut % 8) :]
    try:
        out = decompress(codec, bytes(damaged), magic=magic, max_size=LIMIT)
    except CorruptRecordError as exc:
        assert NAMES[codec] in str(exc)
    else:
        assert isinstance(out, bytes)
        assert len(out) <= LIMIT
