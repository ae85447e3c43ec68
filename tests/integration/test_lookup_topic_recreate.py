"""Lookups, fetches and streams of a topic deleted and created again under the same name, on
SQLite + filesystem and PostgreSQL + S3.

The deleted topic's segments stay listed in the metadata store under the name until the copier
retires them, and another sidecar may hold the lease meanwhile. Whatever the copier did yet, the
answers are the new topic's: its offsets, its log start, its records; never the deleted topic's.
When the broker's ``partition.metadata`` cannot be read, nothing tells the two apart: reads fail,
naming the file, until it is put right.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlm.bootstrap import Runtime, build_runtime
from rlm.errors import MetadataUnavailableError
from rlm.log.logdir import PARTITION_METADATA, LogDir
from rlm.log.model import Record
from rlm.lookup.list_offsets import ErrorCode
from rlm.lookup.plans import OffsetAnswer
from rlm.lookup.topic_ids import UnreadableTopicIdError
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.stream.plan import RangeQuery
from tests.lookup_support import Backend, runtime
from tests.s3_support import MotoS3
from tests.tiering_support import WRITER_NOW_MS, SegmentPlan, set_log_start_offsets, write_scripted_log_dir

TP = TopicPartition("orders", 0)
EARLIEST = -2
LATEST_TIERED = -5


def write_topic(log_dir: Path, segments: int, *, seed: int) -> None:
    """Create topic ``orders`` (a new topic id): ``segments`` rolled segments of 10 records, the
    largest timestamp of segment ``i`` at ``WRITER_NOW_MS - 1000 + i`` (offset ``10 i + 5``)."""
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(segments)]
    write_scripted_log_dir(log_dir, {TP: plans}, seed=seed)


#: The backends of :func:`old_topic_sidecar`, for the ``params`` of its fixtures.
BACKENDS = ["sqlite-fs", pytest.param("postgres-s3", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def sidecar(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Runtime, Path]]:
    yield from old_topic_sidecar(request, tmp_path)


def old_topic_sidecar(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Runtime, Path]]:
    """A sidecar over the old topic: 5 segments tiered, its log start 20 (retention deleted two);
    the backend is ``request.param``, one of :data:`BACKENDS`."""
    log_dir = tmp_path / "logs"
    write_topic(log_dir, 5, seed=1)
    if request.param == "sqlite-fs":
        backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    else:
        s3: MotoS3 = request.getfixturevalue("moto_s3")
        backend = Backend("postgres-s3", postgres_url=request.getfixturevalue("postgres_url"), s3=s3)
    rt = runtime(backend, tmp_path, log_dir, remote_log_start_offset_from_broker=True)  # DeleteRecords
    try:
        assert [o.copied_segments for o in rt.copier.run_once()] == [5]
        set_log_start_offsets(log_dir, {TP: 20})
        assert [o.deleted_segments for o in rt.retention.run_once()] == [2]
        yield rt, log_dir
    finally:
        rt.close()


def recreate_topic(log_dir: Path) -> None:
    """``kafka-topics --delete`` then ``--create``: 3 segments of new records, from offset 0."""
    shutil.rmtree(log_dir)
    write_topic(log_dir, 3, seed=2)


def fetch_values(rt: Runtime, first: int, last: int) -> list[Record]:
    """The records of offsets ``first``..``last``, fetched one batch run at a time."""
    records: list[Record] = []
    offset = first
    while offset <= last:
        result = rt.fetcher.fetch(TP, offset, 1 << 20)
        records += [r for r in result.records if r.offset <= last]
        offset = result.next_offset
    return records


def test_before_the_copier_runs_the_answers_are_the_new_topics(sidecar: tuple[Runtime, Path]) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    local = LogDir(log_dir).partition(TP.topic, TP.partition)
    new_records = [r for s in local.rolled_segments() for h in s.headers() for r in s.read_records(h)]
    rt.lookup.invalidate()  # as the next refresh would: the store did not change, the broker did

    # The deleted topic's remote log start (20) is not the new topic's, nor its segments' offsets.
    assert rt.lookup.find(TP, EARLIEST).offset == 0
    answer = rt.lookup.find(TP, WRITER_NOW_MS - 1000)
    assert answer == OffsetAnswer(5, WRITER_NOW_MS - 1000, 0, "local")
    assert fetch_values(rt, 0, 29) == new_records[:30]


def test_after_the_copier_ran_remote_reads_return_the_new_topics_records(
    sidecar: tuple[Runtime, Path],
) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    local = LogDir(log_dir).partition(TP.topic, TP.partition)
    new_records = [r for s in local.rolled_segments() for h in s.headers() for r in s.read_records(h)]

    assert [o.copied_segments for o in rt.copier.run_once()] == [3]
    # The broker's local retention deletes the tiered segments: offsets 0..29 are remote only.
    for segment in local.rolled_segments():
        for path in segment.log_path.parent.glob(f"{segment.base_offset:020d}.*"):
            path.unlink()
    rt.lookup.invalidate()

    finished = list(rt.store.list_segments(TP, states=[SegmentState.COPY_SEGMENT_FINISHED]))
    assert [s.start_offset for s in finished] == [0, 10, 20]
    assert rt.lookup.find(TP, EARLIEST).offset == 0
    assert rt.lookup.find(TP, WRITER_NOW_MS - 999) == OffsetAnswer(15, WRITER_NOW_MS - 999, 0, "remote")
    assert fetch_values(rt, 0, 29) == new_records[:30]


def test_an_unreadable_topic_id_fails_the_reads_that_would_use_the_remote_tier(
    sidecar: tuple[Runtime, Path], caplog: pytest.LogCaptureFixture
) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    local = LogDir(log_dir).partition(TP.topic, TP.partition)
    metadata = local.path / PARTITION_METADATA
    written = metadata.read_bytes()
    metadata.write_bytes(b"version: 0\ntopic_id: not-an-id")
    rt.lookup.invalidate()

    # The store still lists the deleted topic's segments (log start 20): nothing tells them from
    # the new topic's, so no answer is given from them, through the service or ListOffsets.
    for timestamp in (EARLIEST, WRITER_NOW_MS - 1000, LATEST_TIERED):
        with pytest.raises(UnreadableTopicIdError, match=r"partition\.metadata: the topic id of orders-0"):
            rt.lookup.find(TP, timestamp)
        result = rt.list_offsets.find_one(TP, timestamp)
        assert result.error_code is ErrorCode.KAFKA_STORAGE_ERROR
        assert result.error_message is not None and str(metadata) in result.error_message
        assert "line 2" in result.error_message  # what is wrong in it
    # The log says so once, not once for each of the six reads refused.
    said = [r.getMessage() for r in caplog.records if r.name == "rlm.lookup"]
    assert len([m for m in said if "cannot be read" in m and "line 2" in m]) == 1, said

    # Put right, the file is read again at once: the answers are the new topic's.
    metadata.write_bytes(written)
    assert rt.lookup.find(TP, EARLIEST).offset == 0
    assert rt.lookup.find(TP, WRITER_NOW_MS - 1000) == OffsetAnswer(5, WRITER_NOW_MS - 1000, 0, "local")
    said = [r.getMessage() for r in caplog.records if r.name == "rlm.lookup"]
    assert said[-1] == "the topic id of orders-0 can be read again"


def break_file(path: Path, how: str) -> None:
    """Make ``partition.metadata`` unparsable (``"malformed"``) or unreadable (``"unreadable"``: a
    directory in its place, which even root cannot read as a file)."""
    if how == "malformed":
        path.write_bytes(b"version: 0\ntopic_id: not-an-id")
    else:
        path.unlink()
        path.mkdir()


def put_right(path: Path, written: bytes) -> None:
    if path.is_dir():
        path.rmdir()
    path.write_bytes(written)


@pytest.mark.parametrize(("how", "what"), [("malformed", "line 2"), ("unreadable", "Is a directory")])
def test_an_unreadable_topic_id_fails_fetches_and_streams(
    sidecar: tuple[Runtime, Path], how: str, what: str
) -> None:
    rt, log_dir = sidecar
    recreate_topic(log_dir)
    local = LogDir(log_dir).partition(TP.topic, TP.partition)
    new_records = [r for s in local.rolled_segments() for h in s.headers() for r in s.read_records(h)]
    metadata = local.path / PARTITION_METADATA
    written = metadata.read_bytes()
    rt.lookup.invalidate()
    assert fetch_values(rt, 25, 25) == new_records[25:26]  # the view of the new topic is kept

    break_file(metadata, how)
    # The store's remote log start (20) is the deleted topic's: neither a fetch below it nor one
    # of the broker's own offsets may take it for the new topic's, even with the view kept.
    expected = rf"{PARTITION_METADATA}: the topic id of orders-0 cannot be read \({what}"
    for offset in (0, 25):
        with pytest.raises(UnreadableTopicIdError, match=expected):
            rt.fetcher.fetch(TP, offset, 1 << 20)
    for query in (
        RangeQuery(TP),
        RangeQuery(TP, offset=0),
        RangeQuery(TP, from_timestamp=WRITER_NOW_MS - 1000),
    ):
        with pytest.raises(UnreadableTopicIdError, match=expected):
            rt.streams.plan(query)

    put_right(metadata, written)
    assert fetch_values(rt, 0, 29) == new_records[:30]
    plan = rt.streams.plan(RangeQuery(TP))
    assert (plan.start, plan.local_start) == (0, 0)


def test_latest_tiered_is_not_the_deleted_topics(sidecar: tuple[Runtime, Path]) -> None:
    rt, log_dir = sidecar
    # The new topic grows past the offsets the deleted one had copied (up to 49).
    shutil.rmtree(log_dir)
    write_topic(log_dir, 7, seed=2)
    rt.lookup.invalidate()

    # Nothing of the new topic is tiered yet: the deleted topic's highest copied offset is no answer.
    assert rt.lookup.find(TP, LATEST_TIERED) == OffsetAnswer.none()
    assert rt.list_offsets.find_one(TP, LATEST_TIERED).offset == -1


def drop_tiered_local_segments(log_dir: Path) -> None:
    """The broker's local retention: the rolled (tiered) segments go, the active one stays."""
    local = LogDir(log_dir).partition(TP.topic, TP.partition)
    for segment in local.rolled_segments():
        for path in segment.log_path.parent.glob(f"{segment.base_offset:020d}.*"):
            path.unlink()


def test_a_lookup_process_that_listed_the_deleted_topics_segments_searches_the_new_topics(
    tmp_path: Path, sqlite_template: Path
) -> None:
    # Two processes over one store: the copier's sidecar and another that only answers lookups
    # (it hears of the copier's changes only through the store).
    log_dir = tmp_path / "logs"
    write_topic(log_dir, 3, seed=1)
    backend = Backend("sqlite-fs", sqlite_template=sqlite_template)
    settings = backend.settings(tmp_path, log_dir)
    tiering = build_runtime(settings, registry=CollectorRegistry(), storage=backend.storage(tmp_path))
    other = settings.replace(remote_log_index_cache_dir=tmp_path / "other-index-cache")
    lookups = build_runtime(other, registry=CollectorRegistry(), storage=backend.storage(tmp_path))
    try:
        assert [o.copied_segments for o in tiering.copier.run_once()] == [3]
        drop_tiered_local_segments(log_dir)
        answer = OffsetAnswer(15, WRITER_NOW_MS - 999, 0, "remote")
        assert lookups.lookup.find(TP, WRITER_NOW_MS - 999) == answer  # its segments listed

        # Deleted and created again with the same records: the same remote size and offsets.
        shutil.rmtree(log_dir)
        write_topic(log_dir, 3, seed=1)
        assert [o.copied_segments for o in tiering.copier.run_once()] == [3]
        drop_tiered_local_segments(log_dir)
        lookups.lookup.views.invalidate(TP)  # the view's time to live passed

        assert lookups.lookup.find(TP, WRITER_NOW_MS - 999) == answer
    finally:
        lookups.close()
        tiering.close()


def test_a_view_of_the_deleted_topic_is_not_used_for_the_new_one_while_the_store_is_down(
    sidecar: tuple[Runtime, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, log_dir = sidecar
    rt.lookup.invalidate()
    assert rt.lookup.find(TP, EARLIEST).offset == 20  # the deleted topic's view, local base 0
    recreate_topic(log_dir)  # its first local segment has base offset 0 too

    def down(partitions: object) -> object:
        raise MetadataUnavailableError("the metadata store does not answer")

    monkeypatch.setattr(rt.store, "remote_tier_summaries", down)
    # Within the view's time to live, then as the fallback while the store does not answer.
    assert rt.lookup.find(TP, EARLIEST).offset == 0
    monkeypatch.setattr(rt.lookup.views, "ttl_s", 0.0)
    assert rt.lookup.find(TP, EARLIEST).offset == 0
