"""The last stable offset of a partition's remote tier, for reads without the broker's log.

A query tier (no log directories), or a broker without the partition's directory, knows neither
the high watermark nor the last stable offset: a read ends at the highest offset copied, which is
below the high watermark (the copier tiers rolled segments below it). It is not below the last
stable offset: the tiered tail may hold records of a transaction whose COMMIT or ABORT marker is
still in the broker's active segment. Until that marker is tiered the records are neither
committed nor aborted, and no transaction index can flag them, so a ``READ_COMMITTED`` read stops
at the first offset of the earliest such transaction: the tier's stable offset
(:func:`rlm.remote_tier.stable.tiered_stable_offset`, where ``read_committed`` exports stop too).

Every marker tiered is below the high watermark, so a transaction settled on the tier is settled
for the broker, and the tier's stable offset is never above the broker's last stable offset.

Each partition's answer is kept for the tier's version (:attr:`RemoteTierView.version`: it
changes when finished segments come or go): it costs one ranged read of the last segment's
producer snapshot (a scan of segment headers when that snapshot is missing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence

from rlm.lookup.views import RemoteTierView
from rlm.metastore.model import RemoteSegment, TopicPartition
from rlm.remote_tier.read_plan import summarize
from rlm.remote_tier.stable import stable_offset_of
from rlm.storage.protocol import RemoteStorage


class TierStableOffsets:
    """The remote tiers' stable offsets, one kept per partition for the tier version it was
    found at. Thread-safe; partitions are kept only while the store knows them.

    Args:
        finished: A partition's ``COPY_SEGMENT_FINISHED`` segments, in offset order (a call of
            the metadata store).
        storage: Where their objects are read.
    """

    def __init__(
        self, finished: Callable[[TopicPartition], Sequence[RemoteSegment]], storage: RemoteStorage
    ) -> None:
        self._finished = finished
        self.storage = storage
        self._found: dict[TopicPartition, tuple[Hashable, int, int | None]] = {}
        self._lock = threading.Lock()

    def get(self, tp: TopicPartition, view: RemoteTierView, log_start_offset: int) -> int | None:
        """The first offset of the earliest transaction open at the end of ``tp``'s remote tier,
        raised to ``log_start_offset``; None when every tiered record is settled.

        Raises:
            Any error of ``finished``.
            CorruptDataError: A scanned batch or the producer snapshot's header is not valid.
            NotFoundError / StorageError: The store lost an object or failed.
        """
        with self._lock:
            kept = self._found.get(tp)
        if kept is not None and kept[:2] == (view.version, log_start_offset):
            return kept[2]
        summaries = summarize(self._finished(tp), log_start_offset)
        read = [s for s in summaries if s.segment.end_offset >= log_start_offset]
        found = stable_offset_of(self.storage, read, log_start_offset)
        if view.known and view.version is not None:
            with self._lock:
                self._found[tp] = (view.version, log_start_offset, found)
        return found

    def drop(self, tp: TopicPartition | None = None) -> None:
        """Forget what was found for ``tp`` (every partition when None)."""
        with self._lock:
            if tp is None:
                self._found.clear()
            else:
                self._found.pop(tp, None)
