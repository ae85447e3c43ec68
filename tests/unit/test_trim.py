"""Cutting a remote copy's ``.log`` at a batch boundary (``rlm.tiering.trim.copy_before``),
over batches kafka-python built."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from rlm.errors import CorruptRecordError
from rlm.tiering.trim import CannotTrimError, copy_below


def kafka_batch(base_offset: int, records: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        batch_size=1 << 24,
    )  # fmt: skip
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v" * (7 * i + 1), headers=[])
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")  # kafka-python writes base offset 0; no CRC covers it
    return bytes(data)


def legacy_message(offset: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    assert builder.append(offset, timestamp=1_700_000_000_000, key=None, value=b"old")
    return bytes(builder.build())


def legacy_set(offsets: list[int]) -> bytes:
    """A gzip message set of v1 messages, its wrapper naming its last offset, as a broker stores it."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for i, _ in enumerate(offsets):
        assert builder.append(i, timestamp=1_700_000_000_000, key=None, value=b"old")
    data = bytearray(builder.build())
    data[0:8] = offsets[-1].to_bytes(8, "big")  # no CRC covers the offset
    return bytes(data)


BATCHES = [kafka_batch(base, count) for base, count in [(100, 3), (103, 5), (108, 1), (109, 4)]]
LOG = b"".join(BATCHES)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("piece_bytes", [1, 7, 61, 1 << 20])
@pytest.mark.parametrize(("cut", "kept", "last"), [(103, 1, 102), (108, 2, 107), (109, 3, 108)])
def test_the_batches_below_the_one_at_the_cut_are_copied(
    piece_bytes: int, cut: int, kept: int, last: int
) -> None:
    out = io.BytesIO()
    size, last_kept = copy_below(pieces(LOG, piece_bytes), out, cut, first_offset=100, key="k")
    assert out.getvalue() == b"".join(BATCHES[:kept])
    assert (size, last_kept) == (len(out.getvalue()), last)


@pytest.mark.parametrize("piece_bytes", [1, 13, 1 << 20])
@pytest.mark.parametrize(("cut", "kept", "last"), [(101, 1, 102), (105, 2, 107), (110, 4, 112)])
def test_a_batch_holding_offsets_on_both_sides_of_the_cut_is_copied_whole(
    piece_bytes: int, cut: int, kept: int, last: int
) -> None:
    out = io.BytesIO()
    assert copy_below(pieces(LOG, piece_bytes), out, cut, first_offset=100, key="k") == (
        len(b"".join(BATCHES[:kept])),
        last,
    )
    assert out.getvalue() == b"".join(BATCHES[:kept])


def test_reading_stops_at_the_batch_at_the_cut() -> None:
    read = []

    def tracked() -> Iterator[bytes]:
        for piece in pieces(LOG, 10):
            read.append(piece)
            yield piece

    copy_below(tracked(), io.BytesIO(), 103, first_offset=100, key="k")
    assert sum(map(len, read)) < len(BATCHES[0]) + 40


def test_a_cut_past_the_last_batch_is_refused() -> None:
    with pytest.raises(CannotTrimError, match="no batch of it reaches offset 113"):
        copy_below(pieces(LOG, 13), io.BytesIO(), 113, first_offset=100, key="k")


def test_legacy_messages_are_cut_by_the_offsets_they_name() -> None:
    # A v1 message holds its offset; a compressed message set names only its last inner offset,
    # so one naming an offset at or past the cut may hold offsets below it: it is kept whole.
    log = BATCHES[0] + legacy_message(103) + legacy_message(104)
    out = io.BytesIO()
    assert copy_below([log], out, 104, first_offset=100, key="k") == (
        len(BATCHES[0] + legacy_message(103)),
        103,
    )
    wrapper = legacy_set([103, 104, 105])
    out = io.BytesIO()
    assert copy_below([BATCHES[0] + wrapper + legacy_message(106)], out, 104, first_offset=100, key="k") == (
        len(BATCHES[0] + wrapper),
        105,
    )


def test_a_length_that_cannot_be_is_named_with_its_position() -> None:
    broken = bytearray(LOG)
    position = len(BATCHES[0])
    broken[position + 8 : position + 12] = (3).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="batch length 3") as caught:
        copy_below([bytes(broken)], io.BytesIO(), 109, first_offset=100, key="remote/key.log")
    assert (caught.value.path, caught.value.position) == ("remote/key.log", position)


def test_the_smallest_v0_message_ending_the_log_is_read() -> None:
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    assert builder.append(103, timestamp=None, key=None, value=None)
    smallest = bytes(builder.build())
    assert len(smallest) == 26  # offset, length, CRC, magic, attributes, key and value lengths
    for piece_bytes in (1, 1 << 20):
        out = io.BytesIO()
        log = pieces(BATCHES[0] + smallest, piece_bytes)
        assert copy_below(log, out, 103, first_offset=100, key="k") == (len(BATCHES[0]), 102)
