"""Shared pieces of the metadata store tests: databases, a clock, segment builders.

PostgreSQL tests use the server on 127.0.0.1:5432 (``RLM_TEST_POSTGRES_URL`` overrides it): each
test session creates a database ``rlm_test_<random>``, migrates it with Alembic, and drops it at
the end. They fail, rather than skip, when the server cannot be reached.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, delete, event, select, update
from sqlalchemy.engine import make_url

from metadata.engine import create_engine_for_url
from metadata.models import Base, OffsetTreeRow, PartitionRow
from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
from rlm.metastore import (
    ByteRange,
    IndexType,
    LeaderEpochEntry,
    ObjectLayout,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)
from tests.clock import FakeClock

POSTGRES_SERVER_URL = os.environ.get(
    "RLM_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
TP = TopicPartition("orders", 0)


def _server_dsn() -> str:
    return make_url(POSTGRES_SERVER_URL).set(drivername="postgresql").render_as_string(False)


def create_postgres_database() -> str:
    """Create an empty database on the test server; returns its SQLAlchemy URL.

    Its sessions commit without waiting for the write-ahead log to reach the disk
    (``synchronous_commit = off``): a commit is as atomic and as isolated as ever, and visible to
    every other connection at once; only a crash of the whole server could lose the last commits,
    and no test crashes the shared server (the copier's own-cluster test starts a server of its
    own). A commit then costs about a millisecond instead of five to seven on these disks.
    """
    name = f"rlm_test_{secrets.token_hex(6)}"
    with psycopg.connect(_server_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit TO off')
    return make_url(POSTGRES_SERVER_URL).set(database=name).render_as_string(False)


def drop_postgres_database(url: str) -> None:
    """Drop a database made by :func:`create_postgres_database`, closing its connections."""
    name = make_url(url).database
    with psycopg.connect(_server_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A migrated PostgreSQL database, dropped at the end (the session's: fixture ``postgres_url``)."""
    url = create_postgres_database()
    try:
        upgrade(url)
        yield url
    finally:
        drop_postgres_database(url)


def migrated_sqlite_template(directory: Path) -> Path:
    """A migrated SQLite file in ``directory`` that tests copy instead of migrating their own (the
    session's: fixture ``sqlite_template``)."""
    path = directory / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


def sqlite_copy(template: Path, directory: Path) -> str:
    """Copy the migrated template into ``directory``; returns the copy's URL."""
    path = directory / "metadata.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


def clear(engine: Engine) -> None:
    """Delete every row of every rlm table."""
    with engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(delete(table))


def backend_url(backend: str, request: pytest.FixtureRequest, directory: Path) -> str:
    """A migrated, empty database of ``backend`` for one test."""
    if backend == "sqlite":
        return sqlite_copy(request.getfixturevalue("sqlite_template"), directory)
    url: str = request.getfixturevalue("postgres_url")
    engine = create_engine_for_url(url, pooled=False)
    try:
        clear(engine)
    finally:
        engine.dispose()
    return url


def open_store(url: str, clock: FakeClock[int], *, list_page_size: int = 500) -> SqlMetadataStore:
    """A store on ``url`` driven by ``clock``."""
    return SqlMetadataStore(create_engine_for_url(url), clock=clock, list_page_size=list_page_size)


LAYOUT = ObjectLayout(
    log_key="3f/orders-0/00000000000000000000-seg.log",
    index_key="3f/orders-0/00000000000000000000-seg.indexes",
    index_ranges=(
        (IndexType.OFFSET, ByteRange(0, 120)),
        (IndexType.TIMESTAMP, ByteRange(120, 180)),
        (IndexType.PRODUCER_SNAPSHOT, ByteRange(300, 42)),
        (IndexType.LEADER_EPOCH, ByteRange(342, 20)),
    ),
)


def segment(
    start: int,
    end: int,
    max_timestamp_ms: int = 1_000,
    *,
    tp: TopicPartition = TP,
    epochs: tuple[tuple[int, int], ...] | None = None,
    size_bytes: int = 1_000,
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED,
) -> RemoteSegment:
    """A segment of ``tp`` over ``[start, end]``; one leader epoch (0) unless ``epochs`` is given."""
    return RemoteSegment(
        segment_id=uuid.uuid4(),
        topic_partition=tp,
        topic_id=uuid.UUID("7d8f1c2e-4b5a-4c3d-9e8f-0a1b2c3d4e5f"),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=max_timestamp_ms,
        size_bytes=size_bytes,
        broker_id=1,
        event_time_ms=1_700_000_000_000,
        leader_epochs=tuple(LeaderEpochEntry(e, o) for e, o in (epochs or ((0, start),))),
        layout=LAYOUT,
        txn_index_empty=True,
        state=state,
    )


def add_finished(store: SqlMetadataStore, *segments: RemoteSegment) -> None:
    """Add each segment and move it to COPY_SEGMENT_FINISHED."""
    for seg in segments:
        store.add_segment(seg)
        store.update_segment_state(
            seg.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=seg.event_time_ms + 1
        )


def grant_epoch_again(
    store: SqlMetadataStore, tp: TopicPartition, owner: int, incarnation: uuid.UUID | None
) -> None:
    """Record ``tp``'s lease, at the epoch it is at, as taken by ``owner``'s process
    ``incarnation``, behind the store's back: what a PostgreSQL failover that lost the commit of
    the last take leaves, once the promoted standby handed the same epoch out again."""
    with store.engine.begin() as conn:
        conn.execute(
            update(PartitionRow)
            .where(PartitionRow.topic == tp.topic, PartitionRow.partition == tp.partition)
            .values(lease_owner=owner, lease_incarnation=incarnation)
        )


def stored_tree(store: SqlMetadataStore, tp: TopicPartition = TP) -> dict[tuple[int, int], tuple[int, int]]:
    """The partition's offset tree: ``(level, bucket) -> (max timestamp, max end offset)``."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(
                OffsetTreeRow.level,
                OffsetTreeRow.bucket,
                OffsetTreeRow.max_timestamp_ms,
                OffsetTreeRow.max_end_offset,
            )
            .join(PartitionRow, PartitionRow.id == OffsetTreeRow.partition_id)
            .where(PartitionRow.topic == tp.topic, PartitionRow.partition == tp.partition)
        )
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}


@contextlib.contextmanager
def counted_statements(store: SqlMetadataStore) -> Iterator[list[str]]:
    """The statements the store's engine runs inside the block (``BEGIN IMMEDIATE``, SQLite's
    start of a write transaction, included)."""
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(store.engine, "before_cursor_execute", count)


def writes(statements: list[str]) -> list[str]:
    """Those of ``statements`` that write or lock: what a store call that only reads runs none of."""
    marks = ("INSERT", "UPDATE", "DELETE", "BEGIN IMMEDIATE")
    return [s for s in statements if any(mark in s.upper() for mark in marks)]
