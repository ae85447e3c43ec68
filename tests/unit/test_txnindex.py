"""Transaction index: the §7.6 entry vector, ports of TransactionIndexTest, round trips."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.errors import CorruptIndexError
from rlm.log.txnindex import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
    encode_aborted_txn,
)

TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


def make_index(txns: list[AbortedTxn], base_offset: int = 0) -> TransactionIndex:
    index = TransactionIndex(base_offset)
    for txn in txns:
        index.append(txn)
    return index


def test_aborted_txn_vector() -> None:
    # TransactionIndexTest.testAbortedTxnSerde values.
    txn = AbortedTxn(983493, 137, 299, 200)
    data = bytes.fromhex("0000 00000000000f01c5 0000000000000089 000000000000012b 00000000000000c8")
    assert ENTRY_SIZE == 34
    assert encode_aborted_txn(txn) == data
    assert list(TransactionIndex.from_bytes(0, data).entries()) == [txn]
    assert make_index([txn]).to_bytes() == data


def test_collect_aborted_transactions() -> None:
    index = make_index(TXNS)
    assert index.collect_aborted(0, 100) == TxnIndexSearchResult(TXNS, False)
    assert index.collect_aborted(0, 32) == (TXNS[0:3], True)
    assert index.collect_aborted(0, 35) == (TXNS, True)
    assert index.collect_aborted(10, 35) == (TXNS, True)
    assert index.collect_aborted(11, 35) == (TXNS[1:4], True)
    assert index.collect_aborted(20, 41) == (TXNS[2:4], False)


def test_truncate() -> None:
    txns = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    index = make_index(txns)
    index.truncate_to(51)
    assert index.collect_aborted(0, 100).aborted == txns
    index.truncate_to(50)
    assert index.collect_aborted(0, 100).aborted == txns[0:3]
    assert index.last_offset == 35
    index.append(AbortedTxn(4, 40, 45, 46))  # appends continue after the cut
    index.reset()
    assert index.collect_aborted(0, 100).aborted == []
    assert index.last_offset is None


def test_last_offset_must_increase() -> None:
    index = make_index([AbortedTxn(1, 5, 15, 13)])
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(0, 0, 10, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 2**63, 11))
    assert len(index) == 1


def test_reopen_and_append(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    make_index(TXNS).write(path)
    assert path.stat().st_size == 4 * ENTRY_SIZE
    reopened = TransactionIndex.load(path)
    extra = AbortedTxn(3, 50, 60, 55)
    reopened.append(extra)
    reopened.write()
    assert list(TransactionIndex.load(path, 0).entries()) == [*TXNS, extra]


def test_missing_file_is_empty(tmp_path: Path) -> None:
    index = TransactionIndex.load(tmp_path / "00000000000000000300.txnindex")
    assert len(index) == 0 and index.base_offset == 300
    index.sanity_check()


def test_sanity_check_with_another_base_offset(tmp_path: Path) -> None:
    path = tmp_path / "t.txnindex"
    make_index(TXNS).write(path)
    TransactionIndex.load(path, 0).sanity_check()
    with pytest.raises(CorruptIndexError, match="less than the base offset 100") as info:
        TransactionIndex.load(path, 100).sanity_check()
    assert info.value.path == str(path)
    assert str(path) in str(info.value)


def test_trailing_partial_entry_is_ignored_but_reported(tmp_path: Path) -> None:
    data = make_index(TXNS).to_bytes() + b"\x00" * 20
    index = TransactionIndex.from_bytes(0, data, path="p.txnindex")
    assert list(index.entries()) == TXNS
    with pytest.raises(CorruptIndexError, match="20 trailing bytes") as info:
        index.sanity_check()
    assert info.value.position == 4 * ENTRY_SIZE
    index.truncate_to(35)  # the cut removes the partial entry as well
    index.sanity_check()


@pytest.mark.parametrize(
    ("txns", "problem"),
    [
        ([AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 10, 13)], "does not increase"),
        ([AbortedTxn(0, 12, 10, 11)], "below the first offset 12"),
    ],
)
def test_sanity_check_reports_disorder(txns: list[AbortedTxn], problem: str) -> None:
    data = b"".join(encode_aborted_txn(t) for t in txns)
    with pytest.raises(CorruptIndexError, match=problem):
        TransactionIndex.from_bytes(0, data).sanity_check("x.txnindex")


@pytest.mark.parametrize("version", [1, -1, 0x0100])
def test_unknown_version_is_rejected(version: int) -> None:
    data = encode_aborted_txn(TXNS[0]) + struct.pack(">hqqqq", version, 1, 2, 3, 4)
    with pytest.raises(CorruptIndexError, match=f"version {version}") as info:
        TransactionIndex.from_bytes(0, data, path="v.txnindex")
    assert info.value.path == "v.txnindex" and info.value.position == ENTRY_SIZE


@st.composite
def txn_lists(draw: st.DrawFn) -> list[AbortedTxn]:
    lasts = sorted(draw(st.sets(st.integers(0, 10_000), max_size=30)))
    txns = []
    for last in lasts:
        first = draw(st.integers(0, last))
        lso = draw(st.integers(first, 10_001))
        txns.append(AbortedTxn(draw(st.integers(0, 2**63 - 1)), first, last, lso))
    return txns


@given(txns=txn_lists(), fetch=st.integers(0, 10_001), span=st.integers(0, 10_001))
def test_round_trip_and_collect_matches_brute_force(txns: list[AbortedTxn], fetch: int, span: int) -> None:
    index = TransactionIndex.from_bytes(0, make_index(txns).to_bytes())
    assert list(index.entries()) == txns
    index.sanity_check()
    upper = fetch + span
    expected, done = [], False
    for txn in txns:
        if txn.last_offset >= fetch and txn.first_offset < upper:
            expected.append(txn)
        if txn.last_stable_offset >= upper:
            done = True
            break
    assert index.collect_aborted(fetch, upper) == (expected, done)


@given(data=st.binary(max_size=300))
def test_any_bytes_load_or_raise_corrupt_index(data: bytes) -> None:
    try:
        index = TransactionIndex.from_bytes(5, data, path="fuzz")
        index.sanity_check()
    except CorruptIndexError as exc:
        assert exc.path == "fuzz"
