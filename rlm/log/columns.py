"""Records as columns: the records of whole batches laid out in flat little-endian buffers, one
buffer per field, that Arrow arrays wrap without copying (see :mod:`rlm.log.arrow`).

A :class:`ColumnBuffers` accumulates rows batch after batch; :func:`append_batch` decodes one
batch into it. The layout is Arrow's: fixed-width values back to back, variable-width values as
``int32`` offsets (one more than there are values, starting at 0) into one data buffer, nulls as a
validity bitmap (bit ``i`` of byte ``i // 8``, least significant first, 1 for a value). Headers
form a flat table: ``header_offsets`` gives each row's range of it.

The records of a v2 batch are decoded by the C module :mod:`rlm.log._decode` when it is built.
What they must be is defined here in Python, the reference: the records
:func:`rlm.log.v2.decode_v2` decodes, appended by :func:`append_records`. Like
:mod:`rlm.log.scan`, the C code never reports corruption itself: on anything not plainly
well-formed it gives up (ValueError), the rows it appended are taken back, and the reference
decodes the batch again and says what is wrong, so errors, their wording and every row are the
reference's. ``ACCELERATED`` says which is in use. Legacy (v0/v1) batches always take the
reference path: they are rare and small.

:func:`append_log` decodes the batches of a log's bytes, one after the other, in one C call as far
as it can (the frames of :data:`rlm.log.codecs.PLAIN_DECOMPRESSORS` decompressed in the same call,
through :func:`rlm.log.codecs.plain_calls`); a batch the C walk does not take goes through
:func:`append_batch`. Its reference is :func:`append_log_py`. :func:`append_batch` takes a
compressed batch through the same C call; its reference is :func:`append_batch_py`.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable
from functools import partial
from typing import NamedTuple

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log import codecs, legacy, v2
from rlm.log.batches import Buffer, _legacy_view, parse_header
from rlm.log.model import BatchHeader, Record
from rlm.log.v2 import V2Records

try:
    from rlm.log import _decode
except ImportError:  # built without a C compiler: the Python reference alone
    _decode = None  # type: ignore[assignment]

ACCELERATED = _decode is not None
"""Whether the C column decoder is in use."""

COLUMNS = (
    "offset",
    "timestamp",
    "batch",
    "key_offsets",
    "key_data",
    "key_validity",
    "value_offsets",
    "value_data",
    "value_validity",
    "header_offsets",
    "header_key_offsets",
    "header_key_data",
    "header_value_offsets",
    "header_value_data",
    "header_value_validity",
)
"""The buffers, in the order :attr:`ColumnBuffers.buffers` holds them (the C module's order)."""
(
    OFFSET,
    TIMESTAMP,
    BATCH,
    KEY_OFFSETS,
    KEY_DATA,
    KEY_VALIDITY,
    VALUE_OFFSETS,
    VALUE_DATA,
    VALUE_VALIDITY,
    HEADER_OFFSETS,
    HEADER_KEY_OFFSETS,
    HEADER_KEY_DATA,
    HEADER_VALUE_OFFSETS,
    HEADER_VALUE_DATA,
    HEADER_VALUE_VALIDITY,
) = range(len(COLUMNS))
_OFFSET_BUFFERS = (KEY_OFFSETS, VALUE_OFFSETS, HEADER_OFFSETS, HEADER_KEY_OFFSETS, HEADER_VALUE_OFFSETS)
_CODEC_MASK = 0x07
_INT64 = struct.Struct("<q")
_INT32 = struct.Struct("<i")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1


class ColumnBuffers:
    """Rows decoded so far, as flat buffers.

    ``buffers[i]`` holds column ``COLUMNS[i]`` in its first ``used[i]`` bytes (the rest is spare
    room to grow into). ``batch`` holds, for each row, the ordinal the caller gave the batch it came
    from, so batch-level values (producer id, flags) can be spread over rows by index.
    """

    __slots__ = ("buffers", "used")

    def __init__(self) -> None:
        self.buffers = [bytearray() for _ in COLUMNS]
        self.used = array("q", bytes(8 * len(COLUMNS)))
        for column in _OFFSET_BUFFERS:
            self.buffers[column] += _INT32.pack(0)
            self.used[column] = 4

    @property
    def rows(self) -> int:
        return self.used[OFFSET] // 8

    @property
    def header_count(self) -> int:
        """Rows of the flat header table."""
        return self.used[HEADER_KEY_OFFSETS] // 4 - 1

    def view(self, column: int) -> memoryview:
        """The used bytes of one buffer (a view: the buffer cannot grow while it is held)."""
        return memoryview(self.buffers[column])[: self.used[column]]

    def mark(self) -> tuple[int, ...]:
        """Where every buffer ends now, for :meth:`rollback`."""
        return tuple(self.used)

    def rollback(self, mark: tuple[int, ...]) -> None:
        """Take back every row appended since ``mark``."""
        for column, used in enumerate(mark):
            self.used[column] = used
        rows, headers = self.rows, self.header_count
        for column, count in ((KEY_VALIDITY, rows), (VALUE_VALIDITY, rows), (HEADER_VALUE_VALIDITY, headers)):
            if count % 8:  # bits of rows taken back must read as 0 again, as in a fresh byte
                self.buffers[column][count // 8] &= (1 << (count % 8)) - 1

    def trim(self) -> None:
        """Give back the spare room (before the buffers are wrapped for good)."""
        for column, buffer in enumerate(self.buffers):
            del buffer[self.used[column] :]


def _put(cols: ColumnBuffers, column: int, data: bytes) -> None:
    buffer, used = cols.buffers[column], cols.used[column]
    buffer[used : used + len(data)] = data
    cols.used[column] = used + len(data)


def _end_offset(cols: ColumnBuffers, column: int, data_column: int) -> None:
    size = cols.used[data_column]
    if size > _INT32_MAX:
        raise CorruptRecordError(f"{COLUMNS[data_column]} holds more than {_INT32_MAX} bytes")
    _put(cols, column, _INT32.pack(size))


def _set_bit(cols: ColumnBuffers, column: int, index: int, valid: bool) -> None:
    if index % 8 == 0:
        _put(cols, column, b"\x00")
    if valid:
        cols.buffers[column][index // 8] |= 1 << (index % 8)


def _blob(
    cols: ColumnBuffers, blob: bytes | None, offsets: int, data: int, validity: int, index: int
) -> None:
    _set_bit(cols, validity, index, blob is not None)
    if blob:
        _put(cols, data, blob)
    _end_offset(cols, offsets, data)


def append_records(
    cols: ColumnBuffers, records: Iterable[Record], first_offset: int, last_offset: int, batch_no: int
) -> int:
    """Append the records whose offset is in ``[first_offset, last_offset]``; return how many.

    Raises:
        CorruptRecordError: an offset or timestamp outside int64 (the decoders never make one),
            or more than 2 GiB of keys, values or headers in ``cols``.
    """
    appended = 0
    for i, record in enumerate(records):
        offset, timestamp = record.offset, record.timestamp
        if not _INT64_MIN <= offset <= _INT64_MAX:
            raise CorruptRecordError(f"record {i} has offset {offset}, outside int64")
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise CorruptRecordError(f"record {i} has timestamp {timestamp}, outside int64")
        if not first_offset <= offset <= last_offset:
            continue
        row = cols.rows
        _put(cols, OFFSET, _INT64.pack(offset))
        _put(cols, TIMESTAMP, _INT64.pack(timestamp))
        _put(cols, BATCH, _INT32.pack(batch_no))
        _blob(cols, record.key, KEY_OFFSETS, KEY_DATA, KEY_VALIDITY, row)
        _blob(cols, record.value, VALUE_OFFSETS, VALUE_DATA, VALUE_VALIDITY, row)
        for name, value in record.headers:
            index = cols.header_count
            _put(cols, HEADER_KEY_DATA, name.encode("utf-8"))
            _end_offset(cols, HEADER_KEY_OFFSETS, HEADER_KEY_DATA)
            _blob(cols, value, HEADER_VALUE_OFFSETS, HEADER_VALUE_DATA, HEADER_VALUE_VALIDITY, index)
        _put(cols, HEADER_OFFSETS, _INT32.pack(cols.header_count))
        appended += 1
    return appended


def append_v2_records_py(
    cols: ColumnBuffers, records: V2Records, first_offset: int, last_offset: int, batch_no: int
) -> int:
    """The reference: ``records`` as :func:`rlm.log.v2.decode_v2` decodes them, appended by
    :func:`append_records`. Nothing is appended when it raises.

    Raises:
        CorruptRecordError: as :func:`rlm.log.v2.decode_v2`, or as :func:`append_records`.
    """
    mark = cols.mark()
    try:
        return append_records(cols, v2.decode_records_py(records), first_offset, last_offset, batch_no)
    except CorruptRecordError:
        cols.rollback(mark)
        raise


def append_v2_records(
    cols: ColumnBuffers, records: V2Records, first_offset: int, last_offset: int, batch_no: int
) -> int:
    """:func:`append_v2_records_py`, in C when it is built."""
    if _decode is not None:
        try:  # nothing stays appended when it raises
            return _decode.append_columns(
                cols.buffers, cols.used, *records[:7], first_offset, last_offset, batch_no
            )
        except (ValueError, OverflowError, BufferError):
            pass  # not plainly well-formed: the reference says what is wrong
    return append_v2_records_py(cols, records, first_offset, last_offset, batch_no)


def _append_compressed_in_c(
    cols: ColumnBuffers, buf: Buffer, header: BatchHeader, bounds: tuple[int, int, int], verify_crc: bool
) -> int | None:
    """The compressed v2 batch of ``header`` as the C log walk takes it (the common frames
    decompressed in C), ``bounds`` its first and last offset and batch number: the rows appended,
    or None, nothing appended, where it does not take it."""
    first_offset, last_offset, batch_no = bounds
    mark = cols.mark()
    try:
        end, walked, appended = _decode.append_log_columns(
            cols.buffers,
            cols.used,
            buf,
            header.position,
            header.end_position,
            verify_crc,
            first_offset,
            last_offset,
            batch_no,
            _NO_ROW_LIMIT,
            codecs.plain_calls(),
            None,
        )
    except (ValueError, OverflowError, BufferError):
        return None
    if (end, walked) == (header.end_position, 1):
        return appended
    cols.rollback(mark)  # no batch taken, or bytes that are not the batch the header describes
    return None


def append_batch(
    cols: ColumnBuffers,
    buf: Buffer,
    header: BatchHeader,
    *,
    first_offset: int,
    last_offset: int,
    batch_no: int,
    verify_crc: bool = True,
    in_c: bool = True,
) -> int:
    """Decode the batch described by ``header`` (``header.position`` indexes ``buf``) and append
    its records with offsets in ``[first_offset, last_offset]``; return how many were appended.
    With ``in_c`` (and the C module built) in C as far as it takes the batch; without it, the
    reference (:func:`append_batch_py`): decompressed and decoded in Python.

    Raises:
        CorruptRecordError: as :func:`rlm.log.batches.decode_batch`; nothing is appended then.
    """
    if header.magic < 2:
        legacy_records = legacy.decode_legacy(_legacy_view(buf), header, verify_crc=verify_crc)
        mark = cols.mark()
        try:
            return append_records(cols, legacy_records, first_offset, last_offset, batch_no)
        except CorruptRecordError:
            cols.rollback(mark)
            raise
    if not in_c:
        records = v2.records_of(buf, header, verify_crc, codecs.decompress)
        return append_v2_records_py(cols, records, first_offset, last_offset, batch_no)
    if _decode is not None and not header.attributes & _CODEC_MASK:
        try:  # the whole batch in C: header fields, CRC and records; nothing stays when it raises
            return _decode.append_batch_columns(
                cols.buffers, cols.used, buf, header.position, verify_crc, first_offset, last_offset, batch_no
            )
        except (ValueError, OverflowError, BufferError):
            pass  # not plainly well-formed: as any batch, below
    elif _decode is not None:
        appended = _append_compressed_in_c(
            cols, buf, header, (first_offset, last_offset, batch_no), verify_crc
        )
        if appended is not None:
            return appended
    records = v2.records_of(buf, header, verify_crc)
    return append_v2_records(cols, records, first_offset, last_offset, batch_no)


class LogProgress(NamedTuple):
    """How far :func:`append_log` went."""

    position: int
    """Where it stopped: the end of the bytes, or the first batch left (``max_rows`` reached)."""
    batches: int
    """Batches walked (their rows were appended)."""
    rows: int
    """Rows appended."""


_NO_ROW_LIMIT = 2**62


def append_log(
    cols: ColumnBuffers,
    buf: Buffer,
    pos: int = 0,
    *,
    first_offset: int,
    last_offset: int,
    batch_no: int = 0,
    max_rows: int = _NO_ROW_LIMIT,
    verify_crc: bool = True,
    positions: bytearray | None = None,
    expected_rows: int = 0,
    in_c: bool = True,
) -> LogProgress:
    """Append the records with offsets in ``[first_offset, last_offset]`` of the batches of ``buf``
    from ``pos`` on, batch after batch, until the end of ``buf`` or, once ``max_rows`` rows are
    appended, before the next batch. The ``i``-th batch walked gets batch number ``batch_no + i``;
    its position is appended to ``positions`` (int64, little-endian) when given.

    ``expected_rows`` (0: unknown), the rows the call is expected to append (the record counts of
    the batches' headers, say), changes nothing but how the C walk grows the buffers: to what the
    rows so far extrapolate to, rather than doubling (each growth copies a buffer).

    With ``in_c`` (and the C module built) one C call takes every run of v2 batches it can (the
    common compressed frames among them); other batches, and all of them without ``in_c`` (the
    reference, :func:`append_log_py`), go through :func:`append_batch` one at a time.

    Raises:
        CorruptDataError: the first batch that is corrupt, located at its position; the rows of the
            batches before it stay appended (``positions`` tells which).
    """
    in_int64 = _INT64_MIN <= first_offset <= _INT64_MAX and _INT64_MIN <= last_offset <= _INT64_MAX
    walk_in_c = in_c and _decode is not None and in_int64
    calls = codecs.plain_calls() if walk_in_c else ()
    end = len(buf)
    batches = rows = 0
    while pos < end and rows < max_rows:
        if walk_in_c and pos >= 0 and 0 <= batch_no + batches <= _INT32_MAX:  # else as the reference
            pos, walked, appended = _decode.append_log_columns(
                cols.buffers,
                cols.used,
                buf,
                pos,
                end,
                verify_crc,
                first_offset,
                last_offset,
                batch_no + batches,
                min(max_rows - rows, _NO_ROW_LIMIT),
                calls,
                positions,
                min(max(0, expected_rows - rows), _NO_ROW_LIMIT),
            )
            batches += walked
            rows += appended
            if pos >= end or rows >= max_rows:
                break
        try:  # a batch the C walk left: whatever it is, as the reference takes it
            header = parse_header(buf, pos)
            rows += append_batch(
                cols,
                buf,
                header,
                first_offset=first_offset,
                last_offset=last_offset,
                batch_no=batch_no + batches,
                verify_crc=verify_crc,
                in_c=in_c,
            )
        except CorruptDataError as exc:
            raise exc.at(None, pos) from exc
        if positions is not None:
            positions += _INT64.pack(pos)
        batches += 1
        pos = header.end_position
    return LogProgress(pos, batches, rows)


append_batch_py = partial(append_batch, in_c=False)
"""The reference of :func:`append_batch`: the batch decompressed and decoded in Python."""

append_log_py = partial(append_log, in_c=False)
"""The reference of :func:`append_log`: every batch by :func:`append_batch`'s reference."""
