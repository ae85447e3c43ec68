"""A tiered partition for the lookup and fetch tests, and the truth about every record it holds.

:func:`write_partition` appends a planned log to a broker log directory with
:class:`~rlm.log.writer.PartitionAppender` and writes down, as it goes, every record it appended:
offset, effective timestamp (CreateTime or the LogAppendTime the broker stamped), key, value,
headers and the leader epoch of its batch. That record list is the oracle: the answers are
computed from it by brute force, never with rlm's readers.

:func:`tier_partition` then does to the directory what a cluster does over time: the copier tiers
the rolled segments (``build_runtime`` wires it), a second sidecar copies an offset range again
(overlapping remote segments are legal), retention deletes the oldest remote segments, the broker's
local retention deletes tiered segments, and DeleteRecords moves the log start offset. Each step is
chosen by a :class:`PartitionPlan`; :func:`partition_plans` draws plans for Hypothesis.

Backends: SQLite + the filesystem store (fast), or PostgreSQL + an S3 server over HTTP.
"""

from __future__ import annotations

import random
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hypothesis import strategies as st
from kafka.record import MemoryRecords
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from metadata.engine import create_engine_for_url
from rlm.bootstrap import Runtime, build_runtime
from rlm.config import Settings, TopicSettings
from rlm.log.byte_source import read_batch_bytes
from rlm.log.checkpoints import (
    EpochEntry,
    epoch_for_offset,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
)
from rlm.log.dirwriter import LogDirWriter
from rlm.log.files import segment_file_name
from rlm.log.logdir import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    LogDir,
    PartitionDir,
)
from rlm.log.model import Codec, ControlType, Header, Record, TimestampType
from rlm.log.model import TopicPartition as LogTopicPartition
from rlm.log.segment import Segment
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.prepare import prepare_segment
from rlm.tiering.retention import Retention
from tests.clock import FakeClock
from tests.metadata_support import clear, sqlite_copy
from tests.s3_support import MotoS3

#: The broker clock when the first batch is appended; CreateTime timestamps are near it.
NOW = 1_700_000_000_000
TOPIC = "orders"
#: The broker whose log directories the partitions are written to, and the sidecar's beside it.
BROKER_ID = 1
#: The broker id of the sidecar that copies the same offsets again (a takeover).
OTHER_BROKER = 2
SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
LEGACY_CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)

BatchKind = Literal["plain", "commit", "abort", "legacy", "legacy-v0"]
Tiering = Literal["local", "both", "remote"]


# -- plans --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchPlan:
    """One appended batch (a transactional one is followed by its COMMIT or ABORT marker)."""

    timestamps: tuple[int, ...]
    """CreateTime of each record, in ms after :data:`NOW` (ignored under LogAppendTime)."""
    codec: Codec = Codec.NONE
    kind: BatchKind = "plain"
    new_epoch: bool = False
    """A new leader appends this batch (the leader epoch goes up by one first)."""
    advance_ms: int = 100
    """How far the broker clock moves before the batch."""
    value_bytes: int = 40


@dataclass(frozen=True)
class PartitionPlan:
    """A partition's log and what happened to it since. Fractions pick positions in the log."""

    batches: tuple[BatchPlan, ...]
    log_append_time: bool = False
    segment_bytes: int = 1024
    index_interval_bytes: int = 256
    roll_at_end: bool = False
    """Roll after the last batch, leaving an empty active segment (everything can be tiered)."""
    high_watermark_at: float | None = None
    """The high watermark at this fraction of the batches (a batch boundary); None: the log end."""
    tiering: Tiering = "both"
    """``local``: nothing copied; ``both``: copied and kept locally; ``remote``: copied, then a
    prefix of the tiered segments deleted locally as local retention does."""
    local_deleted: float = 1.0
    """With ``remote``: the share of the tiered segments deleted locally (at least one)."""
    overlaps: tuple[tuple[float, float], ...] = ()
    """Offset ranges copied again by another sidecar: (first batch, batch count) as fractions of
    the tiered batches."""
    retention_bytes_share: float | None = None
    """Run remote retention with ``retention.bytes`` at this share of the remote size."""
    log_start_at: float | None = None
    """DeleteRecords moved the log start offset to this fraction of ``[0, high watermark]``."""
    log_start_inside_batch: bool = False
    """Move it further, past the first record of its batch when the batch has several."""


def _batch_plans(*, legacy: bool) -> st.SearchStrategy[BatchPlan]:
    return st.builds(
        BatchPlan,
        timestamps=st.lists(st.integers(0, 20_000), min_size=1, max_size=8).map(tuple),
        codec=st.sampled_from(LEGACY_CODECS if legacy else tuple(Codec)),
        kind=st.sampled_from(("legacy", "legacy-v0"))
        if legacy
        else st.sampled_from(("plain", "plain", "plain", "commit", "abort")),
        new_epoch=st.just(False) if legacy else st.integers(0, 7).map(lambda n: n == 0),
        advance_ms=st.sampled_from((0, 0, 1, 50, 400)),
        value_bytes=st.integers(0, 120),
    )


@st.composite
def partition_plans(draw: st.DrawFn) -> PartitionPlan:
    """Random partitions: CreateTime out of order or LogAppendTime, every codec, transactions with
    commit and abort markers, legacy v0 and v1 batches first, epoch changes; tiered locally only, on
    both tiers or mostly remotely; overlapping copies, remote retention and DeleteRecords.

    The scenario choices come from a ``Random`` seeded by the drawn batches and an integer, so
    that each is taken about as often as its weight says (Hypothesis strongly favours the first
    branch of ``one_of`` and a few integers, and its ``randoms()`` repeat a few values); the
    failing plan is printed whole, so a failure is reproduced from its repr.
    """
    legacy = draw(st.lists(_batch_plans(legacy=True), max_size=2))
    modern = draw(st.lists(_batch_plans(legacy=False), min_size=6, max_size=40))
    rnd = random.Random(f"{draw(st.integers(0, 2**32 - 1))}-{legacy!r}-{modern!r}")

    def share() -> float:
        # Edges matter most: nothing or everything deleted, copied again or expired.
        return rnd.choice((0.0, 1.0, rnd.random(), rnd.random()))

    def sometimes(chance: float) -> float | None:
        return share() if rnd.random() < chance else None

    return PartitionPlan(
        batches=(*legacy, *modern),
        log_append_time=rnd.random() < 0.4,
        segment_bytes=rnd.randint(300, 1500),
        index_interval_bytes=rnd.choice((1, 200, 1000)),
        roll_at_end=rnd.random() < 0.5,
        high_watermark_at=sometimes(0.3),
        tiering=rnd.choice(("local", "both", "remote", "remote")),
        local_deleted=share(),
        overlaps=tuple((share(), share()) for _ in range(rnd.choice((0, 0, 1, 2)))),
        retention_bytes_share=sometimes(0.5),
        log_start_at=sometimes(0.5),
        log_start_inside_batch=rnd.random() < 0.7,
    )


# -- the truth ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TruthRecord:
    """A record as appended: its effective timestamp, and its batch's leader epoch (-1 for v1)."""

    record: Record
    leader_epoch: int
    control: bool


@dataclass(frozen=True)
class Expected:
    """An expected ListOffsets answer (None where an answer has nothing)."""

    offset: int
    timestamp: int
    leader_epoch: int


NOTHING = Expected(-1, -1, -1)


@dataclass
class Truth:
    """What was appended and what happened to it since: enough to answer by brute force."""

    records: list[TruthRecord]
    """Every record, control records included, in offset order."""
    batches: list[tuple[int, int]]
    """``(base offset, last offset)`` of every batch, markers included."""
    epochs: list[EpochEntry]
    log_end_offset: int
    high_watermark: int
    log_start_offset: int = 0
    """The partition's log start offset: DeleteRecords' and remote retention's, whichever is higher."""
    local_start_offset: int = 0
    """Base offset of the first segment the broker still has."""
    highest_copied: int = -1
    transactions: list[tuple[int, int]] = field(default_factory=list)
    """``(first offset, marker offset)`` of every transaction."""
    checkpoint_epochs: list[EpochEntry] | None = None
    """The broker's ``leader-epoch-checkpoint`` once local retention cut its start; None while it
    holds :attr:`epochs` whole."""

    def last_fetchable(self, committed: bool = False) -> int:
        """The high watermark, or with ``committed`` the last stable offset: the first offset of
        the earliest transaction whose marker is not below the high watermark (raised to the log
        start offset), if below the high watermark."""
        if not committed:
            return self.high_watermark
        unstable = [first for first, marker in self.transactions if first < self.high_watermark <= marker]
        if not unstable:
            return self.high_watermark
        return min(self.high_watermark, max(min(unstable), self.log_start_offset))

    def epoch_at(self, offset: int) -> int:
        """The leader epoch ``offset`` was written in, by ``leader-epoch-checkpoint``'s rule."""
        epoch = -1
        for entry in self.epochs:
            if entry.start_offset <= offset:
                epoch = entry.epoch
        return epoch

    def held_epoch_at(self, offset: int) -> int:
        """:meth:`epoch_at` while a tier holds ``offset`` (from the log start offset on: its batch
        says it) or the broker's checkpoint gives it; below both, the checkpoint's rule (-1)."""
        if self.checkpoint_epochs is None or offset >= self.log_start_offset:
            return self.epoch_at(offset)
        return epoch_for_offset(self.checkpoint_epochs, offset)

    def visible(self) -> list[TruthRecord]:
        """Records from the log start offset on (any may be at or past the high watermark)."""
        return [r for r in self.records if r.record.offset >= self.log_start_offset]

    def for_timestamp(self, timestamp: int, committed: bool = False) -> Expected:
        """The first record at or after the log start offset with a timestamp ≥ ``timestamp``,
        if it is below the last fetchable offset."""
        for r in self.visible():
            if r.record.timestamp >= timestamp:
                if r.record.offset >= self.last_fetchable(committed):
                    return NOTHING
                return Expected(r.record.offset, r.record.timestamp, r.leader_epoch)
        return NOTHING

    def max_timestamp(self, committed: bool = False) -> Expected:
        """MAX_TIMESTAMP (-3): the first record with the largest timestamp from the log start
        offset on, if it is below the high watermark (Kafka filters it by the last fetchable offset)."""
        visible = self.visible()
        if not visible:
            return NOTHING
        best = max(r.record.timestamp for r in visible)
        if best < 0:
            return NOTHING  # no record has a timestamp (v0 messages)
        first = next(r for r in visible if r.record.timestamp == best)
        if first.record.offset >= self.last_fetchable(committed):
            return NOTHING
        return Expected(first.record.offset, best, first.leader_epoch)

    def special(self, timestamp: int, committed: bool = False) -> Expected:
        """The answer to a special timestamp (-1 to -5)."""
        if timestamp == -1:
            latest = self.last_fetchable(committed)
            return Expected(latest, -1, self.epochs[-1].epoch if self.epochs else -1)
        if timestamp == -2:
            return Expected(self.log_start_offset, -1, self.epoch_at(self.log_start_offset))
        if timestamp == -3:
            return self.max_timestamp(committed)
        if timestamp == -4:
            start = max(self.local_start_offset, self.log_start_offset)
            return Expected(start, -1, self.epoch_at(start))
        if timestamp == -5:
            if self.highest_copied < 0 or self.highest_copied >= self.last_fetchable(committed):
                return NOTHING
            return Expected(self.highest_copied, -1, self.held_epoch_at(self.highest_copied))
        raise ValueError(f"{timestamp} is not a special timestamp")

    def data_records(self, from_offset: int) -> list[Record]:
        """What a fetch from ``from_offset`` returns, decoded: data records below the high watermark."""
        return [
            r.record
            for r in self.records
            if not r.control and from_offset <= r.record.offset < self.high_watermark
        ]

    def batch_holding(self, offset: int) -> tuple[int, int]:
        """The ``(base, last)`` offsets of the batch holding ``offset``, or the first after it."""
        return next(b for b in self.batches if b[1] >= offset)


# -- writing the log ----------------------------------------------------------------------------


def _records(plan: BatchPlan, first_offset: int) -> list[ProducerRecord]:
    out = []
    for i, delta in enumerate(plan.timestamps):
        n = first_offset + i
        value = (b"value-%d-" % n * (plan.value_bytes // 8 + 1))[: plan.value_bytes]
        headers: tuple[Header, ...] = (("trace", b"%d" % n), ("empty", None)) if n % 3 == 0 else ()
        key = None if n % 5 == 0 else b"key-%d" % (n % 7)
        out.append(ProducerRecord(NOW + delta, key, value if n % 11 else None, headers))
    return out


def write_partition(log_dir: Path, plan: PartitionPlan, partition: int = 0) -> Truth:
    """Write ``plan`` as the only partition ``orders-<partition>`` of a new log directory."""
    return write_partitions(log_dir, {partition: plan})[partition]


def write_partitions(log_dir: Path, plans: Mapping[int, PartitionPlan]) -> dict[int, Truth]:
    """Append each plan's batches to ``log_dir/orders-<partition>`` and close the directory as a
    broker does (checkpoints included); returns the truth about every appended record."""
    clock = FakeClock(NOW)
    writer = LogDirWriter(log_dir, node_id=BROKER_ID, clock=clock)
    truths: dict[int, Truth] = {}
    high_watermarks: dict[LogTopicPartition, int] = {}
    for partition, plan in plans.items():
        clock.now = NOW
        writer.topic_configs[TOPIC] = TopicConfig(
            segment_bytes=plan.segment_bytes,
            index_interval_bytes=plan.index_interval_bytes,
            timestamp_type=TimestampType.LOG_APPEND_TIME
            if plan.log_append_time
            else TimestampType.CREATE_TIME,
        )
        appender = writer.partition(TOPIC, partition, leader_epoch=3)
        truths[partition] = _append(appender, clock, plan)
        high_watermarks[LogTopicPartition(TOPIC, partition)] = truths[partition].high_watermark
    writer.close(high_watermarks)
    return truths


def _append(appender: PartitionAppender, clock: FakeClock[int], plan: PartitionPlan) -> Truth:
    records: list[TruthRecord] = []
    batches: list[tuple[int, int]] = []
    transactions: list[tuple[int, int]] = []
    producer_id = 1000
    for batch in plan.batches:
        clock.now += batch.advance_ms
        if batch.new_epoch:
            appender.leader_epoch += 1
        offered = _records(batch, appender.next_offset)
        if batch.kind in ("legacy", "legacy-v0"):
            magic = 0 if batch.kind == "legacy-v0" else 1
            result = appender.append_legacy(offered, magic=magic, codec=batch.codec)
            epoch = -1
        else:
            transactional = batch.kind != "plain"
            producer_id += transactional
            result = appender.append(
                offered,
                codec=batch.codec,
                producer_id=producer_id if transactional else -1,
                producer_epoch=0 if transactional else -1,
                base_sequence=0 if transactional else -1,
                transactional=transactional,
            )
            epoch = appender.leader_epoch
        batches.append((result.base_offset, result.last_offset))
        for i, offered_record in enumerate(offered):
            timestamp = result.log_append_time if result.log_append_time >= 0 else offered_record.timestamp
            if batch.kind == "legacy-v0":
                timestamp = -1  # v0 messages carry no timestamp
            record = Record(
                result.base_offset + i,
                timestamp,
                offered_record.key,
                offered_record.value,
                offered_record.headers,
            )
            records.append(TruthRecord(record, epoch, control=False))
        if batch.kind in ("commit", "abort"):
            records.append(_marker(appender, clock, producer_id, batch.kind, batches))
            transactions.append((result.base_offset, records[-1].record.offset))
    if plan.roll_at_end:
        appender.roll()
    end = appender.next_offset
    boundaries = [base for base, _ in batches] + [end]
    if plan.high_watermark_at is None:
        hw = end
    else:
        hw = boundaries[round(plan.high_watermark_at * (len(boundaries) - 1))]
    appender.close()
    return Truth(records, batches, list(appender.epochs), end, hw, transactions=transactions)


def _marker(
    appender: PartitionAppender,
    clock: FakeClock[int],
    producer_id: int,
    kind: BatchKind,
    batches: list[tuple[int, int]],
) -> TruthRecord:
    control = ControlType.COMMIT if kind == "commit" else ControlType.ABORT
    result = appender.append_control(control, producer_id=producer_id, producer_epoch=0)
    batches.append((result.base_offset, result.last_offset))
    timestamp = result.log_append_time if result.log_append_time >= 0 else clock.now
    # The marker's key and value as the v2 control record format lays them out.
    key = b"\x00\x00" + int(control).to_bytes(2, "big")
    value = b"\x00\x00" + (0).to_bytes(4, "big")
    return TruthRecord(Record(result.base_offset, timestamp, key, value), appender.leader_epoch, True)


# -- backends -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """Where the metadata and the objects go: a fresh SQLite file and directory, or the session's
    PostgreSQL database (emptied) and a new S3 bucket."""

    kind: Literal["sqlite-fs", "postgres-s3"]
    sqlite_template: Path | None = None
    postgres_url: str | None = None
    s3: MotoS3 | None = None

    def settings(self, root: Path, log_dir: Path, **changes: object) -> Settings:
        """Settings of a sidecar over ``log_dir`` whose files live under ``root``."""
        if self.kind == "sqlite-fs":
            assert self.sqlite_template is not None
            url = sqlite_copy(self.sqlite_template, root)
            remote = (root / "remote").as_uri()
        else:
            assert self.postgres_url is not None
            engine: Engine = create_engine_for_url(self.postgres_url, pooled=False)
            try:
                clear(engine)
            finally:
                engine.dispose()
            url, remote = self.postgres_url, "s3://unused/tier"
        base = Settings(
            log_dirs=(log_dir,),
            broker_id=BROKER_ID,
            metadata_url=url,
            remote_url=remote,
            remote_log_index_cache_dir=root / "index-cache",
            topic_defaults=TopicSettings(retention_ms=-1),
        )
        return base.replace(**changes)

    def storage(self, root: Path) -> RemoteStorage:
        """A new remote store: a directory under ``root``, or a new bucket."""
        if self.s3 is None:
            return FilesystemStorage(root / "remote")
        return self.s3.storage(self.s3.new_bucket(), "tier")


StorageWrapper = Callable[[RemoteStorage], RemoteStorage]


def runtime(
    backend: Backend, root: Path, log_dir: Path, *, wrap: StorageWrapper | None = None, **changes: object
) -> Runtime:
    """A wired sidecar (fresh metrics registry) over ``log_dir``; ``wrap`` may put a seam around
    its remote store."""
    settings = backend.settings(root, log_dir, **changes)
    storage = backend.storage(root)
    return build_runtime(settings, registry=CollectorRegistry(), storage=wrap(storage) if wrap else storage)


# -- what happens to a partition over time ------------------------------------------------------


@dataclass
class Tiered:
    """A partition after :func:`tier_partition`: its sidecar and the truth."""

    runtime: Runtime
    truth: Truth
    tp: TopicPartition
    partition: PartitionDir
    overlapping_copies: int = 0
    retention_deleted: int = 0
    notes: list[str] = field(default_factory=list)


def tier_partition(rt: Runtime, partition: PartitionDir, truth: Truth, plan: PartitionPlan) -> Tiered:
    """Copy, copy again, expire and delete locally as ``plan`` says; update ``truth`` to match."""
    tp = TopicPartition(partition.topic, partition.partition)
    tiered = Tiered(rt, truth, tp, partition)
    if plan.log_start_at is not None:
        # DeleteRecords: the broker checkpoints the new log start offset (any offset, even mid-batch).
        start = round(plan.log_start_at * truth.high_watermark)
        base, last = truth.batch_holding(start) if start < truth.log_end_offset else (start, start)
        if plan.log_start_inside_batch and start == base and base < last and last < truth.high_watermark:
            start = base + 1
        path = partition.log_dir.path / LOG_START_OFFSET_CHECKPOINT
        write_offset_checkpoint(path, {**read_offset_checkpoint(path), (tp.topic, tp.partition): start})
        truth.log_start_offset = start
    if plan.tiering != "local":
        for outcome in rt.copier.run_once([partition]):
            assert outcome.error is None, outcome.error
        truth.highest_copied = rt.store.highest_copied_offset(tp)
        tiered.overlapping_copies = _copy_again(rt, partition, truth, plan.overlaps)
        if plan.retention_bytes_share is not None:
            tiered.retention_deleted = _expire(rt, partition, truth, plan.retention_bytes_share)
        if plan.tiering == "remote":
            _delete_local_prefix(partition, truth, plan.local_deleted)
    segments = partition.segments()
    truth.local_start_offset = segments[0].base_offset if segments else truth.log_end_offset
    tiered.notes.append(
        f"tiering={plan.tiering} hw={truth.high_watermark} leo={truth.log_end_offset} "
        f"log_start={truth.log_start_offset} local_start={truth.local_start_offset} "
        f"copied<={truth.highest_copied} overlaps={tiered.overlapping_copies} "
        f"expired={tiered.retention_deleted}"
    )
    return tiered


def _copy_again(
    rt: Runtime, partition: PartitionDir, truth: Truth, overlaps: Sequence[tuple[float, float]]
) -> int:
    """Upload whole-batch ranges of the tiered offsets once more, as another sidecar's copies."""
    tiered = [b for b in truth.batches if b[1] <= truth.highest_copied]
    made = 0
    for first_at, count_at in overlaps:
        if not tiered:
            break
        first = round(first_at * (len(tiered) - 1))
        last = first + round(count_at * (len(tiered) - 1 - first))
        _upload_copy(rt, partition, truth, tiered[first][0], tiered[last][1])
        made += 1
    return made


def _upload_copy(rt: Runtime, partition: PartitionDir, truth: Truth, start: int, end: int) -> None:
    staging = partition.log_dir.path.parent / f"copy-{uuid.uuid4().hex[:8]}" / partition.path.name
    staging.mkdir(parents=True)
    shutil.copyfile(partition.path / PARTITION_METADATA, staging / PARTITION_METADATA)
    with open(staging / segment_file_name(start, ".log"), "wb") as out:
        for segment in partition.segments():
            with segment.open() as source:
                for header in segment.headers():
                    if start <= header.last_offset and header.last_offset <= end:
                        out.write(read_batch_bytes(source, header))
    prepared = prepare_segment(
        PartitionDir(staging, LogDir(staging.parent)),
        Segment(staging, start),
        broker_id=OTHER_BROKER,
        now_ms=NOW,
        epochs=truth.epochs,
    )
    remote = prepared.remote
    rt.store.add_segment(remote)
    rt.storage.put_object(remote.layout.log_key, prepared.log_path, size=remote.size_bytes)
    rt.storage.put_object(remote.layout.index_key, prepared.index_blob.data)
    rt.store.update_segment_state(
        remote.segment_id,
        SegmentState.COPY_SEGMENT_FINISHED,
        event_time_ms=NOW,
        expected=SegmentState.COPY_SEGMENT_STARTED,
    )
    shutil.rmtree(staging.parent)


def _expire(rt: Runtime, partition: PartitionDir, truth: Truth, share: float) -> int:
    """Remote retention by size, at ``share`` of the remote size; the log start offset follows."""
    tp = TopicPartition(partition.topic, partition.partition)
    limit = int(share * rt.store.remote_log_size(tp))
    settings = rt.settings.replace(topic_defaults=TopicSettings(retention_ms=-1, retention_bytes=limit))
    retention = Retention(settings, rt.store, rt.storage, rt.metrics, leases=rt.retention.leases)
    [outcome] = retention.run_once([partition])
    assert outcome.error is None, outcome.error
    if outcome.deleted_segments:
        truth.log_start_offset = max(truth.log_start_offset, outcome.log_start_offset)
    return outcome.deleted_segments


def _delete_local_prefix(partition: PartitionDir, truth: Truth, share: float) -> None:
    """Local retention: delete the rolled segments wholly below the log start offset, then the
    oldest tiered ones (``share`` of them, at least one when there is one)."""
    below, tiered = [], []
    for segment in partition.rolled_segments():
        last = segment.last_offset()
        if last is not None and last < truth.log_start_offset:
            below.append(segment)
        elif last is not None and last <= truth.highest_copied:
            tiered.append(segment)
        else:
            break
    count = max(1, round(share * len(tiered))) if tiered else 0
    deleted = below + tiered[:count]
    for segment in deleted:
        for suffix in SEGMENT_FILE_SUFFIXES:
            segment.path(suffix).unlink(missing_ok=True)
    if deleted:
        # A broker without Kafka's tiering moves its log start offset past what local retention
        # deleted, and cuts its leader epoch checkpoint's start up to it (UnifiedLog's
        # maybeIncrementLogStartOffset, LeaderEpochFileCache.truncateFromStart).
        partition.forget_listing()
        path = partition.path / LEADER_EPOCH_CHECKPOINT
        cut = cut_epochs(
            read_leader_epoch_checkpoint(path),
            max(partition.segments()[0].base_offset, truth.log_start_offset),
        )
        write_leader_epoch_checkpoint(path, cut)
        truth.checkpoint_epochs = cut


def cut_epochs(entries: list[EpochEntry], start: int) -> list[EpochEntry]:
    """``entries`` with their start cut up to ``start`` as Kafka's
    ``LeaderEpochFileCache.truncateFromStart`` does: the entries below it dropped, the last of
    them moved up to begin at ``start`` unless an entry begins there."""
    kept = [e for e in entries if e.start_offset >= start]
    below = [e for e in entries if e.start_offset < start]
    if below and (not kept or kept[0].start_offset != start):
        kept.insert(0, EpochEntry(below[-1].epoch, start))
    return kept


@dataclass
class Parsed:
    """A batch as kafka-python reads it."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    control: bool
    records: list[Record]


def parse_with_kafka_python(raw: bytes) -> list[Parsed]:
    memory = MemoryRecords(raw)
    out = []
    while memory.has_next():
        batch: Any = memory.next_batch()
        assert batch.validate_crc()  # before iterating: iteration decompresses in place
        records = [
            Record(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in batch
        ]
        out.append(
            Parsed(batch.base_offset, batch.last_offset, batch.leader_epoch, batch.is_control_batch, records)
        )
    return out
