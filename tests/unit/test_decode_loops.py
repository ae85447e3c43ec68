"""rlm.log._decode: the C record decoder never answers differently from the Python reference, into
columns or into Record tuples, on valid, extreme and mutated records and on any bytes at all; where
the reference finds corruption the C gives up at the same record (or before it, at a record only
the reference reads), and callers get the reference's error."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log import columns, v2
from rlm.log.columns import ColumnBuffers
from rlm.log.model import BatchHeader, Header, Record, TimestampType
from rlm.log.v2 import V2Records, encode_record

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
INT32_MAX = 2**31 - 1

needs_c = pytest.mark.skipif(
    not columns.ACCELERATED, reason="rlm.log._decode is not built here: only the reference exists to test"
)


def test_the_c_decoder_is_built() -> None:
    if os.environ.get("RLM_ALLOW_PURE_PYTHON"):
        pytest.skip(
            "RLM_ALLOW_PURE_PYTHON is set: installed without a C compiler on purpose; the Python "
            "reference decodes alone and the other tests here check it"
        )
    assert columns.ACCELERATED and v2.ACCELERATED, (
        "rlm.log._decode was not built: `pip install -e .` needs a C compiler and the Python headers"
    )


# Args: (data, pos, end, count, base_offset, base_ts, log_append, compressed, first, last)
Args = tuple[bytes, int, int, int, int, int, int | None, bool, int, int]
Outcome = tuple[int, list[bytes]] | str


def _header_for(records: bytes) -> BatchHeader:
    """A header for a batch of two uncompressed records at position 0 (its CRC is not checked)."""
    return BatchHeader(0, 0, 1, 61 + len(records), -1, 2, 0, 0, 0, 0, -1, -1, -1, 2)


def _prefilled(rows: int) -> ColumnBuffers:
    """Column buffers that already hold ``rows`` rows (bitmaps in a partly used byte)."""
    cols = ColumnBuffers()
    data = bytearray()
    for i in range(rows):
        encode_record(data, i, i, None if i % 3 == 0 else b"k", b"v" * i, [("p", None if i % 2 else b"q")])
    columns.append_v2_records_py(
        cols, V2Records(bytes(data), 0, len(data), rows, 0, 0, None, False), 0, INT64_MAX, 0
    )
    return cols


def _columns_outcome(decoder: object, args: Args, prefill: int) -> Outcome:
    cols = _prefilled(prefill)
    before = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
    data, pos, end, count, base_offset, base_ts, log_append, compressed, first, last = args
    try:
        if decoder == "c":
            from rlm.log import _decode

            appended = _decode.append_columns(
                cols.buffers,
                cols.used,
                data,
                pos,
                end,
                count,
                base_offset,
                base_ts,
                log_append,
                first,
                last,
                7,
            )
        else:
            fn = columns.append_v2_records if decoder == "dispatched" else columns.append_v2_records_py
            records = V2Records(data, pos, end, count, base_offset, base_ts, log_append, compressed)
            appended = fn(cols, records, first, last, 7)
    except CorruptRecordError as exc:
        assert [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))] == before  # nothing appended
        return f"corrupt: {exc}"
    except (ValueError, OverflowError) as exc:
        assert decoder == "c"
        assert [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))] == before  # taken back
        return f"gave up: {exc}"
    return appended, [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]


def _records_outcome(decoder: str, args: Args) -> list[Record] | str:
    records = V2Records(*args[:8])
    try:
        if decoder == "c":
            from rlm.log import _decode

            return _decode.decode_records(Record, *records[:7])
        return v2.decode_records_py(records)
    except CorruptRecordError as exc:
        return f"corrupt: {exc}"
    except (ValueError, OverflowError) as exc:
        assert decoder == "c"
        return f"gave up: {exc}"


def _same_position(expected: str, got: str) -> None:
    """Where the reference names the record it found corrupt, the C gave up at that record, or
    before it at a record the reference reads and the C leaves to it: a header key that is not
    UTF-8 (the C takes none, the reference replaces them), or a key, value or header value length
    below -1 (null to Kafka, as -1 is; the C takes only -1)."""
    named = re.search(r"\brecord (\d+)\b", expected)
    if named is not None and got.startswith("gave up: record "):
        at = re.match(
            r"gave up: record (\d+): (a header key is not UTF-8|bad key|bad value|bad header)$", got
        )
        if at is not None and int(at.group(1)) < int(named.group(1)):
            return
        assert got.startswith(f"gave up: record {named.group(1)}:"), (got, expected)


def _check(args: Args, *, c_must_answer: bool = False, prefill: int = 0) -> Outcome:
    expected = _columns_outcome("reference", args, prefill)
    assert _columns_outcome("dispatched", args, prefill) == expected
    records = _records_outcome("reference", args)
    assert isinstance(records, str) == isinstance(expected, str) or "outside int64" in str(expected)
    if not columns.ACCELERATED:
        return expected
    got = _columns_outcome("c", args, prefill)
    got_records = _records_outcome("c", args)
    if isinstance(expected, str):
        assert isinstance(got, str) and got.startswith("gave up"), (got, expected)  # never an answer
        _same_position(expected, got)
    else:
        assert got == expected or (isinstance(got, str) and not c_must_answer), (got, expected)
    if isinstance(records, str):
        assert isinstance(got_records, str) and got_records.startswith("gave up"), (got_records, records)
        _same_position(records, got_records)
    else:
        assert got_records == records or (isinstance(got_records, str) and not c_must_answer)
    return expected


headers_st = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
records_st = st.lists(
    st.tuples(
        st.one_of(st.integers(-1000, 1000), st.integers(INT64_MIN, INT64_MAX)),  # timestamp delta
        st.one_of(st.integers(0, 64), st.integers(-(2**31), INT32_MAX)),  # offset delta
        st.one_of(st.none(), st.binary(max_size=20)),  # key
        st.one_of(st.none(), st.binary(max_size=200)),  # value
        headers_st,
    ),
    max_size=12,
)


Spec = tuple[int, int, bytes | None, bytes | None, list[Header]]


def _encode(records: Sequence[Spec], lead: bytes) -> bytes:
    data = bytearray(lead)
    for ts_delta, offset_delta, key, value, headers in records:
        encode_record(data, offset_delta, ts_delta, key, value, headers)
    return bytes(data)


@settings(max_examples=400, deadline=None)
@given(
    records=records_st,
    base_offset=st.one_of(st.integers(0, 10**6), st.integers(0, INT64_MAX)),
    base_ts=st.one_of(st.integers(-1, 2 * 10**12), st.integers(INT64_MIN, INT64_MAX)),
    log_append=st.one_of(st.none(), st.integers(INT64_MIN, INT64_MAX)),
    first=st.one_of(st.integers(-5, 70), st.integers(INT64_MIN, INT64_MAX)),
    span=st.one_of(st.integers(0, 70), st.integers(0, INT64_MAX)),
    count_delta=st.integers(-2, 2),
    lead=st.binary(max_size=5),
    prefill=st.integers(0, 11),
)
def test_valid_and_extreme_records(
    records: list[tuple[int, int, bytes | None, bytes | None, list[Header]]],
    base_offset: int,
    base_ts: int,
    log_append: int | None,
    first: int,
    span: int,
    count_delta: int,
    lead: bytes,
    prefill: int,
) -> None:
    data = _encode(records, lead)
    count = max(0, len(records) + count_delta)
    last = min(INT64_MAX, first + span)
    args = (data, len(lead), len(data), count, base_offset, base_ts, log_append, False, first, last)
    in_range = all(
        INT64_MIN <= base_offset + r[1] <= INT64_MAX
        and (log_append is not None or INT64_MIN <= base_ts + r[0] <= INT64_MAX)
        for r in records
    )
    outcome = _check(args, c_must_answer=in_range, prefill=prefill)
    if count_delta == 0 and in_range:
        assert not isinstance(outcome, str)


@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=160),
    pos=st.integers(0, 170),
    end_cut=st.integers(0, 170),
    count=st.integers(-1, 20),
    log_append=st.one_of(st.none(), st.integers(-2, 2)),
)
def test_any_bytes(data: bytes, pos: int, end_cut: int, count: int, log_append: int | None) -> None:
    args = (data, pos, min(end_cut, len(data) + 3), count, 0, 0, log_append, True, -5, 10**6)
    _check(args)


def test_mutated_records() -> None:
    rng = random.Random(18)
    for _ in range(3000):
        n = rng.randint(1, 8)
        records: list[Spec] = [
            (
                rng.randint(-50, 500),
                i,
                None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 6)),
                rng.randbytes(rng.randint(0, 30)),
                [
                    (rng.choice(["h", "\u00e9", ""]), rng.choice([None, b"x"]))
                    for _ in range(rng.randint(0, 2))
                ],
            )
            for i in range(n)
        ]
        data = bytearray(_encode(records, b""))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = rng.randint(len(data) - 3, len(data))
        args = (bytes(data), 0, cut, n, 100, 1000, None, False, rng.randint(99, 104), rng.randint(100, 110))
        _check(args, prefill=rng.randint(0, 9))


@needs_c
def test_examples_the_c_answers() -> None:
    records: list[Spec] = [
        (5, 0, b"k", b"value", [("h", b"1"), ("\u00e9", None)]),
        (-3, 1, None, None, []),
        (9, 3, b"", b"", [("", b"")]),
    ]
    data = _encode(records, b"")
    args = (data, 0, len(data), 3, 1000, 10_000, None, False, 0, INT64_MAX)
    outcome = _check(args, c_must_answer=True, prefill=5)
    assert not isinstance(outcome, str) and outcome[0] == 3
    assert _records_outcome("c", args) == [
        Record(1000, 10_005, b"k", b"value", (("h", b"1"), ("\u00e9", None))),
        Record(1001, 9_997, None, None, ()),
        Record(1003, 10_009, b"", b"", (("", b""),)),
    ]
    outcome = _check((*args[:8], 1001, 1002), c_must_answer=True)
    assert not isinstance(outcome, str) and outcome[0] == 1


@needs_c
def test_corrupt_records_give_up_at_the_record_the_reference_names() -> None:
    two: list[Spec] = [(0, 0, b"k", b"v", []), (0, 1, b"k", b"v", [("\u00e9", None)])]
    trailing = _encode(two, b"") + b"\x00"
    for data, message, where in (
        (trailing, "corrupt: 1 bytes left in the batch after its 2 records", "gave up: record 2: "),
    ):
        args = (data, 0, len(data), 2, 0, 0, None, False, 0, 10)
        assert _check(args) == message
        got = _columns_outcome("c", args, 0)
        assert isinstance(got, str) and got.startswith(where)
        with pytest.raises(CorruptRecordError, match=message.removeprefix("corrupt: ")):
            v2.decode_v2(bytes(61) + data, _header_for(data), verify_crc=False)


@needs_c
def test_a_header_key_not_utf8_makes_c_give_up_and_the_reference_answers() -> None:
    two: list[Spec] = [(0, 0, b"k", b"v", []), (0, 1, b"k", b"v", [("\u00e9", None)])]
    bad_key = _encode(two, b"").replace("\u00e9".encode(), b"\xff\xfe")  # same length, not UTF-8
    args = (bad_key, 0, len(bad_key), 2, 0, 0, None, False, 0, 10)
    assert not isinstance(_check(args), str)
    got = _columns_outcome("c", args, 0)
    assert isinstance(got, str) and got.startswith("gave up: record 1: ")
    records = v2.decode_v2(bytes(61) + bad_key, _header_for(bad_key), verify_crc=False)
    assert records[1].headers == (("\ufffd\ufffd", None),)


# -- whole uncompressed batches: header fields and CRC read in C too ----------------------------


def _batch_outcomes(buf: bytes, verify: bool) -> tuple[object, object]:
    """The reference's records and columns of the batch at 0 (or its error), as the callers see it."""
    try:
        header = v2.parse_v2_header(buf, 0)
        records = v2.records_of(buf, header, verify)
        decoded: object = v2.decode_records_py(records)
    except CorruptRecordError as exc:
        return f"corrupt: {exc}", f"corrupt: {exc}"
    cols = ColumnBuffers()
    try:
        columns.append_v2_records_py(cols, records, -(2**63), INT64_MAX, 2)
    except CorruptRecordError as exc:
        return decoded, f"corrupt: {exc}"
    return decoded, [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]


def _check_batch(buf: bytes, verify: bool, *, c_must_answer: bool) -> None:
    want_records, want_columns = _batch_outcomes(buf, verify)
    if isinstance(want_records, list):  # the dispatched API answers as the reference
        assert v2.decode_v2(buf, v2.parse_v2_header(buf, 0), verify_crc=verify) == want_records
    if not columns.ACCELERATED:
        return
    from rlm.log import _decode

    try:
        got_records: object = _decode.decode_batch_records(Record, buf, 0, verify)
    except (ValueError, OverflowError):
        got_records = "gave up"
    cols = _prefilled(5)
    before = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
    try:
        _decode.append_batch_columns(cols.buffers, cols.used, buf, 0, verify, -(2**63), INT64_MAX, 2)
        got_columns: object = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
    except (ValueError, OverflowError):
        got_columns = "gave up"
        assert [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))] == before
    if not isinstance(want_columns, str):
        cols = _prefilled(5)
        columns.append_v2_records_py(
            cols, v2.records_of(buf, v2.parse_v2_header(buf, 0), verify), -(2**63), INT64_MAX, 2
        )
        want_columns = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
    for got, want in ((got_records, want_records), (got_columns, want_columns)):
        if isinstance(want, str) or not c_must_answer:
            assert got in (want, "gave up") if not isinstance(want, str) else got == "gave up"
        else:
            assert got == want


@settings(max_examples=300, deadline=None)
@given(
    records=records_st,
    log_append=st.booleans(),
    transactional=st.booleans(),
    verify=st.booleans(),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 3),
)
def test_whole_batches_valid_and_mutated(
    records: list[Spec],
    log_append: bool,
    transactional: bool,
    verify: bool,
    flips: list[tuple[int, int]],
    cut: int,
) -> None:
    rows = [
        Record(i, 1_700_000_000_000 + (r[0] % 10**6), r[2], r[3], tuple(r[4])) for i, r in enumerate(records)
    ]
    if rows:
        buf = bytearray(
            v2.encode_v2_batch(
                rows,
                timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                log_append_time=5 if log_append else None,
                is_transactional=transactional,
                producer_id=7 if transactional else -1,
            )
        )
    else:
        buf = bytearray(v2.encode_v2_batch([], base_offset=3, last_offset_delta=0, max_timestamp=1))
    for where, value in flips:
        buf[where % len(buf)] = value
    data = bytes(buf[: len(buf) - cut])
    _check_batch(data, verify, c_must_answer=not flips and not cut)


def test_crc32c_in_c_is_the_crc32c_packages() -> None:
    if not columns.ACCELERATED:
        pytest.skip("rlm.log._decode is not built here")
    from rlm.log import _decode

    rng = random.Random(32)
    # lengths around the three-lane blocks (3 * 256 and 3 * 4096 bytes) and their multiples
    for n in [0, 1, 7, 8, 9, 63, 64, 65, 767, 768, 769, 1000, 1543, 4097, 12287, 12288, 12289, 40_000]:
        data = rng.randbytes(n)
        assert _decode.crc32c(data) == crc32c.crc32c(data)
        assert _decode.crc32c(memoryview(data)[1:]) == crc32c.crc32c(data[1:])


@needs_c
def test_used_lengths_that_disagree_on_the_rows_are_refused() -> None:
    """The C writes a row's fixed-width values at the row's place: buffers whose used lengths do
    not hold one number of rows (never made by ColumnBuffers) are refused before anything is written."""
    from rlm.log import _decode

    data = bytearray()
    encode_record(data, 0, 0, b"k", b"v", [])
    buf = v2.encode_v2_batch([Record(0, 0, b"k", b"v", ())])
    for column, delta in (
        (columns.TIMESTAMP, 8),
        (columns.KEY_OFFSETS, -4),
        (columns.HEADER_VALUE_VALIDITY, 1),
    ):
        cols = _prefilled(9)
        cols.buffers[column] += bytes(8)
        cols.used[column] += delta
        before = [bytes(b) for b in cols.buffers]
        with pytest.raises(ValueError, match="one number of rows"):
            _decode.append_batch_columns(cols.buffers, cols.used, buf, 0, True, 0, INT64_MAX, 0)
        with pytest.raises(ValueError, match="one number of rows"):
            _decode.append_columns(cols.buffers, cols.used, bytes(data), 0, len(data), 1, 0, 0, None, 0, 9, 0)
        assert [bytes(b) for b in cols.buffers] == before
