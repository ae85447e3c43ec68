"""A range stream's records as Arrow IPC: the columns of the Spark export, a record batch at a time.

Records are decoded by the pipeline's one column decoder (:func:`rlm.pipeline.columns.decode_columns`),
then the stream's columns are selected: ``offset, timestamp, timestamp_type, key, value, headers,
leader_epoch``, typed as the export types them. A group's IPC message is made on the encoding
thread where its batches are uncompressed, by the event loop's :class:`MessageWriter` from the
columns' own buffers where they are not (:func:`message` says why).
"""

from __future__ import annotations

import functools
import io
import itertools
import sys
from array import array
from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa

from rlm.log.aborted import AbortedIndex
from rlm.log.arrow import empty_batch, int32s, record_arrays, strings
from rlm.pipeline.columns import RECORD_SCHEMA, decode_columns, export_timestamps
from rlm.pipeline.reader import RawBatch
from rlm.stream.chunks import StreamBatch
from rlm.stream.plan import RangePlan
from rlm.stream.records import decode_group

STREAM_COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch")
STREAM_SCHEMA = pa.schema([RECORD_SCHEMA.field(name) for name in STREAM_COLUMNS])
#: Records per Arrow record batch sent (bounds what one message holds).
RECORDS_PER_MESSAGE = 8192
_NOTHING_ABORTED = AbortedIndex(())
#: Where a message's bytes are made: the C heap (``malloc``), not Arrow's default pool (mimalloc
#: in pyarrow's wheels). The kernel copied mimalloc's message buffers into the socket at a
#: quarter or less of the rate it copies the C heap's (``perf``: the send's share of a remote
#: Arrow stream's server CPU fell from 11 % to 3-5 %).
SEND_POOL = pa.system_memory_pool()


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
    if cols is None:  # a corrupt batch: decoded one by one, which says which, in its own object or file
        decoded = [
            decode_columns(
                plan.tp,
                [RawBatch(b.header, b.data) for b in read],  # decoded at position 0 (local_header)
                _NOTHING_ABORTED,
                first_offset=plan.start,
                last_offset=plan.end - 1,
                name=name,
            ).select(list(STREAM_COLUMNS))
            for name, read in itertools.groupby(batches, key=lambda b: b.name)
        ]
        table = pa.Table.from_batches(decoded)
        return (
            decoded[0] if len(decoded) == 1 or not table.num_rows else table.combine_chunks().to_batches()[0]
        )
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


Message = pa.Buffer | pa.RecordBatch
"""What :func:`message` makes of a group: its IPC message, or the record batch the event loop
writes one (:class:`MessageWriter`)."""


def message(plan: RangePlan, batches: Sequence[StreamBatch]) -> Message | None:
    """The IPC message of :func:`record_batch` (``RecordBatch.serialize``) where ``batches`` are
    uncompressed, the record batch itself where some are; None when it has no rows. An Arrow
    stream is :data:`SCHEMA_MESSAGE`, the messages one after the other (:meth:`MessageWriter.parts`),
    and :data:`END_OF_STREAM`.

    Called on a stream's encoding thread. Of uncompressed batches the message is made there too,
    Arrow copying the columns into it in one call without the GIL: the event loop is what such a
    stream waits on, and an IPC writer there hands each of a message's buffers to a Python sink,
    taking the GIL back for each while the encoding threads want it too (the writer took a third
    of the event loop's time of a local stream of uncompressed records). Of compressed batches
    the encoding threads, decompressing, are what a stream waits on: one more copy there cost a
    stream more (6-8 %, measured side by side) than the writer costs the event loop, which sends
    the columns' own buffers."""
    batch = record_batch(plan, batches)
    if not batch.num_rows:
        return None
    if any(b.header.is_compressed for b in batches):
        return batch
    return batch.serialize(memory_pool=SEND_POOL)


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


#: The IPC stream's first message: its schema.
SCHEMA_MESSAGE = STREAM_SCHEMA.serialize().to_pybytes()
#: The IPC stream's end marker: a continuation token and a zero length.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
#: Parts of a message of at least this many bytes are handed out as views of Arrow's buffers;
#: smaller ones (message headers, padding, short columns) are gathered into one bytes object.
VIEW_BYTES = 16 * 1024


class _Parts:
    """The sink of Arrow's IPC stream writer: keeps what the writer gives it, the first ``skip``
    bytes left out. The writer hands a column's buffer over as it is (a ``pyarrow.Buffer`` of the
    column's own memory), so that a message is never copied whole: large parts stay views, small
    ones are gathered."""

    closed = False
    """Read by Arrow's file wrapper before each write."""

    def __init__(self, skip: int = 0) -> None:
        self._parts: list[bytes | memoryview] = []
        self._small = bytearray()
        self._skip = skip

    def write(self, data: bytes | pa.Buffer) -> int:
        view = memoryview(data)
        written = view.nbytes
        if self._skip:
            cut = min(self._skip, written)
            view, self._skip = view[cut:], self._skip - cut
        if view.nbytes >= VIEW_BYTES:
            self._gathered()
            self._parts.append(view)
        elif view.nbytes:
            self._small += view
        return written

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


class MessageWriter:
    """The bytes of a stream's messages (:func:`message`), in order, for the event loop: a
    serialized message as it is; a record batch's message written by Arrow's IPC stream writer
    into a sink that keeps the parts it is given (:class:`_Parts`), the columns' buffers sent from
    where the decoder put them, not copied. The writer's schema message is left out: a stream
    sends :data:`SCHEMA_MESSAGE` first. The bytes of a record batch's message are those of its
    ``RecordBatch.serialize``."""

    def __init__(self) -> None:
        self._sink = _Parts(skip=len(SCHEMA_MESSAGE))
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None

    def parts(self, made: Message | None) -> list[bytes | memoryview]:
        """The bytes of ``made``'s message (none for None), in order: views of the batch's own
        buffers among them (it must not change while they are held)."""
        if made is None:
            return []
        if isinstance(made, pa.Buffer):
            return [memoryview(made)]
        if self._writer is None:  # its first write begins with the schema message, left out
            sink = pa.PythonFile(cast(io.IOBase, self._sink), mode="w")  # it only writes and flushes
            self._writer = pa.ipc.new_stream(sink, STREAM_SCHEMA)
        self._writer.write_batch(made)
        return self._sink.take()
