"""A range stream's records as NDJSON lines, made from the column decoder's buffers.

The batches are decoded by :func:`rlm.log.columns.append_batch` (in C when it is built) into flat
column buffers; each line is then written straight from those buffers: offsets and timestamps
as ints, keys, values and header values as base64 of slices of the data buffers. No
:class:`~rlm.log.model.Record` is made (except for legacy v0/v1 batches, inside the decoder).

The lines are written by the C module :mod:`rlm.stream._ndjson` when it is built (without the
GIL); what they must be is defined here in Python (:func:`lines_py`, the reference), which also
writes them whenever the C code gives up. ``ACCELERATED`` says which is in use.

A line is the JSON answer's record object: ``offset``, ``timestamp`` (as stored), the batch's
``timestamp_type``, ``key``, ``value``, ``headers`` as ``[key, value]`` pairs and the batch's
``leader_epoch``; keys, values and header values in base64, null where absent.
"""

from __future__ import annotations

import itertools
import json
import sys
from array import array
from binascii import b2a_base64
from collections.abc import Sequence

from rlm.errors import CorruptDataError
from rlm.log import columns as c
from rlm.log.columns import ColumnBuffers, append_batch
from rlm.stream.plan import RangePlan
from rlm.stream.reader import StreamBatch

try:
    from rlm.stream import _ndjson
except ImportError:  # built without a C compiler: the Python reference alone
    _ndjson = None  # type: ignore[assignment]

ACCELERATED = _ndjson is not None
"""Whether the C line writer is in use."""
Span = tuple[int, bytes, int]
"""Rows decoded so far, timestamp type label and leader epoch, after each batch."""

_LINE = (
    b'{"offset":%d,"timestamp":%d,"timestamp_type":"%s","key":%s,"value":%s,"headers":[%s],'
    b'"leader_epoch":%d}\n'
)


def _ints(cols: ColumnBuffers, column: int, code: str) -> list[int]:
    """A fixed-width column (little-endian) as Python ints."""
    values = array(code)
    values.frombytes(cols.view(column))
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def _blobs(cols: ColumnBuffers, offsets: int, data: int, validity: int, count: int) -> list[bytes]:
    """Each value of a binary column as a JSON value: base64 in quotes, or ``null``."""
    ends = _ints(cols, offsets, "i")
    bits = cols.view(validity)
    view = cols.view(data)
    out = []
    for i in range(count):
        if bits[i >> 3] >> (i & 7) & 1:
            out.append(b'"' + b2a_base64(view[ends[i] : ends[i + 1]], newline=False) + b'"')
        else:
            out.append(b"null")
    return out


def _headers(cols: ColumnBuffers) -> list[bytes]:
    """Each row's headers as the inside of a JSON array of ``[key, value]`` pairs."""
    per_row = _ints(cols, c.HEADER_OFFSETS, "i")
    count = per_row[-1]
    if count == 0:
        return [b""] * (len(per_row) - 1)
    key_ends = _ints(cols, c.HEADER_KEY_OFFSETS, "i")
    key_data = cols.view(c.HEADER_KEY_DATA)
    keys = [json.dumps(str(key_data[key_ends[i] : key_ends[i + 1]], "utf-8")).encode() for i in range(count)]
    values = _blobs(cols, c.HEADER_VALUE_OFFSETS, c.HEADER_VALUE_DATA, c.HEADER_VALUE_VALIDITY, count)
    pairs = [b"[" + k + b"," + v + b"]" for k, v in zip(keys, values, strict=True)]
    return [b",".join(pairs[a:b]) for a, b in itertools.pairwise(per_row)]


def ndjson_lines(plan: RangePlan, batches: Sequence[StreamBatch]) -> bytes:
    """The records of ``batches`` within the plan's range, as NDJSON lines (module docstring).

    Raises:
        CorruptDataError: a batch fails its CRC or cannot be decoded (names its object or file).
    """
    cols = ColumnBuffers()
    spans: list[Span] = []  # (rows so far, timestamp type, leader epoch)
    for batch in batches:
        header = batch.header
        try:
            append_batch(
                cols,
                batch.data,
                header._replace(position=0),
                first_offset=plan.start,
                last_offset=plan.end - 1,
                batch_no=0,
            )
        except CorruptDataError as exc:
            raise exc.at(batch.name, header.position) from exc
        spans.append((cols.rows, header.timestamp_type.label.encode(), header.leader_epoch))
    if cols.rows == 0:
        return b""
    return lines(cols, spans)


def lines(cols: ColumnBuffers, spans: list[Span]) -> bytes:
    """:func:`lines_py`, in C when it is built."""
    if _ndjson is not None:
        try:
            return _ndjson.lines(cols.buffers, cols.used, spans)
        except ValueError:
            pass  # not plainly consistent: the reference writes them
    return lines_py(cols, spans)


def lines_py(cols: ColumnBuffers, spans: list[Span]) -> bytes:
    """The reference: the NDJSON lines of the rows of ``cols``; ``spans`` gives, batch after
    batch, the rows decoded so far with the batch's timestamp type label and leader epoch."""
    rows = cols.rows
    if rows == 0:
        return b""
    offsets = _ints(cols, c.OFFSET, "q")
    timestamps = _ints(cols, c.TIMESTAMP, "q")
    keys = _blobs(cols, c.KEY_OFFSETS, c.KEY_DATA, c.KEY_VALIDITY, rows)
    values = _blobs(cols, c.VALUE_OFFSETS, c.VALUE_DATA, c.VALUE_VALIDITY, rows)
    headers = _headers(cols)
    out = []
    start = 0
    for end, kind, epoch in spans:
        for i in range(start, end):
            out.append(_LINE % (offsets[i], timestamps[i], kind, keys[i], values[i], headers[i], epoch))
        start = end
    return b"".join(out)
