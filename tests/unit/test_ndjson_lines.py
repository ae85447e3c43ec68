"""NDJSON lines of a range stream: the C writer (rlm/stream/_ndjson.c) writes the reference's bytes."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.log import columns as c
from rlm.log.columns import ColumnBuffers, append_batch
from rlm.log.model import Record, TimestampType
from rlm.log.v2 import encode_v2_batch, parse_v2_header
from rlm.stream import ndjson
from rlm.stream.ndjson import lines, lines_py
from rlm.stream.records import Span

BatchSpec = tuple[list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], TimestampType]
"""A batch's records (timestamp delta, key, value, headers) and its timestamp type."""

needs_c = pytest.mark.skipif(
    not ndjson.ACCELERATED, reason="rlm.stream._ndjson is not built here: only the reference exists to test"
)

blobs = st.none() | st.binary(max_size=40)
header_keys = st.text(max_size=12)  # any code point: escapes, non-ASCII, beyond the BMP
records_of_batch = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**40),
        blobs,
        blobs,
        st.lists(st.tuples(header_keys, blobs), max_size=3),
    ),
    min_size=1,
    max_size=6,
)
batch_specs = st.lists(
    st.tuples(records_of_batch, st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])),
    min_size=1,
    max_size=4,
)


def decoded(
    specs: list[BatchSpec],
    epoch: int,
) -> tuple[ColumnBuffers, list[Span], list[dict[str, object]]]:
    """Column buffers and spans of v2 batches built from ``specs``, and the line objects expected."""
    cols = ColumnBuffers()
    spans: list[Span] = []
    expected: list[dict[str, object]] = []
    offset = 0
    for i, (spec, kind) in enumerate(specs):
        records = [
            Record(offset + j, 1_700_000_000_000 + delta, key, value, tuple(headers))
            for j, (delta, key, value, headers) in enumerate(spec)
        ]
        append_time = 1_800_000_000_000 if kind is TimestampType.LOG_APPEND_TIME else None
        data = encode_v2_batch(
            records, timestamp_type=kind, log_append_time=append_time, leader_epoch=epoch + i
        )
        header = parse_v2_header(data, 0)
        append_batch(cols, data, header, first_offset=0, last_offset=2**62, batch_no=0)
        spans.append((cols.rows, kind.label.encode(), epoch + i))
        expected.extend(
            {
                "offset": r.offset,
                "timestamp": r.timestamp if append_time is None else append_time,
                "timestamp_type": kind.label,
                "key": text(r.key),
                "value": text(r.value),
                "headers": [[k, text(v)] for k, v in r.headers],
                "leader_epoch": epoch + i,
            }
            for r in records
        )
        offset += len(records)
    return cols, spans, expected


def c_lines(cols: ColumnBuffers, spans: list[Span]) -> bytes:
    from rlm.stream import _ndjson

    return _ndjson.lines(cols.buffers, cols.used, spans)


def test_the_c_writer_is_built() -> None:
    if os.environ.get("RLM_ALLOW_PURE_PYTHON"):
        pytest.skip("RLM_ALLOW_PURE_PYTHON is set: installed without a C compiler on purpose")
    assert ndjson.ACCELERATED, "rlm.stream._ndjson was not built: `pip install -e .` needs a C compiler"


def text(blob: bytes | None) -> str | None:
    return None if blob is None else base64.b64encode(blob).decode()


@needs_c
@settings(max_examples=300, deadline=None)
@given(batch_specs, st.integers(-1, 2**31 - 4))  # batch i gets epoch + i (up to 4 batches)
def test_the_c_writer_writes_the_references_bytes(
    specs: list[BatchSpec],
    epoch: int,
) -> None:
    cols, spans, expected = decoded(specs, epoch)
    written = c_lines(cols, spans)
    assert written == lines_py(cols, spans)
    assert [json.loads(line) for line in written.splitlines()] == expected


def test_the_reference_writes_the_json_answers_record_objects() -> None:
    specs = [
        (
            [(5, b"k", None, [("h\u00e9\n\U0001f600", b"\x00"), ("x", None)]), (0, None, b"v" * 7, [])],
            TimestampType.CREATE_TIME,
        )
    ]
    cols, spans, expected = decoded(specs, 3)
    written = lines_py(cols, spans)
    assert [json.loads(line) for line in written.splitlines()] == expected
    assert written.count(b"\n") == 2


@needs_c
def test_a_header_key_that_is_not_utf8_is_left_to_the_reference() -> None:
    cols, spans, _ = decoded([([(0, None, None, [("ab", None)])], TimestampType.CREATE_TIME)], 0)
    cols.buffers[c.HEADER_KEY_DATA][0] = 0xFF  # no longer UTF-8: the C writer gives up
    with pytest.raises(ValueError, match="not UTF-8"):
        c_lines(cols, spans)
    with pytest.raises(UnicodeDecodeError):
        lines(cols, spans)  # the reference says what is wrong


@needs_c
@pytest.mark.parametrize(
    ("spans", "why"),
    [
        ([(1, b"CreateTime", 0)], "spans do not cover the rows"),
        ([(3, b"CreateTime", 0), (2, b"CreateTime", 0)], "spans go backwards or past the rows"),
        ([(9, b"CreateTime", 0)], "spans go backwards or past the rows"),
    ],
)
def test_spans_that_do_not_cover_the_rows_are_refused(spans: list[Span], why: str) -> None:
    cols, _, _ = decoded(
        [([(0, b"a", b"b", []), (1, None, None, []), (2, b"", b"", [])], TimestampType.CREATE_TIME)], 0
    )
    with pytest.raises(ValueError, match=why):
        c_lines(cols, spans)


@needs_c
def test_columns_that_do_not_fit_are_refused() -> None:
    cols, spans, _ = decoded([([(0, b"abc", b"b", []), (1, None, b"c", [])], TimestampType.CREATE_TIME)], 0)
    cols.used[c.KEY_DATA] = 1  # the key offsets point past the used key bytes
    with pytest.raises(ValueError, match="an offsets column does not fit its data"):
        c_lines(cols, spans)
    cols.used[c.KEY_DATA] = len(cols.buffers[c.KEY_DATA]) + 1
    with pytest.raises(ValueError, match="a buffer is shorter than its used length"):
        c_lines(cols, spans)


BASE64_PATHS = {0: "scalar", 1: "SSSE3", 2: "AVX2"}


@pytest.fixture(params=sorted(BASE64_PATHS), ids=list(BASE64_PATHS.values()))
def base64_path(request: pytest.FixtureRequest) -> Iterator[int]:
    """Each of the C writer's base64 paths in turn (``_ndjson.wide_base64``), the one the module
    picked put back after."""
    from rlm.stream import _ndjson

    level: int = request.param
    before = _ndjson.wide_base64(level)
    try:
        if _ndjson.wide_base64() != level:
            pytest.skip(f"this CPU has no {BASE64_PATHS[level]}: the writer cannot take that path here")
        yield level
    finally:
        _ndjson.wide_base64(before)


@needs_c
def test_the_widest_base64_path_the_cpu_has_is_picked() -> None:
    from rlm.stream import _ndjson

    current = _ndjson.wide_base64()
    assert current == _ndjson.wide_base64(max(BASE64_PATHS))  # the module starts at the widest
    assert _ndjson.wide_base64() == current  # asking for a wider one than the CPU has keeps it


@needs_c
def test_values_of_every_length_and_every_sextet_are_written_as_the_reference_writes_them(
    base64_path: int,
) -> None:
    """Values long enough for each of the C writer's base64 paths (24 or 12 bytes at a time, with
    4 more read), of every length up to a few hundred bytes so that every tail after it is written,
    at every alignment, and bytes that make every base64 character (``+`` and ``/`` among them)."""
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    every_sextet = base64.b64decode(alphabet)  # 48 bytes whose base64 is the alphabet in order
    values = [bytes(range(256))[:n] for n in range(0, 260, 1)]
    values += [bytes(range(255, -1, -1))[shift : shift + 83] for shift in range(32)]
    values += [every_sextet * k for k in (1, 3, 7)] + [b"\xff" * 61, b"\x00" * 47, os.urandom(100_003)]
    specs: list[BatchSpec] = [
        (
            [(0, value[:5], value, [("k", value[::-1])]) for value in values[i : i + 5]],
            TimestampType.CREATE_TIME,
        )
        for i in range(0, len(values), 5)
    ]
    cols, spans, expected = decoded(specs, 0)
    written = c_lines(cols, spans)
    assert written == lines_py(cols, spans)
    assert [json.loads(line) for line in written.splitlines()] == expected
