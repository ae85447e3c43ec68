"""Partitions' remote-tier summaries (*views*) as lookups use them: read in batches, reused, and
what a lookup may use instead when the metadata store does not answer.

A lookup needs four facts of a partition's remote tier: whether the store knows it, its first
finished segment, its remote log start offset and its max remote timestamp. The store answers them
for many partitions in one query (``remote_tier_summaries``: all the partitions of a ListOffsets
request at once). A view is reused for ``ttl_s`` (default 1 s), and read again at once when the
broker's first local segment changed since (local retention deleted segments), or the topic id of
its directory did (the topic was deleted and created again under the name), or on
:meth:`RemoteViews.invalidate`.

A partition whose record in the store is of another topic id than the broker's directory (the
topic was deleted and created again under the same name, and the copier has not retired the old
topic's state yet) gets the view of an empty remote tier (:mod:`rlm.lookup.topic_ids`). One the
store knows whose broker topic id cannot be read gets a view that says so, which lookups,
fetches and streams refuse (:attr:`RemoteTierView.unreadable_topic_id`,
:meth:`~rlm.lookup.service.LookupService.require_readable`), and which is read again each time.

Answers stay exact under a view up to ``ttl_s`` old but for the log start offset: segments copied
meanwhile only raise the max remote timestamp, and a timestamp above the stale one is then in
segments the broker still has (it deleted none since), where the local search finds it; a lower max
(retention deleted the segment holding it) only sends a search to the remote tier, which finds the
answer in the segments that remain. A log start offset advanced by another process's retention is
seen up to ``ttl_s`` late, as Kafka's own log start offset propagates late; the retention of the
same process (``rlm serve``) invalidates the view as soon as it advanced it, before it deletes
anything.

Without the store (it is down, see :class:`~rlm.metastore.availability.StoreAvailability`, or its
read failed), :meth:`RemoteViews.fallback` gives the view a lookup may still use, if any:

* the last view read, however old, while the broker's first local segment is still the one it was
  read with (the same base offset, in a directory of the same topic id), and the remote tier then
  reached it (its highest copied offset is just below it or above) or the log start offset was at
  or above it: else offsets the broker's local retention deleted before they were tiered here may
  be tiered since by another broker's sidecar (a leader that still has them), below the broker's
  log, where no view of before tells their timestamps. The argument for a view
  ``ttl_s`` old holds at any age: segments finished since hold offsets the broker still has (it
  deleted none), so they cannot hold an earlier match than its local log; deleted ones only lower
  the max remote timestamp, and a search then goes remote.
* no such view, but the broker's local log starts at or below its log start offset (from offset
  0, or at its ``log-start-offset-checkpoint``): every offset a consumer may read is still local,
  so an answer found locally has no earlier match in the remote tier. The view of an empty remote
  tier then answers exactly, with the remote log start offset of the last view read of the same
  topic (read before the broker's first local segment changed): rlm's retention may have
  advanced it above the broker's own.

Either way only the log start offset may be stale: one advanced by remote retention since is not
known until the store answers again (as Kafka's own log start offset propagates late). A partition
this process changed (:meth:`RemoteViews.invalidate`: its retention advanced the log start offset,
possibly above the broker's first local offset) has no fallback until a view of it is read again:
no lookup then answers below a log start offset the process itself advanced. Without
such a view, the remote tier may hold an earlier match than anything local: no fallback, and the
lookup fails with a retriable error at once rather than answer wrongly.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from uuid import UUID

from rlm.errors import CorruptDataError
from rlm.log.logdir import PartitionDir
from rlm.lookup.topic_ids import UnreadableTopicIdError, is_other_topic, local_topic_id
from rlm.metastore.availability import StoreAvailability
from rlm.metastore.model import PartitionRecord, RemoteTierSummary, TopicPartition
from rlm.metastore.protocol import MetadataStore

DEFAULT_TTL_S = 1.0
"""How long a partition's view is reused before the metadata store is asked again."""
#: Reads of one partition's view wait for each other (the others reuse its answer); partitions
#: share these locks by hash, so that their number stays bounded whatever partitions are asked.
REFRESH_LOCKS = 64


@dataclass(frozen=True)
class RemoteTierView:
    """What the metadata store said about one partition's remote tier, and when."""

    known: bool
    """The store has a record of the partition."""
    first_offset: int | None
    """Start offset of the first finished segment; None when there is none."""
    log_start_offset: int
    """The remote log start offset retention advanced; -1 before it ever did."""
    max_timestamp: int | None
    """The largest max timestamp of the finished segments; None when there are none."""
    version: tuple[int, int, int, UUID | None, int] | None
    """The partition's highest copied offset, remote log start offset and remote size (what
    changes when finished segments come or go), the topic id its record names and its lineage:
    a topic created again under the name, or copies replaced from some offset on (an unclean
    leader election) and tiered again to the same offsets and size, is another version, so that
    nothing kept for the old copies (a process's segment list, its tiered stable offset) is
    reused for the new ones. None when the store does not know it."""
    local_base: int | None
    """Base offset of the broker's first local segment when the view was read."""
    read_at: float
    local_topic_id: str | None = None
    """The topic id of the broker's directory when the view was read (:func:`_local_identity`):
    a view is reused only for the same topic, never for one deleted and created again under the
    name whose first local segment has the same base offset (both from 0, usually)."""
    unreadable_topic_id: UnreadableTopicIdError | None = None
    """Why the remote tier may not be used: the store knows the partition but the broker's
    topic id cannot be read (:mod:`rlm.lookup.topic_ids`). Such a view is never kept."""


class RemoteViews:
    """The views of the partitions a process looks up (one per partition, bounded by them).

    Args:
        store: where views are read.
        availability: whether the store answers lately; every read goes through it.
        ttl_s: how long a view is reused.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        store: MetadataStore,
        availability: StoreAvailability,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.availability = availability
        self.ttl_s = ttl_s
        self._clock = clock
        # Views of partitions the store or the broker knows: a request may name any number of
        # partitions that neither does, and those are read again rather than kept.
        self._views: dict[TopicPartition, RemoteTierView] = {}
        self._refreshing = tuple(threading.Lock() for _ in range(REFRESH_LOCKS))
        self._refresh_claims: dict[TopicPartition, RemoteTierView] = {}
        # Invalidations counted, and when each partition (all of them: _cleared) was last
        # invalidated: a read that began before is returned to its caller but not kept.
        self._invalidations = 0
        self._invalidated: dict[TopicPartition, int] = {}
        self._cleared = 0
        # When the last kept read of each partition began (in invalidations counted): one
        # invalidated since has changed in this process in a way no view it holds tells.
        self._kept_at: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()

    def get(self, tp: TopicPartition, local: PartitionDir | None) -> RemoteTierView:
        """The partition's view: the one at hand if it may be reused, else read from the store
        (one read at a time per partition, or per partitions sharing its lock; the others reuse
        its answer).

        Raises:
            MetadataUnavailableError: the store is down or did not answer.
        """
        view = self.cached(tp, local)
        if view is not None:
            return view
        with self._refreshing[hash(tp) % REFRESH_LOCKS]:
            view = self.cached(tp, local)
            if view is not None:
                return view
            return self.read({tp: local})[tp]

    def read(
        self, partitions: Mapping[TopicPartition, PartitionDir | None]
    ) -> dict[TopicPartition, RemoteTierView]:
        """Read the views of ``partitions`` (each with its broker directory, or None) in one batch.

        Raises:
            MetadataUnavailableError: the store is down or did not answer.
        """
        with self._lock:
            began = self._invalidations
        bases = {tp: _first_base(local) for tp, local in partitions.items()}
        ids = {tp: _local_identity(local) for tp, local in partitions.items()}
        now = self._clock()
        summaries = self.availability.call(lambda: self.store.remote_tier_summaries(list(partitions)))
        views = {
            tp: dataclasses.replace(
                _local_topic_view(summaries.get(tp), partitions[tp], base, now), local_topic_id=ids[tp]
            )
            for tp, base in bases.items()
        }
        kept = {
            tp: v
            for tp, v in views.items()
            if (v.known or partitions[tp] is not None) and v.unreadable_topic_id is None
        }
        with self._lock:
            if self._cleared <= began:
                fresh = {tp: v for tp, v in kept.items() if self._invalidated.get(tp, 0) <= began}
                self._views.update(fresh)
                self._kept_at.update((tp, began) for tp in fresh)
        return views

    def cached(
        self, tp: TopicPartition, local: PartitionDir | None, *, while_refreshing: bool = False
    ) -> RemoteTierView | None:
        """The partition's view if the one at hand may be reused; None when the store must be asked.

        With ``while_refreshing`` (callers that must not wait for the store), the first caller to
        find the view expired gets None and is expected to read the new one through :meth:`get`;
        until it has, the others reuse the expired view, up to twice ``ttl_s`` old, rather than
        all turning to the store at once.
        """
        base = _first_base(local)
        now = self._clock()
        with self._lock:
            view = self._views.get(tp)
            if view is None or view.local_base != base or view.local_topic_id != _local_identity(local):
                return None
            age = now - view.read_at
            if age < self.ttl_s:
                return view
            if not while_refreshing or age >= 2 * self.ttl_s:
                return None
            if self._refresh_claims.get(tp) is view:
                return view  # another caller is reading the new view
            self._refresh_claims[tp] = view
            return None

    def fallback(self, tp: TopicPartition, local: PartitionDir | None) -> RemoteTierView | None:
        """A view to use while the store does not answer (module docstring), or None."""
        base = _first_base(local)
        if local is None or base is None:
            return None
        with self._lock:
            last = self._views.get(tp)
            changed = max(self._cleared, self._invalidated.get(tp, 0)) > self._kept_at.get(tp, 0)
        if changed:
            return None  # this process changed the remote tier since: its log start is the store's
        log_start = local.checkpointed_log_start_offset()
        same_topic = last is not None and last.local_topic_id == _local_identity(local)
        if last is not None and same_topic and last.local_base == base and _reaches(last, base, log_start):
            return last
        if base <= (log_start if log_start is not None else 0):
            # The remote log start offset last read still holds: it never falls for one topic.
            remote_start = last.log_start_offset if last is not None and same_topic else -1
            return RemoteTierView(False, None, remote_start, None, None, base, self._clock())
        return None

    def __len__(self) -> int:
        """How many views are kept."""
        with self._lock:
            return len(self._views)

    def invalidate(self, tp: TopicPartition | None = None) -> None:
        """Forget the view of ``tp`` (of every partition when None): the next lookup asks the
        store, and a read of it begun before is not kept."""
        with self._lock:
            self._invalidations += 1
            if tp is None:
                self._views.clear()
                self._invalidated.clear()
                self._cleared = self._invalidations
            else:
                self._views.pop(tp, None)
                self._invalidated[tp] = self._invalidations


def _view(summary: RemoteTierSummary | None, local_base: int | None, now: float) -> RemoteTierView:
    if summary is None or summary.record.deletion_state is not None:
        # A partition deleted from the remote tier (its topic deleted): none of it is read.
        return RemoteTierView(False, None, -1, None, None, local_base, now)
    return RemoteTierView(
        known=True,
        first_offset=summary.first_offset,
        log_start_offset=summary.record.remote_log_start_offset,
        max_timestamp=summary.max_timestamp if summary.first_offset is not None else None,
        version=_version(summary.record),
        local_base=local_base,
        read_at=now,
    )


def _local_topic_view(
    summary: RemoteTierSummary | None, local: PartitionDir | None, local_base: int | None, now: float
) -> RemoteTierView:
    """The view of ``summary`` for the topic the broker's directory holds; one that says why the
    remote tier may not be used when the store knows the partition and the broker's topic id
    cannot be read."""
    try:
        return _view(_of_local_topic(summary, local), local_base, now)
    except UnreadableTopicIdError as exc:
        return dataclasses.replace(_view(summary, local_base, now), unreadable_topic_id=exc)


def _of_local_topic(
    summary: RemoteTierSummary | None, local: PartitionDir | None
) -> RemoteTierSummary | None:
    """The summary, or one of an empty remote tier when the store's record is of a deleted topic
    of the same name (:mod:`rlm.lookup.topic_ids`): its segments and log start are not this one's.

    Raises:
        UnreadableTopicIdError: the store knows the partition; the broker's topic id cannot be read.
    """
    if summary is None or not is_other_topic(summary.record.topic_id, local_topic_id(local)):
        return summary
    record = dataclasses.replace(
        summary.record, remote_log_start_offset=-1, highest_copied_offset=-1, remote_log_size_bytes=0
    )
    return RemoteTierSummary(record, None, None)


def _reaches(view: RemoteTierView, local_base: int, log_start: int | None) -> bool:
    """Whether no offset below the broker's first local one may be tiered after ``view`` was read:
    the tier then reached the broker's log, or the log start offset is at or above it. Otherwise
    another broker's sidecar may tier offsets this broker's local retention deleted untiered."""
    highest = view.version[0] if view.version is not None else -1
    return highest + 1 >= local_base or max(view.log_start_offset, log_start or -1) >= local_base


def _version(record: PartitionRecord) -> tuple[int, int, int, UUID | None, int]:
    return (
        record.highest_copied_offset,
        record.remote_log_start_offset,
        record.remote_log_size_bytes,
        record.topic_id,
        record.lineage,
    )


def _local_identity(local: PartitionDir | None) -> str | None:
    """The topic id of the broker's directory as :attr:`RemoteTierView.local_topic_id` keeps it:
    None without one, ``"unreadable"`` when ``partition.metadata`` cannot be read (a view kept
    from before is then read again, and says so)."""
    if local is None:
        return None
    try:
        return local.topic_id()
    except (CorruptDataError, OSError):
        return "unreadable"


def _first_base(local: PartitionDir | None) -> int | None:
    segments = local.segments() if local is not None else []
    return segments[0].base_offset if segments else None
