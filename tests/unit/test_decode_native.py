"""The C walk's native decompression (rlm/log/_decode_native.h): zstd and lz4 payloads decompressed
with the system's libzstd and liblz4, without the GIL. It never answers differently from
rlm.log.codecs.decompress (it decompresses alike or gives up, and the reference decides), it takes
what Kafka's clients write, and the walk then makes no library call for those codecs. The walk with
native decompression on is checked against the Python reference by tests/unit/test_decode_log.py;
here it is checked off as well."""

from __future__ import annotations

import ctypes
import random

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.log import codecs, columns
from rlm.log.model import Codec
from tests.unit.test_decode_log import BatchSpec, _check, _log, batches_st, library_calls, mutated_payload
from tests.unit.test_decode_loops import INT64_MAX, needs_c

pytestmark = needs_c
LIBRARIES = {Codec.ZSTD: "libzstd.so.1", Codec.LZ4: "liblz4.so.1"}


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


HERE = [codec for codec, name in LIBRARIES.items() if _loads(name)]
needs_libraries = pytest.mark.skipif(
    len(HERE) < len(LIBRARIES),
    reason=f"{' and '.join(LIBRARIES.values())} are not both on this machine: "
    "their codecs stay with the library calls",
)


def _native(codec: Codec, payload: bytes) -> bytes | None:
    """The payload as native decompression gives it, or None where it gives up."""
    from rlm.log import _decode

    try:
        return _decode.decompress_native(codec, payload)
    except ValueError:
        return None


def test_the_codecs_decompressed_natively_are_those_whose_library_is_here() -> None:
    from rlm.log import _decode

    try:
        assert _decode.set_native(False) == ()
        assert _native(Codec.ZSTD, codecs.compress(Codec.ZSTD, b"x" * 100)) is None  # off: none
    finally:
        on = _decode.set_native(True)
    assert on == tuple(sorted(HERE))
    for codec in (Codec.GZIP, Codec.SNAPPY):  # always the library calls
        assert _native(codec, codecs.compress(codec, b"x" * 100)) is None


@needs_libraries
def test_native_decompression_never_differs_from_the_reference() -> None:
    rng = random.Random(59)
    for _ in range(2000):
        codec = rng.choice([Codec.LZ4, Codec.ZSTD])
        raw, data = mutated_payload(rng, codec, 3000)
        try:
            want: object = codecs.decompress(codec, data)
        except Exception as exc:
            want = f"{type(exc).__name__}: {exc}"
        got = _native(codec, data)
        assert got is None or got == want, (codec, len(data))
        if raw and data == codecs.compress(codec, raw):
            assert got == want == raw  # what Kafka's clients write is decompressed natively


@needs_libraries
@pytest.mark.parametrize(
    ("codec", "payload", "why"),
    [
        (Codec.ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(b"abc" * 99), "no size"),
        (Codec.ZSTD, codecs.compress(Codec.ZSTD, b"abc" * 99) + b"\x00", "bytes after the frame"),
        (Codec.ZSTD, codecs.compress(Codec.ZSTD, b"a") * 2, "two frames"),
        (Codec.ZSTD, b"\x28\xb5\x2f\xfd", "a magic alone"),
        (Codec.LZ4, codecs.compress(Codec.LZ4, b"abc" * 99)[:-4], "no end mark"),
        (Codec.LZ4, codecs.compress(Codec.LZ4, b"abc" * 99) + b"\x00", "bytes after the frame"),
        (Codec.LZ4, b"\x04\x22\x4d\x18\x64\x40\xa7" + b"\x00" * 4, "another descriptor (a content checksum)"),
        (
            Codec.LZ4,
            codecs.compress(Codec.LZ4, b"abc" * 99)[:-4] + (1 << 31).to_bytes(4, "little") + b"\x00" * 4,
            "an end mark with the stored bit, which Kafka reads as the end (liblz4: an empty block)",
        ),
    ],
)
def test_native_decompression_gives_up_on_frames_kafka_does_not_write(
    codec: Codec, payload: bytes, why: str
) -> None:
    assert _native(codec, payload) is None, why


@needs_libraries
def test_stored_lz4_blocks_are_copied_as_they_are() -> None:
    # Kafka's frame (independent 64 KiB blocks), one block stored: its size's high bit set.
    stored = bytes(range(256)) * 10
    compressed = codecs.compress(Codec.LZ4, b"z" * 70_000)
    blocks = compressed[7:-4]  # the compressed blocks, without the descriptor and the end mark
    frame = compressed[:7] + (len(stored) | 1 << 31).to_bytes(4, "little") + stored + blocks + b"\x00" * 4
    assert _native(Codec.LZ4, frame) == codecs.decompress(Codec.LZ4, frame) == stored + b"z" * 70_000


@needs_libraries
def test_the_walk_makes_no_library_call_for_the_codecs_decompressed_natively() -> None:
    from rlm.log import _decode

    specs: list[BatchSpec] = [
        (codec, [(b"k%d" % i, b"value %d " % i * 50, [("h", b"v")]) for i in range(20)])
        for codec in (Codec.ZSTD, Codec.LZ4, Codec.NONE, Codec.ZSTD)
    ]
    log = _log(specs)

    def refuses(view: memoryview, *args: object, **kwargs: object) -> bytes:
        raise RuntimeError("a library call")

    calls = codecs.plain_calls()
    table = (calls[0], calls[1], refuses, refuses, refuses)
    natively = columns.ColumnBuffers()
    got = _decode.append_log_columns(
        natively.buffers, natively.used, log, 0, len(log), True, 0, INT64_MAX, 0, 2**62, table, None
    )
    assert got == (len(log), 4, 80)
    reference = columns.ColumnBuffers()
    columns.append_log_py(reference, log, first_offset=0, last_offset=INT64_MAX)
    assert [bytes(natively.view(c)) for c in range(len(columns.COLUMNS))] == [
        bytes(reference.view(c)) for c in range(len(columns.COLUMNS))
    ]
    with library_calls():  # the control: the calls given refuse, so the walk stops at once
        refused = columns.ColumnBuffers()
        stopped = _decode.append_log_columns(
            refused.buffers, refused.used, log, 0, len(log), True, 0, INT64_MAX, 0, 2**62, table, None
        )
    assert stopped == (0, 0, 0)


@settings(max_examples=150, deadline=None)
@given(
    batches=batches_st,
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2),
    first=st.integers(-5, 40),
    max_rows=st.one_of(st.integers(1, 20), st.just(2**63)),
)
def test_the_walk_with_library_calls_only_answers_as_the_reference(
    batches: list[BatchSpec], flips: list[tuple[int, int]], first: int, max_rows: int
) -> None:
    log = bytearray(_log(batches))
    for where, value in flips:
        if log:
            log[where % len(log)] = value
    with library_calls():
        _check(bytes(log), first_offset=first, last_offset=first + 30, max_rows=max_rows, prefill=2)
