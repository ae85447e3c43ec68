"""rlm.log.columns.append_log: the C walk over a log's batches (rlm.log._decode.append_log_columns,
compressed batches decompressed natively where the system's libzstd and liblz4 are, through
rlm.log.codecs.plain_calls otherwise: tests/unit/test_decode_native.py) never answers differently
from the Python reference (append_log_py) on valid, extreme and mutated logs: the same rows, the
same progress, the same error naming the same position; and the fast decompressors, in Python
(rlm.log.codecs.PLAIN_DECOMPRESSORS) and in C, never differ from rlm.log.codecs.decompress."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptDataError
from rlm.log import codecs, columns, legacy, v2
from rlm.log.batches import parse_header
from rlm.log.columns import LogProgress, append_log, append_log_py
from rlm.log.model import BatchHeader, Codec, Record, TimestampType
from tests.unit.test_decode_loops import INT32_MAX, INT64_MAX, INT64_MIN, _prefilled, needs_c

BASE_TS = 1_700_000_000_000
# A batch of a log: its kind (a v2 codec, or "v0"/"v1" for a legacy message set) and its records'
# (key, value, headers).
Kind = Codec | str
BatchSpec = tuple[Kind, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]]

kinds_st = st.one_of(st.sampled_from(list(Codec)), st.sampled_from(["v0", "v1"]))
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=6))), max_size=2),
)
batches_st = st.lists(st.tuples(kinds_st, st.lists(record_st, min_size=1, max_size=6)), max_size=6)


def _log(batches: list[BatchSpec], base_offset: int = 0, log_append: bool = False) -> bytes:
    out = bytearray()
    offset = base_offset
    for kind, specs in batches:
        records = [
            Record(offset + i, BASE_TS + i, key, value, tuple(headers) if kind not in ("v0", "v1") else ())
            for i, (key, value, headers) in enumerate(specs)
        ]
        if isinstance(kind, str):
            out += legacy.encode_legacy_batch(records, magic=int(kind[1]))
        else:
            out += v2.encode_v2_batch(
                records,
                codec=kind,
                timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                log_append_time=BASE_TS + 99 if log_append else None,
            )
        offset += len(records)
    return bytes(out)


Outcome = tuple[tuple[object, ...], list[bytes], bytes]


@contextlib.contextmanager
def library_calls() -> Iterator[None]:
    """The C walk decompresses every codec with the library calls it is given, none natively
    (``rlm.log._decode.set_native``), inside the block."""
    from rlm.log import _decode

    _decode.set_native(False)
    try:
        yield
    finally:
        _decode.set_native(True)


def _outcome(fn: Callable[..., LogProgress], log: bytes | memoryview, **kwargs: object) -> Outcome:
    """What ``fn`` answers, and the state of the buffers it leaves, whether or not it raises."""
    cols = _prefilled(int(kwargs.pop("prefill", 0)))  # type: ignore[call-overload]
    positions = bytearray(b"\x01" * 8)
    pos = int(kwargs.pop("pos", 0))  # type: ignore[call-overload]
    try:
        answer: tuple[object, ...] = ("ok", *fn(cols, log, pos, positions=positions, **kwargs))
    except Exception as exc:  # any error: the C must raise the very same
        answer = ("raised", type(exc).__name__, str(exc), getattr(exc, "position", None))
    return answer, [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))], bytes(positions)


def _check(log: bytes | memoryview, **kwargs: object) -> Outcome:
    expected = _outcome(append_log_py, log, **kwargs)
    assert _outcome(append_log, log, **kwargs) == expected
    return expected


@settings(max_examples=250, deadline=None)
@given(
    batches=batches_st,
    base_offset=st.one_of(st.integers(0, 10**6), st.just(INT64_MAX - 40)),
    log_append=st.booleans(),
    first=st.one_of(st.integers(-5, 40), st.integers(INT64_MIN, INT64_MAX), st.just(2**70)),
    span=st.one_of(st.integers(0, 40), st.integers(0, 2**64)),
    batch_no=st.one_of(st.integers(0, 5), st.just(INT32_MAX - 1), st.just(-1)),
    max_rows=st.one_of(st.integers(1, 20), st.just(2**63)),
    prefill=st.integers(0, 9),
    verify=st.booleans(),
    expected_rows=st.one_of(st.just(0), st.integers(-3, 40), st.just(2**40), st.just(2**70)),
)
def test_valid_and_extreme_logs(
    batches: list[BatchSpec],
    base_offset: int,
    log_append: bool,
    first: int,
    span: int,
    batch_no: int,
    max_rows: int,
    prefill: int,
    verify: bool,
    expected_rows: int,
) -> None:
    log = _log(batches, base_offset, log_append)
    answer, _, _ = _check(
        log,
        first_offset=first,
        last_offset=first + span,
        batch_no=batch_no,
        max_rows=max_rows,
        prefill=prefill,
        verify_crc=verify,
        expected_rows=expected_rows,
    )
    # The batches walked: a legacy message set is a batch a message.
    walked = sum(len(specs) if kind in ("v0", "v1") else 1 for kind, specs in batches)
    if batches and batch_no >= 0 and batch_no + walked <= INT32_MAX and max_rows > 100:
        assert answer[:2] == ("ok", len(log))  # every batch taken


@settings(max_examples=300, deadline=None)
@given(
    batches=batches_st,
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    cut=st.integers(0, 5),
    verify=st.booleans(),
)
def test_mutated_logs(batches: list[BatchSpec], flips: list[tuple[int, int]], cut: int, verify: bool) -> None:
    log = bytearray(_log(batches))
    if not log:
        return
    for where, value in flips:
        log[where % len(log)] = value
    data = bytes(log[: len(log) - cut])
    _check(data, first_offset=0, last_offset=INT64_MAX, verify_crc=verify, prefill=3)
    _check(memoryview(data), first_offset=0, last_offset=INT64_MAX, max_rows=4)


def _batch_outcome(fn: Callable[..., int], log: bytes, header: BatchHeader, **kwargs: object) -> Outcome:
    cols = _prefilled(3)
    try:
        answer: tuple[object, ...] = ("ok", fn(cols, log, header, **kwargs))
    except Exception as exc:
        answer = ("raised", type(exc).__name__, str(exc))
    return answer, [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))], b""


@settings(max_examples=200, deadline=None)
@given(
    batches=batches_st,
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    first=st.integers(-5, 40),
    span=st.integers(0, 40),
    verify=st.booleans(),
)
def test_append_batch_takes_every_batch_as_the_reference(
    batches: list[BatchSpec], flips: list[tuple[int, int]], first: int, span: int, verify: bool
) -> None:
    """append_batch (compressed v2 batches decompressed in C) against append_batch_py, batch by batch."""
    log = bytearray(_log(batches))
    for where, value in flips:
        if log:
            log[where % len(log)] = value
    data = bytes(log)
    pos = 0
    while pos < len(data):
        try:
            header = parse_header(data, pos)
        except (CorruptDataError, IndexError):
            break  # a mutated length led the walk where no whole header is left
        kwargs = {"first_offset": first, "last_offset": first + span, "batch_no": 2, "verify_crc": verify}
        expected = _batch_outcome(columns.append_batch_py, data, header, **kwargs)
        assert _batch_outcome(columns.append_batch, data, header, **kwargs) == expected
        pos = header.end_position


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200), pos=st.integers(0, 210))
def test_any_bytes(data: bytes, pos: int) -> None:
    _check(data, pos=pos, first_offset=-5, last_offset=10**6)


@needs_c
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD, Codec.LZ4])
@pytest.mark.parametrize("expected_rows", [1, 64, 1199, 1200, 1201, 50_000, 2**40])
def test_expected_rows_only_sizes_the_buffers(codec: Codec, expected_rows: int) -> None:
    # Enough rows (1200, values of 50-400 bytes) that the buffers grow by extrapolation (from 64
    # rows on), to a size too small, exact or too large; a range that leaves out some rows.
    rng = random.Random(expected_rows)
    specs: list[BatchSpec] = [
        (codec, [(b"k%d" % i, rng.randbytes(rng.randint(50, 400)), [("h", b"v")]) for i in range(300)])
        for _ in range(4)
    ]
    log = _log(specs)
    without = _check(log, first_offset=5, last_offset=1190)
    with_hint = _check(log, first_offset=5, last_offset=1190, expected_rows=expected_rows)
    assert with_hint == without
    assert without[0] == ("ok", len(log), 4, 1186)


@needs_c
def test_the_values_of_uncompressed_batches_get_their_room_at_once() -> None:
    # Their records' bytes bound their values: the value column is sized for them when the walk
    # starts (up to max_rows records), not grown, and copied, as rows come.
    rng = random.Random(3)
    log = _log([(Codec.NONE, [(None, rng.randbytes(1000), []) for _ in range(30)]) for _ in range(10)])
    payloads, pos = [], 0
    while pos < len(log):
        header = parse_header(log, pos)
        payloads.append(header.size - 61)
        pos += header.size
    cols = columns.ColumnBuffers()
    append_log(cols, log, first_offset=0, last_offset=INT64_MAX)
    assert (cols.used[columns.VALUE_DATA], len(cols.buffers[columns.VALUE_DATA])) == (300_000, sum(payloads))
    cols = columns.ColumnBuffers()
    append_log(cols, log, first_offset=0, last_offset=INT64_MAX, max_rows=30)
    assert (cols.used[columns.VALUE_DATA], len(cols.buffers[columns.VALUE_DATA])) == (30_000, payloads[0])


def test_the_c_walk_takes_every_v2_batch_of_a_log() -> None:
    from rlm.log import _decode

    batches: list[BatchSpec] = [
        (codec, [(b"k%d" % i, b"value " * (i + 1), [("h", b"v")]) for i in range(5)]) for codec in Codec
    ]
    log = _log(batches)
    cols = columns.ColumnBuffers()
    positions = bytearray()
    got = _decode.append_log_columns(
        cols.buffers,
        cols.used,
        log,
        0,
        len(log),
        True,
        0,
        INT64_MAX,
        0,
        2**62,
        codecs.plain_calls(),
        positions,
    )
    assert got == (len(log), len(Codec), 5 * len(Codec))
    assert _outcome(append_log_py, log, first_offset=0, last_offset=INT64_MAX)[1] == [
        bytes(cols.view(c)) for c in range(len(columns.COLUMNS))
    ]


@needs_c
def test_the_c_walk_stops_before_a_batch_it_does_not_take() -> None:
    from rlm.log import _decode

    good = _log([(Codec.NONE, [(b"k", b"v", [])])])
    compressed = _log([(Codec.LZ4, [(b"k", b"v", [])])], base_offset=1)

    def refuses(view: memoryview) -> bytes:
        raise RuntimeError("no")

    kept: list[memoryview] = []

    def keeps(view: memoryview) -> bytes:
        kept.append(view)
        return bytes(view)  # not records: the walk gives up on them

    for lz4_call, legacy_next in ((refuses, False), (keeps, False), (refuses, True)):
        log = good + (
            legacy.encode_legacy_batch([Record(1, 0, None, b"x", ())], magic=1) if legacy_next else compressed
        )
        cols = _prefilled(3)
        before = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
        calls = codecs.plain_calls()
        table = (*calls[:2], lz4_call, *calls[3:])
        with library_calls():  # lz4 by the call given, not natively
            got = _decode.append_log_columns(
                cols.buffers, cols.used, log, 0, len(log), True, 0, 9, 0, 99, table, None
            )
        assert got == (len(good), 1, 1)  # the second batch is left, nothing of it appended
        after = _prefilled(3)
        columns.append_log_py(after, good, first_offset=0, last_offset=9)
        assert (
            [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
            == [bytes(after.view(c)) for c in range(len(columns.COLUMNS))]
            != before
        )
    assert kept
    with pytest.raises(ValueError):  # a view kept past the call reads as released
        bytes(kept[0])


def mutated_payload(rng: random.Random, codec: Codec, repeats: int) -> tuple[bytes, bytes]:
    """Bytes, and a payload of them as ``codec`` frames them, now and then mutated: bytes flipped,
    bytes or a second frame after it, its end cut."""
    raw = rng.randbytes(rng.randint(0, 50)) * rng.randint(1, repeats) * rng.choice([1, 1, 1, 5])
    payload = bytearray(codecs.compress(codec, raw))
    for _ in range(rng.choice([0, 0, 1, 2])):
        payload[rng.randrange(len(payload))] = rng.randrange(256)
    if rng.random() < 0.2:
        payload += rng.randbytes(rng.randint(1, 30)) if rng.random() < 0.5 else codecs.compress(codec, raw)
    return raw, bytes(payload[: len(payload) - rng.choice([0, 0, 0, 1, 5])])


def test_fast_decompressors_never_differ_from_the_reference() -> None:
    rng = random.Random(47)
    for _ in range(1500):
        codec = rng.choice([Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
        raw, data = mutated_payload(rng, codec, 400)
        try:
            want: object = codecs.decompress(codec, data)
        except Exception as exc:
            want = f"{type(exc).__name__}: {exc}"
        try:
            fast: object = bytes(codecs.PLAIN_DECOMPRESSORS[codec](memoryview(data)))
        except Exception:
            fast = None  # left to the reference
        assert fast is None or fast == want, (codec, fast, want)
        if columns.ACCELERATED:
            from rlm.log import _decode

            try:
                fast_c: object = _decode.decompress_plain(codecs.plain_calls(), codec, data)
            except Exception:
                fast_c = None
            assert fast_c is None or fast_c == want, (codec, fast_c, want)
        try:
            got: object = codecs.decompress_v2(codec, memoryview(data))
        except Exception as exc:
            got = f"{type(exc).__name__}: {exc}"
        assert got == want
        if raw and data == codecs.compress(codec, raw):
            assert fast == want  # what Kafka's clients write takes the fast path
            assert not columns.ACCELERATED or fast_c == want
