"""Cutting a remote copy's ``.log`` at a batch boundary (``rlm.tiering.trim.copy_before``),
over batches kafka-python built."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from rlm.errors import CorruptRecordError
from rlm.tiering.trim import CannotTrimError, copy_before


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


BATCHES = [kafka_batch(base, count) for base, count in [(100, 3), (103, 5), (108, 1), (109, 4)]]
LOG = b"".join(BATCHES)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("piece_bytes", [1, 7, 61, 1 << 20])
@pytest.mark.parametrize(("cut", "kept"), [(103, 1), (108, 2), (109, 3)])
def test_the_batches_before_the_one_at_the_cut_are_copied(piece_bytes: int, cut: int, kept: int) -> None:
    out = io.BytesIO()
    size = copy_before(pieces(LOG, piece_bytes), out, cut, key="k")
    assert out.getvalue() == b"".join(BATCHES[:kept])
    assert size == len(out.getvalue())


def test_reading_stops_at_the_batch_at_the_cut() -> None:
    read = []

    def tracked() -> Iterator[bytes]:
        for piece in pieces(LOG, 10):
            read.append(piece)
            yield piece

    copy_before(tracked(), io.BytesIO(), 103, key="k")
    assert sum(map(len, read)) < len(BATCHES[0]) + 40


@pytest.mark.parametrize("cut", [101, 105, 110])
def test_a_cut_inside_a_batch_is_refused(cut: int) -> None:
    with pytest.raises(CannotTrimError, match=f"no batch of it starts at offset {cut}"):
        copy_before(pieces(LOG, 13), io.BytesIO(), cut, key="k")


def test_a_cut_past_the_last_batch_is_refused() -> None:
    with pytest.raises(CannotTrimError, match="no batch of it reaches offset 113"):
        copy_before(pieces(LOG, 13), io.BytesIO(), 113, key="k")


def test_a_legacy_message_at_the_cut_is_refused() -> None:
    # A legacy message set names only its last offset: where it starts is not known from its header.
    log = BATCHES[0] + legacy_message(103)
    with pytest.raises(CannotTrimError, match="starts below 103"):
        copy_before([log], io.BytesIO(), 103, key="k")
    out = io.BytesIO()
    assert copy_before([legacy_message(99) + LOG], out, 103, key="k") == len(legacy_message(99) + BATCHES[0])


def test_a_length_that_cannot_be_is_named_with_its_position() -> None:
    broken = bytearray(LOG)
    position = len(BATCHES[0])
    broken[position + 8 : position + 12] = (3).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="batch length 3") as caught:
        copy_before([bytes(broken)], io.BytesIO(), 109, key="remote/key.log")
    assert (caught.value.path, caught.value.position) == ("remote/key.log", position)
