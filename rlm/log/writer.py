"""A log appender that writes a partition directory the way a Kafka broker (the leader) does.

It assigns offsets, stamps LogAppendTime (never going backwards), validates CreateTime against
``message.timestamp.before.max.ms`` / ``after.max.ms``, rolls segments by ``segment.bytes``, by
``segment.ms`` measured from the first batch's timestamp, when an index is full and on offset
overflow, keeps sparse index entries every ``index.interval.bytes``, trims the indexes and adds
the final time-index entry on roll and close, writes a producer snapshot at every roll, the
transaction index for aborted transactions and the leader-epoch checkpoint.

Used to build realistic log directories (``rlm log produce``) and test fixtures; rlm itself never
writes into a broker's log directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rlm.errors import ConfigError, InvalidRecordError
from rlm.log import legacy, v2
from rlm.log.checkpoints import EpochEntry, write_leader_epoch_checkpoint, write_partition_metadata
from rlm.log.files import segment_file_name
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.logdir import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA
from rlm.log.model import INT32_MAX, Codec, ControlType, Header, Record, TimestampType
from rlm.log.snapshot import ProducerStateEntry, write_snapshot
from rlm.log.txnindex import AbortedTxn, TransactionIndex

Clock = Callable[[], int]
"""Returns the broker's wall-clock time in milliseconds."""


def system_clock() -> int:
    """The real wall clock in milliseconds."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class TopicConfig:
    """The topic settings the appender honours (Kafka's names and defaults)."""

    segment_bytes: int = 1_073_741_824
    """``segment.bytes``: roll before a segment would exceed this size."""
    segment_ms: int = 604_800_000
    """``segment.ms``: roll when a batch is this much newer than the segment's first batch."""
    segment_index_bytes: int = 10_485_760
    """``segment.index.bytes``: maximum size of an offset or time index."""
    index_interval_bytes: int = 4096
    """``index.interval.bytes``: bytes between two index entries."""
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    """``message.timestamp.type``."""
    timestamp_before_max_ms: int = 2**63 - 1
    """``message.timestamp.before.max.ms``: how far in the past a CreateTime may be."""
    timestamp_after_max_ms: int = 3_600_000
    """``message.timestamp.after.max.ms``: how far in the future a CreateTime may be."""
    max_message_bytes: int = 1_048_588
    """``max.message.bytes``: largest batch accepted."""


class ProducerRecord(NamedTuple):
    """A record offered for appending; the log assigns its offset."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class AppendResult(NamedTuple):
    """Where a batch landed."""

    base_offset: int
    last_offset: int
    log_append_time: int
    """The append time for LogAppendTime topics, -1 otherwise."""
    segment_base_offset: int
    position: int


@dataclass
class _ProducerState:
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    txn_first_offset: int = -1


@dataclass
class _ActiveSegment:
    base_offset: int
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    created_ms: int
    size: int = 0
    bytes_since_last_index_entry: int = 0
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    rolling_timestamp: int | None = None
    """Max timestamp of the first batch appended (what ``segment.ms`` is measured from)."""


@dataclass
class PartitionAppender:
    """Appends to one partition directory. Not thread-safe; ``close()`` finishes the files."""

    directory: Path
    config: TopicConfig = field(default_factory=TopicConfig)
    clock: Clock = system_clock
    leader_epoch: int = 0
    topic_id: str | None = None
    start_offset: int = 0
    """Offset of the first record (a log whose older data was already deleted starts above 0)."""

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if any(name.endswith(".log") for name in os.listdir(self.directory)):
            raise ConfigError(f"{self.directory} already holds segments; the appender starts logs afresh")
        self.next_offset = self.start_offset
        self.epochs: list[EpochEntry] = []
        self._last_log_append_time = -1
        self._producers: dict[int, _ProducerState] = {}
        self._segment = self._new_segment(self.start_offset)
        self._closed = False
        if self.topic_id is not None:
            write_partition_metadata(self.directory / PARTITION_METADATA, self.topic_id)

    # -- appending -------------------------------------------------------------------------

    def append(
        self,
        records: Sequence[ProducerRecord],
        *,
        codec: Codec = Codec.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> AppendResult:
        """Append one v2 batch holding ``records``; returns where it went."""
        if not records:
            raise InvalidRecordError("cannot append an empty batch")
        if transactional and producer_id < 0:
            raise InvalidRecordError("a transactional batch needs a producer id")
        now = self.clock()
        self._validate_timestamps(records, now)
        base = self.next_offset
        stamped = [Record(base + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]
        log_append_time = self._log_append_time(now)
        batch = v2.encode_v2_batch(
            stamped,
            codec=codec,
            timestamp_type=self.config.timestamp_type,
            log_append_time=log_append_time if log_append_time >= 0 else None,
            leader_epoch=self.leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=transactional,
        )
        max_ts = log_append_time if log_append_time >= 0 else max(r.timestamp for r in records)
        result = self._append_batch(batch, base, base + len(records) - 1, max_ts, now, log_append_time)
        if producer_id >= 0:
            state = self._producers.get(producer_id)
            txn_first = state.txn_first_offset if state is not None else -1
            if transactional and txn_first < 0:
                txn_first = base
            self._producers[producer_id] = _ProducerState(
                producer_epoch,
                base_sequence + len(records) - 1 if base_sequence >= 0 else -1,
                base + len(records) - 1,
                len(records) - 1,
                max_ts,
                state.coordinator_epoch if state is not None else -1,
                txn_first,
            )
        return result

    def append_control(
        self,
        control_type: ControlType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = 0,
    ) -> AppendResult:
        """Append a COMMIT or ABORT marker ending ``producer_id``'s open transaction."""
        if control_type not in (ControlType.COMMIT, ControlType.ABORT):
            raise InvalidRecordError(f"only COMMIT and ABORT markers can be appended, not {control_type!r}")
        now = self.clock()
        offset = self.next_offset
        log_append_time = self._log_append_time(now)
        timestamp = log_append_time if log_append_time >= 0 else now
        batch = v2.encode_control_batch(
            offset,
            control_type,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=timestamp,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch,
            log_append_time=log_append_time if log_append_time >= 0 else None,
        )
        result = self._append_batch(batch, offset, offset, timestamp, now, log_append_time)
        state = self._producers.get(producer_id)
        first = state.txn_first_offset if state is not None else -1
        if state is not None:
            state.txn_first_offset = -1
            state.coordinator_epoch = coordinator_epoch
            state.last_offset = offset
        if control_type == ControlType.ABORT and first >= 0:  # a marker alone aborts no data
            open_txns = [p.txn_first_offset for p in self._producers.values() if p.txn_first_offset >= 0]
            lso = min(open_txns, default=offset + 1)
            self._segment.txn_index.append(AbortedTxn(producer_id, first, offset, lso))
        return result

    def append_legacy(
        self, records: Sequence[ProducerRecord], *, magic: int, codec: Codec = Codec.NONE
    ) -> AppendResult:
        """Append records in the legacy v0/v1 message format (old-log fixtures)."""
        now = self.clock()
        if magic == 1:
            self._validate_timestamps(records, now)
        base = self.next_offset
        ts = [r.timestamp if magic == 1 else -1 for r in records]
        stamped = [Record(base + i, ts[i], r.key, r.value) for i, r in enumerate(records)]
        log_append_time = self._log_append_time(now) if magic == 1 else -1
        batch = legacy.encode_legacy_batch(
            stamped,
            magic=magic,
            codec=codec,
            timestamp_type=self.config.timestamp_type if magic == 1 else TimestampType.CREATE_TIME,
            log_append_time=log_append_time if log_append_time >= 0 else None,
        )
        max_ts = log_append_time if log_append_time >= 0 else max(ts)
        last = base + len(records) - 1
        return self._append_batch(batch, base, last, max_ts, now, log_append_time, magic=magic)

    def _log_append_time(self, now: int) -> int:
        if self.config.timestamp_type is not TimestampType.LOG_APPEND_TIME:
            return -1
        self._last_log_append_time = max(self._last_log_append_time, now)
        return self._last_log_append_time

    def _validate_timestamps(self, records: Sequence[ProducerRecord], now: int) -> None:
        if self.config.timestamp_type is TimestampType.LOG_APPEND_TIME:
            return
        for i, r in enumerate(records):
            if r.timestamp < -1:
                raise InvalidRecordError(f"record {i} has an invalid timestamp {r.timestamp}")
            if r.timestamp < 0:
                continue
            if now - r.timestamp > self.config.timestamp_before_max_ms:
                raise InvalidRecordError(
                    f"record {i} timestamp {r.timestamp} is {now - r.timestamp} ms before the broker "
                    f"time {now}, more than message.timestamp.before.max.ms "
                    f"({self.config.timestamp_before_max_ms})"
                )
            if r.timestamp - now > self.config.timestamp_after_max_ms:
                raise InvalidRecordError(
                    f"record {i} timestamp {r.timestamp} is {r.timestamp - now} ms after the broker "
                    f"time {now}, more than message.timestamp.after.max.ms "
                    f"({self.config.timestamp_after_max_ms})"
                )

    def _append_batch(
        self,
        batch: bytes,
        base: int,
        last: int,
        max_ts: int,
        now: int,
        log_append_time: int,
        *,
        magic: int = 2,
    ) -> AppendResult:
        if self._closed:
            raise InvalidRecordError(f"the appender of {self.directory} is closed")
        if len(batch) > self.config.max_message_bytes:
            raise InvalidRecordError(
                f"batch of {len(batch)} bytes exceeds max.message.bytes ({self.config.max_message_bytes})"
            )
        if self._should_roll(len(batch), max_ts, last, now):
            self.roll()
        seg = self._segment
        position = seg.size
        with open(self.directory / segment_file_name(seg.base_offset, ".log"), "ab") as f:
            f.write(batch)
        if max_ts > seg.max_timestamp:
            seg.max_timestamp, seg.offset_of_max_timestamp = max_ts, last
        if seg.rolling_timestamp is None:
            seg.rolling_timestamp = max_ts
        if seg.bytes_since_last_index_entry > self.config.index_interval_bytes:
            seg.offset_index.append(last, position)
            seg.time_index.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp)
            seg.bytes_since_last_index_entry = 0
        seg.bytes_since_last_index_entry += len(batch)
        seg.size += len(batch)
        # Legacy batches carry no leader epoch: the broker assigns epochs only for v2 batches
        # (UnifiedLog.append, and LogSegment.recover rebuilding the cache does the same).
        new_epoch = not self.epochs or self.leader_epoch > self.epochs[-1].epoch
        if magic >= 2 and self.leader_epoch >= 0 and new_epoch:
            self.epochs.append(EpochEntry(self.leader_epoch, base))
        self.next_offset = last + 1
        return AppendResult(base, last, log_append_time, seg.base_offset, position)

    # -- rolling ---------------------------------------------------------------------------

    def _should_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> bool:
        seg = self._segment
        if seg.size == 0:
            return False
        cfg = self.config
        if seg.size > cfg.segment_bytes - size:
            return True
        if seg.rolling_timestamp is not None and seg.rolling_timestamp >= 0:
            waited = max_ts - seg.rolling_timestamp
        else:
            waited = now - seg.created_ms
        if waited > cfg.segment_ms:
            return True
        if seg.offset_index.is_full() or seg.time_index.is_full():
            return True
        return last_offset - seg.base_offset > INT32_MAX

    def roll(self) -> None:
        """Finish the active segment and start a new one at the log end offset."""
        self._finish_segment()
        self._segment = self._new_segment(self.next_offset)
        write_snapshot(self.directory / segment_file_name(self.next_offset, ".snapshot"), self._snapshot())

    def _new_segment(self, base: int) -> _ActiveSegment:
        size = self.config.segment_index_bytes
        (self.directory / segment_file_name(base, ".log")).touch()
        return _ActiveSegment(
            base,
            OffsetIndex(base, max_index_size=size),
            TimeIndex(base, max_index_size=size),
            TransactionIndex(base),
            created_ms=self.clock(),
        )

    def _finish_segment(self) -> None:
        seg = self._segment
        if seg.max_timestamp >= 0:
            seg.time_index.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp, skip_full_check=True)
        seg.offset_index.write(self.directory / segment_file_name(seg.base_offset, ".index"))
        seg.time_index.write(self.directory / segment_file_name(seg.base_offset, ".timeindex"))
        if len(seg.txn_index):
            seg.txn_index.write(self.directory / segment_file_name(seg.base_offset, ".txnindex"))

    def _snapshot(self) -> list[ProducerStateEntry]:
        return [
            ProducerStateEntry(
                pid,
                s.epoch,
                s.last_sequence,
                s.last_offset,
                s.offset_delta,
                s.timestamp,
                s.coordinator_epoch,
                s.txn_first_offset,
            )
            for pid, s in sorted(self._producers.items())
        ]

    def close(self) -> None:
        """Finish the files as a clean shutdown does; idempotent."""
        if self._closed:
            return
        self._finish_segment()
        write_snapshot(self.directory / segment_file_name(self.next_offset, ".snapshot"), self._snapshot())
        write_leader_epoch_checkpoint(self.directory / LEADER_EPOCH_CHECKPOINT, self.epochs)
        self._closed = True
