"""Offset for timestamp across the remote and local tiers (Kafka ListOffsets semantics, KIP-1075).

For a timestamp T ≥ 0 the answer is the smallest offset ≥ the log start offset whose record
timestamp is ≥ T, with that record's timestamp and its batch's leader epoch; -1/-1/-1 when there is
none. The tier is chosen by the max timestamp of the finished remote segments: above it only the
local log can hold the answer; otherwise the search starts at the earliest offset, remote first,
and a remote candidate whose range the broker still has locally is read locally.

Special timestamps: -1 latest (high watermark), -2 earliest (remote tier included), -3 the record
with the max timestamp across remote *and* local, -4 earliest local, -5 latest tiered.

Every call here is synchronous; :meth:`LookupService.plan` reads only the broker's files (an event
loop may call it), :meth:`LookupService.search` may ask the store or read the remote tier and runs
on the pool its plan names.

The remote tier's part of a search, which stops at the cut of a diverged copy kept past it, is
:mod:`rlm.lookup.remote_search`'s.

Each lookup is planned once (:meth:`LookupService.plan`, :mod:`rlm.lookup.plans`): from the
partition's remote-tier summary, its *view*, held by :class:`~rlm.lookup.views.RemoteViews` (which
says how views are reused and why answers stay exact under one a little stale), and the broker's
files, the plan is either the answer, found on the caller's thread, or a search for a pool to run
(:meth:`LookupService.search`), which does not decide the tier again.

The metadata store down: every call of the store goes through a
:class:`~rlm.metastore.availability.StoreAvailability`, so that during an outage a lookup does not
wait for it: answers in the broker's local log come from a fallback view where those stay exact
(:meth:`RemoteViews.fallback`), the others fail at once with ``MetadataUnavailableError``.

Segment lists: a remote search takes its segments from the partition's finished segments held in
memory (:mod:`rlm.lookup.segment_lists`), answering as the store's ``first_segment_for_timestamp``
would, instead of querying the store for each. A list is read again at the first remote search
after the summary shows finished segments came or went (its ``version``); a partition over the
list's bound (``max_listed_segments``) is searched with the store's queries. Answers stay exact.
A segment the list lacks either copies again offsets a listed segment holds (a takeover's copy),
or holds offsets copied after the summary at hand was read (else its version would differ from
the list's), which the broker had locally then and still has (its first local segment did not
change, or the summary would have been read again): the local search finds those. A segment
retention deleted after the summary was read may still be listed: reached below the stale log
start offset, it answers as under a stale summary while its objects remain; once they are gone,
reading them raises NotFoundError, and the list is dropped and the search done again with the
store's queries. A stale list never fails a lookup, nor answers from a deleted object.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rlm.errors import MetadataUnavailableError, NotFoundError, PartitionUnavailableError
from rlm.log.broker_dirs import offline_problem
from rlm.log.checkpoints import epoch_for_offset
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.stable import StableOffsetTracker
from rlm.log.watch import DirectoryWatcher
from rlm.lookup.max_timestamps import local_max_timestamp
from rlm.lookup.plans import (
    Answered,
    IsolationLevel,
    LookupPlan,
    OffsetAnswer,
    Search,
    ViewNeeded,
)
from rlm.lookup.ranged_search import (
    Checkpoint,
    SegmentIndexes,
    never_cancelled,
)
from rlm.lookup.remote_search import RemoteSearch
from rlm.lookup.segment_lists import DEFAULT_MAX_SEGMENTS, SegmentLists
from rlm.lookup.stats import FetchStats
from rlm.lookup.tier_stable import TierStableOffsets
from rlm.lookup.topic_ids import is_other_topic, local_topic_id
from rlm.lookup.views import DEFAULT_TTL_S, RemoteTierView, RemoteViews
from rlm.metastore.availability import StoreAvailability
from rlm.metastore.model import PartitionRecord, RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.storage.protocol import RemoteStorage
from rlm.timestamps import SpecialTimestamp

DEFAULT_METADATA_TTL_S = DEFAULT_TTL_S
"""How long a partition's remote-tier view is reused before the metadata store is asked again."""
DEFAULT_RETRY_S = 1.0
"""After the metadata store failed to answer, how long lookups do without it (by default)."""

T = TypeVar("T")
#: Times a lookup lists the broker's directory again when a segment it listed is gone (the broker's
#: retention deleted it between the listing and the reading).
MAX_LISTINGS = 3


class _Unpinned:
    """The default of :meth:`LookupService.plan`'s ``local``: look the directory up."""


UNPINNED = _Unpinned()


class LookupService:
    """Answers offset-for-timestamp for the partitions of this broker's log directories."""

    def __init__(
        self,
        store: MetadataStore,
        storage: RemoteStorage,
        indexes: SegmentIndexes,
        log_dirs: tuple[Path, ...],
        *,
        metadata_ttl_s: float = DEFAULT_METADATA_TTL_S,
        max_listed_segments: int = DEFAULT_MAX_SEGMENTS,
        availability: StoreAvailability | None = None,
        views: RemoteViews | None = None,
        watcher: DirectoryWatcher | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.storage = storage
        self.indexes = indexes
        self.log_dirs = tuple(LogDir(d, watcher=watcher, clock=clock) for d in log_dirs)
        self.availability = availability if availability is not None else StoreAvailability(DEFAULT_RETRY_S)
        self.views = (
            views
            if views is not None
            else RemoteViews(store, self.availability, ttl_s=metadata_ttl_s, clock=clock)
        )
        self._partitions: dict[TopicPartition, PartitionDir] = {}
        self._stable_offsets = StableOffsetTracker()
        self.remote = RemoteSearch(
            store, storage, indexes, SegmentLists(store, max_segments=max_listed_segments), self.availability
        )
        self._tier_stable = TierStableOffsets(self.remote.finished_segments, storage)
        self._lock = threading.Lock()

    # -- partitions --------------------------------------------------------------------------

    def local_partition(self, tp: TopicPartition) -> PartitionDir | None:
        """The broker's directory of ``tp``, or None when it has none (cached; re-checked on miss).

        Raises:
            PartitionUnavailableError: none of the log directories that can be read has ``tp``,
                and one cannot be read: whether the broker holds it there cannot be told.
        """
        with self._lock:
            found = self._partitions.get(tp)
        if found is not None and found.path.is_dir():
            return found
        for log_dir in self.log_dirs:
            path = log_dir.partition_path(tp.topic, tp.partition)
            if path is not None:
                found = PartitionDir(path, log_dir)
                with self._lock:
                    self._partitions[tp] = found
                return found
        with self._lock:
            self._partitions.pop(tp, None)
        offline = [problem for problem in map(offline_problem, self.log_dirs) if problem is not None]
        if offline:
            raise PartitionUnavailableError(
                f"{tp} is in none of the log directories that can be read, and {'; '.join(offline)}: "
                "whether the broker holds it there cannot be told"
            )
        return None

    def pinned_partition(self, tp: TopicPartition, *, relisted: bool = False) -> PartitionDir | None:
        """The broker's directory of ``tp`` as one lookup sees it (:meth:`PartitionDir.pinned`), or
        None. Listing the directory tells that it still exists, so no separate check is made.
        ``relisted``: the directory read again, not a kept listing (a reader found a listed
        segment gone)."""
        with self._lock:
            known = self._partitions.get(tp)
        if known is not None:
            try:
                if relisted:
                    known.forget_listing()
                return known.pinned()
            except FileNotFoundError:  # deleted or moved to another log directory since
                pass
        local = self.local_partition(tp)
        return local.pinned() if local is not None else None

    def require_known(
        self, tp: TopicPartition, local: PartitionDir | None, view: RemoteTierView | None = None
    ) -> None:
        """Raise NotFoundError when ``tp`` has neither a local log nor remote segments."""
        if local is None and not (view if view is not None else self.remote_view(tp, local)).known:
            raise NotFoundError(f"unknown topic-partition {tp}: no local log and no remote segments")

    def require_readable(self, tp: TopicPartition, local: PartitionDir | None, view: RemoteTierView) -> None:
        """:meth:`require_known`, and that ``view``'s remote tier can be told from a deleted topic's
        of the same name: what every read of ``tp`` (lookup, fetch, stream) checks first.

        Raises:
            NotFoundError: ``tp`` has neither a local log nor remote segments.
            UnreadableTopicIdError: the store knows ``tp`` and the broker's ``partition.metadata``
                cannot be read or parsed (:mod:`rlm.lookup.topic_ids`): the partition is not read,
                as Kafka does not load such a log, rather than answered from segments and offsets
                that may be a deleted topic's.
        """
        self.require_known(tp, local, view)
        if view.unreadable_topic_id is not None:
            raise view.unreadable_topic_id
        if view.known:
            local_topic_id(local)  # a view kept from before the file could not be read

    # -- the remote tier's summary -------------------------------------------------------------

    def remote_view(self, tp: TopicPartition, local: PartitionDir | None) -> RemoteTierView:
        """The partition's remote-tier view, reused as the module docstring says."""
        return self.views.get(tp, local)

    def usable_view(self, tp: TopicPartition, local: PartitionDir | None) -> RemoteTierView:
        """:meth:`remote_view`, or while the store does not answer its fallback (for reads of the
        broker's log only: :meth:`RemoteViews.fallback`).

        Raises:
            MetadataUnavailableError: the store does not answer and there is no fallback.
        """
        try:
            return self.remote_view(tp, local)
        except MetadataUnavailableError:
            fallback = self.views.fallback(tp, local)
            if fallback is None:
                raise
            return fallback

    def remote_segment_for_offset(
        self, tp: TopicPartition, local: PartitionDir | None, offset: int
    ) -> RemoteSegment | None:
        """The finished remote segment holding ``offset``, or None; never one of a deleted topic
        of the same name (:mod:`rlm.lookup.topic_ids`).

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
        """
        return self.remote.segment_for_offset(tp, local, offset)

    def ask_store(self, ask: Callable[[], T]) -> T:
        """``ask()``, a call of the metadata store, unless the store is down (then this raises
        ``MetadataUnavailableError`` at once); noting how it went."""
        return self.availability.call(ask)

    def invalidate(self, tp: TopicPartition | None = None) -> None:
        """Forget the remote-tier view of ``tp`` (of every partition when None): the next
        lookup asks the metadata store. For whoever changed the remote tier in this process."""
        self.views.invalidate(tp)
        self.remote.lists.drop(tp)
        self._tier_stable.drop(tp)

    # -- offsets -----------------------------------------------------------------------------

    def earliest_offset(
        self, tp: TopicPartition, local: PartitionDir | None, view: RemoteTierView | None = None
    ) -> int:
        """The log start offset, remote tier included (-2)."""
        view = view if view is not None else self.remote_view(tp, local)
        local_base = _first_base(local)
        starts = [o for o in (view.first_offset, local_base) if o is not None]
        # Retention advanced the remote log start offset past what it deleted; it holds even when
        # retention deleted every remote segment and the broker still has some of those offsets.
        earliest = max(min(starts, default=0), view.log_start_offset)
        checkpointed = local.checkpointed_log_start_offset() if local is not None else None
        return max(earliest, checkpointed or 0)

    def answer_from_view(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        timestamp: int,
        view: RemoteTierView,
        *,
        stats: FetchStats | None = None,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetAnswer | None:
        """The answer when the partition's ``view`` and the broker's files are enough: no query of
        the metadata store, no remote read (what a request's own thread may do, even an event
        loop's); None when finding it needs either: :meth:`find` it on the reader pool then.

        That is: a timestamp ≥ 0 above the max remote timestamp (only the local log can hold it),
        LATEST, MAX_TIMESTAMP without finished remote segments, EARLIEST when the answer is in the
        local log, and EARLIEST_LOCAL (the first local offset at or above the log start offset;
        its leader epoch is the broker's checkpoint's, as Kafka answers it).

        Raises:
            as :meth:`find`.
        """
        self.require_readable(tp, local, view)
        if timestamp >= 0:
            if view.max_timestamp is not None and timestamp <= view.max_timestamp:
                return None
            return self._by_timestamp(tp, local, timestamp, stats, never_cancelled, isolation, view)
        if timestamp == SpecialTimestamp.LATEST:
            return self._latest(tp, local, isolation, view)
        if timestamp == SpecialTimestamp.MAX_TIMESTAMP:
            if view.max_timestamp is not None:
                return None
            return self._max_timestamp(tp, local, stats, never_cancelled, isolation, view)
        if timestamp in (SpecialTimestamp.EARLIEST, SpecialTimestamp.EARLIEST_LOCAL):
            segments = local.segments() if local is not None else []
            if timestamp == SpecialTimestamp.EARLIEST_LOCAL and not segments:
                return OffsetAnswer.none()
            epochs = local.leader_epochs() if local is not None else []
            earliest = self.earliest_offset(tp, local, view)
            if timestamp == SpecialTimestamp.EARLIEST and (
                not segments or earliest < segments[0].base_offset
            ):
                return None  # the tier is the store's to tell
            start = max(segments[0].base_offset, earliest)
            return OffsetAnswer(start, -1, epoch_for_offset(epochs, start), "local")
        if timestamp == SpecialTimestamp.LATEST_TIERED:
            return None
        raise ValueError(f"timestamp {timestamp} is not a timestamp (≥ 0) nor a special value (-1 to -5)")

    @staticmethod
    def reads_remote(timestamp: int, view: RemoteTierView) -> bool:
        """Whether finding the answer for ``timestamp`` may read the remote tier (KIP-1075: it
        then runs on the reader pool; the others need the metadata store at most)."""
        max_remote = view.max_timestamp
        if max_remote is None:
            return False
        return 0 <= timestamp <= max_remote or timestamp == SpecialTimestamp.MAX_TIMESTAMP

    def plan(
        self,
        tp: TopicPartition,
        timestamp: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        local: PartitionDir | _Unpinned | None = UNPINNED,
        view: RemoteTierView | None = None,
    ) -> LookupPlan:
        """Decide, once, how ``timestamp`` is answered for ``tp`` (:mod:`rlm.lookup.plans`), with
        no metadata query and no remote read: what a request's own thread may do, even an event
        loop's.

        Args:
            tp: the partition.
            timestamp: ≥ 0, or a special timestamp (-1 to -5).
            isolation: which offsets the answer may name.
            local: the partition's pinned directory (:meth:`pinned_partition`) when the caller
                has it, None when the broker has none; by default it is looked up.
            view: the partition's remote-tier view when the caller read it (or took its
                fallback); by default the one held, or while the store is down its fallback;
                without either the plan is :class:`ViewNeeded`.

        Raises:
            NotFoundError: neither a local log nor remote segments exist for ``tp``.
            UnreadableTopicIdError: the store knows ``tp`` and the broker's ``partition.metadata``
                cannot be read (:mod:`rlm.lookup.topic_ids`).
            ValueError: ``timestamp`` is below -5.
        """
        if isinstance(local, _Unpinned):
            local = self.pinned_partition(tp)
        if view is None:
            view = self.views.cached(tp, local, while_refreshing=True)
            if view is None and self.availability.down:
                view = self.views.fallback(tp, local)
            if view is None:
                return ViewNeeded(local)
        for listing in range(1, MAX_LISTINGS + 1):
            try:
                answer = self.answer_from_view(tp, local, timestamp, view, isolation=isolation)
                break
            except FileNotFoundError:  # a listed segment is gone: the broker deleted it
                if local is None or listing == MAX_LISTINGS:
                    raise
                local = self.pinned_partition(tp, relisted=True)
        if answer is not None:
            return Answered(answer)
        # Without the broker's log, READ_COMMITTED LATEST_TIERED is bounded by the remote tier's
        # last stable offset, read from the tier (a producer snapshot).
        # EARLIEST and LATEST_TIERED read the epoch of an offset below the broker's checkpoint
        # from the remote tier (_epoch_at).
        reads_remote = (
            self.reads_remote(timestamp, view)
            or (
                local is None
                and isolation is IsolationLevel.READ_COMMITTED
                and timestamp == SpecialTimestamp.LATEST_TIERED
            )
            or self._reads_remote_epoch(tp, local, timestamp, view)
        )
        return Search(tp, timestamp, isolation, local, view, reads_remote)

    def search(
        self, search: Search, *, stats: FetchStats | None = None, checkpoint: Checkpoint = never_cancelled
    ) -> OffsetAnswer:
        """Find the answer of a planned :class:`Search` with the view and the directory it was
        planned on (the tier is not decided again). It may ask the metadata store and, when
        ``search.reads_remote``, read the remote tier: run it on the pool the plan names.

        With READ_COMMITTED answers at or above the last stable offset are dropped (-1), as Kafka
        does; with READ_UNCOMMITTED the same holds for the high watermark.

        A segment the plan listed that the broker deleted since (its retention) is not an error:
        the directory is listed again and the search made again, :data:`MAX_LISTINGS` times at
        most (so is one that :meth:`plan` finds gone).

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
            TaskCancelledError: ``checkpoint`` said the answer is no longer wanted.
            RlmError, OSError: the remote tier or the broker's files could not be read.
        """
        listings = 1
        while True:
            try:
                return self._search(search, stats, checkpoint)
            except FileNotFoundError:  # a listed segment is gone: the broker deleted it
                if search.local is None or listings >= MAX_LISTINGS:
                    raise
                listings += 1
                search = dataclasses.replace(search, local=self.pinned_partition(search.tp, relisted=True))

    def _search(self, search: Search, stats: FetchStats | None, checkpoint: Checkpoint) -> OffsetAnswer:
        tp, local, view, timestamp = search.tp, search.local, search.view, search.timestamp
        if timestamp >= 0:
            return self._by_timestamp(tp, local, timestamp, stats, checkpoint, search.isolation, view)
        if timestamp == SpecialTimestamp.MAX_TIMESTAMP:
            return self._max_timestamp(tp, local, stats, checkpoint, search.isolation, view)
        if timestamp == SpecialTimestamp.EARLIEST:
            earliest = self.earliest_offset(tp, local, view)
            tier, segment = self._placed(tp, local, earliest)
            return OffsetAnswer(
                earliest, -1, self._epoch_at(local, earliest, segment, stats, checkpoint), tier
            )
        if timestamp == SpecialTimestamp.EARLIEST_LOCAL and local is not None and local.segments():
            start = max(local.segments()[0].base_offset, self.earliest_offset(tp, local, view))
            return OffsetAnswer(start, -1, self._epoch_at(local, start, None, stats, checkpoint), "local")
        if timestamp == SpecialTimestamp.LATEST_TIERED:
            # Kafka's highestOffsetInRemoteStorage: the highest offset ever copied, which never
            # falls, also once retention deleted every remote segment; its epoch as _epoch_at
            # says (-1 once neither the checkpoint nor the remote tier holds it, as after such a
            # retention). Only the topic the broker's directory holds now counts: the record of a
            # topic deleted under the same name, not yet retired, or of one being deleted, is not
            # this one's (as the view says, :mod:`rlm.lookup.views`).
            record = self.ask_store(lambda: self.store.get_partition(tp))
            highest = _highest_copied(record, local)
            if highest >= 0 and record is not None and record.topic_id is None:
                highest = self._highest_of_local_topic(tp, local, highest)
            if highest < 0:
                return OffsetAnswer.none()
            earliest = self.earliest_offset(tp, local, view)
            # As for every timestamp but LATEST and EARLIEST, Kafka gives no offset at or above
            # the last fetchable one: under READ_COMMITTED the tier may reach a transaction still
            # open (rlm tiers up to the high watermark; Kafka itself up to the last stable offset).
            if 0 <= self._fetchable_limit(tp, local, search.isolation, view, earliest) <= highest:
                return OffsetAnswer.none()
            # The tier that still serves the offset: none once it is below the log start offset.
            tier, segment = (
                self._placed(tp, local, highest, remote_first=True) if highest >= earliest else (None, None)
            )
            return OffsetAnswer(highest, -1, self._epoch_at(local, highest, segment, stats, checkpoint), tier)
        raise ValueError(f"timestamp {timestamp} needs no search: plan it (LookupService.plan)")

    def find(
        self,
        tp: TopicPartition,
        timestamp: int,
        *,
        stats: FetchStats | None = None,
        checkpoint: Checkpoint = never_cancelled,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetAnswer:
        """ListOffsets for one partition, all on the caller's thread, which may wait for the store
        and the remote tier (for tools and tests; the API plans and runs searches on its pools):
        :meth:`plan`, with the view read first when needed, then :meth:`search`.

        Raises:
            as :meth:`plan` and :meth:`search`.
        """
        plan = self.plan(tp, timestamp, isolation)
        if isinstance(plan, ViewNeeded):
            view = self.usable_view(tp, plan.local)
            plan = self.plan(tp, timestamp, isolation, local=plan.local, view=view)
        if isinstance(plan, Answered):
            return plan.answer
        assert isinstance(plan, Search)
        return self.search(plan, stats=stats, checkpoint=checkpoint)

    def _latest(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        isolation: IsolationLevel,
        view: RemoteTierView | None = None,
    ) -> OffsetAnswer:
        if local is None:  # the high watermark is the broker's to know (a query tier has none)
            return OffsetAnswer.none()
        log_start = self._committed_start(tp, local, isolation, view)
        epochs = local.leader_epochs() if local is not None else []
        hw = self.last_fetchable(local, isolation, log_start=log_start)
        return OffsetAnswer(hw, -1, epochs[-1].epoch if epochs else -1, "local")

    def last_fetchable(
        self,
        local: PartitionDir | None,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        log_start: int | None = None,
    ) -> int:
        """The high watermark (the log end offset when none is checkpointed), or for READ_COMMITTED
        the last stable offset below it; -1 with no local log.

        ``log_start`` is the partition's log start offset, remote tier included (see
        :meth:`earliest_offset`): the first unstable offset is raised to it, as the broker does
        when remote retention or DeleteRecords moves the log start past an open transaction.
        """
        if local is None:
            return -1
        found = local.high_watermark()
        hw = local.log_end_offset() if found is None else found
        if isolation is IsolationLevel.READ_COMMITTED:
            return self._stable_offsets.last_stable_offset(local, hw, log_start)
        return hw

    def _committed_start(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        isolation: IsolationLevel,
        view: RemoteTierView | None = None,
    ) -> int | None:
        """The log start offset when READ_COMMITTED needs it to bound the last stable offset."""
        if isolation is IsolationLevel.READ_COMMITTED and local is not None:
            return self.earliest_offset(tp, local, view)
        return None

    def _by_timestamp(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        timestamp: int,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
        isolation: IsolationLevel,
        view: RemoteTierView | None = None,
    ) -> OffsetAnswer:
        view = view if view is not None else self.remote_view(tp, local)
        earliest = self.earliest_offset(tp, local, view)
        local_start = self._local_start(local, earliest)
        max_remote = view.max_timestamp
        answer = OffsetAnswer.none()
        if max_remote is not None and timestamp <= max_remote:
            answer = self.remote.find(tp, view, local, local_start, timestamp, earliest, stats, checkpoint)
            if answer.tier is None and local is not None:
                answer = OffsetAnswer.of(local.find_offset_by_timestamp(timestamp, earliest), "local")
        elif local is not None:
            answer = OffsetAnswer.of(
                local.find_offset_by_timestamp(timestamp, max(earliest, local_start)), "local"
            )
        return self._below_high_watermark(answer, tp, local, isolation, view, earliest)

    def _below_high_watermark(
        self,
        answer: OffsetAnswer,
        tp: TopicPartition,
        local: PartitionDir | None,
        isolation: IsolationLevel,
        view: RemoteTierView,
        earliest: int,
    ) -> OffsetAnswer:
        if answer.tier is None:
            return answer
        if 0 <= self._fetchable_limit(tp, local, isolation, view, earliest) <= answer.offset:
            return OffsetAnswer.none()  # beyond what consumers of this isolation level may read
        return answer

    def _fetchable_limit(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        isolation: IsolationLevel,
        view: RemoteTierView,
        earliest: int,
    ) -> int:
        """The offset answers stay below (-1: none): the broker's last fetchable offset; without
        its log, for READ_COMMITTED, the remote tier's last stable offset (every tiered offset
        is below the high watermark, not below the last stable offset)."""
        if local is not None:
            return self.last_fetchable(local, isolation, log_start=earliest)
        if isolation is IsolationLevel.READ_COMMITTED:
            found = self.tier_stable_offset(tp, view, log_start=earliest)
            return -1 if found is None else found
        return -1

    def tier_stable_offset(self, tp: TopicPartition, view: RemoteTierView, *, log_start: int) -> int | None:
        """The last stable offset of ``tp``'s remote tier, raised to ``log_start``: where a
        READ_COMMITTED read without the broker's log stops (:mod:`rlm.lookup.tier_stable`);
        None when every tiered record is settled.

        Raises:
            MetadataUnavailableError: the metadata store does not answer.
            CorruptDataError: a producer snapshot or a scanned batch is not valid.
            NotFoundError, StorageError: the remote tier lost an object or could not be read.
        """
        return self._tier_stable.get(tp, view, log_start)

    @staticmethod
    def _local_start(local: PartitionDir | None, earliest: int) -> int:
        segments = local.segments() if local is not None else []
        return max(segments[0].base_offset, earliest) if segments else 2**63 - 1

    def _max_timestamp(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
        isolation: IsolationLevel,
        view: RemoteTierView | None = None,
    ) -> OffsetAnswer:
        """The first record with the largest timestamp at or after the log start offset, if it is
        below the high watermark (Kafka filters MAX_TIMESTAMP by the last fetchable offset)."""
        view = view if view is not None else self.remote_view(tp, local)
        earliest = self.earliest_offset(tp, local, view)
        best = local_max_timestamp(local, earliest) if local is not None else -1
        max_remote = view.max_timestamp
        if max_remote is not None and max_remote > best:
            local_start = self._local_start(local, earliest)
            answer = self.remote.find(tp, view, local, local_start, max_remote, earliest, stats, checkpoint)
            if answer.tier is not None:
                return self._below_high_watermark(answer, tp, local, isolation, view, earliest)
            # The record holding the remote maximum lies below the log start offset.
            best = max(best, self.remote.max_timestamp(tp, local, earliest, stats, checkpoint))
        if best < 0:
            return OffsetAnswer.none()
        return self._by_timestamp(tp, local, best, stats, checkpoint, isolation, view)

    def _epoch_at(
        self,
        local: PartitionDir | None,
        offset: int,
        segment: RemoteSegment | None,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
    ) -> int:
        """The leader epoch that wrote ``offset``, as Kafka with tiered storage answers ListOffsets:
        from the broker's ``leader-epoch-checkpoint`` when it reaches back to the offset, else from
        the batch holding it in ``segment``, the remote segment holding it (None: none does); -1
        when neither has one.

        The broker's checkpoint does not reach back below its local log once local retention
        deleted segments: a broker without Kafka's tiering cuts its start up to its log start
        offset then (``LeaderEpochFileCache.truncateFromStart``), and a query tier has none. Nor
        does it reach offsets of records that carry no epoch (legacy v0/v1), whose batches say
        none either: Kafka answers -1 for those.
        """
        epochs = local.leader_epochs() if local is not None else []
        if epochs and epochs[0].start_offset <= offset:
            return epoch_for_offset(epochs, offset)
        if segment is None:
            return -1
        return self.remote.batch_epoch(segment, offset, stats, checkpoint)

    def _highest_of_local_topic(self, tp: TopicPartition, local: PartitionDir | None, highest: int) -> int:
        """Of a partition recording no topic id, whose highest copied offset is ``highest``, the
        highest copied offset of the topic ``local`` holds: its finished segments may name two
        topics (a store rebuilt while a deleted topic's lay beside its successor's, until a
        sidecar adopts the broker's id), and the other topic's offsets are not this one's."""
        local_id = local_topic_id(local)
        if local_id is None:
            return highest
        states = (SegmentState.COPY_SEGMENT_FINISHED,)
        finished = self.ask_store(lambda: list(self.store.list_segments(tp, states=states)))
        if {s.topic_id for s in finished} <= {None, local_id}:
            return highest
        return max((s.end_offset for s in finished if not is_other_topic(s.topic_id, local_id)), default=-1)

    def _reads_remote_epoch(
        self, tp: TopicPartition, local: PartitionDir | None, timestamp: int, view: RemoteTierView
    ) -> bool:
        """Whether the answer to EARLIEST or LATEST_TIERED (the highest copied offset ``view``
        knows) may take its epoch from the remote tier: the broker's checkpoint does not reach
        back to it (:meth:`_epoch_at`)."""
        if timestamp == SpecialTimestamp.EARLIEST:
            offset = self.earliest_offset(tp, local, view)
        elif timestamp == SpecialTimestamp.LATEST_TIERED and view.version is not None:
            offset = view.version[0]
        else:
            return False
        epochs = local.leader_epochs() if local is not None else []
        return offset >= 0 and not (epochs and epochs[0].start_offset <= offset)

    def _placed(
        self, tp: TopicPartition, local: PartitionDir | None, offset: int, *, remote_first: bool = False
    ) -> tuple[str | None, RemoteSegment | None]:
        """The tier holding ``offset`` (the local log when both do; the remote tier with
        ``remote_first``; None when neither does), and the remote segment holding it when the
        answer is the remote tier's."""
        in_local = local is not None and bool(local.segments()) and local.segments()[0].base_offset <= offset
        if in_local and not remote_first:
            return "local", None
        segment = self.remote_segment_for_offset(tp, local, offset)
        if segment is not None:
            return "remote", segment
        return ("local" if in_local else None), None


def _first_base(local: PartitionDir | None) -> int | None:
    segments = local.segments() if local is not None else []
    return segments[0].base_offset if segments else None


def _highest_copied(record: PartitionRecord | None, local: PartitionDir | None) -> int:
    """The highest offset ever copied of the topic ``local`` holds, from its partition ``record``;
    -1 when nothing of it was: no record, one of a partition being deleted, or one of a topic
    deleted and created again under the same name whose remote state is not retired yet
    (:mod:`rlm.lookup.topic_ids`), whose offsets are not this topic's.

    Raises:
        UnreadableTopicIdError: the broker's ``partition.metadata`` cannot be read.
    """
    if record is None or record.deletion_state is not None:
        return -1
    if is_other_topic(record.topic_id, local_topic_id(local)):
        return -1
    return record.highest_copied_offset
