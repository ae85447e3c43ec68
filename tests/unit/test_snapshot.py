"""Producer-state snapshots: the §7.6 vector and ProducerStateManagerTest's corrupt-file cases."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.errors import CorruptCheckpointError
from rlm.log.files import segment_file_name
from rlm.log.snapshot import (
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)

TS = 1_700_000_000_000
ENTRY = ProducerStateEntry(1000, 2, 9, 57, 4, TS, -1, -1)
VECTOR = bytes.fromhex(
    "0001 ac3fed0c 00000001 00000000000003e8 0002 00000009 0000000000000039 00000004"
    "0000018bcfe56800 ffffffff ffffffffffffffff"
)
EMPTY = bytes.fromhex("0001 48674bc7 00000000")


def test_vector_with_one_entry() -> None:
    assert len(VECTOR) == 56
    assert encode_snapshot([ENTRY]) == VECTOR
    assert decode_snapshot(VECTOR) == [ENTRY]


def test_empty_snapshot_vector() -> None:
    assert encode_snapshot([]) == EMPTY
    assert crc32c.crc32c(bytes(4)) == 0x48674BC7
    assert decode_snapshot(EMPTY) == []


def test_write_and_read(tmp_path: Path) -> None:
    path = tmp_path / segment_file_name(58, ".snapshot")
    entries = [ENTRY, ProducerStateEntry(7, 0, 0, 100, 0, TS + 5, 3, 90)]
    write_snapshot(path, entries)
    assert path.name == "00000000000000000058.snapshot"
    assert read_snapshot(path) == entries
    assert not list(tmp_path.glob("*.tmp"))


def corrupt_file(tmp_path: Path, data: bytes) -> CorruptCheckpointError:
    path = tmp_path / "00000000000000000058.snapshot"
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError) as info:
        read_snapshot(path)
    assert info.value.path == str(path)
    return info.value


def test_load_from_empty_snapshot_file(tmp_path: Path) -> None:
    assert "truncated" in str(corrupt_file(tmp_path, b""))


def test_load_from_truncated_snapshot_file(tmp_path: Path) -> None:
    assert "truncated" in str(corrupt_file(tmp_path, VECTOR[: len(VECTOR) // 2]))
    assert "truncated" in str(corrupt_file(tmp_path, VECTOR[:-1]))


def test_load_from_corrupt_snapshot_file(tmp_path: Path) -> None:
    middle = len(VECTOR) // 2
    garbage = VECTOR[:middle] + bytes([37]) + VECTOR[middle + 1 :]
    assert "CRC mismatch" in str(corrupt_file(tmp_path, garbage))


def test_wrong_version_count_and_length(tmp_path: Path) -> None:
    assert "unknown version 2" in str(corrupt_file(tmp_path, b"\x00\x02" + VECTOR[2:]))
    negative = VECTOR[:6] + struct.pack(">i", -1) + VECTOR[10:]
    assert "negative entry count" in str(corrupt_file(tmp_path, negative))
    assert "trailing bytes" in str(corrupt_file(tmp_path, VECTOR + b"\x00"))
    huge = VECTOR[:6] + struct.pack(">i", 2**31 - 1) + VECTOR[10:]
    assert "truncated" in str(corrupt_file(tmp_path, huge))


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_snapshot(tmp_path / "00000000000000000001.snapshot")


def test_out_of_range_field_is_rejected() -> None:
    with pytest.raises(ValueError, match="cannot encode"):
        encode_snapshot([ENTRY._replace(epoch=2**15)])


int16, int32 = st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
entries = st.builds(ProducerStateEntry, int64, int16, int32, int64, int32, int64, int32, int64)


@given(st.lists(entries, max_size=20))
def test_round_trip(items: list[ProducerStateEntry]) -> None:
    data = encode_snapshot(items)
    assert len(data) == 10 + 46 * len(items)
    assert decode_snapshot(data) == items


@given(data=st.binary(max_size=200))
def test_any_bytes_decode_or_raise_corrupt_checkpoint(data: bytes) -> None:
    try:
        decoded = decode_snapshot(data, path="fuzz")
    except CorruptCheckpointError as exc:
        assert exc.path == "fuzz"
    else:
        assert encode_snapshot(decoded) == data
