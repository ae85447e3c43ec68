"""Which offsets a range stream reads, decided once before its first byte is sent.

A stream reads the offsets ``[start, end)`` of one partition. ``start`` is the offset asked for,
or the answer of rlm's own offset-for-timestamp lookup for ``from_timestamp`` (any timestamp the
APIs take, special names included), or the log start offset. ``end`` is the smallest of
``end_offset``, the offset-for-timestamp answer of ``to_timestamp`` (the first record at or after
it, which the stream leaves out) and the last fetchable offset: the high watermark, or with
``read_committed`` the last stable offset, at most the end of the broker's segments as listed for
the plan (the broker may roll and checkpoint a higher watermark after they were listed).
Without the broker's log (a query tier) the last fetchable offset is the highest offset copied,
plus one, or with ``read_committed`` the remote tier's last stable offset when lower
(:mod:`rlm.lookup.tier_stable`: a transaction whose marker is not tiered yet may still abort).

A range that starts at or past its end is empty: it is not an error (a stream from the high
watermark has nothing to send yet). An ``offset`` below the log start offset or past the end of
the broker's log is one, as Kafka answers a fetch (a query tier, which does not know the end,
answers an empty range).

With ``read_committed``, the aborted transactions of the range are collected from the
transaction indexes of the broker's segments and of the remote copies below them. A segment the
broker deletes while they are read (local retention) may have lost its index already: the
broker's segments are then listed again, and the copies of the offsets it held read instead.

Planning may search the remote tier (a timestamp's offset, aborted transactions): it runs on the
reader pool, never on an event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from uuid import UUID

from rlm.errors import InvalidArgumentError, OffsetOutOfRangeError
from rlm.log.logdir import PartitionDir
from rlm.log.segment import Segment
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.lookup.answer_end import answer_end
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.plans import IsolationLevel
from rlm.lookup.ranged_search import Checkpoint, never_cancelled
from rlm.lookup.segment_lists import SegmentList
from rlm.lookup.service import LookupService
from rlm.lookup.topic_ids import is_other_topic, local_topic_id
from rlm.metastore.model import IndexType, SegmentState, TopicPartition
from rlm.storage.layout import validate_topic

#: An end beyond any offset: no bound.
NO_END = 2**63 - 1
#: Listings of the broker's segments the aborted transactions are collected from at most, each
#: after a segment of the last one was deleted under it.
MAX_RELISTS = 8


@dataclass(frozen=True)
class RangeQuery:
    """What a client asked to stream (at most one of each pair of start and end arguments)."""

    tp: TopicPartition
    offset: int | None = None
    from_timestamp: int | None = None
    end_offset: int | None = None
    """The first offset left out."""
    to_timestamp: int | None = None
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED

    def __post_init__(self) -> None:
        if self.offset is not None and self.from_timestamp is not None:
            raise InvalidArgumentError("offset", "give offset or from_timestamp, not both")
        if self.end_offset is not None and self.to_timestamp is not None:
            raise InvalidArgumentError("end_offset", "give end_offset or to_timestamp, not both")
        if self.offset is not None and self.offset < 0:
            raise InvalidArgumentError("offset", f"{self.offset} is negative")
        if self.end_offset is not None and self.end_offset < 0:
            raise InvalidArgumentError("end_offset", f"{self.end_offset} is negative")


@dataclass(frozen=True)
class RangePlan:
    """The offsets a stream reads and where the tiers meet."""

    tp: TopicPartition
    start: int
    """First offset sent."""
    end: int
    """First offset not sent: records are sent while below it."""
    limit: int
    """The last fetchable offset (:data:`NO_END` when unknown): a whole batch is sent only when it
    lies wholly below it, so that no record a consumer may not see leaves in a raw batch."""
    local_start: int | None
    """The first offset the broker's log holds (read there from then on), or None without one."""
    local: PartitionDir | None
    aborted: tuple[AbortedTxn, ...] = ()
    """With READ_COMMITTED, the aborted transactions touching the range (their batches are left out)."""
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    topic_id: UUID | None = None
    """The topic id of the broker's directory when planned (None without one): a directory holding
    another is a topic made again under the name since, whose files the stream must not read."""

    @property
    def empty(self) -> bool:
        return self.start >= self.end


def plan_range(
    service: LookupService,
    indexes: RemoteIndexCache,
    query: RangeQuery,
    *,
    checkpoint: Checkpoint = never_cancelled,
) -> RangePlan:
    """Resolve ``query`` into offsets (blocking: run it on the reader pool).

    ``checkpoint`` is called between remote reads (its pool task's token): planning cut off by
    its request's deadline stops there instead of reading on for nobody, holding a pool thread.

    Raises:
        TaskCancelledError: ``checkpoint`` said the plan is no longer wanted.
        InvalidTopicNameError: the topic name breaks Kafka's rule.
        NotFoundError: unknown topic-partition.
        UnreadableTopicIdError: the store knows the partition and the broker's
            ``partition.metadata`` cannot be read (:mod:`rlm.lookup.topic_ids`).
        OffsetOutOfRangeError: ``offset`` is below the log start offset or past the log end offset,
            or the broker's segments kept changing while aborted transactions were collected.
        MetadataUnavailableError: the metadata store does not answer and the range needs it.
    """
    tp = query.tp
    validate_topic(tp.topic)
    local = service.pinned_partition(tp)
    view = service.usable_view(tp, local)
    service.require_readable(tp, local, view)
    earliest = service.earliest_offset(tp, local, view)
    limit = service.last_fetchable(local, query.isolation, log_start=earliest)
    if local is not None:
        limit = min(limit, _listed_end(local))
    else:
        limit = service.ask_store(lambda: service.store.highest_copied_offset(tp)) + 1
        if query.isolation is IsolationLevel.READ_COMMITTED:
            stable = service.tier_stable_offset(tp, view, log_start=earliest)
            limit = limit if stable is None else min(limit, stable)
    if query.offset is not None:
        if query.offset < earliest:
            raise OffsetOutOfRangeError(
                f"offset {query.offset} of {tp} is below the log start offset {earliest}"
            )
        # Past the end of the log is out of range, as Kafka answers a fetch (between the high
        # watermark and the log end, which a stale checkpoint can put there, the range is empty);
        # without the broker's log the end is not known here.
        if local is not None:
            log_end = max(service.last_fetchable(local), local.log_end_offset())
            if query.offset > log_end:
                raise OffsetOutOfRangeError(
                    f"offset {query.offset} of {tp} is outside [{earliest}, {log_end}]: "
                    "past the end of the log"
                )
        start = query.offset
    elif query.from_timestamp is not None:
        start = _offset_for(service, tp, query.from_timestamp, query.isolation, limit, checkpoint)
    else:
        start = earliest
    end = limit
    if query.end_offset is not None:
        end = min(end, query.end_offset)
    if query.to_timestamp is not None:
        end = min(end, _offset_for(service, tp, query.to_timestamp, query.isolation, limit, checkpoint))
    aborted: tuple[AbortedTxn, ...] = ()
    if query.isolation is IsolationLevel.READ_COMMITTED and start < end:
        collect = partial(_aborted, service, indexes, tp, start=start, end=end, checkpoint=checkpoint)
        local, aborted = _aborted_listed(tp, service, local, collect)
    segments = local.segments() if local is not None else []
    local_start = max(segments[0].base_offset, earliest) if segments else None
    topic_id = local_topic_id(local)
    return RangePlan(tp, start, end, limit, local_start, local, aborted, query.isolation, topic_id)


def _listed_end(local: PartitionDir) -> int:
    """The end of the log as listed (pinned) for the plan: the stream reads these segments. The
    broker may roll, append and checkpoint a high watermark past them after they were listed;
    a range ending there would end short of its announced end once their batches are sent.
    :data:`NO_END` when the listing's last segment is gone (the stream lists them again)."""
    try:
        return local.log_end_offset()
    except FileNotFoundError:
        return NO_END


def _offset_for(
    service: LookupService,
    tp: TopicPartition,
    timestamp: int,
    isolation: IsolationLevel,
    limit: int,
    checkpoint: Checkpoint,
) -> int:
    """The offset-for-timestamp answer; ``limit`` when there is none (nothing at or after it)."""
    checkpoint()
    answer = service.find(tp, timestamp, isolation=isolation, checkpoint=checkpoint)
    return limit if answer.offset < 0 else answer.offset


class _SegmentGoneError(Exception):
    """A listed segment of the broker's was deleted before its transaction index was read."""


def _aborted_listed(
    tp: TopicPartition,
    service: LookupService,
    local: PartitionDir | None,
    collect: Callable[[PartitionDir | None], list[AbortedTxn]],
) -> tuple[PartitionDir | None, tuple[AbortedTxn, ...]]:
    """``collect(local)`` (:func:`_aborted`), from a new listing of the broker's segments each
    time one it read was deleted under it (its offsets are then the remote tier's, whose copies'
    transaction indexes are read instead); the listing they were collected from, and them.

    Raises:
        OffsetOutOfRangeError: the broker's segments kept changing under the plan.
    """
    for _ in range(MAX_RELISTS):
        try:
            return local, tuple(collect(local))
        except _SegmentGoneError:
            local = service.pinned_partition(tp, relisted=True)
    raise OffsetOutOfRangeError(
        f"the broker's segments of {tp} kept changing while its aborted transactions were collected"
    )


def _local_aborted(segment: Segment) -> TransactionIndex:
    """The transaction index of one of the broker's segments.

    Raises:
        _SegmentGoneError: the broker deleted the segment (its ``.log`` goes first): a transaction
            index read or found missing then may be none of the segment's, its entries lost.
    """
    try:
        index = segment.transaction_index()
    except FileNotFoundError:
        raise _SegmentGoneError from None
    if not segment.log_path.exists():
        raise _SegmentGoneError
    return index


def _aborted(
    service: LookupService,
    indexes: RemoteIndexCache,
    tp: TopicPartition,
    local: PartitionDir | None,
    start: int,
    end: int,
    checkpoint: Checkpoint = never_cancelled,
) -> list[AbortedTxn]:
    """The aborted transactions with records in ``[start, end)``, from the transaction indexes of
    every segment from the one holding ``start`` on, until one says no later one can matter (an
    entry whose last stable offset is at or past ``end``, as Kafka's fetch collects them). An
    abort's entry is in the segment of its marker, which may come after the records' segment."""
    found: list[AbortedTxn] = []
    segments = local.segments() if local is not None else []
    local_start = segments[0].base_offset if segments else NO_END
    if start < local_start:
        finished = service.ask_store(
            lambda: list(service.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
        )
        local_id = local_topic_id(local)
        # A deleted topic's copies are none of this one's (rlm.lookup.topic_ids).
        listed = SegmentList(s for s in finished if not is_other_topic(s.topic_id, local_id))
        for segment in listed.segments:
            if segment.end_offset < start or segment.start_offset >= local_start or segment.txn_index_empty:
                continue
            checkpoint()
            data = indexes.get(segment, IndexType.TRANSACTION)
            if not data:
                continue
            # A diverged copy kept past its cut is the old leader's log from there
            # (rlm.lookup.answer_end): its entries of transactions begun there, and where its
            # transactions left the last stable offset, are none of the log's.
            following = partial(listed.last_holding, starting_after=segment.start_offset)
            last = answer_end(segment, segments[0].base_offset if segments else None, following).last
            index = TransactionIndex.from_bytes(segment.start_offset, data, path=segment.layout.index_key)
            result = index.collect_aborted(start, end)
            found += [txn for txn in result.aborted if txn.first_offset <= last]
            if result.done and last == segment.end_offset:
                return found
    for i, local_segment in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
            continue
        result = _local_aborted(local_segment).collect_aborted(start, end)
        found += result.aborted
        if result.done:
            break
    return found
