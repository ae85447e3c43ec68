"""rlm.log.scan: the C loops never answer differently from the Python reference, on valid records
and batches and on any bytes at all (and the reference's headers are the parser's); where the C
gives up, the reference's answer or error is what callers get."""

from __future__ import annotations

import itertools
import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log import scan
from rlm.log.batches import parse_header
from rlm.log.legacy import encode_legacy_entry
from rlm.log.model import BatchHeader, Codec, Record, TimestampType
from rlm.log.v2 import encode_record, encode_v2_batch

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

needs_c = pytest.mark.skipif(
    not scan.ACCELERATED, reason="rlm.log._scan is not built here: only the Python loops exist to test"
)


def test_the_c_loops_are_built() -> None:
    if os.environ.get("RLM_ALLOW_PURE_PYTHON"):
        pytest.skip(
            "RLM_ALLOW_PURE_PYTHON is set: installed without a C compiler on purpose; the Python "
            "loops answer alone and the other tests here check them"
        )
    assert scan.ACCELERATED, (
        "rlm.log._scan was not built: `pip install -e .` needs a C compiler and the Python headers"
    )


# -- find_record --------------------------------------------------------------------------------

Outcome = tuple[int, int] | None | str


def _reference(args: tuple[object, ...]) -> Outcome:
    try:
        return scan.find_record_py(*args)  # type: ignore[arg-type]
    except CorruptRecordError as exc:
        return f"corrupt: {exc}"


def _c(args: tuple[object, ...]) -> Outcome:
    from rlm.log import _scan

    try:
        return _scan.find_record(*args)  # type: ignore[arg-type]
    except (ValueError, OverflowError):
        return "gave up"


def _dispatched(args: tuple[object, ...]) -> Outcome:
    try:
        return scan.find_record(*args)  # type: ignore[arg-type]
    except CorruptRecordError as exc:
        return f"corrupt: {exc}"


def _check_find(args: tuple[object, ...], *, c_must_answer: bool = False) -> Outcome:
    expected = _reference(args)
    assert _dispatched(args) == expected
    if scan.ACCELERATED:
        got = _c(args)
        assert got in (expected, "gave up"), (got, expected)
        if c_must_answer and not isinstance(expected, str):
            assert got == expected
        if isinstance(expected, str):
            assert got == "gave up"  # never an answer where the reference finds corruption
    return expected


records_st = st.lists(
    st.tuples(
        st.one_of(st.integers(-1000, 1000), st.integers(INT64_MIN, INT64_MAX)),  # timestamp delta
        st.one_of(st.integers(0, 64), st.integers(-(2**31), 2**31 - 1)),  # offset delta
        st.one_of(st.none(), st.binary(max_size=40)),  # value
    ),
    max_size=12,
)


@settings(max_examples=400, deadline=None)
@given(
    records=records_st,
    base_offset=st.one_of(st.integers(0, 10**6), st.integers(0, INT64_MAX)),
    base_ts=st.one_of(st.integers(0, 2 * 10**12), st.integers(INT64_MIN, INT64_MAX)),
    log_append=st.booleans(),
    target=st.one_of(st.integers(-(10**4), 10**4), st.integers(INT64_MIN, INT64_MAX)),
    start=st.one_of(st.integers(0, 100), st.integers(INT64_MIN, INT64_MAX)),
    count_delta=st.integers(-2, 2),
    lead=st.binary(max_size=5),
)
def test_find_record_on_well_formed_records(
    records: list[tuple[int, int, bytes | None]],
    base_offset: int,
    base_ts: int,
    log_append: bool,
    target: int,
    start: int,
    count_delta: int,
    lead: bytes,
) -> None:
    data = bytearray(lead)
    for ts_delta, offset_delta, value in records:
        encode_record(data, offset_delta, ts_delta, None, value)
    count = max(0, len(records) + count_delta)
    args = (bytes(data), len(lead), len(data), count, base_offset, base_ts, log_append, target, start)
    small = base_offset < 2**40 and 0 <= base_ts < 2**50 and all(abs(r[0]) <= 1000 for r in records)
    _check_find(args, c_must_answer=small)


@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=120),
    pos=st.integers(0, 130),
    end_cut=st.integers(0, 130),
    count=st.integers(-1, 20),
    target=st.integers(-5, 5),
    start=st.integers(-5, 5),
)
def test_find_record_on_any_bytes(
    data: bytes, pos: int, end_cut: int, count: int, target: int, start: int
) -> None:
    args = (data, pos, min(end_cut, len(data) + 3), count, 0, 0, False, target, start)
    _check_find(args)


def test_find_record_on_mutated_batches() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        data = bytearray()
        n = rng.randint(1, 8)
        for i in range(n):
            encode_record(data, i, rng.randint(-50, 500), None, rng.randbytes(rng.randint(0, 30)))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = rng.randint(len(data) - 3, len(data))
        args = (bytes(data), 0, cut, n, 100, 1000, False, 1000 + rng.randint(-20, 500), rng.randint(99, 104))
        _check_find(args)


def test_find_record_examples() -> None:
    data = bytearray()
    for i, delta in enumerate([5, -3, 9, 9, 20]):
        encode_record(data, i, delta, b"k", b"value")
    base = (bytes(data), 0, len(data), 5, 1000, 10_000, False)
    assert _check_find((*base, 10_000, 0), c_must_answer=True) == (10_005, 1000)
    assert _check_find((*base, 10_006, 0), c_must_answer=True) == (10_009, 1002)
    assert _check_find((*base, 10_000, 1003), c_must_answer=True) == (10_009, 1003)
    assert _check_find((*base, 10_021, 0), c_must_answer=True) is None
    log_append = (bytes(data), 0, len(data), 5, 1000, 7, True)
    assert _check_find((*log_append, 7, 1001), c_must_answer=True) == (7, 1001)
    assert _check_find((bytes(data), 0, len(data), 6, 1000, 0, False, 10**9, 0)) == (
        "corrupt: batch declares 6 records but its data ends after 5"
    )


def test_a_timestamp_past_int64_is_answered_by_the_reference() -> None:
    data = bytearray()
    encode_record(data, 0, INT64_MAX, None, b"v")
    # Long.MAX_VALUE + Long.MAX_VALUE wraps to -2 in Java, as a decode reads the record.
    args = (bytes(data), 0, len(data), 1, 0, INT64_MAX, False, INT64_MIN, 0)
    assert _check_find(args) == (-2, 0)
    assert _check_find((*args[:7], 0, 0)) is None


# -- skip_below ---------------------------------------------------------------------------------


def _batch(base_offset: int, timestamps: list[int], codec: Codec) -> bytes:
    records = [Record(base_offset + i, ts, None, b"x" * (i % 7)) for i, ts in enumerate(timestamps)]
    return encode_v2_batch(
        records, base_offset=base_offset, codec=codec, timestamp_type=TimestampType.CREATE_TIME
    )


#: Batches of a log: each one's timestamps and codec.
batch_specs_st = st.lists(
    st.tuples(st.lists(st.integers(0, 10**6), min_size=1, max_size=4), st.sampled_from(list(Codec))),
    min_size=1,
    max_size=6,
)


def _batches(specs: list[tuple[list[int], Codec]]) -> list[bytes]:
    """A batch of each spec's timestamps and codec, at the offsets that follow one another."""
    parts, offset = [], 0
    for stamps, codec in specs:
        parts.append(_batch(offset, stamps, codec))
        offset += len(stamps)
    return parts


def _check_skip(data: bytes, pos: int, limit: int, timestamp: int, start: int) -> int:
    expected = scan.skip_below_py(data, pos, limit, timestamp, start)
    assert scan.skip_below(data, pos, limit, timestamp, start) == expected
    if scan.ACCELERATED:
        from rlm.log import _scan

        try:
            assert _scan.skip_below(data, pos, limit, timestamp, start) == expected
        except OverflowError:
            assert not INT64_MIN <= timestamp <= INT64_MAX or not INT64_MIN <= start <= INT64_MAX
    return expected


@settings(max_examples=300, deadline=None)
@given(
    batches=batch_specs_st,
    timestamp=st.one_of(st.integers(0, 10**6 + 1), st.integers(-(2**70), 2**70)),
    start=st.integers(-5, 30),
    first=st.integers(0, 5),
    limit_cut=st.integers(0, 200),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    tail=st.binary(max_size=70),
)
def test_skip_below(
    batches: list[tuple[list[int], Codec]],
    timestamp: int,
    start: int,
    first: int,
    limit_cut: int,
    flips: list[tuple[int, int]],
    tail: bytes,
) -> None:
    parts = _batches(batches)
    bounds = [0, *itertools.accumulate(len(part) for part in parts)]
    data = bytearray(b"".join(parts) + tail)
    for where, value in flips:
        data[where % len(data)] = value
    pos = bounds[min(first, len(bounds) - 1)]
    limit = max(0, len(data) - limit_cut)
    got = _check_skip(bytes(data), pos, limit, timestamp, start)
    assert pos <= got <= max(pos, limit)
    if not flips and not tail and limit == len(data) and INT64_MIN <= timestamp <= INT64_MAX:
        # Valid batches: exactly the ones below the target are stepped over.
        below = 0
        for i in range(bounds.index(pos), len(batches)):
            stamps = batches[i][0]
            last = sum(len(b[0]) for b in batches[: i + 1]) - 1
            if max(stamps) >= timestamp and last >= start:
                break
            below += 1
        assert got == bounds[bounds.index(pos) + below]


@needs_c
def test_skip_below_in_c_steps_over_many_batches_in_one_call() -> None:
    from rlm.log import _scan

    data = b"".join(_batch(i * 3, [i * 10, i * 10 + 5, i * 10 + 1], Codec.NONE) for i in range(200))
    stop = _scan.skip_below(data, 0, len(data), 1005, 0)
    assert stop == scan.skip_below_py(data, 0, len(data), 1005, 0) > 0
    assert data[stop : stop + 8] == (300).to_bytes(8, "big")  # the batch of 1000..1005 starts there


# -- v2_headers ---------------------------------------------------------------------------------


def _check_headers(data: bytes | bytearray, pos: int, at: int, budget: int) -> tuple[list[BatchHeader], int]:
    expected = scan.v2_headers_py(data, pos, at, budget)
    assert scan.v2_headers(memoryview(data), pos, at, budget) == expected
    if scan.ACCELERATED:
        from rlm.log import _scan

        assert _scan.v2_headers(data, pos, at, budget, BatchHeader) == expected
    return expected


@settings(max_examples=300, deadline=None)
@given(
    batches=batch_specs_st,
    at=st.integers(0, 2**40),
    budget=st.integers(0, 2000),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 100),
    legacy=st.booleans(),
    first=st.integers(0, 5),
)
def test_v2_headers(
    batches: list[tuple[list[int], Codec]],
    at: int,
    budget: int,
    flips: list[tuple[int, int]],
    cut: int,
    legacy: bool,
    first: int,
) -> None:
    parts = _batches(batches)
    offset = sum(len(stamps) for stamps, _ in batches)
    if legacy:  # a v1 entry in the middle: read by the parser, not here
        parts.insert(len(parts) // 2, encode_legacy_entry(offset, None, b"v", magic=1, timestamp=5))
    data = bytearray(b"".join(parts))
    for where, value in flips:
        data[where % len(data)] = value
    data = data[: max(0, len(data) - cut)]
    start = sum(len(p) for p in parts[: min(first, len(parts) - 1)])
    headers, end = _check_headers(data, start, at, budget)
    pos = start
    for header in headers:  # each as the parser reads it, one after the other
        assert header == parse_header(data, pos, at + pos - start)
        pos += header.size
    assert end == pos
    if not flips and not cut and not legacy:  # valid batches: all of them, up to the budget
        sizes = [len(p) for p in parts[min(first, len(parts) - 1) :]]
        whole = next((i + 1 for i in range(len(sizes)) if sum(sizes[: i + 1]) >= budget), len(sizes))
        assert len(headers) == (whole if budget > 0 else 0)


def test_v2_headers_stop_where_the_parser_must_say_what_is_wrong() -> None:
    good = _batch(0, [1, 2], Codec.NONE)
    second = bytearray(_batch(2, [3], Codec.NONE))
    second[21:23] = (7).to_bytes(2, "big")  # an unknown codec
    headers, end = _check_headers(good + second + good, 0, 100, 1 << 30)
    assert [h.position for h in headers] == [100] and end == len(good)
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        parse_header(good + second, end)
    # A batch cut by the end, and bytes too few for a header, are left as they are.
    assert _check_headers(good + good[:-1], 0, 0, 1 << 30)[1] == len(good)
    assert _check_headers(good[:40], 0, 0, 1 << 30) == ([], 0)


def test_v2_headers_read_a_chunk_of_many_batches() -> None:
    data = b"".join(_batch(i * 3, [i, i + 1, i + 2], Codec.NONE) for i in range(500))
    headers, end = _check_headers(data, 0, 0, len(data))
    assert end == len(data) and [h.base_offset for h in headers] == list(range(0, 1500, 3))
