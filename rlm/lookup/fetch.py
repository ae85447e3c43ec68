"""Reading records from an offset across both tiers, up to a byte bound (Kafka Fetch semantics).

The answer holds whole data batches, as Kafka returns them (the first is returned even if it alone
exceeds the bound), none at or past the high watermark and no control batch (transaction
markers), each with its decoded records at or after the offset: transports only translate it.
Offsets the broker still has are read locally; older ones from the remote segment that holds
them, with ranged GETs from the position its offset index gives. A local segment the broker
deletes between its listing and its reading (its retention, once the segment is tiered) ends the
answer where it is; when nothing was read yet, the fetch starts again, the offset now the remote
tier's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from uuid import UUID

from rlm.errors import CorruptDataError, OffsetOutOfRangeError
from rlm.log.batches import decode_batch
from rlm.log.byte_source import iter_headers, read_batch_bytes
from rlm.log.clip import cut_short
from rlm.log.logdir import PartitionDir
from rlm.log.model import BatchHeader, Record
from rlm.log.segment import Segment
from rlm.lookup import answer_end
from rlm.lookup.ranged_search import Checkpoint, RemoteLogReader, SegmentIndexes, never_cancelled
from rlm.lookup.service import MAX_LISTINGS, LookupService
from rlm.lookup.stats import FetchStats
from rlm.lookup.topic_ids import local_topic_id, open_of_topic
from rlm.metastore.model import TopicPartition
from rlm.metrics import Metrics
from rlm.storage.layout import validate_topic
from rlm.storage.protocol import RemoteStorage


class _SegmentGoneError(Exception):
    """The broker deleted the local segment a fetch was to read before anything was read."""


@dataclass
class FetchedBatch:
    """One data batch as stored, with its records a consumer may be given."""

    header: BatchHeader
    data: bytes
    """The whole batch, as stored (records below the fetch's offset included, as Kafka returns it);
    a diverged copy's batch kept across its cut, cut short there (:func:`rlm.log.clip.cut_short`)."""
    records: list[Record]
    """The batch's records at or after the fetch's offset (all below the high watermark)."""


@dataclass
class FetchResult:
    """What a fetch read, ready for a transport to translate: data batches only (control batches,
    the transaction markers, are left out), none at or past the high watermark."""

    tier: str | None
    """``"remote"``, ``"local"`` or None when there was nothing to read."""
    high_watermark: int
    batches: list[FetchedBatch] = field(default_factory=list)
    next_offset: int = -1
    """The offset after the last batch read (control batches included): where the next fetch
    starts; -1 when nothing was read."""

    @property
    def raw(self) -> bytes:
        """The batches, concatenated as in a ``.log`` file."""
        return b"".join(b.data for b in self.batches)

    @property
    def records(self) -> list[Record]:
        """The data records from the fetch's offset on, below the high watermark, in order."""
        return [r for b in self.batches for r in b.records]


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
            NotFoundError: unknown topic-partition, or its topic was deleted and made again
                before its files were read (the error names both topic ids).
            UnreadableTopicIdError: the store knows the partition and the broker's
                ``partition.metadata`` cannot be read (:mod:`rlm.lookup.topic_ids`).
            MetadataUnavailableError: the metadata store does not answer, and the offset is not
                in the broker's log or its log start offset is unknown without the store.
            OffsetOutOfRangeError: ``offset`` is below the log start offset or above the high watermark.
        """
        started = time.perf_counter()
        tier = "none"
        try:
            for attempt in range(1, MAX_LISTINGS + 1):
                try:
                    result = self._fetch(tp, offset, max_bytes, stats, checkpoint, relisted=attempt > 1)
                    break
                except _SegmentGoneError:  # listed again: the offset is the remote tier's now
                    if attempt == MAX_LISTINGS:
                        raise OffsetOutOfRangeError(
                            f"the broker's segments of {tp} kept changing under the fetch at offset {offset}"
                        ) from None
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
        *,
        relisted: bool = False,
    ) -> FetchResult:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, not {max_bytes}")
        validate_topic(tp.topic)
        local = self.service.local_partition(tp)
        if relisted and local is not None:  # a listed segment was gone: read the directory again
            local.forget_listing()
        # Offsets the broker still has are read without the metadata store while it is down.
        view = self.service.usable_view(tp, local)
        self.service.require_readable(tp, local, view)
        topic_id = local_topic_id(local)  # its files are read only while the directory holds it
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
            self._read_local(local, topic_id, segments, offset, max_bytes, result)
        else:
            result.tier = "remote"
            self._read_remote(tp, local, offset, max_bytes, result, stats, checkpoint)
        return result

    def _read_local(
        self,
        local: PartitionDir,
        topic_id: UUID | None,
        segments: list[Segment],
        offset: int,
        max_bytes: int,
        result: FetchResult,
    ) -> None:
        """Read from the segments listed when the fetch chose the broker's log (listed after the
        high watermark was read): listed again, a segment the broker deleted in between would be
        missing, and its offsets skipped for the next segment's. Each is read only while the
        directory holds ``topic_id``, the topic it held when planned
        (:func:`rlm.lookup.topic_ids.open_of_topic`)."""
        taken = 0
        for i, segment in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= offset:
                continue  # wholly below the offset
            try:
                entry = segment.offset_index().lookup(offset)
                source = open_of_topic(local, segment, topic_id, "fetch", offset)
            except FileNotFoundError:  # the broker deleted it since it was listed
                if result.next_offset >= 0:
                    return  # what was read is the answer
                raise _SegmentGoneError from None
            with source:
                start = segment.read_position(offset, entry, source)
                # Only the active segment may end in a batch the broker is still writing.
                for header in iter_headers(source, start, whole=i + 1 < len(segments)):
                    if header.last_offset < offset:
                        continue
                    if _past_the_end(header, result, taken, max_bytes):
                        return
                    result.next_offset = header.next_offset
                    if header.is_control:
                        continue
                    data = read_batch_bytes(source, header)
                    records = _decode(header, data, source.name, offset, result.high_watermark)
                    result.batches.append(FetchedBatch(header, data, records))
                    taken += header.size
            offset = max(offset, segment.base_offset)

    def _read_remote(
        self,
        tp: TopicPartition,
        local: PartitionDir | None,
        offset: int,
        max_bytes: int,
        result: FetchResult,
        stats: FetchStats | None,
        checkpoint: Checkpoint,
    ) -> None:
        segment = self.service.remote_segment_for_offset(tp, local, offset)
        if segment is None:
            raise OffsetOutOfRangeError(f"no remote segment of {tp} holds offset {offset}")
        last = answer_end.remote_answer_end(self.service, tp, local, segment)
        if last < offset:  # the store has the copy answer the offset: as it says
            last = segment.end_offset
        position = self.indexes.offset_index(segment, stats).lookup(offset).position
        reader = RemoteLogReader(self.storage, segment, stats, checkpoint)
        taken = 0
        name = segment.layout.log_key
        for header, data in reader.batches(position):
            if header.last_offset < offset:
                continue
            if header.base_offset > last:
                return
            # A batch reaching past the copy's last answered offset is the old leader's there: it
            # is given out cut short, and only what is given out is held against the high
            # watermark and the bound (the old leader's last offset may lie past the new
            # leader's high watermark where the records up to the cut do not).
            clipped: tuple[BatchHeader, bytes] | None = (header, data)
            if header.last_offset > last and not header.is_control:
                clipped = cut_short(header, data, last, name)
            if clipped is None or _past_the_end(clipped[0], result, taken, max_bytes):
                return
            result.next_offset = min(header.next_offset, last + 1)
            if not header.is_control:
                records = _decode(*clipped, name, offset, result.high_watermark)
                result.batches.append(FetchedBatch(*clipped, records))
                taken += clipped[0].size
            if header.last_offset >= last:
                return


def _past_the_end(header: BatchHeader, result: FetchResult, taken: int, max_bytes: int) -> bool:
    """Whether the read stops before ``header``'s batch: it would exceed ``max_bytes`` (the first
    data batch is always taken; control batches are not returned and count for nothing), or it
    reaches the high watermark — as in Kafka, a fetch never returns a batch consumers may not see
    yet."""
    if 0 <= result.high_watermark <= header.last_offset:
        return True
    return not header.is_control and bool(result.batches) and taken + header.size > max_bytes


def _decode(header: BatchHeader, data: bytes, name: str, offset: int, high_watermark: int) -> list[Record]:
    """The batch's records at or after ``offset`` and below ``high_watermark`` (when known)."""
    try:
        records = decode_batch(data, header._replace(position=0))
    except CorruptDataError as exc:
        raise exc.at(name, header.position) from exc
    end = high_watermark if high_watermark >= 0 else 2**63
    return [r for r in records if offset <= r.offset < end]
