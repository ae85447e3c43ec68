"""A range stream's records as Arrow IPC: the columns of the Spark export, a record batch at a time.

Records are decoded by the pipeline's one column decoder (:func:`rlm.pipeline.columns.decode_columns`),
then the stream's columns are selected: ``offset, timestamp, timestamp_type, key, value, headers,
leader_epoch``, typed as the export types them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from rlm.log.arrow import record_arrays
from rlm.pipeline.columns import RECORD_SCHEMA, decode_columns, export_timestamps
from rlm.pipeline.reader import RawBatch
from rlm.pipeline.transactions import AbortedIndex
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
        return pa.RecordBatch.from_pylist([], STREAM_SCHEMA)
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
    kinds = pa.array([h.timestamp_type.label for h in headers], pa.string())
    epochs = pa.array(
        [h.leader_epoch if h.magic >= 2 and h.leader_epoch >= 0 else None for h in headers], pa.int32()
    )
    columns = (
        arrays.offset,
        export_timestamps(arrays.timestamp),
        kinds.take(arrays.batch),
        arrays.key,
        arrays.value,
        arrays.headers,
        epochs.take(arrays.batch),
    )
    return pa.RecordBatch.from_arrays(list(columns), schema=STREAM_SCHEMA)


#: The IPC stream's end marker: a continuation token and a zero length.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


class ArrowStreamWriter:
    """Arrow IPC stream bytes, handed out as they are made: the schema message first (with the
    first batch), one message per record batch, and the end-of-stream marker from :meth:`end`.

    Each message is serialized once by Arrow (``serialize``: the encapsulated IPC message the stream
    format is a sequence of) and joined with what goes with it: no file object in between."""

    def __init__(self) -> None:
        self._schema: bytes | None = STREAM_SCHEMA.serialize().to_pybytes()

    def _head(self) -> list[bytes]:
        schema, self._schema = self._schema, None
        return [] if schema is None else [schema]

    def write(self, batch: pa.RecordBatch) -> bytes | memoryview:
        """The bytes of ``batch``'s message (and of the schema before the first): after the first,
        a view of the buffer Arrow serialized the message into (not copied again)."""
        if not batch.num_rows:
            return b""
        head = self._head()
        message = batch.serialize()
        return b"".join([*head, message]) if head else memoryview(message)

    def end(self) -> bytes:
        """The rest of the stream: the schema when nothing was written, and the end marker."""
        return b"".join([*self._head(), END_OF_STREAM])
