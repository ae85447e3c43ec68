"""A range stream's records as Arrow IPC: the columns of the Spark export, a record batch at a time.

Records are decoded by the pipeline's one column decoder (:func:`rlm.pipeline.columns.decode_columns`),
then the stream's columns are selected: ``offset, timestamp, timestamp_type, key, value, headers,
leader_epoch``, typed as the export types them.
"""

from __future__ import annotations

import functools
import io
import sys
from array import array
from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa

from rlm.log.aborted import AbortedIndex
from rlm.log.arrow import empty_batch, int32s, record_arrays, strings
from rlm.pipeline.columns import RECORD_SCHEMA, decode_columns, export_timestamps
from rlm.pipeline.reader import RawBatch
from rlm.stream.plan import RangePlan
from rlm.stream.reader import StreamBatch
from rlm.stream.records import decode_group

STREAM_COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch")
STREAM_SCHEMA = pa.schema([RECORD_SCHEMA.field(name) for name in STREAM_COLUMNS])
#: Records per Arrow record batch sent (bounds what one message holds).
RECORDS_PER_MESSAGE = 8192
_NOTHING_ABORTED = AbortedIndex(())


def record_batch(plan: RangePlan, batches: Sequence[StreamBatch]) -> pa.RecordBatch:
    """The records of ``batches`` within the plan's range, as one record batch of :data:`STREAM_SCHEMA`.

    The batches sent are already neither control nor aborted ones (:mod:`rlm.stream.reader`). The
    columns are those :func:`~rlm.pipeline.columns.decode_columns` makes of the same rows, the
    stream's alone made.

    Raises:
        CorruptDataError: a batch fails its CRC or cannot be decoded (names its object or file).
    """
    if not batches:
        return empty_batch(STREAM_SCHEMA)
    cols = decode_group(plan, batches)
    if cols is None:  # a corrupt batch: decoded one by one, which says which
        decoded = decode_columns(
            plan.tp,
            [RawBatch(b.header, b.data) for b in batches],  # decoded at position 0 (local_header)
            _NOTHING_ABORTED,
            first_offset=plan.start,
            last_offset=plan.end - 1,
            name=batches[0].name,
        )
        return decoded.select(list(STREAM_COLUMNS))
    arrays = record_arrays(cols)
    headers = [b.header for b in batches]
    labels = [h.timestamp_type.label for h in headers]
    epochs = [h.leader_epoch if h.magic >= 2 and h.leader_epoch >= 0 else None for h in headers]
    if len(set(labels)) == 1 and len(set(epochs)) == 1:  # the common case: one of each for the group
        kinds, leaders = _repeated(labels[0], epochs[0], len(arrays.offset))
    else:
        kinds, leaders = strings(labels).take(arrays.batch), int32s(epochs).take(arrays.batch)
    columns = (
        arrays.offset,
        export_timestamps(arrays.timestamp),
        kinds,
        arrays.key,
        arrays.value,
        arrays.headers,
        leaders,
    )
    return pa.RecordBatch.from_arrays(list(columns), schema=STREAM_SCHEMA)


#: Rows of the buffers :func:`_repeated` keeps (a message's, with room for its last batch's).
_REPEATED_ROWS = 4 * RECORDS_PER_MESSAGE


def _repeated(label: str, epoch: int | None, rows: int) -> tuple[pa.Array[Any], pa.Array[Any]]:
    """The ``timestamp_type`` and ``leader_epoch`` columns of ``rows`` rows that all have ``label``
    and ``epoch``, made of the first bytes of buffers made once (a buffer's slice is not a copy)
    rather than by a ``take`` of each row for every message: the same arrays, the same bytes sent."""
    if rows > _REPEATED_ROWS:
        first = pa.array([0] * rows, pa.int32())
        return strings([label]).take(first), int32s([epoch]).take(first)
    ends, text, values, validity = _repeated_buffers(label, epoch)
    width = len(label.encode())
    kinds = pa.Array.from_buffers(
        pa.string(), rows, [None, ends.slice(0, 4 * (rows + 1)), text.slice(0, width * rows)], null_count=0
    )
    nulls = 0 if validity is None else rows
    mask = None if validity is None else validity.slice(0, (rows + 7) // 8)
    leaders = pa.Array.from_buffers(pa.int32(), rows, [mask, values.slice(0, 4 * rows)], null_count=nulls)
    return kinds, leaders


@functools.lru_cache(maxsize=16)
def _repeated_buffers(
    label: str, epoch: int | None
) -> tuple[pa.Buffer, pa.Buffer, pa.Buffer, pa.Buffer | None]:
    """:data:`_REPEATED_ROWS` rows of ``label`` (offsets, text) and ``epoch`` (values; a validity
    bitmap of nulls when it is None), little-endian."""
    encoded = label.encode()
    ends = array("i", range(0, len(encoded) * (_REPEATED_ROWS + 1), len(encoded)))
    values = array("i", [0 if epoch is None else epoch]) * _REPEATED_ROWS
    if sys.byteorder == "big":
        ends.byteswap()
        values.byteswap()
    validity = None if epoch is not None else pa.py_buffer(bytes((_REPEATED_ROWS + 7) // 8))
    return pa.py_buffer(ends), pa.py_buffer(encoded * _REPEATED_ROWS), pa.py_buffer(values), validity


#: The IPC stream's end marker: a continuation token and a zero length.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
#: Parts of a message of at least this many bytes are handed out as views of Arrow's buffers;
#: smaller ones (message headers, padding, short columns) are gathered into one bytes object.
VIEW_BYTES = 16 * 1024


class _Parts:
    """The sink of Arrow's IPC stream writer: keeps what the writer gives it. The writer hands a
    column's buffer over as it is (a ``pyarrow.Buffer`` of the column's own memory), so that a
    message is never copied whole: large parts stay views, small ones are gathered."""

    closed = False
    """Read by Arrow's file wrapper before each write."""

    def __init__(self) -> None:
        self._parts: list[bytes | memoryview] = []
        self._small = bytearray()

    def write(self, data: bytes | pa.Buffer) -> int:
        view = memoryview(data)
        if view.nbytes >= VIEW_BYTES:
            self._gathered()
            self._parts.append(view)
        else:
            self._small += view
        return view.nbytes

    def flush(self) -> None:
        """Nothing is buffered for the writer."""

    def _gathered(self) -> None:
        if self._small:
            self._parts.append(bytes(self._small))
            self._small.clear()

    def take(self) -> list[bytes | memoryview]:
        """What was written since the last call, in order."""
        self._gathered()
        parts, self._parts = self._parts, []
        return parts


class ArrowStreamWriter:
    """Arrow IPC stream bytes, handed out as they are made: the schema message first (with the
    first batch), one message per record batch, and the end-of-stream marker from :meth:`end`.

    The messages are written by Arrow's stream writer into a sink that keeps the parts it is
    given (:class:`_Parts`): the columns' buffers are not copied into a message buffer, they are
    sent from where the decoder put them. The bytes are those of ``Schema.serialize``, each
    ``RecordBatch.serialize`` and the end marker, one after the other."""

    def __init__(self) -> None:
        self._sink = _Parts()
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None

    def _stream(self) -> pa.ipc.RecordBatchStreamWriter:
        if self._writer is None:
            sink = pa.PythonFile(cast(io.IOBase, self._sink), mode="w")  # it only writes and flushes
            self._writer = pa.ipc.new_stream(sink, STREAM_SCHEMA)
        return self._writer

    def write(self, batch: pa.RecordBatch) -> list[bytes | memoryview]:
        """The parts of ``batch``'s message (and of the schema's before the first), in order:
        views of the batch's own buffers among them (it must not change while they are held)."""
        if not batch.num_rows:
            return []
        if not batch.schema.equals(STREAM_SCHEMA):  # the same columns, typed as the stream's
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=STREAM_SCHEMA)
        self._stream().write_batch(batch)
        return self._sink.take()

    def end(self) -> bytes:
        """The rest of the stream: the schema when nothing was written, and the end marker."""
        self._stream().close()
        parts = self._sink.take()
        return b"".join(parts)
