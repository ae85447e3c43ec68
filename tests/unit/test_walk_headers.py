"""rlm.log.walk: the C header walk answers exactly as the Python reference, on whole logs, on logs
cut anywhere, on damaged bytes and on any bytes at all; and the reference agrees with the
ordinary header parser and CRC check."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.log import walk
from rlm.log.batches import crc_valid, parse_header
from rlm.log.legacy import encode_legacy_batch
from rlm.log.model import Codec, ControlType, Record
from rlm.log.v2 import encode_control_batch, encode_v2_batch
from rlm.log.walk import V2Header, walk_v2_headers_py

needs_c = pytest.mark.skipif(not walk.ACCELERATED, reason="rlm.log._decode is not built here")

Outcome = tuple[int, list[V2Header]] | str


def _log(seed: int = 1) -> bytes:
    """v2 batches of every codec, transactional ones, a control batch and a legacy batch."""
    rng = random.Random(seed)
    out: list[bytes] = []
    offset = 0
    for i in range(12):
        records = [
            Record(offset + k, 1_000 + offset + k, b"k%d" % k, rng.randbytes(rng.randint(0, 300)))
            for k in range(rng.randint(1, 6))
        ]
        if i == 5:
            out.append(encode_legacy_batch(records, magic=1))
        elif i == 8:
            out.append(
                encode_control_batch(
                    offset, ControlType.ABORT, producer_id=7, producer_epoch=0, timestamp=1_000 + offset
                )
            )
            offset += 1
            continue
        else:
            out.append(
                encode_v2_batch(
                    records,
                    codec=(Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD)[i % 4],
                    leader_epoch=i // 4,
                    producer_id=7 if i % 3 == 0 else -1,
                    producer_epoch=0 if i % 3 == 0 else -1,
                    is_transactional=i % 3 == 0,
                )
            )
        offset += len(records)
    return b"".join(out)


def _c(args: tuple[bytes, int, int, int, int]) -> Outcome:
    from rlm.log import _decode

    try:
        stop, headers = _decode.walk_v2_headers(*args)
    except ValueError as exc:
        return f"refused: {exc}"
    return stop, [V2Header._make(h) for h in headers]


def _py(args: tuple[bytes, int, int, int, int]) -> Outcome:
    try:
        return walk_v2_headers_py(*args)
    except ValueError as exc:
        return f"refused: {exc}"


def _same(buf: bytes, pos: int, end: int, position: int, total: int) -> Outcome:
    args = (buf, pos, end, position, total)
    expected = _py(args)
    if walk.ACCELERATED:
        assert _c(args) == expected
    return expected


def test_the_reference_agrees_with_the_parser_and_the_crc_check() -> None:
    log = _log()
    walked: list[V2Header] = []
    legacy = 0
    at = 0
    while at < len(log):  # the walk stops at each legacy entry, the parser steps over it
        at, headers = walk_v2_headers_py(log, at, len(log), at, len(log))
        walked += headers
        if at < len(log):
            entry = parse_header(log, at)
            assert entry.magic == 1
            legacy += 1
            at += entry.size
    assert len(walked) == 11 and legacy >= 1
    for h in walked:
        parsed = parse_header(log, h.pos)
        assert (h.size, h.base_offset, h.last_offset, h.leader_epoch, h.attributes) == (
            parsed.size,
            parsed.base_offset,
            parsed.last_offset,
            parsed.leader_epoch,
            parsed.attributes,
        )
        assert (h.max_timestamp, h.producer_id) == (parsed.max_timestamp, parsed.producer_id)
        assert h.crc_ok and crc_valid(log, parsed)
    assert any(h.attributes & 0x10 for h in walked)  # transactional and control batches are walked


@needs_c
def test_c_and_reference_on_whole_logs_cut_anywhere_and_shifted() -> None:
    log = _log(2)
    for end in range(0, len(log) + 1, 7):
        _same(log, 0, end, 0, len(log))
        _same(log, 0, len(log), 0, end)  # the object said to end early
    first = parse_header(log, 0).size
    assert _same(log, first, len(log), 1_000 + first, 1_000 + len(log)) != _same(
        log, 0, len(log), 0, len(log)
    )
    plain = _same(log, 0, len(log), 0, len(log))
    assert not isinstance(plain, str)
    shifted = (plain[0] + 3, [h._replace(pos=h.pos + 3) for h in plain[1]])
    assert _same(b"\0" * 3 + log, 3, 3 + len(log), 0, len(log)) == shifted
    assert _same(log, 5, 4, 0, len(log)) == "refused: pos and end must lie in the buffer, pos <= end"
    assert str(_same(log, 0, len(log) + 1, 0, len(log))).startswith("refused")


@needs_c
def test_c_and_reference_on_every_flipped_byte_of_a_batch() -> None:
    log = _log(3)
    size = parse_header(log, 0).size + parse_header(log, parse_header(log, 0).size).size
    flips = 0
    for at in range(size):
        damaged = bytearray(log)
        damaged[at] ^= 0x5A
        outcome = _same(bytes(damaged), 0, len(damaged), 0, len(damaged))
        assert not isinstance(outcome, str)
        flips += not all(h.crc_ok for h in outcome[1])
    assert flips > size // 2  # most flips are CRC mismatches, reported, not stopped at


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 400), st.integers(0, 2_000))
def test_c_and_reference_on_any_bytes(data: bytes, cut: int, total: int) -> None:
    end = min(cut, len(data))
    _same(data, 0, end, 0, total)
    prefix = _log(4)[: parse_header(_log(4), 0).size]
    _same(prefix + data, 0, len(prefix) + end, 0, len(prefix) + total)
