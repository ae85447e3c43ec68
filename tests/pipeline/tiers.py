"""Tiered remote tiers for the pipeline tests, and the faults injected into them.

A :class:`Tier` is a log directory tiered by the real copier into a metadata store and a remote
store of its own (a fresh database and bucket or directory), with an ``rlm.yaml`` naming them, so
that tests can run ``rlm spark ...`` on it. Two backend pairs, as elsewhere in the suite: SQLite
+ the filesystem store, PostgreSQL + moto's S3 server over HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry
from sqlalchemy import update

from metadata.engine import create_engine_for_url
from metadata.models import SegmentRow
from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
from rlm.config import Settings
from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.identity import broker_id_from_log_dirs
from rlm.log.model import V2_HEADER_SIZE
from rlm.metastore.model import LeaderEpochEntry, ObjectLayout, RemoteSegment, SegmentState, TopicPartition
from rlm.metrics import Metrics
from rlm.pipeline.stage import Collect, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, VerifyReport, verify
from rlm.storage.layout import segment_keys
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.copier import Copier, CopyOutcome
from tests.metadata_support import create_postgres_database, sqlite_copy
from tests.s3_support import REGION, MotoS3
from tests.tiering_support import Backend

#: What executors and the driver's storage read S3 credentials from (moto takes any).
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "rlm-test-key",
    "AWS_SECRET_ACCESS_KEY": "rlm-test-secret",
    "AWS_DEFAULT_REGION": REGION,
}
BACKEND_KINDS = ("sqlite-fs", "postgres-s3")


@dataclass(frozen=True)
class Tier:
    """A tiered log directory: its backend pair, and the settings (and ``rlm.yaml``) naming it."""

    backend: Backend
    settings: Settings
    config: Path
    """An ``rlm.yaml`` with these settings, for the command line."""

    def open_store(self) -> SqlMetadataStore:
        return SqlMetadataStore.open(self.settings.metadata_url)

    def open_storage(self) -> RemoteStorage:
        return self.backend.open_storage()

    def finished(self, tp: TopicPartition) -> list[RemoteSegment]:
        with self.open_store() as store:
            return list(store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))


def build_tier(
    kind: str,
    directory: Path,
    write_logs: Callable[[Path], object],
    *,
    sqlite_template: Path | None = None,
    s3: MotoS3 | None = None,
    databases: list[str] | None = None,
    copy_errors: int = 0,
) -> Tier:
    """Write a log directory with ``write_logs`` and tier every eligible segment of it.

    Unlike :func:`tests.tiering_support.make_backend`, each tier has a database of its own (and a
    bucket or directory), so that tiers built once per session can be used side by side.

    Args:
        kind: ``sqlite-fs`` or ``postgres-s3``.
        directory: Where the log directory, the SQLite file and the filesystem store go.
        write_logs: Writes a Kafka log directory at the path it is given.
        sqlite_template: A migrated SQLite file (for ``sqlite-fs``).
        s3: The S3 server (for ``postgres-s3``).
        databases: PostgreSQL databases created are appended here, for the caller to drop.
        copy_errors: How many partitions the copy must fail on (a damaged log a test wrote).
    """
    log_dir = directory / "logs"
    write_logs(log_dir)
    if kind == "sqlite-fs":
        assert sqlite_template is not None
        remote = directory / "remote"
        remote.mkdir()
        backend = Backend(kind, sqlite_copy(sqlite_template, directory), remote.as_uri())
    else:
        assert s3 is not None
        url = create_postgres_database()
        if databases is not None:
            databases.append(url)
        upgrade(url)
        bucket = s3.new_bucket()
        backend = Backend(kind, url, f"s3://{bucket}/tier", s3, bucket)
    # The sidecar beside the broker that wrote the log directory.
    settings = backend.settings(log_dir, broker_id=broker_id_from_log_dirs([log_dir]))
    tier = Tier(backend, settings, directory / "rlm.yaml")
    _write_config(tier)
    outcomes = copy_eligible(tier)
    errors = [o.error for o in outcomes if o.error is not None]
    assert len(errors) == copy_errors, errors
    assert sum(o.copied_segments for o in outcomes) > 0
    return tier


def copy_eligible(tier: Tier) -> list[CopyOutcome]:
    """Run the copier once over the tier's log directory: it tiers what became eligible since
    (segments rolled, or the high watermark raised, after the last copy)."""
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            return Copier(tier.settings, store, storage, Metrics(CollectorRegistry())).run_once()
    finally:
        storage.close()


def _write_config(tier: Tier) -> None:
    s = tier.settings
    values = {
        "log.dirs": [str(d) for d in s.log_dirs],
        "broker.id": s.broker_id,
        "metadata.url": s.metadata_url,
        "remote.url": s.remote_url,
    }
    if s.s3_endpoint_url is not None:
        values["s3.endpoint.url"] = s.s3_endpoint_url
    tier.config.write_text(yaml.safe_dump(values))


# -- faults ---------------------------------------------------------------------------------------


def flip_byte(storage: RemoteStorage, row: RemoteSegment) -> int:
    """Flip a byte inside the records of the middle batch of the segment's ``.log``; returns the
    batch's position (a byte the CRC covers, so only the CRC can tell)."""
    data = bytearray(storage.read_range(row.layout.log_key, 0, row.size_bytes))
    headers = list(iter_headers(BytesSource(bytes(data))))
    batch = headers[len(headers) // 2]
    assert batch.magic == 2 and batch.size > V2_HEADER_SIZE + 8
    data[batch.position + V2_HEADER_SIZE + 5] ^= 0x20
    storage.put_object(row.layout.log_key, bytes(data))
    return batch.position


def truncate(storage: RemoteStorage, key: str, cut: int) -> None:
    """Replace the object with all but its last ``cut`` bytes."""
    size = storage.object_size(key)
    assert size is not None
    storage.put_object(key, storage.read_range(key, 0, size - cut))


def set_max_timestamp(tier: Tier, segment_id: uuid.UUID, value: int) -> None:
    """Write another max timestamp into the segment's row, behind the store's back."""
    engine = create_engine_for_url(tier.settings.metadata_url, pooled=False)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(SegmentRow).where(SegmentRow.segment_id == segment_id).values(max_timestamp_ms=value)
            )
    finally:
        engine.dispose()


def delete_finished(store: SqlMetadataStore, storage: RemoteStorage, row: RemoteSegment, now_ms: int) -> None:
    """Remove a finished segment as retention does (rows through DELETE_*, objects deleted)."""
    store.update_segment_state(row.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=now_ms)
    storage.delete_objects([row.layout.log_key, row.layout.index_key])
    store.update_segment_state(row.segment_id, SegmentState.DELETE_SEGMENT_FINISHED, event_time_ms=now_ms)


def add_started_row(store: SqlMetadataStore, after: RemoteSegment, event_time_ms: int) -> RemoteSegment:
    """A copy of the offsets after ``after`` that started at ``event_time_ms`` and never finished."""
    start = after.end_offset + 1
    segment_id = uuid.uuid4()
    keys = segment_keys(
        after.topic_partition.topic, after.topic_id, after.topic_partition.partition, start, segment_id
    )
    row = RemoteSegment(
        segment_id=segment_id,
        topic_partition=after.topic_partition,
        topic_id=after.topic_id,
        start_offset=start,
        end_offset=start + 9,
        max_timestamp_ms=after.max_timestamp_ms,
        size_bytes=1000,
        broker_id=after.broker_id,
        event_time_ms=event_time_ms,
        leader_epochs=(LeaderEpochEntry(after.leader_epochs[-1].epoch, start),),
        layout=ObjectLayout(keys.log_key, keys.indexes_key, ()),
        txn_index_empty=True,
    )
    store.add_segment(row)
    return row


def put_orphan(storage: RemoteStorage, like: RemoteSegment) -> str:
    """Store an object with a segment key of ``like``'s partition that no row references."""
    tp = like.topic_partition
    key = segment_keys(tp.topic, like.topic_id, tp.partition, like.end_offset + 1000, uuid.uuid4()).log_key
    storage.put_object(key, b"left behind by a copy whose row is gone")
    return key


def verify_tier(
    tier: Tier, options: VerifyOptions, *, now_ms: int, collect: Collect = run_in_process
) -> VerifyReport:
    """``rlm spark verify`` of the tier, its stage run by ``collect`` (in this process by default)."""
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            spec = StorageSpec.from_settings(tier.settings)
            return verify(store, storage, spec, collect, options, now_ms=now_ms)
    finally:
        storage.close()
