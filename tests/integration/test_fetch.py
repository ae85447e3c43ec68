"""Reading records from an offset across both tiers (``RecordFetcher``), against the appended records.

One partition of about ten segments: every codec, transactions with commit and abort markers,
two leader changes, out-of-order CreateTime, a high watermark below the log end. It is tiered and
the older half of its segments is deleted locally, so offsets below the first local segment exist
only remotely, later ones on both tiers. The raw bytes a fetch returns are parsed with
kafka-python's ``MemoryRecords`` as a consumer would; decoded records must equal what was appended.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import NotFoundError, OffsetOutOfRangeError
from rlm.log.logdir import LogDir
from rlm.log.model import Codec
from rlm.lookup.fetch import FetchResult
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import TopicPartition
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    PartitionPlan,
    Tiered,
    parse_with_kafka_python,
    runtime,
    tier_partition,
    write_partition,
)
from tests.s3_support import MotoS3

CODECS = tuple(Codec)
PLAN = PartitionPlan(
    batches=tuple(
        BatchPlan(
            timestamps=tuple((i * 37 + j * 911) % 4000 for j in range(1 + i % 5)),
            codec=CODECS[i % len(CODECS)],
            kind="commit" if i % 7 == 3 else "abort" if i % 7 == 5 else "plain",
            new_epoch=i in (12, 25),
            value_bytes=60 + (i * 13) % 90,
        )
        for i in range(36)
    ),
    segment_bytes=1500,
    index_interval_bytes=200,
    high_watermark_at=0.9,
    tiering="remote",
    local_deleted=0.5,
)


#: The backend pairs a module-scoped ``tiered`` fixture runs on.
BACKEND_PARAMS = ["sqlite-fs", pytest.param("postgres-s3", marks=pytest.mark.postgres)]


def tiered_partition(request: pytest.FixtureRequest, root: Path, **settings: object) -> Iterator[Tiered]:
    """:data:`PLAN` written under ``root`` and tiered on the backend pair ``request.param`` names,
    served by a runtime with ``settings``; closed after."""
    log_dir = root / "logs"
    truth = write_partition(log_dir, PLAN)
    if request.param == "sqlite-fs":
        backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    else:
        s3: MotoS3 = request.getfixturevalue("moto_s3")
        backend = Backend("postgres-s3", postgres_url=request.getfixturevalue("postgres_url"), s3=s3)
    rt = runtime(backend, root, log_dir, wrap=None, **settings)
    try:
        yield tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, PLAN)
    finally:
        rt.close()


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    yield from tiered_partition(request, tmp_path_factory.mktemp("fetch"))


def _fetch(tiered: Tiered, offset: int, max_bytes: int = 1 << 20) -> tuple[FetchResult, FetchStats]:
    stats = FetchStats()
    return tiered.runtime.fetcher.fetch(tiered.tp, offset, max_bytes, stats=stats), stats


def assert_consistent(tiered: Tiered, offset: int, result: FetchResult) -> None:
    """Every batch is whole, as kafka-python reads the raw bytes, and a data batch: control batches
    (transaction markers) are left out; its records are the appended ones from ``offset`` on; the
    data records from ``offset`` on come with no gap; nothing at or past the high watermark is
    returned; ``next_offset`` is past every batch read, control batches included."""
    truth = tiered.truth
    appended = {r.record.offset: r for r in truth.records}
    parsed = parse_with_kafka_python(result.raw)
    assert [(p.base_offset, p.last_offset) for p in parsed] == [
        (b.header.base_offset, b.header.last_offset) for b in result.batches
    ]
    for theirs, ours in zip(parsed, result.batches, strict=True):
        first, last = ours.header.base_offset, ours.header.last_offset
        assert not theirs.control and not ours.header.is_control
        assert theirs.records == [appended[o].record for o in range(first, last + 1)]
        assert ours.records == [appended[o].record for o in range(max(first, offset), last + 1)]
        assert (theirs.leader_epoch, ours.header.leader_epoch) == (appended[first].leader_epoch,) * 2
        assert last < truth.high_watermark
    assert result.next_offset > offset, "a fetch below the high watermark reads at least one batch"
    assert result.next_offset <= truth.high_watermark
    if result.batches:
        assert result.batches[0].header.base_offset <= result.records[0].offset
    in_batches = [
        r for r in truth.records if offset <= r.record.offset < result.next_offset and not r.control
    ]
    assert result.records == [r.record for r in in_batches]
    expected = truth.data_records(offset)
    assert result.records == expected[: len(result.records)]


def test_local_fetch_returns_the_appended_records(tiered: Tiered) -> None:
    offset = tiered.truth.local_start_offset + 3
    result, stats = _fetch(tiered, offset)
    assert result.tier == "local" and stats.gets == 0
    assert_consistent(tiered, offset, result)
    assert result.next_offset == tiered.truth.high_watermark  # 1 MiB holds every local batch


def test_remote_fetch_reads_only_the_segment_holding_the_offset(tiered: Tiered) -> None:
    truth = tiered.truth
    assert truth.local_start_offset > 0, "the fixture keeps only the newer segments locally"
    offset = truth.local_start_offset // 2
    result, stats = _fetch(tiered, offset)
    assert result.tier == "remote"
    assert 1 <= stats.gets <= 2  # the offset index (cold cache) and one ranged read of the .log
    segment = tiered.runtime.store.segment_for_offset(tiered.tp, offset)
    assert segment is not None
    assert stats.bytes < segment.size_bytes + 4096
    assert_consistent(tiered, offset, result)
    assert result.next_offset == segment.end_offset + 1  # no batch past the segment's end


def test_walking_from_the_log_start_to_the_high_watermark_reads_every_record_once(tiered: Tiered) -> None:
    truth = tiered.truth
    offset, records, tiers = truth.log_start_offset, [], []
    while offset < truth.high_watermark:
        result, _ = _fetch(tiered, offset, max_bytes=400)
        assert_consistent(tiered, offset, result)
        records.extend(result.records)
        tiers.append(result.tier)
        offset = result.next_offset
    assert records == truth.data_records(truth.log_start_offset)
    first_local = tiers.index("local")
    assert (
        first_local > 0 and set(tiers[:first_local]) == {"remote"} and set(tiers[first_local:]) == {"local"}
    )


@pytest.mark.parametrize("max_bytes", [1, 150, 600, 2000, 1 << 20])
@pytest.mark.parametrize("where", ["remote", "local"])
def test_max_bytes_is_honoured_after_the_first_batch(tiered: Tiered, max_bytes: int, where: str) -> None:
    truth = tiered.truth
    offset = truth.log_start_offset + 1 if where == "remote" else truth.local_start_offset + 1
    result, _ = _fetch(tiered, offset, max_bytes)
    assert result.tier == where
    assert_consistent(tiered, offset, result)
    sizes = [len(b.data) for b in result.batches]
    assert sizes == [b.header.size for b in result.batches]
    assert len(sizes) == 1 or sum(sizes) <= max_bytes
    following = [b for b in truth.batches if b[0] >= result.next_offset and b[1] < truth.high_watermark]
    if following and where == "local":
        # It stopped because the next batch would not fit, not earlier.
        next_size = len(_fetch(tiered, following[0][0])[0].batches[0].data)
        assert sum(sizes) + next_size > max_bytes


@settings(max_examples=80)
@given(start=st.integers(0, 10_000), max_bytes=st.one_of(st.integers(1, 3000), st.just(1 << 20)))
def test_any_offset_and_bound_fetch_whole_batches_of_the_appended_records(
    tiered: Tiered, start: int, max_bytes: int
) -> None:
    """A fetch from any offset below the high watermark, with any byte bound: whole data batches of
    the appended records, from the offset on without a gap, within the bound after the first."""
    truth = tiered.truth
    offset = truth.log_start_offset + start % (truth.high_watermark - truth.log_start_offset)
    result, _ = _fetch(tiered, offset, max_bytes)
    assert result.tier == ("remote" if offset < truth.local_start_offset else "local")
    assert_consistent(tiered, offset, result)
    sizes = [len(b.data) for b in result.batches]
    assert len(sizes) == 1 or sum(sizes) <= max_bytes


def test_offsets_outside_the_log_are_out_of_range(tiered: Tiered) -> None:
    truth = tiered.truth
    with pytest.raises(OffsetOutOfRangeError):
        _fetch(tiered, truth.high_watermark + 1)
    empty, _ = _fetch(tiered, truth.high_watermark)
    assert empty.batches == [] and empty.high_watermark == truth.high_watermark and empty.next_offset == -1
    with pytest.raises(NotFoundError):
        tiered.runtime.fetcher.fetch(TopicPartition(TOPIC, 9), 0, 1000)
    with pytest.raises(ValueError):
        _fetch(tiered, truth.local_start_offset, max_bytes=0)


def test_offsets_below_the_log_start_are_out_of_range(tmp_path: Path, sqlite_template: Path) -> None:
    plan = PartitionPlan(
        PLAN.batches, segment_bytes=1500, tiering="remote", log_start_at=0.3, log_start_inside_batch=True
    )
    truth = write_partition(tmp_path / "logs", plan)
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, tmp_path / "logs")
    try:
        tiered = tier_partition(rt, LogDir(tmp_path / "logs").partition(TOPIC, 0), truth, plan)
        start = truth.log_start_offset
        with pytest.raises(OffsetOutOfRangeError):
            _fetch(tiered, start - 1)
        assert truth.batch_holding(start)[0] < start, "DeleteRecords moved the log start into a batch"
        result, stats = _fetch(tiered, start)
        assert result.tier == "remote" and stats.gets >= 1
        assert_consistent(tiered, start, result)
        # The whole batch comes back, as Kafka returns it; its records below the log start do not.
        assert result.batches[0].header.base_offset < start == result.records[0].offset
    finally:
        rt.close()
