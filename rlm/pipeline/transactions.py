"""Aborted transactions on the remote tier: which batches a READ_COMMITTED reader leaves out.

An aborted transaction is listed in the transaction index of the segment holding its ABORT
marker, which may come after the segments holding its records. So a job that needs the aborted
flag first collects every transaction index of the partitions it reads (:data:`ABORTED_STAGE` on
executors, a few bytes per segment), then attaches to each segment the transactions touching it
(:func:`attach_aborted`), then reads records. :class:`~rlm.log.aborted.AbortedIndex` answers
per batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.metastore.model import IndexType, TopicPartition
from rlm.pipeline.reader import SegmentReader
from rlm.pipeline.stage import Collect, Stage, arrow_schema, batch_of
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import PartitionPlan, SegmentSummary, with_aborted
from rlm.storage.protocol import RemoteStorage

ABORTED_SCHEMA = arrow_schema(
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("producer_id", pa.int64()),
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("last_stable_offset", pa.int64()),
)


def read_aborted(storage: RemoteStorage, summary: SegmentSummary) -> list[AbortedTxn]:
    """The entries of the segment's own transaction index (none when it has no such file).

    Raises:
        NotFoundError: The index object is missing.
        CorruptIndexError: The transaction index is cut short or holds an unknown version.
    """
    data = SegmentReader(storage, summary).read_index(IndexType.TRANSACTION)
    if not data:
        return []
    index = TransactionIndex.from_bytes(summary.segment.start_offset, data, path=summary.index_key)
    return list(index.entries())


def aborted_task(storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
    """The stage task: one row per entry of the segment's transaction index, but those of
    transactions begun past the last offset the segment is read for (``read_to``).

    Past there a later copy is read: where it holds the same records, its own index names the
    same aborts (their markers lie in it); where this copy is a diverged one kept past its cut
    (:mod:`rlm.lookup.answer_end`), its records there are the old leader's, and an abort of theirs
    is none of the log's: the log may have committed another transaction of the same producer at
    those offsets, whose records a ``read_committed`` reader would otherwise leave out. The range
    streams follow the same rule (:mod:`rlm.stream.plan`).
    """
    tp = summary.topic_partition
    rows = [
        {"topic": tp.topic, "partition": tp.partition, **txn._asdict()}
        for txn in read_aborted(storage, summary)
        if txn.first_offset <= summary.read_to
    ]
    yield batch_of(ABORTED_SCHEMA, rows)


def aborted_stage(storage: StorageSpec) -> Stage:
    """The stage that reads the transaction indexes of segments."""
    return Stage("read transaction indexes", ABORTED_SCHEMA, aborted_task, storage)


def attach_aborted(
    plans: Sequence[PartitionPlan], storage: StorageSpec, collect: Collect
) -> list[PartitionPlan]:
    """``plans`` with each segment's aborted transactions attached.

    Reads, with ``collect``, the transaction index of every segment whose row says it has one.
    """
    with_index = [s for plan in plans for s in plan.segments if not s.segment.txn_index_empty]
    found: dict[TopicPartition, list[AbortedTxn]] = {}
    if with_index:
        table = collect(aborted_stage(storage), with_index)
        for row in table.to_pylist():
            tp = TopicPartition(row["topic"], row["partition"])
            found.setdefault(tp, []).append(
                AbortedTxn(
                    row["producer_id"], row["first_offset"], row["last_offset"], row["last_stable_offset"]
                )
            )
    return [with_aborted(plan, found.get(plan.topic_partition, ())) for plan in plans]
