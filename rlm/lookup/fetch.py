"""Reading records from an offset across both tiers, up to a byte bound (Kafka Fetch semantics).

The answer holds whole record batches, as Kafka returns them (the first batch is returned even if
it alone exceeds the bound), and the decoded records at or after the offset and below the high
watermark. Offsets the broker still has are read locally; older ones from the remote segment that
holds them, with ranged GETs from the position its offset index gives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rlm.errors import CorruptDataError, OffsetOutOfRangeError
from rlm.log.batches import decode_batch
from rlm.log.logdir import PartitionDir
from rlm.log.model import BatchHeader, Record
from rlm.log.source import iter_headers, read_batch_bytes
from rlm.lookup.remote_search import Checkpoint, RemoteLogReader, SegmentIndexes, never_cancelled
from rlm.lookup.service import LookupService
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import TopicPartition
from rlm.metrics import Metrics
from rlm.storage.layout import validate_topic
from rlm.storage.protocol import RemoteStorage


@dataclass
class FetchedBatch:
    """One batch as stored, with its decoded records (control batches have their markers)."""

    header: BatchHeader
    data: bytes
    records: list[Record]


@dataclass
class FetchResult:
    """What a fetch read."""

    tier: str | None
    """``"remote"``, ``"local"`` or None when there was nothing to read."""
    high_watermark: int
    batches: list[FetchedBatch] = field(default_factory=list)

    @property
    def raw(self) -> bytes:
        """The batches, concatenated as in a ``.log`` file."""
        return b"".join(b.data for b in self.batches)

    def records(self, from_offset: int) -> list[Record]:
        """Decoded data records at or after ``from_offset`` and below :attr:`visible_end`."""
        return [
            r
            for b in self.batches
            if not b.header.is_control
            for r in b.records
            if from_offset <= r.offset < self.visible_end
        ]

    @property
    def visible_end(self) -> int:
        """The offset below which records may be returned: the high watermark when known (without
        the broker's log, as in a query tier, it is -1 and every fetched record may be)."""
        return self.high_watermark if self.high_watermark >= 0 else 2**63

    @property
    def next_offset(self) -> int:
        return self.batches[-1].header.next_offset if self.batches else -1


class RecordFetcher:
    """Reads record batches of a partition from either tier."""

    def __init__(
        self,
        service: LookupService,
        storage: RemoteStorage,
        indexes: SegmentIndexes,
        metrics: Metrics | None = None,
    ) -> None:
        self.service = service
        self.storage = storage
        self.indexes = indexes
        self.metrics = metrics
        """Where each fetch's time is observed (``rlm_fetch_seconds``); None: nowhere."""

    def fetch(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        *,
        stats: FetchStats | None = None,
        checkpoint: Checkpoint = never_cancelled,
    ) -> FetchResult:
        """Batches from the one holding ``offset``, until ``max_bytes`` (at least one batch).

        Raises:
            InvalidTopicNameError: the topic name breaks Kafka's rule.
            NotFoundError: unknown topic-partition.
            MetadataUnavailableError: the metadata store does not answer, and the offset is not
                in the broker's log or its log start offset is unknown without the store.
            OffsetOutOfRangeError: ``offset`` is below the log start offset or above the high watermark.
        """
        started = time.perf_counter()
        tier = "none"
        try:
            result = self._fetch(tp, offset, max_bytes, stats, checkpoint)
            tier = result.tier or "none"
            return result
        finally:
            if self.metrics is not None:
                self.metrics.fetch_seconds.labels(tier).observe(time.perf_counter() - started)

    def _fetch(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
    ) -> FetchResult:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, not {max_bytes}")
        validate_topic(tp.topic)
        local = self.service.local_partition(tp)
        # Offsets the broker still has are read without the metadata store while it is down.
        view = self.service.usable_view(tp, local)
        self.service.require_known(tp, local, view)
        earliest = self.service.earliest_offset(tp, local, view)
        hw = self.service.last_fetchable(local)
        if offset < earliest or (hw >= 0 and offset > hw):
            raise OffsetOutOfRangeError(f"offset {offset} of {tp} is outside [{earliest}, {hw}]")
        result = FetchResult(None, hw)
        if hw >= 0 and offset == hw:
            return result
        segments = local.segments() if local is not None else []
        if local is not None and segments and offset >= segments[0].base_offset:
            result.tier = "local"
            self._read_local(local, offset, max_bytes, result)
        else:
            result.tier = "remote"
            self._read_remote(tp, offset, max_bytes, result, stats, checkpoint)
        return result

    def _read_local(self, partition: PartitionDir, offset: int, max_bytes: int, result: FetchResult) -> None:
        taken = 0
        segments = partition.segments()  # one listing: each is a directory read
        for i, segment in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= offset:
                continue  # wholly below the offset
            start = segment.offset_index().lookup(offset).position
            with segment.open() as source:
                for header in iter_headers(source, start):
                    if header.last_offset < offset:
                        continue
                    if _past_the_end(header, result, taken, max_bytes):
                        return
                    data = read_batch_bytes(source, header)
                    result.batches.append(FetchedBatch(header, data, _decode(header, data, source.name)))
                    taken += header.size
            offset = max(offset, segment.base_offset)

    def _read_remote(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        result: FetchResult,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
    ) -> None:
        segment = self.service.ask_store(lambda: self.service.store.segment_for_offset(tp, offset))
        if segment is None:
            raise OffsetOutOfRangeError(f"no remote segment of {tp} holds offset {offset}")
        position = self.indexes.offset_index(segment, stats).lookup(offset).position
        reader = RemoteLogReader(self.storage, segment, stats, checkpoint)
        taken = 0
        for header, data in reader.batches(position):
            if header.last_offset < offset:
                continue
            if _past_the_end(header, result, taken, max_bytes):
                return
            result.batches.append(FetchedBatch(header, data, _decode(header, data, segment.layout.log_key)))
            taken += header.size


def _past_the_end(header: BatchHeader, result: FetchResult, taken: int, max_bytes: int) -> bool:
    """Whether the read stops before ``header``'s batch: it would exceed ``max_bytes`` (the first
    batch is always taken), or it reaches the high watermark — as in Kafka, a fetch never returns
    a batch consumers may not see yet."""
    if 0 <= result.high_watermark <= header.last_offset:
        return True
    return bool(result.batches) and taken + header.size > max_bytes


def _decode(header: BatchHeader, data: bytes, name: str) -> list[Record]:
    try:
        return decode_batch(data, header._replace(position=0))
    except CorruptDataError as exc:
        raise exc.at(name, header.position) from exc
