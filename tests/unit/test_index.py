"""Offset and time indexes: Kafka's byte vectors, ports of OffsetIndexTest/TimeIndexTest, fuzzing."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.errors import CorruptIndexError, OffsetOverflowError
from rlm.log.files import parse_base_offset, segment_file_name
from rlm.log.index import (
    DEFAULT_MAX_INDEX_SIZE,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
)
from rlm.log.model import INT32_MAX

TS = 1_700_000_000_000  # 0x18bcfe56800, the TS of the spec's synthetic vectors

Batch = tuple[int, int, int]  # (last offset, max timestamp, size in bytes)


def recover(base: int, batches: list[Batch], interval: int) -> tuple[OffsetIndex, TimeIndex]:
    """Build both indexes the way LogSegment.recover does, one batch at a time."""
    offsets, times = OffsetIndex(base), TimeIndex(base)
    valid = last_entry = 0
    max_ts, max_ts_offset = -1, base
    for last_offset, max_timestamp, size in batches:
        if max_timestamp > max_ts:
            max_ts, max_ts_offset = max_timestamp, last_offset
        if valid - last_entry > interval:
            offsets.append(last_offset, valid)
            times.maybe_append(max_ts, max_ts_offset)
            last_entry = valid
        valid += size
    times.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
    return offsets, times


# --- §7.6 vectors ---------------------------------------------------------------------------


def test_log_segment_test_vector() -> None:
    # LogSegmentTest.testFindOffsetByTimestamp: ten 39-byte v1 messages, timestamps offset*10.
    offsets, times = recover(40, [(o, o * 10, 39) for o in range(40, 50)], interval=77)
    assert offsets.to_bytes() == bytes.fromhex(
        "00000002 0000004e 00000004 0000009c 00000006 000000ea 00000008 00000138"
    )
    assert times.to_bytes() == bytes.fromhex(
        "00000000000001a4 00000002 00000000000001b8 00000004 00000000000001cc 00000006"
        "00000000000001e0 00000008 00000000000001ea 00000009"
    )
    loaded = TimeIndex.from_bytes(40, times.to_bytes())
    assert loaded.last_entry == TimestampOffset(490, 49)
    assert loaded.lookup(420) == TimestampOffset(420, 42)
    assert loaded.lookup(421) == TimestampOffset(420, 42)
    assert loaded.lookup(399) == TimestampOffset(-1, 40)
    assert loaded.lookup(491) == TimestampOffset(490, 49)
    assert OffsetIndex.from_bytes(40, offsets.to_bytes()).lookup(43) == OffsetPosition(42, 78)


def test_synthetic_v2_vector() -> None:
    deltas = [0, 10, 5, 20, 30, 25, 40, 35]
    batches = [(1000 + i, TS + d, 2070) for i, d in enumerate(deltas)]
    offsets, times = recover(1000, batches, interval=4096)
    assert offsets.to_bytes() == bytes.fromhex("00000002 0000102c 00000004 00002058 00000006 00003084")
    assert times.to_bytes() == bytes.fromhex(
        "0000018bcfe5680a 00000001 0000018bcfe5681e 00000004 0000018bcfe56828 00000006"
    )
    assert times.lookup(TS + 22) == TimestampOffset(TS + 10, 1001)
    assert offsets.lookup(1001) == OffsetPosition(1000, 0)


# --- OffsetIndexTest ------------------------------------------------------------------------

BASE = 45


@pytest.fixture
def index() -> OffsetIndex:
    return OffsetIndex(BASE, 30 * 8)


def monotonic_seq(rng: random.Random, base: int, length: int) -> list[int]:
    seq, last = [], base
    for _ in range(length):
        last += rng.randint(1, 15)
        seq.append(last)
    return seq


def test_random_lookup(index: OffsetIndex) -> None:
    rng = random.Random(45)
    assert index.lookup(92) == OffsetPosition(BASE, 0)
    offsets = monotonic_seq(rng, BASE + 1, index.max_entries)
    positions = monotonic_seq(rng, 0, index.max_entries)
    for offset, position in zip(offsets, positions, strict=True):
        index.append(offset, position)
    for offset, position in zip(offsets, positions, strict=True):
        assert index.lookup(offset) == OffsetPosition(offset, position)
    for target in rng.sample(range(BASE, offsets[-1]), 30):
        below = [(o, p) for o, p in zip(offsets, positions, strict=True) if o <= target]
        assert index.lookup(target) == (OffsetPosition(*below[-1]) if below else (BASE, 0))


def test_lookup_extreme_cases(index: OffsetIndex) -> None:
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    last = BASE + index.max_entries
    assert index.lookup(last) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(2**62) == OffsetPosition(last, index.max_entries - 1)


def test_entry_and_entry_overflow(index: OffsetIndex) -> None:
    with pytest.raises(IndexError):
        index.entry(0)
    for i in range(index.max_entries):
        index.append(BASE + i, i)
    assert [index.entry(i) for i in range(30)] == [(BASE + i, i) for i in range(30)]
    with pytest.raises(IndexError):
        index.entry(30)


def test_append_too_many_and_out_of_order(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.is_full()
    with pytest.raises(ValueError, match="full"):
        index.append(BASE + 100, 1000)
    small = OffsetIndex(0)
    small.append(51, 0)
    with pytest.raises(ValueError, match="last offset is 51"):
        small.append(50, 1)
    with pytest.raises(ValueError):
        small.append(51, 1)


def test_append_overflow() -> None:
    index = OffsetIndex(100)
    with pytest.raises(OffsetOverflowError):
        index.append(99, 0)
    with pytest.raises(OffsetOverflowError):
        index.append(100 + INT32_MAX + 1, 0)
    index.append(100 + INT32_MAX, 0)
    with pytest.raises(ValueError):
        OffsetIndex(0).append(1, -1)


def test_reopen(index: OffsetIndex, tmp_path: Path) -> None:
    path = tmp_path / segment_file_name(BASE, ".index")
    index.append(51, 0)
    index.append(52, 1)
    index.write(path)
    assert path.read_bytes() == struct.pack(">iiii", 6, 0, 7, 1)
    assert not list(tmp_path.glob("*.tmp"))
    reopened = OffsetIndex.load(path)  # base offset from the file name
    assert reopened.base_offset == BASE and reopened.path == str(path)
    assert reopened.lookup(51) == OffsetPosition(51, 0)
    assert reopened.lookup(52) == OffsetPosition(52, 1)
    assert reopened.last_offset == 52 and len(reopened) == 2
    # Kafka reopens a trimmed index with a capacity of its own size: no more appends.
    trimmed = OffsetIndex.load(path, BASE, max_index_size=path.stat().st_size)
    with pytest.raises(ValueError, match="full"):
        trimmed.append(53, 2)


def test_truncate() -> None:
    idx = OffsetIndex(0, 10 * 8)
    for i in range(1, 10):
        idx.append(i, i)
    idx.truncate_to(12)
    assert idx.lookup(10) == OffsetPosition(9, 9) and idx.last_offset == 9
    idx.append(10, 10)
    idx.truncate_to(10)
    assert idx.lookup(10) == OffsetPosition(9, 9) and idx.last_offset == 9
    idx.append(10, 10)
    idx.truncate_to(9)
    assert idx.lookup(10) == OffsetPosition(8, 8) and idx.last_offset == 8
    idx.append(9, 9)
    idx.truncate_to(5)
    assert idx.lookup(10) == OffsetPosition(4, 4) and idx.last_offset == 4
    idx.append(5, 5)
    idx.reset()
    assert len(idx) == 0 and idx.last_entry == OffsetPosition(0, 0)
    idx.append(0, 0)


def test_sanity_last_offset_equal_to_base_offset() -> None:
    idx = OffsetIndex(20, 10 * 8)
    idx.append(20, 0)
    idx.sanity_check()
    # (20, 0) is 8 zero bytes, which read back as an empty preallocated index; a lookup answers
    # the same either way.
    reread = OffsetIndex.from_bytes(20, idx.to_bytes())
    assert len(reread) == 0 and reread.lookup(25) == idx.lookup(25) == OffsetPosition(20, 0)
    other = OffsetIndex(20)
    other.append(20, 9)
    assert list(OffsetIndex.from_bytes(20, other.to_bytes()).entries()) == [(20, 9)]


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([(5, 0), (-1, 10)], "last offset 44 is less than the base offset"),
        ([(-2, 0), (5, 10)], "relative offset -2 in slot 0 is negative"),
        ([(5, 0), (3, 10)], "offset in slot 1 is not above"),
        ([(5, 0), (6, -10)], "position -10 in slot 1 is negative"),
        ([(5, 20), (6, 10)], "position in slot 1 is not above"),
    ],
)
def test_offset_sanity_check_names_file_and_problem(entries: list[tuple[int, int]], problem: str) -> None:
    data = b"".join(struct.pack(">ii", *e) for e in entries)
    idx = OffsetIndex.from_bytes(BASE, data, path="/logs/t-0/00000000000000000045.index")
    with pytest.raises(CorruptIndexError, match=problem) as info:
        idx.sanity_check()
    assert info.value.path == "/logs/t-0/00000000000000000045.index"
    assert "00000000000000000045.index" in str(info.value)
    with pytest.raises(CorruptIndexError, match=r"elsewhere\.index"):
        idx.sanity_check("elsewhere.index")


# --- TimeIndexTest --------------------------------------------------------------------------

MAX_ENTRIES = 30


@pytest.fixture
def tindex() -> TimeIndex:
    return TimeIndex(BASE, MAX_ENTRIES * 12)


def append_entries(idx: TimeIndex, count: int) -> None:
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE)


def test_time_lookup(tindex: TimeIndex) -> None:
    assert tindex.lookup(100) == TimestampOffset(-1, BASE)
    append_entries(tindex, MAX_ENTRIES - 1)
    assert tindex.lookup(9) == TimestampOffset(-1, BASE)
    assert tindex.lookup(25) == TimestampOffset(20, 65)
    assert tindex.lookup(30) == TimestampOffset(30, 75)
    assert [tindex.entry(i) for i in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]


def test_time_truncate(tindex: TimeIndex) -> None:
    append_entries(tindex, MAX_ENTRIES - 1)
    tindex.reset()
    assert len(tindex) == 0
    append_entries(tindex, MAX_ENTRIES - 1)
    tindex.truncate_to(10 + BASE)
    assert len(tindex) == 0
    append_entries(tindex, 5)
    tindex.truncate_to(66)  # removes offsets >= 66: (30, 75) and later
    assert list(tindex.entries()) == [(10, 55), (20, 65)]


def test_time_is_full_and_append(tindex: TimeIndex) -> None:
    assert not tindex.is_full()
    append_entries(tindex, MAX_ENTRIES - 1)
    assert tindex.is_full()
    with pytest.raises(ValueError, match="full"):
        tindex.maybe_append(10000, 1000)
    with pytest.raises(ValueError, match="offset"):
        tindex.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    assert tindex.maybe_append(10000, 1000, skip_full_check=True)
    with pytest.raises(ValueError, match="no slot left"):
        tindex.maybe_append(20000, 1001, skip_full_check=True)


def test_time_append_rules() -> None:
    idx = TimeIndex(BASE)
    assert idx.last_entry == TimestampOffset(-1, BASE)
    assert not idx.maybe_append(-1, BASE)  # v0 data never creates entries
    assert idx.maybe_append(1, BASE + 1)
    assert idx.last_entry == TimestampOffset(1, BASE + 1)
    assert not idx.maybe_append(1, BASE + 5)  # same timestamp: the final entry already exists
    with pytest.raises(ValueError, match="timestamp"):
        idx.maybe_append(0, BASE + 6)
    with pytest.raises(ValueError, match="offset"):
        idx.maybe_append(5, BASE)
    with pytest.raises(OffsetOverflowError):
        idx.maybe_append(7, BASE + INT32_MAX + 1)
    with pytest.raises(OffsetOverflowError):
        TimeIndex(BASE).maybe_append(7, BASE - 1)


def test_time_sanity_check(tindex: TimeIndex, tmp_path: Path) -> None:
    tindex.sanity_check()
    append_entries(tindex, 5)
    tindex.sanity_check()
    good = tindex.to_bytes()
    path = tmp_path / "00000000000000000045.timeindex"

    def check(data: bytes, problem: str) -> None:
        path.write_bytes(data)
        with pytest.raises(CorruptIndexError, match=problem) as info:
            TimeIndex.load(path).sanity_check()
        assert info.value.path == str(path)

    bad_offset = good[:-4] + struct.pack(">i", -1)
    check(bad_offset, "last offset 44 is less than the base offset")
    bad_timestamp = good[:-12] + struct.pack(">qi", 9, 50)
    check(bad_timestamp, "last timestamp 9 is less than the first timestamp 10")
    check(good[:-1], "length 59 is not a multiple of the entry size 12")
    middle = good[:24] + struct.pack(">qi", 15, 20) + good[36:]
    check(middle, "timestamp in slot 2 is not above")
    path.write_bytes(good)
    TimeIndex.load(path).sanity_check()


# --- preallocated files, tails, garbage ---------------------------------------------------


def test_preallocated_offset_index_file(tmp_path: Path) -> None:
    path = tmp_path / segment_file_name(1000, ".index")
    entries = struct.pack(">iiiiii", 0, 0, 2, 4140, 4, 8280)  # slot 0 may hold relative offset 0
    path.write_bytes(entries + bytes(DEFAULT_MAX_INDEX_SIZE - len(entries)))
    idx = OffsetIndex.load(path)
    assert list(idx.entries()) == [(1000, 0), (1002, 4140), (1004, 8280)]
    idx.sanity_check()
    idx.append(1006, 12420)
    idx.write()
    assert path.stat().st_size == 32


def test_preallocated_time_index_file(tmp_path: Path) -> None:
    path = tmp_path / segment_file_name(1000, ".timeindex")
    entries = struct.pack(">qiqiqi", 0, 0, TS, 1, TS + 1, 1)  # slot 0 may be all zeros
    path.write_bytes(entries + bytes(873813 * 12 - len(entries)))
    idx = TimeIndex.load(path)
    assert list(idx.entries()) == [(0, 1000), (TS, 1001), (TS + 1, 1001)]
    idx.sanity_check()


def test_all_zero_file_is_an_empty_index(tmp_path: Path) -> None:
    path = tmp_path / segment_file_name(7, ".index")
    path.write_bytes(bytes(DEFAULT_MAX_INDEX_SIZE))
    idx = OffsetIndex.load(path)
    assert len(idx) == 0 and idx.lookup(100) == OffsetPosition(7, 0)
    idx.sanity_check()
    tidx = TimeIndex.from_bytes(7, bytes(873813 * 12))
    assert len(tidx) == 0 and tidx.last_entry == TimestampOffset(-1, 7)
    tidx.sanity_check()


def test_zero_tail_not_multiple_of_entry_size_is_accepted() -> None:
    idx = OffsetIndex.from_bytes(0, struct.pack(">ii", 3, 7) + bytes(13))
    assert list(idx.entries()) == [(3, 7)]
    idx.sanity_check()
    tidx = TimeIndex.from_bytes(0, struct.pack(">qi", 3, 7) + bytes(5))
    assert list(tidx.entries()) == [(3, 7)]
    tidx.sanity_check()


def test_non_zero_bytes_after_the_zero_slot_are_reported() -> None:
    data = struct.pack(">iiiiii", 3, 7, 0, 0, 9, 20)
    idx = OffsetIndex.from_bytes(0, data, path="x.index")
    assert len(idx) == 1
    with pytest.raises(CorruptIndexError, match="zero slot 1 but non-zero bytes follow") as info:
        idx.sanity_check()
    assert info.value.position == 19
    partial = OffsetIndex.from_bytes(0, struct.pack(">ii", 3, 7) + b"\x01", path="x.index")
    with pytest.raises(CorruptIndexError, match="length 9 is not a multiple"):
        partial.sanity_check()


def test_write_clears_tail_problem(tmp_path: Path) -> None:
    idx = OffsetIndex.from_bytes(0, struct.pack(">ii", 3, 7) + b"\x01")
    idx.write(tmp_path / "a.index")
    idx.sanity_check()
    with pytest.raises(ValueError, match="no path"):
        OffsetIndex(0).write()


def test_random_garbage_is_reported_with_the_file_name(tmp_path: Path) -> None:
    rng = random.Random(7)
    for kind, suffix in ((OffsetIndex, ".index"), (TimeIndex, ".timeindex")):
        path = tmp_path / f"00000000000000000000{suffix}"
        path.write_bytes(rng.randbytes(1 << 20))
        idx = kind.load(path)
        with pytest.raises(CorruptIndexError) as info:
            idx.sanity_check()
        assert str(path) in str(info.value)


@given(kind=st.sampled_from([OffsetIndex, TimeIndex]), data=st.binary(max_size=400))
def test_any_bytes_load_and_either_pass_or_raise_corrupt_index(
    kind: type[OffsetIndex] | type[TimeIndex], data: bytes
) -> None:
    idx = kind.from_bytes(7, data, path="fuzz")
    try:
        idx.sanity_check()
    except CorruptIndexError as exc:
        assert exc.path == "fuzz"
        return
    assert kind.from_bytes(7, idx.to_bytes()).to_bytes() == idx.to_bytes()


# --- properties -----------------------------------------------------------------------------


@st.composite
def offset_entries(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    base = draw(st.integers(0, 2**40))
    rels = sorted(draw(st.sets(st.integers(0, INT32_MAX), max_size=60)))
    # Kafka never indexes position 0 (the first batch of a segment).
    positions = sorted(draw(st.sets(st.integers(1, INT32_MAX), min_size=len(rels), max_size=len(rels))))
    return base, [(base + r, p) for r, p in zip(rels, positions, strict=True)]


@st.composite
def time_entries(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    base = draw(st.integers(0, 2**40))
    stamps = sorted(draw(st.sets(st.integers(1, 2**63 - 1), max_size=60)))
    n = len(stamps)
    rels = sorted(draw(st.lists(st.integers(0, INT32_MAX), min_size=n, max_size=n)))
    return base, [(t, base + r) for t, r in zip(stamps, rels, strict=True)]


@given(case=offset_entries(), targets=st.lists(st.integers(0, 2**41), max_size=20), pad=st.booleans())
def test_offset_index_round_trip_and_lookup(
    case: tuple[int, list[tuple[int, int]]], targets: list[int], pad: bool
) -> None:
    base, entries = case
    idx = OffsetIndex(base)
    for offset, position in entries:
        idx.append(offset, position)
    data = idx.to_bytes()
    assert data == b"".join(struct.pack(">ii", o - base, p) for o, p in entries)
    loaded = OffsetIndex.from_bytes(base, data + (bytes(800) if pad else b""))
    assert list(loaded.entries()) == entries
    loaded.sanity_check()
    for target in [*targets, *(o for o, _ in entries), base - 1]:
        below = [e for e in entries if e[0] <= target]
        assert loaded.lookup(target) == (below[-1] if below else (base, 0))


@given(case=time_entries(), targets=st.lists(st.integers(-2, 2**63), max_size=20), pad=st.booleans())
def test_time_index_round_trip_and_lookup(
    case: tuple[int, list[tuple[int, int]]], targets: list[int], pad: bool
) -> None:
    base, entries = case
    idx = TimeIndex(base)
    for timestamp, offset in entries:
        assert idx.maybe_append(timestamp, offset)
    data = idx.to_bytes()
    assert data == b"".join(struct.pack(">qi", t, o - base) for t, o in entries)
    loaded = TimeIndex.from_bytes(base, data + (bytes(1200) if pad else b""))
    assert list(loaded.entries()) == entries
    loaded.sanity_check()
    for target in [*targets, *(t for t, _ in entries)]:
        below = [e for e in entries if e[0] <= target]
        assert loaded.lookup(target) == (below[-1] if below else (-1, base))


@given(case=offset_entries(), cut=st.integers(0, 2**41))
def test_truncate_removes_offsets_at_or_above(case: tuple[int, list[tuple[int, int]]], cut: int) -> None:
    base, entries = case
    idx = OffsetIndex.from_bytes(base, b"".join(struct.pack(">ii", o - base, p) for o, p in entries))
    idx.truncate_to(cut)
    assert list(idx.entries()) == [e for e in entries if e[0] < cut]


# --- file names -----------------------------------------------------------------------------


def test_segment_file_names() -> None:
    assert segment_file_name(40, ".index") == "00000000000000000040.index"
    assert segment_file_name(2**63 - 1, ".log") == "09223372036854775807.log"
    assert parse_base_offset("00000000000000000040.index") == 40
    assert parse_base_offset(os.path.join("a-0", "00000000000000368769.log.deleted")) == 368769
    for bad in ("index", "abc.log", ".log", "-1.log", "99999999999999999999.log"):
        with pytest.raises(ValueError):
            parse_base_offset(bad)
    with pytest.raises(ValueError):
        segment_file_name(-1, ".log")
