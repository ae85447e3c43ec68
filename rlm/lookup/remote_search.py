"""The remote tier's part of an offset-for-timestamp search (:mod:`rlm.lookup.service`).

From an offset on, the first finished segment whose max timestamp reaches the target is searched
with ranged reads (:func:`~rlm.lookup.ranged_search.find_in_remote_segment`) up to the last offset
it answers: a diverged copy kept past its cut stops answering there (:mod:`rlm.lookup.answer_end`),
and the search goes on from the next offset in the broker's log or in the copy that follows it,
never with the old leader's records past the cut, as Kafka answers only from the leader's lineage.
Which copy follows one is found without a query while the partition's segments are listed in
memory (:mod:`rlm.lookup.segment_lists`); without a list, with one query per segment read.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from uuid import UUID

from rlm.errors import NotFoundError
from rlm.log.logdir import PartitionDir
from rlm.log.model import BatchHeader
from rlm.lookup.answer_end import AnswerEnd, answer_end
from rlm.lookup.max_timestamps import remote_max_timestamp
from rlm.lookup.plans import OffsetAnswer
from rlm.lookup.ranged_search import Checkpoint, RemoteLogReader, SegmentIndexes, find_in_remote_segment
from rlm.lookup.segment_lists import SegmentList, SegmentLists
from rlm.lookup.stats import FetchStats
from rlm.lookup.topic_ids import is_other_topic, local_topic_id, of_local_topic
from rlm.lookup.views import RemoteTierView
from rlm.metastore.availability import StoreAvailability
from rlm.metastore.model import RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.storage.protocol import RemoteStorage

#: Batch epochs :meth:`RemoteSearch.batch_epoch` keeps (an entry is a few dozen bytes).
BATCH_EPOCHS_KEPT = 4096


class RemoteSearch:
    """Searches a partition's finished remote segments.

    Args:
        store: the metadata store.
        storage: the remote tier.
        indexes: where segments' indexes come from (the remote index cache).
        lists: the partitions' segments held in memory.
        availability: every call of the store goes through it (the lookup service's).
    """

    def __init__(
        self,
        store: MetadataStore,
        storage: RemoteStorage,
        indexes: SegmentIndexes,
        lists: SegmentLists,
        availability: StoreAvailability,
    ) -> None:
        self.store = store
        self.storage = storage
        self.indexes = indexes
        self.lists = lists
        self.availability = availability
        self._epochs: OrderedDict[tuple[UUID, int], int] = OrderedDict()
        """(segment id, offset) → the epoch of the batch holding it, the most recently used last:
        a copy's bytes never change, and EARLIEST asks for the same offset until retention moves it."""
        self._epochs_lock = threading.Lock()

    def segment_for_offset(
        self, tp: TopicPartition, local: PartitionDir | None, offset: int
    ) -> RemoteSegment | None:
        """The finished segment holding ``offset`` (the last in offset order when several do), or
        None; never one of a deleted topic of the same name (:mod:`rlm.lookup.topic_ids`).

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
        """
        return of_local_topic(
            self.availability.call(lambda: self.store.segment_for_offset(tp, offset)), local
        )

    def finished_segments(self, tp: TopicPartition) -> list[RemoteSegment]:
        """Every finished segment of ``tp``, in offset order, read from the store.

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
        """
        return self.availability.call(
            lambda: list(self.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
        )

    def batch_epoch(
        self, segment: RemoteSegment, offset: int, stats: FetchStats | None, checkpoint: Checkpoint
    ) -> int:
        """The leader epoch of the batch holding ``offset`` in ``segment``, read from the remote
        tier (one ranged GET, the offset index from the cache) the first time it is asked, then
        kept; -1 for a legacy (v0/v1) batch, which carries none, or when the segment holds no batch
        there.

        The segment's row names an epoch for each of its offsets, but not whether its records
        carry one: the copier gives offsets no epoch began at the epoch that began first in the
        segment, 0 when none did.

        Raises:
            CorruptDataError: a batch header is not valid.
            StorageError / NotFoundError: the remote store failed or lost the object.
        """
        key = (segment.segment_id, offset)
        with self._epochs_lock:
            kept = self._epochs.get(key)
            if kept is not None:
                self._epochs.move_to_end(key)
                return kept
        epoch = -1
        position = self.indexes.offset_index(segment, stats).lookup(offset).position
        reader = RemoteLogReader(self.storage, segment, stats, checkpoint)
        for header, _, _ in reader.headers(position, start_offset=offset):
            holds = header.magic >= 2 and header.base_offset <= offset
            epoch = header.leader_epoch if holds and header.leader_epoch >= 0 else -1
            break
        with self._epochs_lock:
            self._epochs[key] = epoch
            while len(self._epochs) > BATCH_EPOCHS_KEPT:
                self._epochs.popitem(last=False)
        return epoch

    def find(
        self,
        tp: TopicPartition,
        view: RemoteTierView,
        local: PartitionDir | None,
        local_start: int,
        timestamp: int,
        start: int,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
    ) -> OffsetAnswer:
        """The first record at or after ``start`` whose timestamp is ≥ ``timestamp``, in the remote
        tier below ``local_start`` (the broker's first local offset) and in the broker's log from
        there; -1/-1/-1 when the remote tier has none (the caller may look further locally).

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
            TaskCancelledError: ``checkpoint`` said the answer is no longer wanted.
            RlmError, OSError: the remote tier or the broker's files could not be read.
        """
        listed = self.availability.call(lambda: self.lists.get(tp, view.version, view.log_start_offset))
        search = functools.partial(self._search, tp, local=local, local_start=local_start)
        if listed is None:
            return search(None, timestamp, start, stats, checkpoint)
        try:
            return search(listed, timestamp, start, stats, checkpoint)
        except NotFoundError:
            # A listed segment was deleted since the list was read (:mod:`rlm.lookup.service`).
            self.lists.drop(tp)
            return search(None, timestamp, start, stats, checkpoint)

    def _search(
        self,
        tp: TopicPartition,
        listed: SegmentList | None,
        timestamp: int,
        start: int,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
        *,
        local: PartitionDir | None,
        local_start: int,
    ) -> OffsetAnswer:
        """:meth:`find` over ``listed``, or over the store's answers when None. Each copy is
        searched up to the last offset it answers; from the next, the broker's log or the copy
        that follows it answers."""
        from_offset = start
        local_id = local_topic_id(local)
        following: RemoteSegment | None = None
        while True:
            checkpoint()
            segment = following
            if segment is None and listed is not None:
                segment = listed.first_for_timestamp(timestamp, from_offset=from_offset)
            elif segment is None:
                ask = functools.partial(
                    self.store.first_segment_for_timestamp, tp, timestamp, from_offset=from_offset
                )
                segment = self.availability.call(ask)
            if segment is None:
                return OffsetAnswer.none()
            if is_other_topic(segment.topic_id, local_id):  # a deleted topic's, not yet retired
                from_offset, following = segment.end_offset + 1, None
                continue
            begin = max(start, segment.start_offset, from_offset)
            if local is not None and begin >= local_start:
                # The broker still has this range: reading it locally costs no GET.
                return OffsetAnswer.of(local.find_offset_by_timestamp(timestamp, begin), "local")
            end = self.answer_end(tp, listed, local, segment)
            if begin <= end.last and segment.max_timestamp_ms >= timestamp:
                found = find_in_remote_segment(
                    segment,
                    timestamp,
                    begin,
                    storage=self.storage,
                    indexes=self.indexes,
                    stats=stats,
                    checkpoint=checkpoint,
                    last_offset=end.last,
                )
                if found is not None:
                    return OffsetAnswer.of(found, "remote")
            from_offset, following = max(begin, end.last + 1), end.following

    def answer_end(
        self,
        tp: TopicPartition,
        listed: SegmentList | None,
        local: PartitionDir | None,
        segment: RemoteSegment,
    ) -> AnswerEnd:
        """Where ``segment`` stops answering (:func:`~rlm.lookup.answer_end.answer_end`), the copy
        that may follow inside it taken from ``listed`` when there is one (no query), else asked
        of the store.

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
        """
        if listed is not None:

            def holding(offset: int) -> RemoteSegment | None:
                found = listed.last_holding(offset, starting_after=segment.start_offset)
                return of_local_topic(found, local)

        else:

            def holding(offset: int) -> RemoteSegment | None:
                return self.segment_for_offset(tp, local, offset)

        segments = local.segments() if local is not None else []
        return answer_end(segment, segments[0].base_offset if segments else None, holding)

    def max_timestamp(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        earliest: int,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
    ) -> int:
        """The largest timestamp of the records the remote tier answers at or after ``earliest``
        (:func:`~rlm.lookup.max_timestamps.remote_max_timestamp`; -1 when none).

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
            RlmError: the remote tier could not be read.
        """
        local_id = local_topic_id(local)
        segments = [s for s in self.finished_segments(tp) if not is_other_topic(s.topic_id, local_id)]
        listed = SegmentList(segments)

        def batches(segment: RemoteSegment, offset: int) -> Iterator[tuple[BatchHeader, bytes]]:
            position = self.indexes.offset_index(segment, stats).lookup(offset).position
            return RemoteLogReader(self.storage, segment, stats, checkpoint).batches(position)

        def last_answered(segment: RemoteSegment) -> int:
            return self.answer_end(tp, listed, local, segment).last

        return remote_max_timestamp(segments, earliest, batches, last_answered)
