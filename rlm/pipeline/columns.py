"""Records as Arrow columns: the rows a job's first stage yields, one per record.

:data:`RECORD_SCHEMA` holds the export's columns (``topic`` … ``producer_id``, in that order:
:data:`EXPORT_COLUMNS`) and what compaction needs besides (``is_control``, ``is_transactional``,
``aborted``). :func:`decode_columns` is the one place the pipeline decodes records, with
``rlm.log``'s column decoder (:mod:`rlm.log.columns`); its contract is only "whole batches in,
one Arrow record batch of :data:`RECORD_SCHEMA` out".

Column meanings: ``timestamp`` follows the batch's timestamp type (null for magic 0, which has
none); ``timestamp_type`` is Kafka's name (``CreateTime``, ``LogAppendTime``, ``NoTimestampType``);
``key``/``value`` null for a null key or value (a tombstone); ``leader_epoch`` and ``producer_id``
null where the batch has none (-1, or a legacy batch); control records (transaction markers) are
rows with ``is_control`` true and their key/value as stored; ``aborted`` is true for the records of
an aborted transaction (see :class:`~rlm.log.aborted.AbortedIndex`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rlm.errors import CorruptDataError
from rlm.log.aborted import AbortedIndex
from rlm.log.arrow import HEADER_TYPE, int64_scalar, record_arrays
from rlm.log.columns import ColumnBuffers, append_batch
from rlm.log.model import NO_TIMESTAMP, BatchHeader
from rlm.metastore.model import TopicPartition
from rlm.pipeline.reader import RawBatch, SegmentReader
from rlm.pipeline.stage import Stage, arrow_schema
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.protocol import RemoteStorage

RECORD_SCHEMA = arrow_schema(
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
    pa.field("timestamp_type", pa.string()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(HEADER_TYPE)),
    pa.field("leader_epoch", pa.int32()),
    pa.field("producer_id", pa.int64()),
    pa.field("is_control", pa.bool_()),
    pa.field("is_transactional", pa.bool_()),
    pa.field("aborted", pa.bool_()),
)
#: The columns an export writes, in order.
EXPORT_COLUMNS: tuple[str, ...] = tuple(RECORD_SCHEMA.names[:10])
#: Records per Arrow batch a stage yields (bounds an executor's memory, not a batch of Kafka's).
RECORDS_PER_ARROW_BATCH = 8192
_TIMESTAMP_TYPE = RECORD_SCHEMA.field("timestamp").type
_NO_TIMESTAMP = int64_scalar(NO_TIMESTAMP)
_NULL_TIMESTAMP = pa.nulls(1, _TIMESTAMP_TYPE)[0]


def decode_columns(
    tp: TopicPartition,
    batches: Sequence[RawBatch],
    aborted: AbortedIndex,
    *,
    first_offset: int,
    last_offset: int,
    name: str,
) -> pa.RecordBatch:
    """Decode whole batches into one Arrow record batch of :data:`RECORD_SCHEMA`.

    Records are decoded into column buffers (:mod:`rlm.log.columns`, in C when it is built) that
    the Arrow arrays wrap; batch-level values are spread over rows by each row's batch ordinal.
    No object is made per record (except for legacy v0/v1 batches).

    Args:
        tp: The partition the batches belong to.
        batches: Consecutive whole batches of one ``.log`` object.
        aborted: The aborted transactions touching them.
        first_offset: Records below this offset are left out.
        last_offset: Records above this offset are left out.
        name: The object's key, for error messages.

    Raises:
        CorruptDataError: A batch fails its CRC or cannot be decoded; it names ``name`` and the
            batch's position.
    """
    cols = ColumnBuffers()
    kept: list[BatchHeader] = []
    for batch in batches:
        header = batch.header
        try:
            appended = append_batch(
                cols,
                batch.data,
                batch.local_header,
                first_offset=first_offset,
                last_offset=last_offset,
                batch_no=len(kept),
            )
        except CorruptDataError as exc:
            raise exc.at(name, header.position) from exc
        if appended:
            kept.append(header)
    arrays = record_arrays(cols)
    rows = len(arrays.offset)
    per_batch: dict[str, pa.Array[Any]] = {
        "timestamp_type": pa.array([h.timestamp_type.label for h in kept], pa.string()),
        "leader_epoch": pa.array(
            [h.leader_epoch if h.magic >= 2 and h.leader_epoch >= 0 else None for h in kept], pa.int32()
        ),
        "producer_id": pa.array([h.producer_id if h.producer_id >= 0 else None for h in kept], pa.int64()),
        "is_control": pa.array([h.is_control for h in kept], pa.bool_()),
        "is_transactional": pa.array([h.is_transactional for h in kept], pa.bool_()),
        "aborted": pa.array([aborted.is_aborted(h) for h in kept], pa.bool_()),
    }
    columns: dict[str, pa.Array[Any]] = {
        "topic": pa.repeat(pa.scalar(tp.topic, pa.string()), rows),
        "partition": pa.repeat(pa.scalar(tp.partition, pa.int32()), rows),
        "offset": arrays.offset,
        "timestamp": export_timestamps(arrays.timestamp),
        "key": arrays.key,
        "value": arrays.value,
        "headers": arrays.headers,
        **{field: values.take(arrays.batch) for field, values in per_batch.items()},
    }
    return pa.RecordBatch.from_arrays([columns[f] for f in RECORD_SCHEMA.names], schema=RECORD_SCHEMA)


def export_timestamps(stored: pa.Array[Any]) -> pa.Array[Any]:
    """The ``timestamp`` column of stored timestamps (int64): null where a record has none."""
    no_timestamp = pc.equal(stored, _NO_TIMESTAMP)
    timestamps = stored.view(_TIMESTAMP_TYPE)
    return (
        pc.if_else(no_timestamp, _NULL_TIMESTAMP, timestamps) if pc.any(no_timestamp).as_py() else timestamps
    )


def records_task(storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
    """The stage task: every record the segment is read for (``read_from`` … ``read_to``).

    Batches wholly outside that range are stepped over without decoding. Aborted flags need the
    summary's aborted transactions (:func:`~rlm.pipeline.transactions.attach_aborted`).
    """
    if summary.read_from > summary.read_to:
        return
    reader = SegmentReader(storage, summary)
    aborted = AbortedIndex(summary.aborted)
    pending: list[RawBatch] = []
    records = 0

    def flush(batches: list[RawBatch]) -> pa.RecordBatch:
        return decode_columns(
            summary.topic_partition,
            batches,
            aborted,
            first_offset=summary.read_from,
            last_offset=summary.read_to,
            name=summary.log_key,
        )

    for batch in reader.batches():
        header = batch.header
        if header.last_offset < summary.read_from:
            continue
        if header.base_offset > summary.read_to:
            break
        pending.append(batch)
        records += max(1, header.record_count)
        if records >= RECORDS_PER_ARROW_BATCH:
            yield flush(pending)
            pending, records = [], 0
    if pending:
        yield flush(pending)


def records_stage(storage: StorageSpec) -> Stage:
    """The stage that reads every record of segments as rows of :data:`RECORD_SCHEMA`."""
    return Stage("read records", RECORD_SCHEMA, records_task, storage)
