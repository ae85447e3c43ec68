"""Arrow arrays over the buffers of :class:`~rlm.log.columns.ColumnBuffers`, without copying them.

Keys, values and headers are copied once, from the records into the column buffers; the arrays
here wrap those buffers as they are (``pa.py_buffer`` over a view), so the buffers must not be
appended to once wrapped (:func:`record_arrays` trims them and a view held keeps them from
growing).

The few arrays made of Python values (a label or an epoch per batch, a scalar to compare with)
are made from buffers too (:func:`strings`, :func:`int32s`, :func:`int64_scalar`): pyarrow's
conversion of Python objects (``pa.array``, ``pa.scalar``) imports pandas where it is installed,
some 50 MiB a server would then hold for as long as it runs.
"""

from __future__ import annotations

import itertools
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Any, NamedTuple

import pyarrow as pa

from rlm.log.columns import (
    BATCH,
    HEADER_KEY_DATA,
    HEADER_KEY_OFFSETS,
    HEADER_OFFSETS,
    HEADER_VALUE_DATA,
    HEADER_VALUE_OFFSETS,
    HEADER_VALUE_VALIDITY,
    KEY_DATA,
    KEY_OFFSETS,
    KEY_VALIDITY,
    OFFSET,
    TIMESTAMP,
    VALUE_DATA,
    VALUE_OFFSETS,
    VALUE_VALIDITY,
    ColumnBuffers,
)

#: One record header: a UTF-8 key and a value that may be null.
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)


class RecordArrays(NamedTuple):
    """The per-record columns, one entry per row; ``batch`` is each row's batch ordinal."""

    offset: pa.Array[Any]
    """int64."""
    timestamp: pa.Array[Any]
    """int64, as stored (-1 where a record has none); callers choose how to show that."""
    batch: pa.Array[Any]
    """int32."""
    key: pa.Array[Any]
    value: pa.Array[Any]
    headers: pa.Array[Any]
    """:data:`HEADERS_TYPE`."""


def record_arrays(cols: ColumnBuffers) -> RecordArrays:
    """Wrap the rows of ``cols`` as Arrow arrays (no copy; ``cols`` is trimmed and then final)."""
    cols.trim()
    rows, headers = cols.rows, cols.header_count

    def buf(column: int) -> pa.Buffer:
        return pa.py_buffer(cols.view(column))

    def binary(
        kind: pa.DataType, length: int, validity: int | None, offsets: int, data: int
    ) -> pa.Array[Any]:
        mask = None if validity is None else buf(validity)
        return pa.Array.from_buffers(kind, length, [mask, buf(offsets), buf(data)], null_count=-1)

    header_table = pa.StructArray.from_arrays(
        [
            binary(pa.string(), headers, None, HEADER_KEY_OFFSETS, HEADER_KEY_DATA),
            binary(pa.binary(), headers, HEADER_VALUE_VALIDITY, HEADER_VALUE_OFFSETS, HEADER_VALUE_DATA),
        ],
        fields=list(HEADER_TYPE),
    )
    return RecordArrays(
        offset=pa.Array.from_buffers(pa.int64(), rows, [None, buf(OFFSET)]),
        timestamp=pa.Array.from_buffers(pa.int64(), rows, [None, buf(TIMESTAMP)]),
        batch=pa.Array.from_buffers(pa.int32(), rows, [None, buf(BATCH)]),
        key=binary(pa.binary(), rows, KEY_VALIDITY, KEY_OFFSETS, KEY_DATA),
        value=binary(pa.binary(), rows, VALUE_VALIDITY, VALUE_OFFSETS, VALUE_DATA),
        headers=pa.Array.from_buffers(
            HEADERS_TYPE, rows, [None, buf(HEADER_OFFSETS)], null_count=0, children=[header_table]
        ),
    )


def strings(values: Sequence[str]) -> pa.Array[Any]:
    """A UTF-8 string array of ``values`` (none null)."""
    data = [value.encode() for value in values]
    ends = array("i", itertools.accumulate((len(item) for item in data), initial=0))
    if sys.byteorder == "big":
        ends.byteswap()
    buffers = [None, pa.py_buffer(ends), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers, null_count=0)


def int32s(values: Sequence[int | None]) -> pa.Array[Any]:
    """An int32 array of ``values``, null where a value is None."""
    numbers = array("i", (0 if value is None else value for value in values))
    if sys.byteorder == "big":
        numbers.byteswap()
    nulls = sum(value is None for value in values)
    validity = None
    if nulls:
        bits = sum(1 << i for i, value in enumerate(values) if value is not None)
        validity = pa.py_buffer(bits.to_bytes((len(values) + 7) // 8, "little"))
    return pa.Array.from_buffers(pa.int32(), len(values), [validity, pa.py_buffer(numbers)], null_count=nulls)


def int64_scalar(value: int) -> pa.Scalar[Any]:
    """An int64 scalar of ``value``, to compare a column with."""
    return pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(struct.pack("<q", value))])[0]


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A record batch of ``schema`` without rows."""
    return pa.RecordBatch.from_arrays([pa.nulls(0, field.type) for field in schema], schema=schema)
