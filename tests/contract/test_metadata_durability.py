"""The embedded SQLite store keeps what it committed across a power loss, not only a crash of rlm."""

from __future__ import annotations

from pathlib import Path

from metadata.store import SqlMetadataStore
from tests.metadata_support import TP, segment, sqlite_copy

#: SQLite's ``PRAGMA synchronous`` level that syncs every commit.
FULL = 2


def test_every_sqlite_commit_reaches_the_disk_before_the_call_returns(
    sqlite_template: Path, tmp_path: Path
) -> None:
    # In WAL mode, synchronous=NORMAL syncs only at checkpoints: a commit the caller was told of
    # rolls back on a power loss. Retention commits DELETE_SEGMENT_STARTED and then deletes the
    # objects; rolled back, the row is COPY_SEGMENT_FINISHED again with its objects gone.
    with SqlMetadataStore.open(sqlite_copy(sqlite_template, tmp_path)) as store:
        store.add_segment(segment(0, 9))
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == FULL
        assert store.get_partition(TP) is not None
