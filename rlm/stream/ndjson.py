"""A range stream's records as NDJSON lines, made from the column decoder's buffers.

The batches are decoded into flat column buffers (:func:`rlm.stream.records.decode_range`); each
line is then written straight from those buffers: offsets and timestamps as ints, keys, values and
header values as base64 of slices of the data buffers. No :class:`~rlm.log.model.Record` is made
(except for legacy v0/v1 batches, inside the decoder).

The lines are written by the C module :mod:`rlm.stream._ndjson` when it is built (without the
GIL); what they must be is defined here in Python (:func:`lines_py`, the reference), which also
writes them whenever the C code gives up. ``ACCELERATED`` says which is in use.

A line is the JSON answer's record object: ``offset``, ``timestamp`` (as stored), the batch's
``timestamp_type``, ``key``, ``value``, ``headers`` as ``[key, value]`` pairs and the batch's
``leader_epoch``; keys, values and header values in base64, null where absent.
"""

from __future__ import annotations

import json
from binascii import b2a_base64
from collections.abc import Sequence

from rlm.log import columns as c
from rlm.log.columns import ColumnBuffers
from rlm.stream import records
from rlm.stream.chunks import StreamBatch
from rlm.stream.plan import RangePlan
from rlm.stream.records import Span, decode_range

try:
    from rlm.stream import _ndjson
except ImportError:  # built without a C compiler: the Python reference alone
    _ndjson = None  # type: ignore[assignment]

ACCELERATED = _ndjson is not None
"""Whether the C line writer is in use."""

_LINE = (
    b'{"offset":%d,"timestamp":%d,"timestamp_type":"%s","key":%s,"value":%s,"headers":[%s],'
    b'"leader_epoch":%d}\n'
)


def _json(blob: bytes | None) -> bytes:
    """A value as JSON: base64 in quotes, or ``null``."""
    return b"null" if blob is None else b'"' + b2a_base64(blob, newline=False) + b'"'


def ndjson_lines(plan: RangePlan, batches: Sequence[StreamBatch]) -> bytes:
    """The records of ``batches`` within the plan's range, as NDJSON lines (module docstring).

    Raises:
        CorruptDataError: a batch fails its CRC or cannot be decoded (names its object or file).
    """
    cols, spans = decode_range(plan, batches)
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
    if cols.rows == 0:
        return b""
    offsets = records.ints(cols, c.OFFSET, "q")
    timestamps = records.ints(cols, c.TIMESTAMP, "q")
    keys = [_json(k) for k in records.keys(cols)]
    values = [_json(v) for v in records.values(cols)]
    headers = [
        b",".join(b"[%s,%s]" % (json.dumps(k).encode(), _json(v)) for k, v in pairs)
        for pairs in records.headers(cols)
    ]
    out = []
    start = 0
    for end, kind, epoch in spans:
        for i in range(start, end):
            out.append(_LINE % (offsets[i], timestamps[i], kind, keys[i], values[i], headers[i], epoch))
        start = end
    return b"".join(out)
