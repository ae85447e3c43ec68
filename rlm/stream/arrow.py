"""A range stream's records as Arrow IPC: the columns of the Spark export, a record batch at a time.

Records are decoded by the pipeline's one column decoder (:func:`rlm.pipeline.columns.decode_columns`),
then the stream's columns are selected: ``offset, timestamp, timestamp_type, key, value, headers,
leader_epoch``, typed as the export types them.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
from typing_extensions import Buffer

from rlm.pipeline.columns import RECORD_SCHEMA, decode_columns
from rlm.pipeline.reader import RawBatch
from rlm.pipeline.transactions import AbortedIndex
from rlm.stream.plan import RangePlan
from rlm.stream.reader import StreamBatch

STREAM_COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch")
STREAM_SCHEMA = pa.schema([RECORD_SCHEMA.field(name) for name in STREAM_COLUMNS])
#: Records per Arrow record batch sent (bounds what one message holds).
RECORDS_PER_MESSAGE = 8192
_NOTHING_ABORTED = AbortedIndex(())


def record_batch(plan: RangePlan, batches: Sequence[StreamBatch]) -> pa.RecordBatch:
    """The records of ``batches`` within the plan's range, as one record batch of :data:`STREAM_SCHEMA`.

    The batches sent are already neither control nor aborted ones (:mod:`rlm.stream.reader`).

    Raises:
        CorruptDataError: a batch fails its CRC or cannot be decoded (names its object or file).
    """
    if not batches:
        return pa.RecordBatch.from_pylist([], STREAM_SCHEMA)
    decoded = decode_columns(
        plan.tp,
        [RawBatch(b.header._replace(position=0), b.data) for b in batches],
        _NOTHING_ABORTED,
        first_offset=plan.start,
        last_offset=plan.end - 1,
        name=batches[0].name,
    )
    return decoded.select(list(STREAM_COLUMNS))


class _Parts(io.RawIOBase):
    """A write-only file that keeps what was written until taken."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        self.parts.append(bytes(data))
        return len(memoryview(data))

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


class ArrowStreamWriter:
    """Arrow IPC stream bytes, handed out as they are made: the schema message first (with the
    first batch), one message per record batch, and the end-of-stream marker from :meth:`end`."""

    def __init__(self) -> None:
        self._parts = _Parts()
        self._writer = pa.ipc.new_stream(self._parts, STREAM_SCHEMA)

    def write(self, batch: pa.RecordBatch) -> bytes:
        """The bytes of ``batch``'s message (and of the schema before the first)."""
        if batch.num_rows:
            self._writer.write_batch(batch)
        return self._parts.take()

    def end(self) -> bytes:
        """The rest of the stream: the schema when nothing was written, and the end marker."""
        self._writer.close()
        return self._parts.take()
