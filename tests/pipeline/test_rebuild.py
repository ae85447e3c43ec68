"""``rlm spark rebuild-metadata`` end to end: the metadata database dropped, rebuilt from the objects.

A tier is copied by the real copier (its index objects carry descriptions); half of them then
lose their description, as objects copied before descriptions existed have none, and two copies
that crashed after their upload are left beside the segments they repeat (one complete, one with
its ``.log`` only). The rebuild, into an empty migrated database, must give every finished row
back (every field for the described, every field a lookup uses for the others), answer every
lookup of a set exactly as the original did, and list the crashed copies as orphans, deleting
them only when asked.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
from rlm.cli import main
from rlm.metastore.model import RemoteSegment, SegmentState
from rlm.pipeline.export.bounds import offset_for_timestamp
from rlm.remote_tier.read_plan import summarize
from rlm.storage.description import DESCRIPTION_KEY
from rlm.storage.layout import segment_keys
from rlm.storage.protocol import RemoteStorage
from tests.metadata_support import create_postgres_database, sqlite_copy
from tests.pipeline.conftest import BACKENDS, make_tier
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")


@dataclass(frozen=True)
class Damaged:
    tier: Tier
    stripped: set[uuid.UUID]
    """Segments whose index object lost its description."""
    orphans: set[str]
    """Keys of the crashed copies."""


def _strip(storage: RemoteStorage, key: str) -> None:
    """Store the object again without metadata (as copied before descriptions existed)."""
    size = storage.object_size(key)
    assert size is not None
    storage.put_object(key, storage.read_range(key, 0, size))


def _crashed_copy(storage: RemoteStorage, of: RemoteSegment, *, complete: bool) -> list[str]:
    """The objects of another copy of ``of``'s range (new segment id), as a crashed copy leaves them."""
    tp = of.topic_partition
    keys = segment_keys(tp.topic, of.topic_id, tp.partition, of.start_offset, uuid.uuid4())
    storage.put_object(keys.log_key, storage.read_range(of.layout.log_key, 0, of.size_bytes))
    if not complete:
        return [keys.log_key]
    size = storage.object_size(of.layout.index_key)
    assert size is not None
    storage.put_object(keys.indexes_key, storage.read_range(of.layout.index_key, 0, size))
    return [keys.log_key, keys.indexes_key]


@pytest.fixture(scope="module", params=BACKENDS)
def damaged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Damaged:
    tier = make_tier(request.param, request, tmp_path_factory.mktemp(f"rebuild-{request.param}"))
    rows = _finished(tier.open_store())
    storage = tier.open_storage()
    try:
        for row in rows:
            metadata = storage.object_metadata(row.layout.index_key)
            assert metadata is not None and DESCRIPTION_KEY in metadata  # the copier described it
        stripped = {row.segment_id for row in rows[::2]}
        for row in rows[::2]:
            _strip(storage, row.layout.index_key)
            assert storage.object_metadata(row.layout.index_key) == {}
        described = [row for row in rows if row.segment_id not in stripped]
        orphans = set(_crashed_copy(storage, described[0], complete=True))
        orphans |= set(_crashed_copy(storage, described[1], complete=False))
    finally:
        storage.close()
    return Damaged(tier, stripped, orphans)


def _finished(store: SqlMetadataStore) -> list[RemoteSegment]:
    with store:
        return [
            row
            for record in store.list_partitions()
            for row in store.list_segments(
                record.topic_partition, states=[SegmentState.COPY_SEGMENT_FINISHED]
            )
        ]


def _empty_database(request: pytest.FixtureRequest, directory: Path) -> str:
    if "postgres" in request.node.callspec.id:
        url = create_postgres_database()
        request.getfixturevalue("postgres_databases").append(url)
        upgrade(url)
        return url
    directory.mkdir()
    return sqlite_copy(request.getfixturevalue("sqlite_template"), directory)


def _rebuild(capsys: pytest.CaptureFixture[str], tier: Tier, url: str, *args: str) -> dict[str, Any]:
    code = main(
        [
            "spark",
            "rebuild-metadata",
            "--config",
            str(tier.config),
            "--metadata",
            url,
            "--quiet",
            "--json",
            *args,
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    report: dict[str, Any] = json.loads(out.out)
    return report


def _lookups(tier: Tier, url: str) -> dict[str, Any]:
    """Answers of a set of lookups: the store's queries and rlm's remote offset-for-timestamp."""
    answers: dict[str, Any] = {}
    storage = tier.open_storage()
    try:
        with SqlMetadataStore.open(url) as store:
            for record in store.list_partitions():
                tp = record.topic_partition
                rows = list(store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
                end = max(r.end_offset for r in rows)
                stamps = sorted({r.max_timestamp_ms for r in rows})
                listed = summarize(rows, record.remote_log_start_offset)
                answers[str(tp)] = {
                    "highest": store.highest_copied_offset(tp),
                    "size": store.remote_log_size(tp),
                    "max_timestamp": store.max_timestamp(tp),
                    "log_start": record.remote_log_start_offset,
                    "by_offset": [
                        getattr(store.segment_for_offset(tp, o), "segment_id", None)
                        for o in range(0, end + 2, 7)
                    ],
                    "by_timestamp": [
                        getattr(store.first_segment_for_timestamp(tp, t), "segment_id", None)
                        for t in [stamps[0] - 1, *stamps, stamps[-1] + 1]
                    ],
                    "offset_for_timestamp": [
                        offset_for_timestamp(storage, listed, t, 0) for t in [stamps[0] - 1000, *stamps[::2]]
                    ],
                }
    finally:
        storage.close()
    return answers


def _row_fields(row: RemoteSegment, *, described: bool) -> tuple[Any, ...]:
    fields = (
        row.segment_id,
        row.topic_partition,
        row.topic_id,
        row.start_offset,
        row.end_offset,
        row.max_timestamp_ms,
        row.size_bytes,
        row.leader_epochs,
        row.layout,
        row.txn_index_empty,
        row.state,
    )
    return (*fields, row.broker_id) if described else fields


def test_a_dropped_database_is_rebuilt_from_the_objects(
    spark: SparkSession,
    damaged: Damaged,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tier = damaged.tier
    original = _finished(tier.open_store())
    url = _empty_database(request, tmp_path / "db")
    report = _rebuild(capsys, tier, url)
    assert report["segments"] == len(original)
    assert report["read"] == len(damaged.stripped) > 0
    assert report["from_descriptions"] == len(original) - len(damaged.stripped) > 0
    rebuilt = {row.segment_id: row for row in _finished(SqlMetadataStore.open(url))}
    assert set(rebuilt) == {row.segment_id for row in original}
    for row in original:
        described = row.segment_id not in damaged.stripped
        assert _row_fields(rebuilt[row.segment_id], described=described) == _row_fields(
            row, described=described
        )
    assert _lookups(tier, url) == _lookups(tier, tier.settings.metadata_url)
    # The crashed copies are orphans, named with why, and still there.
    assert {key for o in report["orphans"] for key in o["keys"]} == damaged.orphans
    reasons = sorted(o["reason"].split(":")[0].split(" ")[0] for o in report["orphans"])
    assert reasons == ["a", "incomplete"]
    storage = tier.open_storage()
    try:
        assert all(storage.object_size(key) is not None for key in damaged.orphans)
    finally:
        storage.close()


def test_orphans_are_deleted_only_when_asked_and_a_full_database_is_refused(
    spark: SparkSession,
    damaged: Damaged,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tier = damaged.tier
    code = main(["spark", "rebuild-metadata", "--config", str(tier.config), "--quiet"])
    assert code == 1 and "the metadata database is not empty" in capsys.readouterr().err
    url = _empty_database(request, tmp_path / "db")
    report = _rebuild(capsys, tier, url, "--delete-orphans")
    assert report["deleted_orphans"] and report["segments"] == len(_finished(tier.open_store()))
    storage = tier.open_storage()
    try:
        assert all(storage.object_size(key) is None for key in damaged.orphans)
        assert all(storage.object_size(r.layout.log_key) is not None for r in _finished(tier.open_store()))
    finally:
        storage.close()
