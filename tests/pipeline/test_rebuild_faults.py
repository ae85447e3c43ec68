"""``rlm spark rebuild-metadata --delete-orphans`` when the store fails or a description is damaged.

Only a missing object proves a set incomplete, an orphan to delete. A store that fails while a
set is described (throttled past its retries, refusing a call) tells nothing of the set: the
rebuild fails naming the objects, writes and deletes nothing, and a second run rebuilds the set. A
damaged description (an empty filesystem sidecar, JSON rlm cannot read, sizes that disagree with
the objects) is set aside and the set read from its bytes; a set whose bytes do not give a row
either is kept. Before deleting an incomplete set the rebuild looks again, and keeps it when its
missing object is there by then.

Each test copies the session's healthy ``sqlite-fs`` tier's objects into a store of its own (a
directory, or a moto bucket behind :class:`~tests.s3_proxy.S3Proxy` for the store's failures) and
rebuilds into a fresh SQLite database: in this process (:func:`~rlm.pipeline.stage.run_in_process`)
or, for two of them, on Spark through the command line.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyspark.sql import SparkSession

from metadata.store import SqlMetadataStore
from rlm.cli import main
from rlm.errors import CorruptDataError, StorageUnavailableError
from rlm.metastore.model import RemoteSegment
from rlm.pipeline.rebuild.job import RebuildOptions, RebuildReport, rebuild
from rlm.pipeline.stage import Collect, Stage, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.description import DESCRIPTION_KEY
from rlm.storage.filesystem import META_SUFFIX, FilesystemStorage
from rlm.storage.layout import segment_keys
from rlm.storage.log_start import marker_key, write_marker
from rlm.storage.protocol import RemoteStorage
from tests.metadata_support import sqlite_copy
from tests.pipeline.test_rebuild import _finished, _row_fields
from tests.pipeline.tiers import Tier, flip_byte
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import MotoS3

pytestmark = pytest.mark.usefixtures("aws_env")

#: Attempts of one S3 call before it fails (:class:`rlm.storage.retry.RetryPolicy`'s default).
S3_ATTEMPTS = 8


@pytest.fixture
def healthy(
    request: pytest.FixtureRequest, healthy_tiers: Callable[[str, pytest.FixtureRequest], Tier]
) -> Tier:
    return healthy_tiers("sqlite-fs", request)


def _rows(tier: Tier) -> list[RemoteSegment]:
    return sorted(_finished(tier.open_store()), key=lambda r: (r.topic_partition, r.start_offset))


def _copy(tier: Tier, target: RemoteStorage) -> list[str]:
    """Copy every object of ``tier`` (metadata too) into ``target``; the keys, sorted."""
    source = tier.open_storage()
    try:
        keys = sorted(source.list_keys())
        for key in keys:
            size = source.object_size(key)
            assert size is not None
            target.put_object(key, source.read_range(key, 0, size), metadata=source.object_metadata(key))
    finally:
        source.close()
    return keys


def _database(request: pytest.FixtureRequest, directory: Path) -> str:
    directory.mkdir()
    return sqlite_copy(request.getfixturevalue("sqlite_template"), directory)


def _rebuild_here(
    storage: RemoteStorage, spec: StorageSpec, url: str, collect: Collect = run_in_process
) -> RebuildReport:
    with SqlMetadataStore.open(url) as store:
        return rebuild(store, storage, spec, collect, RebuildOptions(delete_orphans=True))


def _directory_store(tier: Tier, directory: Path) -> tuple[FilesystemStorage, StorageSpec, list[str]]:
    directory.mkdir()
    storage = FilesystemStorage(str(directory))
    return storage, StorageSpec(directory.as_uri()), _copy(tier, storage)


def _describe_again(storage: RemoteStorage, row: RemoteSegment, **changes: Any) -> None:
    """Store the index object again with a description whose fields ``changes`` replaces."""
    key = row.layout.index_key
    metadata = storage.object_metadata(key)
    assert metadata is not None
    size = storage.object_size(key)
    assert size is not None
    doc = {**json.loads(metadata[DESCRIPTION_KEY]), **changes}
    storage.put_object(key, storage.read_range(key, 0, size), metadata={DESCRIPTION_KEY: json.dumps(doc)})


def _empty_sidecar(root: Path, row: RemoteSegment) -> None:
    """What a crash can leave of a sidecar the filesystem store wrote without syncing it."""
    (root / (row.layout.index_key + META_SUFFIX)).write_bytes(b"")


def test_a_store_failing_while_sets_are_described_fails_the_rebuild_and_deletes_nothing(
    healthy: Tier, moto_s3: MotoS3, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bucket = moto_s3.new_bucket()
    storage = moto_s3.storage(bucket)
    keys = _copy(healthy, storage)
    url = _database(request, tmp_path / "db")
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        spec = StorageSpec(f"s3://{bucket}", proxy.endpoint_url)  # the stage's reads go through it
        # The first set's first HEAD fails every attempt, as S3 throttling past the retries.
        proxy.inject(ProxyFault.SERVER_ERROR, "HeadObject", times=S3_ATTEMPTS)
        first = _rows(healthy)[0]
        with pytest.raises(StorageUnavailableError, match="nothing was written or deleted") as failed:
            _rebuild_here(storage, spec, url)
        assert first.layout.log_key in str(failed.value)
        assert sorted(storage.list_keys()) == keys
        with SqlMetadataStore.open(url) as store:
            assert store.list_partitions() == []
        proxy.clear()
        report = _rebuild_here(storage, spec, url)
    assert report.segments == len(_rows(healthy)) and report.orphans == [] and report.problems == []
    assert sorted(storage.list_keys()) == keys


def test_a_damaged_description_is_set_aside_and_the_set_read(
    healthy: Tier, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    storage, spec, keys = _directory_store(healthy, tmp_path / "remote")
    rows = _rows(healthy)
    sidecar, unreadable, wrong = rows[0], rows[3], rows[6]
    _empty_sidecar(tmp_path / "remote", sidecar)
    storage.put_object(
        unreadable.layout.index_key,
        storage.read_range(unreadable.layout.index_key, 0, 1 << 20),
        metadata={DESCRIPTION_KEY: '{"v":1,"end":'},
    )
    _describe_again(storage, wrong, size=wrong.size_bytes + 1)
    url = _database(request, tmp_path / "db")
    report = _rebuild_here(storage, spec, url)
    assert report.orphans == [] and sorted(storage.list_keys()) == keys
    assert report.segments == len(rows) and report.from_descriptions == len(rows) - 3
    damaged = {p.keys: p.reason for p in report.problems}
    assert set(damaged) == {(r.layout.log_key, r.layout.index_key) for r in (sidecar, unreadable, wrong)}
    assert all(reason.endswith("rebuilt from its objects") for reason in damaged.values())
    assert "sidecar is not JSON" in damaged[(sidecar.layout.log_key, sidecar.layout.index_key)]
    rebuilt = {r.segment_id: r for r in _finished(SqlMetadataStore.open(url))}
    for row in rows:
        assert _row_fields(rebuilt[row.segment_id], described=False) == _row_fields(row, described=False)


def test_a_set_neither_its_description_nor_its_bytes_describe_is_kept(
    healthy: Tier, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    storage, spec, keys = _directory_store(healthy, tmp_path / "remote")
    rows = _rows(healthy)
    kept = rows[1]
    _empty_sidecar(tmp_path / "remote", kept)
    flip_byte(storage, kept)
    report = _rebuild_here(storage, spec, _database(request, tmp_path / "db"))
    assert report.segments == len(rows) - 1
    (orphan,) = report.orphans
    assert orphan.keys == (kept.layout.log_key, kept.layout.index_key)
    assert orphan.reason.startswith("undescribable") and "CRC mismatch" in orphan.reason
    assert not orphan.deleted and orphan.kept is not None
    assert sorted(storage.list_keys()) == keys


def test_incomplete_sets_are_deleted_once_looked_at_again(
    healthy: Tier, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    storage, spec, keys = _directory_store(healthy, tmp_path / "remote")
    row = _rows(healthy)[0]
    log_only, index_only, late = (_other_copy(row) for _ in range(3))
    _put(storage, row.layout.log_key, log_only[0])
    _put(storage, row.layout.index_key, index_only[1])
    _put(storage, row.layout.log_key, late[0])

    def described_then_late_index(stage: Stage, summaries: Sequence[SegmentSummary]) -> pa.Table:
        table = run_in_process(stage, summaries)
        _put(storage, row.layout.index_key, late[1])  # a copy still under way uploads its index
        return table

    report = _rebuild_here(storage, spec, _database(request, tmp_path / "db"), described_then_late_index)
    assert report.segments == len(_rows(healthy))
    orphans = {o.keys: o for o in report.orphans}
    assert set(orphans) == {(log_only[0],), (index_only[1],), (late[0],)}
    assert orphans[(log_only[0],)].deleted and orphans[(index_only[1],)].deleted
    assert not orphans[(late[0],)].deleted and "is there now" in str(orphans[(late[0],)].kept)
    assert sorted(storage.list_keys()) == sorted([*keys, *late])


def test_an_unreadable_log_start_marker_fails_the_rebuild_before_it_writes_anything(
    healthy: Tier, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    storage, spec, keys = _directory_store(healthy, tmp_path / "remote")
    row = _rows(healthy)[1]
    marker = marker_key(row.topic_partition, row.topic_id)
    storage.put_object(marker, b"{not json")  # a marker cut short
    url = _database(request, tmp_path / "db")
    with pytest.raises(CorruptDataError, match="remote log start marker") as failed:
        _rebuild_here(storage, spec, url)
    assert marker in str(failed.value)
    with SqlMetadataStore.open(url) as store:
        assert store.list_partitions() == []  # so the rebuild can be run again once it is repaired
    assert sorted(storage.list_keys()) == sorted([*keys, marker])
    write_marker(storage, row.topic_partition, row.topic_id, row.start_offset)
    report = _rebuild_here(storage, spec, url)
    assert report.segments == len(_rows(healthy)) and report.orphans == []
    with SqlMetadataStore.open(url) as store:
        record = store.get_partition(row.topic_partition)
    assert record is not None and record.remote_log_start_offset == row.start_offset


def _other_copy(row: RemoteSegment) -> tuple[str, str]:
    """The keys of another copy of ``row``'s range (a new segment id)."""
    tp = row.topic_partition
    keys = segment_keys(tp.topic, row.topic_id, tp.partition, row.start_offset, uuid.uuid4())
    return keys.log_key, keys.indexes_key


def _put(storage: RemoteStorage, source: str, key: str) -> None:
    size = storage.object_size(source)
    assert size is not None
    storage.put_object(key, storage.read_range(source, 0, size))


# -- on Spark, through the command line ------------------------------------------------------------


def _config(tier: Tier, path: Path, url: str, remote: str, endpoint: str | None = None) -> Path:
    values: dict[str, Any] = {
        "log.dirs": [str(d) for d in tier.settings.log_dirs],
        "broker.id": tier.settings.broker_id,
        "metadata.url": url,
        "remote.url": remote,
    }
    if endpoint is not None:
        values["s3.endpoint.url"] = endpoint
    path.write_text(yaml.safe_dump(values))
    return path


def _cli(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args = ["spark", "rebuild-metadata", "--config", str(config), "--quiet", "--json", "--delete-orphans"]
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_spark_keeps_damaged_sets_and_deletes_incomplete_ones(
    spark: SparkSession,
    healthy: Tier,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage, spec, keys = _directory_store(healthy, tmp_path / "remote")
    rows = _rows(healthy)
    _empty_sidecar(tmp_path / "remote", rows[0])
    _empty_sidecar(tmp_path / "remote", rows[1])
    flip_byte(storage, rows[1])
    orphan = _other_copy(rows[2])
    _put(storage, rows[2].layout.index_key, orphan[1])
    config = _config(healthy, tmp_path / "rlm.yaml", _database(request, tmp_path / "db"), spec.remote_url)
    code, out, err = _cli(config, capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["segments"] == len(rows) - 1
    assert [p["keys"] for p in report["problems"]] == [[rows[0].layout.log_key, rows[0].layout.index_key]]
    orphans = {tuple(o["keys"]): o for o in report["orphans"]}
    assert orphans[(orphan[1],)]["deleted"]
    undescribable = orphans[(rows[1].layout.log_key, rows[1].layout.index_key)]
    assert undescribable["reason"].startswith("undescribable") and not undescribable["deleted"]
    assert "kept" in undescribable
    assert sorted(storage.list_keys()) == keys


def test_spark_fails_the_rebuild_when_the_store_refuses_and_a_rerun_rebuilds(
    spark: SparkSession,
    healthy: Tier,
    moto_s3: MotoS3,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bucket = moto_s3.new_bucket()
    storage = moto_s3.storage(bucket)
    keys = _copy(healthy, storage)
    url = _database(request, tmp_path / "db")
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        config = _config(healthy, tmp_path / "rlm.yaml", url, f"s3://{bucket}", proxy.endpoint_url)
        proxy.inject(ProxyFault.NOT_IMPLEMENTED, "HeadObject")  # refused at once, not retried
        code, _, err = _cli(config, capsys)
        assert code == 1 and "nothing was written or deleted" in err
        assert any(key in err for key in keys)
        assert sorted(storage.list_keys()) == keys
        proxy.clear()
        code, out, err = _cli(config, capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["segments"] == len(_rows(healthy)) and report["orphans"] == []
    assert sorted(storage.list_keys()) == keys
