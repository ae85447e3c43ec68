"""Kafka v2 record-batch test vectors and builders shared by the record-format tests.

The hex vectors are those of the log-format specification (§7.3 and §7.5): real broker batches
captured by kafka-python, and batches cross-checked with kafka-python's reader.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log.model import BatchHeader, Codec, Header, Record
from rlm.log.v2 import decode_v2, encode_v2_batch, parse_v2_header

TS = 1_700_000_000_000

# Offsets of v2 header fields (DefaultRecordBatch.java).
LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
RECORDS_COUNT_OFFSET = 57

#: How every Kafka-framed payload of each codec begins (spec §7.5).
PAYLOAD_PREFIX = {
    Codec.GZIP: bytes.fromhex("1f8b"),
    Codec.SNAPPY: bytes.fromhex("82534e41505059000000000100000001"),
    Codec.LZ4: bytes.fromhex("04224d18604082"),
    Codec.ZSTD: bytes.fromhex("28b52ffd"),
}

# A. One record, CreateTime, baseOffset 0, leaderEpoch 0, key "key", value "value".
VECTOR_A = bytes.fromhex(
    "0000000000000000 00000040 00000000 02 db5e9cdd 0000 00000000 0000018bcfe56800"
    "0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000001"
    "1c 00 00 00 06 6b6579 0a 76616c7565 00"
)
# B. Three records at offsets 42-44, leaderEpoch 7, headers, a null key and a null value.
VECTOR_B = bytes.fromhex(
    "000000000000002a 00000054 00000007 02 46facec1 0000 00000002 0000018bcfe56800"
    "0000018bcfe5692c ffffffffffffffff ffff ffffffff 00000003"
    "16 00 00 00 01 02 61 02 02 68 02 31"
    "10 00 09 02 04 6b32 01 00"
    "1a 00 d804 04 04 6b33 02 63 02 02 78 01"
)
# C. Vector A as LogAppendTime at TS + 999 (records untouched, CRC recomputed).
VECTOR_C = bytes.fromhex(
    "000000000000000000000040000000000201c519a90008000000000000018bcfe568000000018bcfe56be7"
    "ffffffffffffffffffffffffffff000000011c000000066b65790a76616c756500"
)
# D. COMMIT marker: baseOffset 5, leaderEpoch 1, producer 4242/3, coordinatorEpoch 7.
VECTOR_D = bytes.fromhex(
    "0000000000000005 00000042 00000001 02 a1756980 0030 00000000 0000018bcfe56800"
    "0000018bcfe56800 0000000000001092 0003 ffffffff 00000001"
    "20 00 00 00 08 00000001 0c 000000000007 00"
)
# E. Header-only batch left by compaction: offsets 10-14, producer 77/0, baseSequence 12.
VECTOR_E = bytes.fromhex(
    "000000000000000a 00000031 00000002 02 2cd63da2 0000 00000004 ffffffffffffffff"
    "0000018bcfe56800 000000000000004d 0000 0000000c 00000000"
)

# kafka-python test_records.record_batch_data_v2: four batches written by real brokers.
BROKER_BATCHES = bytes.fromhex(
    "00000000000000000000003b00000001020318a2700000000000000000015dff"
    "7b063c0000015dff7b063cffffffffffffffffffffffffffff00000001120000"
    "000106313233000000000000000001000000400000000202c85cbd2300000000"
    "00010000015dff7cdd6c0000015dff7cde14ffffffffffffffffffffffffffff"
    "000000020c0000000100000e00d0020201000000000000000000030000003b00"
    "000002022e0b85b70000000000000000015dff7ce79d0000015dff7ce79dffff"
    "ffffffffffffffffffffffff0000000112000000010631323300000000000000"
    "00000000004500000000025cd8ef520000000000000000016585b6f3c1000001"
    "6585b6f3c1ffffffffffffffffffffffffffff00000001260000000106686472"
    "0208686b6579086876616c"
)
#: (position, size, CRC) of each batch of BROKER_BATCHES.
BROKER_BATCH_LAYOUT = [(0, 71, 0x0318A270), (71, 76, 0xC85CBD23), (147, 71, 0x2E0B85B7),
                       (218, 81, 0x5CD8EF52)]  # fmt: skip

# kafka-python test_records.record_batch_data_v1: four magic-1 messages, offsets 0-3.
BROKER_V1_MESSAGES = [
    bytes.fromhex("000000000000000000000019478628c201000000015e1867abaeffffffff00000003313233"),
    bytes.fromhex("000000000000000100000016ef98c92001000000015e1867afc0ffffffff00000000"),
    bytes.fromhex("0000000000000002000000165faffb5e01000000015e1867b072ffffffff00000000"),
    bytes.fromhex("000000000000000300000019a812572001000000015e1867b803ffffffff00000003313233"),
]

_HEADER = struct.Struct(">qiibIhiqqqhii")


def recompute_crc(batch: bytes | bytearray) -> bytes:
    """Return ``batch`` with its CRC-32C rewritten to match its (possibly edited) bytes."""
    buf = bytearray(batch)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def patch(batch: bytes, offset: int, fmt: str, value: int, *, fix_crc: bool = True) -> bytes:
    """Overwrite one big-endian field of ``batch``; by default keep the CRC valid."""
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    return recompute_crc(buf) if fix_crc else bytes(buf)


def raw_batch(
    payload: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    last_offset_delta: int = 0,
    base_timestamp: int = 0,
    max_timestamp: int = 0,
) -> bytes:
    """A v2 batch around hand-written record bytes, with a correct CRC."""
    header = _HEADER.pack(base_offset, 49 + len(payload), 0, 2, 0, attributes, last_offset_delta,
                          base_timestamp, max_timestamp, -1, -1, -1, count)  # fmt: skip
    return recompute_crc(header + payload)


def zigzag(v: int) -> bytes:
    """A zig-zag varint written independently of the code under test."""
    u = (v << 1) ^ (v >> 63)
    u &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record_bytes(body: bytes, length: int | None = None) -> bytes:
    """A v2 record whose length prefix is ``length`` (default: the body's size)."""
    return zigzag(len(body) if length is None else length) + body


def padded_record(fields: bytes, size: int = 100) -> bytes:
    """Record fields followed by zero bytes up to ``size``, as DefaultRecordTest writes them."""
    return record_bytes(fields + bytes(size - len(fields)))


#: Record attributes, timestampDelta 2 and offsetDelta 1: the start of DefaultRecordTest's records.
ATTRS_TS_OFFSET = b"\x00" + zigzag(2) + zigzag(1)
NULL_KEY_VALUE = ATTRS_TS_OFFSET + zigzag(-1) + zigzag(-1)


# --- assertions ---------------------------------------------------------------------------------


def decode(batch: bytes, *, verify_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Parse and decode the v2 batch at the start of ``batch``."""
    header = parse_v2_header(batch, 0)
    return header, decode_v2(batch, header, verify_crc=verify_crc)


def assert_corrupt(batch: bytes | bytearray, *, verify_crc: bool = True) -> None:
    """Parsing or decoding ``batch`` raises CorruptRecordError (and nothing else)."""
    with pytest.raises(CorruptRecordError):
        header = parse_v2_header(batch, 0)
        decode_v2(batch, header, verify_crc=verify_crc)


def decode_or_corrupt(batch: bytes | bytearray, *, verify_crc: bool, pos: int = 0) -> None:
    """Decoding either succeeds with the declared record count or raises CorruptRecordError."""
    try:
        header = parse_v2_header(batch, pos)
        records = decode_v2(batch, header, verify_crc=verify_crc)
    except CorruptRecordError:
        return
    assert len(records) == header.record_count


# --- hypothesis strategies ----------------------------------------------------------------------

_BLOBS = st.one_of(
    st.none(),
    st.binary(max_size=48),
    # repeated chunks, so that compressed batches really shrink
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=4), st.integers(1, 64)),
)
_HEADER_NAMES = st.text(max_size=12)
HEADERS = st.lists(st.tuples(_HEADER_NAMES, _BLOBS), max_size=3).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn, *, max_records: int = 12, base_offset: int | None = None) -> list[Record]:
    """Records with increasing offsets (gaps allowed) and CreateTime timestamps."""
    n = draw(st.integers(min_value=1, max_value=max_records))
    offset = draw(st.integers(0, 2**40)) if base_offset is None else base_offset
    base_ts = draw(st.integers(min_value=0, max_value=2**42))
    records = []
    for _ in range(n):
        timestamp = base_ts + draw(st.integers(min_value=-min(base_ts, 10**6), max_value=10**6))
        headers: tuple[Header, ...] = draw(HEADERS)
        records.append(Record(offset, timestamp, draw(_BLOBS), draw(_BLOBS), headers))
        offset += draw(st.integers(min_value=1, max_value=3))
    return records


def compressible_tail(records: list[Record]) -> list[Record]:
    """``records`` plus one record that compresses well, so a compressed batch stays compressed."""
    last = records[-1]
    return [*records, Record(last.offset + 1, last.timestamp, None, b"kafka-log " * 64, ())]


@st.composite
def v2_batches(draw: st.DrawFn) -> bytes:
    """A valid v2 batch of a few records, of any codec."""
    records = draw(record_lists(max_records=5))
    codec = draw(st.sampled_from(list(Codec)))
    if codec is not Codec.NONE:
        records = compressible_tail(records)
    return encode_v2_batch(records, codec=codec, leader_epoch=draw(st.integers(-1, 100)))
