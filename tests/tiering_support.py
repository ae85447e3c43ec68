"""Shared pieces of the copier and retention tests: log directories, a wired copier and retention
on either backend pair, and the checker of the remote tier's invariants.

Backend pairs: SQLite + the filesystem store (the embedded default), and PostgreSQL or SQLite + an
S3 server over HTTP (moto's server mode, or s3rver). The fixtures ``backend`` and
``tiering_factory`` are in ``tests/integration/conftest.py``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import boto3
import pytest
from prometheus_client import CollectorRegistry

from metadata.store import SqlMetadataStore
from rlm.config import Settings, TopicSettings
from rlm.log.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from rlm.log.dirwriter import LogDirWriter
from rlm.log.index import TimeIndex
from rlm.log.logdir import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogDir,
    PartitionDir,
)
from rlm.log.model import Codec
from rlm.log.model import TopicPartition as LogTopicPartition
from rlm.log.segment import Segment
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.storage.events import StorageEvents
from rlm.storage.filesystem import TMP_SUFFIX, FilesystemStorage
from rlm.storage.log_start import marker_partition
from rlm.storage.payload import crc32c_update
from rlm.storage.protocol import RemoteStorage
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.s3_config import S3Config
from rlm.tiering.copier import Copier
from rlm.tiering.deletion import Step, no_step
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.retention import Retention
from tests.clock import FakeClock
from tests.metadata_support import backend_url, open_store
from tests.s3_support import TEST_S3_CONFIG, S3Server

BROKER_ID = 1
#: Every step the copier reports, in the order of one copy.
COPY_STEPS = ("copy_started", "log_uploaded", "indexes_uploaded", "copy_finished")
#: Every step of a deletion (retention, or the cleanup of an unfinished copy), in order.
DELETE_STEPS = ("delete_started", "log_deleted", "indexes_deleted", "delete_finished")
#: The step retention reports once it advanced the remote log start offset, before deleting.
RETENTION_STEPS = ("log_start_advanced", *DELETE_STEPS)
#: The broker's wall clock while scripted partitions are written (timestamps are checked against it).
WRITER_NOW_MS = 1_800_000_000_000

BACKEND_PAIRS = [
    pytest.param("sqlite-fs", id="sqlite-fs"),
    pytest.param("postgres-s3", id="postgres-s3", marks=pytest.mark.postgres),
]


# -- log directories ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentPlan:
    """One rolled segment of a scripted partition."""

    records: int
    """Records in the segment."""
    max_timestamp_ms: int
    """The segment's largest record timestamp; it is held by a record in the middle."""
    leader_epochs: tuple[int, ...] = (0,)
    """Epochs that write the segment, each a contiguous share of its records, ascending."""
    batch_records: int = 10
    value_bytes: int = 200
    legacy: bool = False
    """Write v1 messages, which carry no leader epoch (a log from before the v2 format)."""


def write_scripted_log_dir(
    path: Path,
    partitions: Mapping[TopicPartition, Sequence[SegmentPlan]],
    *,
    active_records: int = 3,
    high_watermarks: Mapping[TopicPartition, int] | None = None,
    seed: int = 0,
) -> None:
    """Write a log directory whose partitions roll exactly as ``partitions`` says.

    Each plan becomes one rolled segment; an active segment of ``active_records`` records follows
    (written by the last epoch of the last plan). High watermarks default to the log end offsets.
    """
    rng = random.Random(seed)
    writer = LogDirWriter(
        path,
        node_id=BROKER_ID,
        clock=lambda: WRITER_NOW_MS,
        default_config=TopicConfig(segment_bytes=1 << 30),
    )
    for tp, plans in partitions.items():
        appender = writer.partition(tp.topic, tp.partition, leader_epoch=plans[0].leader_epochs[0])
        for plan in plans:
            share = -(-plan.records // len(plan.leader_epochs))
            written = 0
            for epoch in plan.leader_epochs:
                appender.leader_epoch = epoch
                todo = min(share, plan.records - written)
                while todo > 0:
                    n = min(plan.batch_records, todo)
                    records = [_record(rng, plan, written + i) for i in range(n)]
                    if plan.legacy:
                        appender.append_legacy(records, magic=1, codec=rng.choice((Codec.NONE, Codec.GZIP)))
                    else:
                        appender.append(records, codec=rng.choice((Codec.NONE, Codec.ZSTD, Codec.LZ4)))
                    written += n
                    todo -= n
            appender.roll()
        if active_records:
            last = replace(plans[-1], records=active_records)
            appender.append([_record(rng, last, i) for i in range(active_records)])
    writer.close(
        {LogTopicPartition(tp.topic, tp.partition): hw for tp, hw in (high_watermarks or {}).items()}
    )


def _record(rng: random.Random, plan: SegmentPlan, index: int) -> ProducerRecord:
    # The largest timestamp sits in the middle, so "the last record's timestamp" would be wrong.
    middle = plan.records // 2
    timestamp = plan.max_timestamp_ms if index == middle else plan.max_timestamp_ms - 1 - (index % 97)
    text = b"event %d of a scripted segment " % index
    value = (text * (plan.value_bytes // len(text) + 1))[: plan.value_bytes // 2] + rng.randbytes(
        plan.value_bytes - plan.value_bytes // 2
    )
    return ProducerRecord(timestamp, f"key-{rng.randrange(50)}".encode(), value)


def _update_checkpoint(path: Path, changes: Mapping[TopicPartition, int]) -> None:
    entries = read_offset_checkpoint(path)
    entries.update({(tp.topic, tp.partition): offset for tp, offset in changes.items()})
    write_offset_checkpoint(path, entries)


def set_high_watermarks(log_dir: Path, changes: Mapping[TopicPartition, int]) -> None:
    """Rewrite ``replication-offset-checkpoint`` with new high watermarks for some partitions."""
    _update_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, changes)


def set_log_start_offsets(log_dir: Path, changes: Mapping[TopicPartition, int]) -> None:
    """Rewrite ``log-start-offset-checkpoint`` as a broker does after retention or DeleteRecords."""
    _update_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, changes)


class LocalSegment(NamedTuple):
    """What a rolled local segment holds, read the slow way."""

    base_offset: int
    last_offset: int
    size: int
    path: Path
    max_timestamp_ms: int
    """The largest record timestamp, from decoding every record."""


def local_segment(segment: Segment) -> LocalSegment:
    """Decode every record of ``segment`` to find its offsets and largest timestamp."""
    last, max_ts = -1, -1
    for header in segment.headers():
        last = header.last_offset
        for record in segment.read_records(header):
            max_ts = max(max_ts, record.timestamp)
    return LocalSegment(segment.base_offset, last, segment.size(), segment.log_path, max_ts)


def eligible_segments(partition: PartitionDir) -> list[Segment]:
    """Rolled segments wholly below the high watermark (what the copier must tier)."""
    hw = partition.high_watermark()
    out = []
    for segment in partition.rolled_segments():
        last = segment.last_offset()
        if hw is None or last is None or last >= hw:
            break
        out.append(segment)
    return out


def tp_of(partition: PartitionDir) -> TopicPartition:
    """The metadata store's topic-partition of a partition directory."""
    return TopicPartition(partition.topic, partition.partition)


# -- backends and the wired components ----------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """Where the metadata and the objects go."""

    name: str
    metadata_url: str
    remote_url: str
    s3: S3Server | None = None
    bucket: str | None = None

    @property
    def s3_endpoint_url(self) -> str | None:
        return None if self.s3 is None else self.s3.endpoint_url

    def open_storage(
        self,
        *,
        session: boto3.session.Session | None = None,
        config: S3Config = TEST_S3_CONFIG,
        events: StorageEvents | None = None,
    ) -> RemoteStorage:
        """A fresh connection to the remote store (an S3 store reports to ``events``)."""
        if self.s3 is None:
            return FilesystemStorage(self.remote_url.removeprefix("file://"))
        assert self.bucket is not None
        return self.s3.storage(self.bucket, "tier", config, session=session, events=events)

    def unfinished_puts(self) -> list[str]:
        """What unfinished puts left in the remote store, seen behind its back, sorted.

        The key of every S3 multipart upload neither completed nor aborted, or the path (from the
        root) of every filesystem temporary file.
        """
        if self.s3 is not None:
            assert self.bucket is not None
            return sorted(self.s3.unfinished_uploads(self.bucket))
        root = Path(self.remote_url.removeprefix("file://"))
        return sorted(tmp.relative_to(root).as_posix() for tmp in root.rglob(f"*{TMP_SUFFIX}"))

    def open_store(self, clock: FakeClock[int]) -> SqlMetadataStore:
        """A fresh connection to the metadata store; leases expire by ``clock``."""
        return open_store(self.metadata_url, clock)

    def settings(self, log_dir: Path, **changes: object) -> Settings:
        """Settings for a sidecar of broker ``BROKER_ID`` over ``log_dir``; time retention off."""
        base = Settings(
            log_dirs=(log_dir,),
            broker_id=BROKER_ID,
            metadata_url=self.metadata_url,
            remote_url=self.remote_url,
            s3_endpoint_url=self.s3_endpoint_url,
            s3_addressing_style="auto" if self.s3 is None else self.s3.addressing_style,
            remote_log_manager_copier_thread_pool_size=2,
            topic_defaults=TopicSettings(retention_ms=-1),
            # Beside the log dir, not the checkout's build/: test processes run side by side, and a
            # remote index cache's directory is locked by one process at a time.
            remote_log_index_cache_dir=log_dir.parent / "index-cache",
        )
        return base.replace(**changes)


def make_backend(kind: str, request: pytest.FixtureRequest, directory: Path) -> Backend:
    """A fresh, empty backend pair of ``kind``: ``sqlite-fs``, ``postgres-s3`` or ``sqlite-s3``
    (moto), ``sqlite-s3rver`` or ``postgres-s3rver``."""
    database, _, objects = kind.partition("-")
    url = backend_url(database, request, directory)
    if objects == "fs":
        remote = directory / "remote"
        remote.mkdir()
        return Backend(kind, url, remote.as_uri())
    s3: S3Server = request.getfixturevalue("s3rver" if objects == "s3rver" else "moto_s3")
    bucket = s3.new_bucket()
    return Backend(kind, url, f"s3://{bucket}/tier", s3, bucket)


@dataclass
class Tiering:
    """A copier and a retention of broker ``BROKER_ID`` sharing one store, storage and lease keeper."""

    backend: Backend
    settings: Settings
    store: SqlMetadataStore
    storage: RemoteStorage
    clock: FakeClock[int] = field(default_factory=FakeClock)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    given_metrics: InitVar[Metrics | None] = None
    """The metrics the storage reports to, on ``registry``; new ones when not given."""

    def __post_init__(self, given_metrics: Metrics | None) -> None:
        self.metrics = given_metrics or Metrics(self.registry)
        self.leases = LeaseKeeper(
            self.store,
            self.settings.broker_id,
            self.settings.remote_log_manager_lease_ttl_ms,
            metrics=self.metrics,
        )

    @classmethod
    def open(
        cls, backend: Backend, log_dir: Path, clock: FakeClock[int] | None = None, **changes: object
    ) -> Tiering:
        """Connect to ``backend`` with settings for ``log_dir`` (``changes`` applied to them)."""
        clock = clock or FakeClock()
        registry = CollectorRegistry()
        metrics = Metrics(registry)
        return cls(
            backend,
            backend.settings(log_dir, **changes),
            backend.open_store(clock),
            backend.open_storage(events=metrics),
            clock,
            registry,
            metrics,
        )

    def restart(self) -> None:
        """Continue as a restarted sidecar: a new process of the same broker, which draws an
        incarnation of its own (and so takes the broker's leases over at once)."""
        self.leases = LeaseKeeper(
            self.store,
            self.settings.broker_id,
            self.settings.remote_log_manager_lease_ttl_ms,
            metrics=self.metrics,
        )

    def copier(self, *, step: Step = no_step, rate_limiter: RateLimiter | None = None) -> Copier:
        return Copier(
            self.settings,
            self.store,
            self.storage,
            self.metrics,
            clock=self.clock,
            step=step,
            rate_limiter=rate_limiter,
            leases=self.leases,
        )

    def retention(self, *, step: Step = no_step, settings: Settings | None = None) -> Retention:
        return Retention(
            settings or self.settings,
            self.store,
            self.storage,
            self.metrics,
            leases=self.leases,
            clock=self.clock,
            step=step,
        )

    def partitions(self) -> list[PartitionDir]:
        return [p for d in self.settings.log_dirs for p in LogDir(d).partitions()]

    def segments(self, tp: TopicPartition, *states: SegmentState) -> list[RemoteSegment]:
        return list(self.store.list_segments(tp, states=states or None))

    def finished(self, tp: TopicPartition) -> list[RemoteSegment]:
        return self.segments(tp, SegmentState.COPY_SEGMENT_FINISHED)

    def close(self) -> None:
        self.leases.release_all()
        self.storage.close()
        self.store.close()


# -- the invariants of the remote tier ----------------------------------------------------------


def all_rows(store: MetadataStore, tps: Iterable[TopicPartition]) -> list[RemoteSegment]:
    """Every segment row of the partitions, in any state."""
    return [row for tp in tps for row in store.list_segments(tp)]


def _uncovered(ranges: list[tuple[int, int]], want: tuple[int, int]) -> list[tuple[int, int]]:
    """Parts of the inclusive range ``want`` that no range of ``ranges`` covers."""
    gaps = []
    low, high = want
    for start, end in sorted(ranges):
        if end < low:
            continue
        if start > low:
            gaps.append((low, min(start - 1, high)))
        low = max(low, end + 1)
        if low > high:
            return gaps
    if low <= high:
        gaps.append((low, high))
    return gaps


def invariant_problems(
    store: MetadataStore,
    storage: RemoteStorage,
    log_dirs: Sequence[Path],
    *,
    untiered: Collection[TopicPartition] = (),
    allow_pending: bool = False,
) -> list[str]:
    """What is wrong with the remote tier, in words; empty when every invariant holds.

    1. Every ``COPY_SEGMENT_FINISHED`` row has its ``.log`` object, of the row's size and the local
       segment's size, and whose CRC-32C is the local file's; its index object is as long as the
       sum of its ranges, and its time index ends with the row's max timestamp.
    2. Every offset of a rolled segment below the high watermark, from the broker's log start
       offset and the remote log start offset on (what retention deleted is below them), is
       covered by finished rows (except in the ``untiered`` partitions).
    3. Every object is referenced by a row not in ``DELETE_SEGMENT_FINISHED`` (no orphans).
    4. No two finished rows of one broker cover the same offset.
    5. No finished row lies wholly below the partition's remote log start offset.
    6. Unless ``allow_pending``: no row is left in ``COPY_SEGMENT_STARTED`` or ``DELETE_SEGMENT_STARTED``.
    """
    problems: list[str] = []
    partitions = {tp_of(p): p for d in log_dirs for p in LogDir(d).partitions()}
    rows = all_rows(store, partitions)
    finished = [r for r in rows if r.state is SegmentState.COPY_SEGMENT_FINISHED]
    for row in finished:
        problems.extend(_object_problems(storage, partitions[row.topic_partition], row))
    for tp, partition in partitions.items():
        if tp in untiered:
            continue
        # Offsets below the broker's log start offset, or retention's remote log start, are gone.
        record = store.get_partition(tp)
        floor = max(
            partition.checkpointed_log_start_offset() or 0, record.remote_log_start_offset if record else 0
        )
        ranges = [(r.start_offset, r.end_offset) for r in finished if r.topic_partition == tp]
        for segment in eligible_segments(partition):
            last = segment.last_offset()
            assert last is not None
            if last < floor:
                continue
            for gap in _uncovered(ranges, (max(segment.base_offset, floor), last)):
                problems.append(f"{tp}: offsets {gap[0]}..{gap[1]} below the high watermark are not tiered")
    live_keys = {
        key
        for r in rows
        if r.state is not SegmentState.DELETE_SEGMENT_FINISHED
        for key in (r.layout.log_key, r.layout.index_key)
    }
    for key in storage.list_keys(""):
        if key not in live_keys and marker_partition(key) is None:
            problems.append(f"object {key} is referenced by no live row")
    by_copier: dict[tuple[TopicPartition, int], list[RemoteSegment]] = {}
    for row in finished:
        by_copier.setdefault((row.topic_partition, row.broker_id), []).append(row)
    for (tp, broker), copied in by_copier.items():
        copied.sort(key=lambda r: r.start_offset)
        for before, after in itertools.pairwise(copied):
            if after.start_offset <= before.end_offset:
                problems.append(
                    f"{tp}: broker {broker} has two finished copies of offset {after.start_offset}: "
                    f"[{before.start_offset}, {before.end_offset}] and "
                    f"[{after.start_offset}, {after.end_offset}]"
                )
    for tp in partitions:
        record = store.get_partition(tp)
        start = -1 if record is None else record.remote_log_start_offset
        for row in finished:
            if row.topic_partition == tp and row.end_offset < start:
                problems.append(
                    f"{tp}: finished segment ending at {row.end_offset} is below the remote log start {start}"
                )
    if not allow_pending:
        for row in rows:
            if row.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED):
                problems.append(f"{row.topic_partition}: segment {row.segment_id} left in {row.state.value}")
    return problems


def _object_problems(storage: RemoteStorage, partition: PartitionDir, row: RemoteSegment) -> list[str]:
    what = f"{row.topic_partition} [{row.start_offset}, {row.end_offset}]"
    problems = []
    local = Segment(partition.path, row.start_offset)
    data = (
        storage.read_range(row.layout.log_key, 0, row.size_bytes + 1)
        if storage.object_size(row.layout.log_key) is not None
        else None
    )
    if data is None:
        return [f"{what}: .log object {row.layout.log_key} is missing"]
    if len(data) != row.size_bytes:
        problems.append(f"{what}: .log object holds {len(data)} bytes, the row says {row.size_bytes}")
    if not local.log_path.exists():
        problems.append(f"{what}: no local segment starts at {row.start_offset}")
    else:
        local_bytes = local.log_path.read_bytes()
        if len(local_bytes) != len(data) or crc32c_update(local_bytes) != crc32c_update(data):
            problems.append(f"{what}: .log object is not the local {local.log_path}")
    expected_index = sum(byte_range.size for _, byte_range in row.layout.index_ranges)
    index_size = storage.object_size(row.layout.index_key)
    if index_size != expected_index:
        problems.append(f"{what}: index object is {index_size} bytes, its ranges add up to {expected_index}")
        return problems
    time_range = row.layout.index_range(IndexType.TIMESTAMP)
    if time_range is None:
        problems.append(f"{what}: no time index")
    else:
        raw = storage.read_range(row.layout.index_key, time_range.position, time_range.size)
        index = TimeIndex.from_bytes(row.start_offset, raw)
        last_ts = index.last_entry.timestamp if len(index) else -1
        if last_ts != row.max_timestamp_ms:
            problems.append(
                f"{what}: time index ends at {last_ts}, the row's max timestamp is {row.max_timestamp_ms}"
            )
    return problems


def assert_invariants(
    store: MetadataStore,
    storage: RemoteStorage,
    log_dirs: Sequence[Path],
    *,
    untiered: Collection[TopicPartition] = (),
    allow_pending: bool = False,
) -> None:
    """Fail with every broken invariant listed (see :func:`invariant_problems`)."""
    problems = invariant_problems(store, storage, log_dirs, untiered=untiered, allow_pending=allow_pending)
    assert not problems, "remote tier invariants broken:\n" + "\n".join(problems)
