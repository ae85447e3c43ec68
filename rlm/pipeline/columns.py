"""Records as Arrow columns: the rows a job's first stage yields, one per record.

:data:`RECORD_SCHEMA` holds the export's columns (``topic`` … ``producer_id``, in that order:
:data:`EXPORT_COLUMNS`) and what compaction needs besides (``is_control``, ``is_transactional``,
``aborted``). :func:`decode_columns` is the one place the pipeline decodes records, with
``rlm.log``'s decoder; a column decoder in C will take its place, so its contract is only
"whole batches in, one Arrow record batch of :data:`RECORD_SCHEMA` out".

Column meanings: ``timestamp`` follows the batch's timestamp type (null for magic 0, which has
none); ``timestamp_type`` is Kafka's name (``CreateTime``, ``LogAppendTime``, ``NoTimestampType``);
``key``/``value`` null for a null key or value (a tombstone); ``leader_epoch`` and ``producer_id``
null where the batch has none (-1, or a legacy batch); control records (transaction markers) are
rows with ``is_control`` true and their key/value as stored; ``aborted`` is true for the records of
an aborted transaction (see :class:`~rlm.pipeline.transactions.AbortedIndex`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from rlm.errors import CorruptDataError
from rlm.log.batches import decode_batch
from rlm.log.model import NO_TIMESTAMP
from rlm.metastore.model import TopicPartition
from rlm.pipeline.plan import SegmentSummary
from rlm.pipeline.reader import RawBatch, SegmentReader
from rlm.pipeline.stage import Stage, arrow_schema
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import AbortedIndex
from rlm.storage.protocol import RemoteStorage

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
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
    columns: dict[str, list[Any]] = {field: [] for field in RECORD_SCHEMA.names}
    for batch in batches:
        header = batch.header
        try:
            records = decode_batch(batch.data, batch.local_header)
        except CorruptDataError as exc:
            raise exc.at(name, header.position) from exc
        records = [r for r in records if first_offset <= r.offset <= last_offset]
        if not records:
            continue
        count = len(records)
        ts_type = header.timestamp_type.label
        epoch = header.leader_epoch if header.magic >= 2 and header.leader_epoch >= 0 else None
        producer = header.producer_id if header.producer_id >= 0 else None
        columns["offset"] += [r.offset for r in records]
        columns["timestamp"] += [None if r.timestamp == NO_TIMESTAMP else r.timestamp for r in records]
        columns["key"] += [r.key for r in records]
        columns["value"] += [r.value for r in records]
        columns["headers"] += [[{"key": k, "value": v} for k, v in r.headers] for r in records]
        columns["timestamp_type"] += [ts_type] * count
        columns["leader_epoch"] += [epoch] * count
        columns["producer_id"] += [producer] * count
        columns["is_control"] += [header.is_control] * count
        columns["is_transactional"] += [header.is_transactional] * count
        columns["aborted"] += [aborted.is_aborted(header)] * count
    rows = len(columns["offset"])
    columns["topic"] = [tp.topic] * rows
    columns["partition"] = [tp.partition] * rows
    arrays = [pa.array(columns[f.name], type=f.type) for f in RECORD_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


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
