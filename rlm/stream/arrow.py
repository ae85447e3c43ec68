"""A range stream's records as Arrow IPC: the columns of the Spark export, a record batch at a time.

Records are decoded by the pipeline's one column decoder (:func:`rlm.pipeline.columns.decode_columns`),
then the stream's columns are selected: ``offset, timestamp, timestamp_type, key, value, headers,
leader_epoch``, typed as the export types them.
"""

from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Sequence
from typing import Any

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


def message(plan: RangePlan, batches: Sequence[StreamBatch]) -> pa.Buffer | None:
    """The IPC message of :func:`record_batch` (``RecordBatch.serialize``), None when it has no
    rows. An Arrow stream is :data:`SCHEMA_MESSAGE`, these messages one after the other, and
    :data:`END_OF_STREAM`.

    The message is made where this is called: on a stream's encoding thread, where Arrow copies
    the columns into it in one call, without the GIL. The event loop only sends it: an IPC writer
    there hands each of a message's buffers to a Python sink, taking the GIL back for each while
    the encoding threads want it too (a range stream of uncompressed records spent a third of its
    event loop's time there)."""
    batch = record_batch(plan, batches)
    return batch.serialize() if batch.num_rows else None


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
