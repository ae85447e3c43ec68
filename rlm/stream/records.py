"""The records of a stream's batches within its range, as column buffers, and their values.

A group of batches is decoded by :func:`rlm.log.columns.append_batch` (in C when it is built) into
one :class:`~rlm.log.columns.ColumnBuffers`; the transports translate from those buffers (NDJSON
lines, gRPC messages) without a :class:`~rlm.log.model.Record` per record.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from array import array
from collections.abc import Sequence

from rlm.errors import CorruptDataError
from rlm.log import columns as c
from rlm.log.columns import ColumnBuffers, append_batch, append_log
from rlm.stream.chunks import StreamBatch, chunk_runs, joined
from rlm.stream.plan import RangePlan

Span = tuple[int, bytes, int]
"""Rows decoded so far, timestamp type label and leader epoch, after each batch."""


def decode_group(plan: RangePlan, batches: Sequence[StreamBatch]) -> ColumnBuffers | None:
    """The records of ``batches`` at or after the plan's start and below its end, decoded by a walk
    (:func:`rlm.log.columns.append_log`) over each run of them read in one chunk
    (:func:`~rlm.stream.chunks.chunk_runs`): row ``i`` comes from ``batches[cols.batch[i]]``.
    None where a batch is corrupt (decoded one by one, the batches say which:
    :func:`decode_range`, :func:`rlm.pipeline.columns.decode_columns`)."""
    cols = ColumnBuffers()
    expected = sum(batch.header.record_count for batch in batches)
    data = [batch.data for batch in batches]
    try:
        for start, end in chunk_runs(data):  # a group spanning two chunks is not copied into one
            append_log(
                cols,
                joined(data[start:end]),
                first_offset=plan.start,
                last_offset=plan.end - 1,
                batch_no=start,
                expected_rows=expected,
            )
            expected -= sum(batch.header.record_count for batch in batches[start:end])
    except CorruptDataError:
        return None
    return cols


def decode_range(plan: RangePlan, batches: Sequence[StreamBatch]) -> tuple[ColumnBuffers, list[Span]]:
    """The records of ``batches`` at or after the plan's start and below its end
    (:func:`decode_group`), and the spans of their rows: one per run of batches of the same
    timestamp type and leader epoch.

    Raises:
        CorruptDataError: a batch fails its CRC or cannot be decoded (names its object or file).
    """
    cols = decode_group(plan, batches)
    if cols is None:
        return _decode_each(plan, batches)
    return cols, _spans(cols, batches) if batches else []


def _spans(cols: ColumnBuffers, batches: Sequence[StreamBatch]) -> list[Span]:
    """The spans of rows decoded from ``batches`` (row ``i`` came from batch ``batch[i]``)."""
    kinds = [(batch.header.timestamp_type.label.encode(), batch.header.leader_epoch) for batch in batches]
    spans: list[Span] = []
    ordinals: list[int] | None = None
    for i in range(1, len(kinds)):
        if kinds[i] != kinds[i - 1]:  # a new span from batch i: its first row ends the last one
            ordinals = ordinals if ordinals is not None else ints(cols, c.BATCH, "i")
            spans.append((bisect.bisect_left(ordinals, i), *kinds[i - 1]))
    spans.append((cols.rows, *kinds[-1]))
    return spans


def _decode_each(plan: RangePlan, batches: Sequence[StreamBatch]) -> tuple[ColumnBuffers, list[Span]]:
    """:func:`decode_range` a batch at a time, to locate a corrupt batch in its object or file."""
    cols = ColumnBuffers()
    spans: list[Span] = []
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
    return cols, spans


def ints(cols: ColumnBuffers, column: int, code: str) -> list[int]:
    """A fixed-width column (little-endian; ``code`` as :mod:`array` has it) as Python ints."""
    values = array(code)
    values.frombytes(cols.view(column))
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def blobs(cols: ColumnBuffers, offsets: int, data: int, validity: int, count: int) -> list[bytes | None]:
    """Each value of a binary column (its offsets, data and validity buffers), None where absent."""
    ends = ints(cols, offsets, "i")
    bits = cols.view(validity)
    view = bytes(cols.view(data))
    return [view[ends[i] : ends[i + 1]] if bits[i >> 3] >> (i & 7) & 1 else None for i in range(count)]


def keys(cols: ColumnBuffers) -> list[bytes | None]:
    return blobs(cols, c.KEY_OFFSETS, c.KEY_DATA, c.KEY_VALIDITY, cols.rows)


def values(cols: ColumnBuffers) -> list[bytes | None]:
    return blobs(cols, c.VALUE_OFFSETS, c.VALUE_DATA, c.VALUE_VALIDITY, cols.rows)


def headers(cols: ColumnBuffers) -> list[list[tuple[str, bytes | None]]]:
    """Each row's headers as ``(key, value)`` pairs."""
    per_row = ints(cols, c.HEADER_OFFSETS, "i")
    count = per_row[-1]
    if count == 0:
        return [[] for _ in range(len(per_row) - 1)]
    key_ends = ints(cols, c.HEADER_KEY_OFFSETS, "i")
    key_data = bytes(cols.view(c.HEADER_KEY_DATA))
    names = [str(key_data[key_ends[i] : key_ends[i + 1]], "utf-8") for i in range(count)]
    found = blobs(cols, c.HEADER_VALUE_OFFSETS, c.HEADER_VALUE_DATA, c.HEADER_VALUE_VALIDITY, count)
    pairs = list(zip(names, found, strict=True))
    return [pairs[a:b] for a, b in itertools.pairwise(per_row)]
