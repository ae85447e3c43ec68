"""What one lookup needs, decided once: the answer itself, or a search to run on a pool.

:meth:`~rlm.lookup.service.LookupService.plan` looks at a partition's remote-tier view and the
broker's files and returns one of:

* :class:`Answered`: the answer, found on the caller's thread (no metadata query, no remote read:
  an event loop may make the plan itself);
* :class:`Search`: what finding the answer needs, with the view and the broker's directory the
  decision was made on; :attr:`Search.reads_remote` tells which pool runs it (the reader pool
  when it may read the remote tier, KIP-1075; else the metadata pool), and
  :meth:`~rlm.lookup.service.LookupService.search` runs it without deciding the tier again;
* :class:`ViewNeeded`: the partition's view is not at hand; it is read from the metadata store
  (on the metadata pool, in a batch for many partitions) and the plan made with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from rlm.log.logdir import PartitionDir
from rlm.log.model import TimestampAndOffset
from rlm.lookup.views import RemoteTierView
from rlm.metastore.model import TopicPartition


class IsolationLevel(IntEnum):
    """ListOffsets' isolation level: which offsets a consumer may be told about."""

    READ_UNCOMMITTED = 0
    """Offsets below the high watermark."""
    READ_COMMITTED = 1
    """Offsets below the last stable offset (no open transaction's records)."""


@dataclass(frozen=True)
class OffsetAnswer:
    """One partition's answer. ``tier`` is the tier holding the offset, ``"remote"`` or
    ``"local"``; None when nothing was found, or when no tier holds it any more (LATEST_TIERED
    once retention deleted it)."""

    offset: int
    timestamp: int
    leader_epoch: int
    tier: str | None

    @classmethod
    def none(cls) -> OffsetAnswer:
        return cls(-1, -1, -1, None)

    @classmethod
    def of(cls, found: TimestampAndOffset | None, tier: str) -> OffsetAnswer:
        if found is None:
            return cls.none()
        return cls(found.offset, found.timestamp, found.leader_epoch, tier)


@dataclass(frozen=True)
class Answered:
    """The plan's answer, found while planning."""

    answer: OffsetAnswer


@dataclass(frozen=True)
class Search:
    """A lookup that needs the metadata store or the remote tier, as planned."""

    tp: TopicPartition
    timestamp: int
    isolation: IsolationLevel
    local: PartitionDir | None
    """The broker's directory of the partition as the plan saw it (pinned), or None."""
    view: RemoteTierView
    """The remote-tier view the plan was made on."""
    reads_remote: bool
    """The search may read the remote tier: it runs on the reader pool (KIP-1075); otherwise it
    asks the metadata store at most and runs on the metadata pool."""


@dataclass(frozen=True)
class ViewNeeded:
    """The partition's remote-tier view must be read from the metadata store before planning."""

    local: PartitionDir | None
    """The broker's directory of the partition (pinned), to plan with once the view is read."""


LookupPlan = Answered | Search | ViewNeeded
