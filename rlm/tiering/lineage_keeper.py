"""Keeps a partition's remote copies on the broker's log lineage, once per copier pass.

:func:`rlm.tiering.lineage.find_divergence` says where the remote tier's records stop being the
broker's log's (an unclean leader election). When the broker's log still holds every offset of the
copies that would go, their objects are marked retired (:func:`rlm.storage.marks.mark_retired`: a
store rebuilt from the objects leaves them out), they are retired in one store transaction
(:meth:`~rlm.metastore.protocol.MetadataStore.truncate_copies`) and the same pass deletes their
objects (:class:`~rlm.tiering.copier.Copier`) and tiers the log again from their start: nothing is
lost, and the truncated records stop answering at once. A diverged copy starting below the broker's
first local segment (local retention deleted its start since) holds offsets no one else has: it is
trimmed to them (:mod:`rlm.tiering.trim`), in the same transaction that retires the copies after it,
and the log is tiered again from its first local segment on. Where the copy keeps a batch holding
offsets on both sides of that segment's start, or is the same copy cut there (the batch is its last,
kept as it is), the log is tiered from there in one copy reaching past it (:mod:`rlm.tiering.join`),
which answers from its start on. A copy whose bytes fail the checks is kept as it is in the same
way, said as an error: its offsets below the cut answer from it as before (those its damaged bytes
hold cannot be read), the log tiered from the cut answers past it. A copy that cannot be cut there
otherwise (it lies wholly below the broker's first local segment, or its object is shorter than its
row) is kept whole: ``rlm_copies_diverged`` and an error, once per divergence, say which offsets
answer records the log no longer has; the diverged copies after it, which the local log holds
wholly, are retired all the same.

The comparison lists the partition's finished segments, so it runs only when something it
depends on changed: the broker's leader epochs or the highest copied offset (or when the last
comparison could not reach the remote tier's end, being above the high watermark then).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import NamedTuple
from uuid import UUID

from rlm.errors import CorruptDataError
from rlm.log.checkpoints import EpochEntry
from rlm.log.logdir import PartitionDir
from rlm.metastore.model import Lease, RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.tiering.lineage import Divergence, behind, find_divergence
from rlm.tiering.trim import CannotTrimError, NoShorterCopyError

log = logging.getLogger("rlm.copier")

_Checked = tuple[tuple[EpochEntry, ...], int]


class Trimmed(NamedTuple):
    """What trimming a copy did."""

    retired: int
    """Remote copies retired, the trimmed one included."""
    end_offset: int
    """The last offset its replacement holds: below the cut, or past it where a batch holds
    offsets on both sides."""
    replacement: UUID
    """The replacement's segment id."""


Mark = Callable[[TopicPartition, int], None]
"""Mark the objects of every live copy of a partition starting at or above an offset retired,
before the store retires them (the copier's, see :func:`rlm.storage.marks.mark_retired`)."""

Trim = Callable[[PartitionDir, Lease, RemoteSegment, int], Trimmed]
"""Replace a copy by a copy of its batches holding offsets below a cut, and retire the copies
from the cut on (the copier's, see :mod:`rlm.tiering.trim`). Raises
:class:`~rlm.tiering.trim.CannotTrimError` or :class:`~rlm.errors.CorruptDataError` when the copy
cannot be cut there."""


class Followed(NamedTuple):
    """What :meth:`LineageKeeper.follow` found for one partition."""

    retired: int = 0
    """Remote copies retired."""
    behind: bool = False
    """The broker's log is older than the remote tier (:func:`rlm.tiering.lineage.behind`): none of
    it is to be tiered."""
    join: tuple[int, int] | None = None
    """``(cut, end)``: a diverged copy kept below the broker's first local segment ``cut`` reaches
    up to ``end``, past it; the broker's log is to be tiered from ``cut`` in one copy reaching
    past ``end`` (:mod:`rlm.tiering.join`), before anything after it."""


class LineageKeeper:
    """Compares and, where it can, replaces the remote copies of the partitions a copier holds."""

    def __init__(self, store: MetadataStore, metrics: Metrics, *, trim: Trim, mark: Mark) -> None:
        self.store = store
        self.metrics = metrics
        self.trim = trim
        self.mark = mark
        self._agreed: dict[TopicPartition, tuple[_Checked, bool]] = {}
        """Per partition, what the last comparison that found the whole remote tier on the
        broker's lineage depended on, and whether the log was behind the remote tier."""
        self._reported: dict[TopicPartition, tuple[int, UUID]] = {}
        """Per partition, the divergence last reported (its offset and copy)."""
        self._untrimmable: dict[TopicPartition, tuple[UUID, int, str, bool, bool]] = {}
        """Per partition, the copy last found not to be cut at an offset, the offset, why, whether
        it is kept as it is (it would be the same copy cut there, or its bytes fail the checks),
        and whether its bytes fail the checks: it is not read again for that (its bytes do not
        change), every pass."""
        self._lock = threading.Lock()

    def follow(self, partition: PartitionDir, lease: Lease, *, now_ms: int) -> Followed:
        """Retire the remote copies of ``partition`` its log diverged from, trimming one that also
        holds offsets its files no longer hold to those; returns how many were retired, and
        whether its log is behind the remote tier.

        Raises:
            StaleLeaseError: ``lease`` was lost.
            MetadataError: the store failed.
            CorruptCheckpointError: ``leader-epoch-checkpoint`` cannot be parsed.
        """
        tp = lease.topic_partition
        local = tuple(partition.leader_epochs())
        checkpointed = partition.high_watermark()
        if not local or checkpointed is None:
            return Followed()
        # The checkpoint is flushed every few seconds: after a truncation it may lie above the log.
        high_watermark = min(checkpointed, partition.log_end_offset())
        highest = self.store.highest_copied_offset(tp)
        checked = (local, highest)
        with self._lock:
            agreed = self._agreed.get(tp)
        if agreed is not None and agreed[0] == checked:
            return Followed(behind=agreed[1])
        record = self.store.get_partition(tp)
        remote_start = record.remote_log_start_offset if record is not None else -1
        finished = list(self.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
        older = behind(finished, local)
        local_start = partition.log_start_offset()
        segments = partition.segments()
        # The first offset the broker's files hold; below its log start offset too, after a
        # DeleteRecords (those records are deleted for readers, but they are the log's).
        held_from = segments[0].base_offset if segments else local_start
        kept: Divergence | None = None
        why_kept = ""
        found = find_divergence(
            finished, local, log_start_offset=max(local_start, remote_start), high_watermark=high_watermark
        )
        labels = (tp.topic, str(tp.partition))
        if found is not None and found.replace_from < held_from:
            with self._lock:
                untrimmable = self._untrimmable.get(tp)
            as_is = damaged = False
            if untrimmable is not None and untrimmable[:2] == (found.copy.segment_id, held_from):
                why_kept, as_is, damaged = untrimmable[2:]
            else:
                try:
                    trimmed = self.trim(partition, lease, found.copy, held_from)
                except (CannotTrimError, CorruptDataError) as exc:
                    # A copy whose bytes fail the checks is kept as it is, as one that would be the
                    # same copy cut there: the log tiered from the cut past it answers from there.
                    why_kept = str(exc)
                    damaged = isinstance(exc, CorruptDataError)
                    as_is = damaged or isinstance(exc, NoShorterCopyError)
                    with self._lock:
                        self._untrimmable[tp] = (found.copy.segment_id, held_from, why_kept, as_is, damaged)
                else:
                    end = trimmed.end_offset
                    self._replaced(tp, found, trimmed.retired, trimmed=(held_from, end))
                    if end < held_from:
                        return Followed(trimmed.retired, older)
                    # Until the log is tiered past it, the replacement is found diverged as it is:
                    # it would be the same copy cut there, and this is said once.
                    why = f"its batch holding offset {held_from} was kept whole when it was trimmed"
                    with self._lock:
                        self._untrimmable[tp] = (trimmed.replacement, held_from, why, True, False)
                        self._reported[tp] = (found.offset, trimmed.replacement)
                    return Followed(trimmed.retired, older, (held_from, end))
            if as_is:
                # Retired at the first such pass: later ones, waiting for the log to reach past
                # the copy, find none to retire and write nothing.
                retire = any(s.start_offset >= held_from for s in finished)
                return self._kept_as_is(
                    tp,
                    found,
                    held_from,
                    why_kept,
                    lease,
                    retire=retire,
                    now_ms=now_ms,
                    older=older,
                    damaged=damaged,
                )
        while found is not None and found.replace_from < held_from:
            # Its copy holds offsets only it has, and could not be trimmed to them: kept. The
            # copies read after it may still be replaced, from the first one the log holds wholly.
            kept = kept or found
            found = find_divergence(
                finished, local, log_start_offset=found.copy.end_offset + 1, high_watermark=high_watermark
            )
        if kept is not None:
            self._kept(tp, kept, held_from, why_kept)
        elif found is None:
            self.metrics.copies_diverged.labels(*labels).set(0)
            with self._lock:
                self._reported.pop(tp, None)
                if high_watermark > highest:  # every copied offset was compared
                    self._agreed[tp] = (checked, older)
        if found is None:
            return Followed(behind=older)
        retired = self._retire(tp, found.replace_from, lease, now_ms)
        if kept is None:
            self.metrics.copies_diverged.labels(*labels).set(0)
        self._replaced(tp, found, retired)
        if retired and any(s.start_offset < found.replace_from <= s.end_offset for s in finished):
            # A copy kept past an earlier cut reaches over the retired ones' start (the copy that
            # answered past it was the broker's, now diverged too): it answers up to its end again,
            # and the copier, resuming past it, would leave the broker's segments ending inside it
            # untiered, its old leader's records answering there once the broker deletes them. It
            # is compared again now, and kept or cut as at its own cut, the log tiered past it.
            again = self.follow(partition, lease, now_ms=now_ms)
            return again._replace(retired=retired + again.retired)
        return Followed(retired, older)

    def _retire(self, tp: TopicPartition, from_offset: int, lease: Lease, now_ms: int) -> int:
        """Retire the copies of ``tp`` from ``from_offset`` on, their objects marked retired first:
        a store rebuilt from the objects before they are deleted leaves them out."""
        self.mark(tp, from_offset)
        return self.store.truncate_copies(tp, from_offset, event_time_ms=now_ms, fence=lease)

    def _replaced(
        self, tp: TopicPartition, found: Divergence, retired: int, *, trimmed: tuple[int, int] | None = None
    ) -> None:
        """Count and log copies replaced; ``trimmed``: the cut and the last offset of the copy
        that replaced the trimmed one."""
        labels = (tp.topic, str(tp.partition))
        self.metrics.diverged_copies_replaced.labels(*labels).inc(retired)
        reaching = ""
        if trimmed is None:
            what = f"{retired} remote segments from offset {found.replace_from} on were retired"
            tiered_from = found.replace_from
        else:
            self.metrics.copies_diverged.labels(*labels).set(0)
            with self._lock:
                self._reported.pop(tp, None)
            tiered_from, end = trimmed
            past = ""
            if end >= tiered_from:
                past = f" (its batch holding offset {tiered_from} whole)"
                reaching = f" in one remote segment reaching past offset {end}"
            what = (
                f"the remote segment of offsets {found.replace_from}..{found.copy.end_offset}, whose "
                f"offsets below {tiered_from} the broker's log no longer holds, was trimmed to "
                f"{found.replace_from}..{end}{past} and {retired} remote segments were retired"
            )
        log.warning(
            "%s: from offset %d the remote tier held leader epoch %d's records, the broker's log "
            "holds epoch %d's (its log diverged: an unclean leader election); %s, and the log is "
            "tiered again from offset %d%s",
            tp,
            found.offset,
            found.remote_epoch,
            found.local_epoch,
            what,
            tiered_from,
            reaching,
        )

    def _kept_as_is(
        self,
        tp: TopicPartition,
        found: Divergence,
        held_from: int,
        why: str,
        lease: Lease,
        *,
        retire: bool,
        now_ms: int,
        older: bool,
        damaged: bool = False,
    ) -> Followed:
        """Keep ``found``'s copy as it is (cut at ``held_from`` it would be the same copy, or its
        bytes fail the checks: ``damaged``, said as an error), retire the copies from ``held_from``
        on (when ``retire``), and have the log tiered from there past it."""
        retired = 0
        if retire:
            retired = self._retire(tp, held_from, lease, now_ms)
        labels = (tp.topic, str(tp.partition))
        self.metrics.copies_diverged.labels(*labels).set(0)
        self.metrics.diverged_copies_replaced.labels(*labels).inc(retired)
        reported = (found.offset, found.copy.segment_id)
        with self._lock:
            first = self._reported.get(tp) != reported
            self._reported[tp] = reported
        if first:
            log.log(
                logging.ERROR if damaged else logging.WARNING,
                "%s: from offset %d the remote tier holds leader epoch %d's records, the broker's log "
                "holds epoch %d's (its log diverged: an unclean leader election); the remote segment "
                "of offsets %d..%d, whose offsets below %d the broker's log no longer holds, is kept "
                "as it is (%s), %d remote segments from offset %d on were retired, and the log is "
                "tiered again from offset %d in one remote segment reaching past offset %d, which "
                "answers for its offsets from %d on once it is tiered",
                tp,
                found.offset,
                found.remote_epoch,
                found.local_epoch,
                found.replace_from,
                found.copy.end_offset,
                held_from,
                why,
                retired,
                held_from,
                held_from,
                found.copy.end_offset,
                held_from,
            )
        return Followed(retired, older, (held_from, found.copy.end_offset))

    def _kept(self, tp: TopicPartition, found: Divergence, held_from: int, why: str) -> None:
        self.metrics.copies_diverged.labels(tp.topic, str(tp.partition)).set(1)
        reported = (found.offset, found.copy.segment_id)
        with self._lock:
            if self._reported.get(tp) == reported:
                return
            self._reported[tp] = reported
        log.error(
            "%s: from offset %d the remote tier holds leader epoch %d's records, the broker's log "
            "holds epoch %d's (its log diverged: an unclean leader election). Reads of those offsets, "
            "up to %d, answer records the log no longer has. They are kept: the remote segment "
            "holding them starts at offset %d, below the broker's first local segment %d, its "
            "offsets below %d are held nowhere else, and it cannot be trimmed to them (%s)",
            tp,
            found.offset,
            found.remote_epoch,
            found.local_epoch,
            found.copy.end_offset,
            found.replace_from,
            held_from,
            held_from,
            why or "it is read past its divergence",
        )
