"""Which segments a reader of the remote tier reads, decided from the metadata store alone (by a
pipeline job's driver, and by a query tier's bound for ``read_committed`` reads).

A job reads, per partition, the ``COPY_SEGMENT_FINISHED`` segments from the remote log start
offset on, in offset order. Each becomes a :class:`SegmentSummary`: the metadata row plus what an
executor needs and the row alone does not say (which offsets this copy is the one to read, where
the producer state at its start is kept, the aborted transactions that touch it). Summaries are
immutable, small (a few hundred bytes pickled) and picklable: the driver ships them to executors,
and executors read the objects they name.

Overlapping copies (a takeover: the new leader's segment starts inside the last copied one and
ends past it) are read once: where copies overlap the later one is read, since its leader epochs
are at least the earlier one's there (after an unclean election its records are the log's, the
earlier copy's the truncated ones). A copy lying wholly inside earlier ones, which no copier makes,
is not read at all; ``rlm spark verify`` reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from rlm.errors import NotFoundError
from rlm.log.txnindex import AbortedTxn
from rlm.metastore.model import (
    ByteRange,
    IndexType,
    PartitionRecord,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)
from rlm.metastore.protocol import MetadataStore
from rlm.storage.layout import validate_topic
from rlm.tiering.lineage import read_ranges


class IndexRef(NamedTuple):
    """One file inside a segment's index object: the object's key and the file's byte range."""

    key: str
    byte_range: ByteRange


@dataclass(frozen=True)
class SegmentSummary:
    """One finished remote segment as a job sees it; immutable and picklable."""

    segment: RemoteSegment
    """The metadata row."""
    read_from: int
    """First offset a reader takes from this copy (the remote log start offset, or the end of an
    overlapping earlier copy, may lie above the segment's start)."""
    read_to: int
    """Last offset a reader takes from this copy; below ``read_from`` when it yields every offset
    to other copies."""
    previous_snapshot: IndexRef | None = None
    """The producer snapshot taken at this segment's start offset: the one stored with the finished
    segment that ends right before it. ``None`` when there is none."""
    aborted: tuple[AbortedTxn, ...] = ()
    """Aborted transactions of the partition overlapping the segment's offsets, from the remote
    transaction indexes (see :func:`with_aborted`); empty until attached."""

    @property
    def topic_partition(self) -> TopicPartition:
        return self.segment.topic_partition

    @property
    def segment_id(self) -> str:
        return str(self.segment.segment_id)

    @property
    def log_key(self) -> str:
        return self.segment.layout.log_key

    @property
    def index_key(self) -> str:
        return self.segment.layout.index_key

    @property
    def read_whole(self) -> bool:
        """Whether every offset of the segment is read from this copy (neither the remote log start
        offset nor a later copy takes any)."""
        return self.read_from == self.segment.start_offset and self.read_to == self.segment.end_offset

    @property
    def start_state_known(self) -> bool:
        """Whether the open transactions at the segment's start are known: from the previous
        segment's producer snapshot, or because the segment starts the partition (offset 0)."""
        return self.previous_snapshot is not None or self.segment.start_offset == 0

    def index_ref(self, kind: IndexType) -> IndexRef | None:
        """Where one index file of this segment lies; ``None`` when the segment has none."""
        found = self.segment.layout.index_range(kind)
        return None if found is None else IndexRef(self.index_key, found)

    def describe(self) -> str:
        """``orders-0 [100, 199] <segment id>``: how messages name the segment."""
        s = self.segment
        return f"{s.topic_partition} [{s.start_offset}, {s.end_offset}] {s.segment_id}"


@dataclass(frozen=True)
class PartitionPlan:
    """What a job reads of one partition."""

    topic_partition: TopicPartition
    record: PartitionRecord | None
    """The store's record of the partition (remote log start offset, highest copied offset)."""
    segments: tuple[SegmentSummary, ...]
    """Finished segments in offset order (start offset, then end offset)."""

    @property
    def log_start_offset(self) -> int:
        """The remote log start offset; -1 when the store recorded none (nothing was deleted)."""
        return -1 if self.record is None else self.record.remote_log_start_offset


def select_partitions(
    store: MetadataStore, topics: Collection[str] = (), partitions: Collection[int] = ()
) -> list[PartitionRecord]:
    """The partitions a job covers: those the store knows, of ``topics`` and numbered ``partitions``
    when given (all otherwise), ordered by topic and partition. Partitions being deleted
    (``DELETE_PARTITION_*``) are left out: their segments are going away.

    Raises:
        InvalidTopicNameError: A topic name breaks Kafka's rule.
        NotFoundError: A topic asked for has no partition (of those numbers) in the store.
    """
    for topic in topics:
        validate_topic(topic)
    chosen = [
        record
        for record in store.list_partitions()
        if record.deletion_state is None
        and (not topics or record.topic_partition.topic in topics)
        and (not partitions or record.topic_partition.partition in partitions)
    ]
    for topic in topics:
        if not any(r.topic_partition.topic == topic for r in chosen):
            numbers = f" numbered {', '.join(map(str, sorted(partitions)))}" if partitions else ""
            raise NotFoundError(f"the metadata store knows no partition{numbers} of topic {topic!r}")
    return chosen


def plan_partition(
    store: MetadataStore, record: PartitionRecord, *, from_log_start: bool = True
) -> PartitionPlan:
    """Read the partition's finished segments and summarize them.

    With ``from_log_start`` (what jobs that read records want) segments wholly below the remote
    log start offset, which retention is about to delete, are left out; without it every finished
    segment is kept (a scrubber looks at them all).
    """
    tp = record.topic_partition
    finished = list(store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
    summaries = summarize(finished, record.remote_log_start_offset)
    if from_log_start:
        summaries = tuple(s for s in summaries if s.segment.end_offset >= record.remote_log_start_offset)
    return PartitionPlan(tp, record, summaries)


def in_offset_order(segments: Iterable[RemoteSegment]) -> list[RemoteSegment]:
    """``segments`` sorted by start offset, then end offset (a shorter copy before a longer one)."""
    return sorted(segments, key=lambda s: (s.start_offset, s.end_offset, str(s.segment_id)))


def summarize(finished: Sequence[RemoteSegment], log_start_offset: int = -1) -> tuple[SegmentSummary, ...]:
    """Summaries of one partition's finished segments, in offset order.

    Each summary's read range follows the module's rule for overlapping copies, and starts no
    lower than ``log_start_offset``; its previous snapshot is the producer snapshot of a segment
    ending right before it.
    """
    ordered = in_offset_order(finished)
    snapshots: dict[int, IndexRef] = {}
    for segment in ordered:
        found = segment.layout.index_range(IndexType.PRODUCER_SNAPSHOT)
        if found is not None:
            snapshots[segment.end_offset + 1] = IndexRef(segment.layout.index_key, found)
    read_to = {id(segment): last for segment, _, last in read_ranges(ordered)}
    summaries = []
    for segment in ordered:
        first = max(segment.start_offset, log_start_offset)
        last = read_to.get(id(segment), first - 1)
        summaries.append(
            SegmentSummary(
                segment,
                read_from=first,
                read_to=last,
                previous_snapshot=snapshots.get(segment.start_offset),
            )
        )
    return tuple(summaries)


def with_aborted(plan: PartitionPlan, aborted: Iterable[AbortedTxn]) -> PartitionPlan:
    """``plan`` with each segment's aborted transactions attached.

    ``aborted`` are the partition's aborted transactions, read from every segment's transaction
    index (an abort marker may sit in a later segment than the transaction's records, so a
    segment's own index does not list every transaction that touches it).
    """
    entries = sorted(set(aborted), key=lambda t: (t.last_offset, t.producer_id))
    summaries = tuple(
        dataclasses.replace(
            summary,
            aborted=tuple(
                t
                for t in entries
                if t.first_offset <= summary.segment.end_offset
                and t.last_offset >= summary.segment.start_offset
            ),
        )
        for summary in plan.segments
    )
    return dataclasses.replace(plan, segments=summaries)
