"""Whether the remote tier still holds the broker's log: leader epochs compared, offset by offset (pure).

After an unclean leader election the new leader's log diverges from the old one's: from some
offset on, its records are other records, written in another leader epoch, and Kafka truncates
every replica to the new leader's log. The remote tier may hold the old leader's records there,
copied before the election. Read as they are, those offsets would answer records the log no
longer has, and the copier, which resumes above the highest copied offset, would never tier the
new leader's records below it.

Kafka's ``RemoteLogManager`` finds the copy's start in the leader's epoch lineage and deletes the
remote segments outside it. rlm compares the remote tier's leader epochs with the broker's
``leader-epoch-checkpoint`` over the offsets both hold. Within a leader epoch, two replicas hold
the same records at the same offset; so the logs agree exactly as far as their epochs agree.

The comparison follows the read rule of overlapping copies (a later copy, in offset order, that
reaches past the earlier ones answers from its start on), and only where the broker's log is
committed: below its high watermark (a replica's records above it may still be truncated) and
from its log start on. The broker's log is only taken as the truth when it is at least as new:
its latest leader epoch is at least every epoch of the remote copies it would replace. A stale
replica (one that missed the election and has not truncated yet) therefore replaces nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from rlm.log.checkpoints import EpochEntry, epoch_for_offset
from rlm.metastore.model import RemoteSegment


@dataclass(frozen=True)
class Divergence:
    """The first offset at which the remote tier's records are not the broker's log's."""

    offset: int
    remote_epoch: int
    """The leader epoch the remote copy read at ``offset`` says."""
    local_epoch: int
    """The leader epoch the broker's log says."""
    copy: RemoteSegment
    """The remote copy read at ``offset``: it and every copy starting at or above its start are
    to be replaced by the broker's log."""
    replaced_epoch: int
    """The highest leader epoch of those copies."""

    @property
    def replace_from(self) -> int:
        """The first offset the replaced copies hold: the copier tiers again from there."""
        return self.copy.start_offset


def read_ranges(finished: Sequence[RemoteSegment]) -> list[tuple[RemoteSegment, int, int]]:
    """Each copy that reads answer from, with the offsets it answers for, in offset order.

    A copy that reaches past every copy before it answers from its start up to the next such
    copy's start; one lying wholly inside earlier copies answers for nothing.
    """
    ordered = sorted(finished, key=lambda s: (s.start_offset, s.end_offset, str(s.segment_id)))
    read: list[RemoteSegment] = []
    for segment in ordered:
        if not read or segment.end_offset > read[-1].end_offset:
            read.append(segment)
    ranges = [
        (segment, segment.start_offset, min(segment.end_offset, following.start_offset - 1))
        for segment, following in itertools.pairwise(read)
    ]
    if read:
        ranges.append((read[-1], read[-1].start_offset, read[-1].end_offset))
    return ranges


def find_divergence(
    finished: Sequence[RemoteSegment],
    local: Sequence[EpochEntry],
    *,
    log_start_offset: int,
    high_watermark: int,
) -> Divergence | None:
    """The first offset, from ``log_start_offset`` and below ``high_watermark``, where the remote
    copies read (``finished``) name another leader epoch than the broker's ``local`` entries,
    when the broker's log is at least as new as the copies from there on; else None.

    Offsets before the first local entry (legacy messages, which carry no epoch) are not compared.
    """
    if not local or high_watermark <= 0:
        return None
    low = max(log_start_offset, local[0].start_offset)
    high = high_watermark - 1
    for segment, first, last in read_ranges(finished):
        start, end = max(first, low), min(last, high)
        if start > end:
            continue
        # Both sides' epochs are constant between these offsets: compare at each.
        edges = {start}
        edges.update(e.start_offset for e in segment.leader_epochs if start < e.start_offset <= end)
        edges.update(e.start_offset for e in local if start < e.start_offset <= end)
        for offset in sorted(edges):
            remote_epoch = epoch_for_offset(segment.leader_epochs, offset)
            local_epoch = epoch_for_offset(local, offset)
            if remote_epoch == local_epoch:
                continue
            later = (copy for copy in finished if copy.start_offset >= segment.start_offset)
            replaced = max((e.epoch for copy in later for e in copy.leader_epochs), default=-1)
            if local[-1].epoch < replaced:
                return None  # the broker's log is the older one: it will be truncated
            return Divergence(offset, remote_epoch, local_epoch, segment, replaced)
    return None


def behind(finished: Sequence[RemoteSegment], local: Sequence[EpochEntry]) -> bool:
    """Whether the broker's log is older than the remote tier: a remote copy holds records of a
    leader epoch above the log's latest.

    Such a log has no record above the remote tier's highest offset that is the partition's: a
    follower behind the remote tier has none of that epoch's records yet, and a replica that missed
    the election (and has not truncated yet) holds the old leader's, which the log will drop.
    """
    newest = max((e.epoch for copy in finished for e in copy.leader_epochs), default=-1)
    return bool(local) and local[-1].epoch < newest
