"""The copier never moves past an offset it did not copy, and never tiers what ``verify`` rejects.

A rolled segment that cannot be copied (truncated, empty, swapped with another, a huge length, an
offset going backwards, a bad CRC) stops its partition's copying there: an error naming the file
and the position, ``rlm_copy_blocked`` and the copy lag up, the other partitions going on. Every
pass tries again; once the file is repaired it is copied and the remote tier is whole. A damaged
local index changes nothing: offsets come from the ``.log`` bytes and the uploaded indexes are
rebuilt from them. Offsets the broker deleted before they were tiered are recorded as skipped, not
jumped over in silence.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.grpc_messages import partitions_response
from api.rest.app import create_app
from rlm.cli import main
from rlm.errors import ChecksumMismatchError, SegmentNotCopiedError
from rlm.log.index import OffsetIndex
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.produce import ProduceSpec, produce
from rlm.log.segment import Segment, initial_tracker, rebuild_segment_indexes
from rlm.log.verify import verify_partition
from rlm.metastore.model import IndexType, SegmentState, SkipKind, TopicPartition
from rlm.tiering.overview import Overview
from tests.clock import FakeClock
from tests.tiering_support import (
    Backend,
    Tiering,
    assert_invariants,
    make_backend,
    set_high_watermarks,
    set_log_start_offsets,
)

SPEC = ProduceSpec(
    topics=2,
    partitions=1,
    records=1500,
    segment_bytes=16 * 1024,
    max_batch_records=30,
    legacy_batches=8,
    seed=11,
)
TP = TopicPartition("orders", 0)
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
LABELS = {"topic": "orders", "partition": "0"}
TieringFactory = Callable[..., Tiering]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("copier-safety") / "logs"
    produce(root, SPEC)
    assert verify_partition(LogDir(root).partition("orders", 0)) == []
    return root


@pytest.fixture
def log_dir(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "logs")
    return tmp_path / "logs"


@pytest.fixture
def sqlite_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend("sqlite-fs", request, tmp_path)


def _orders(log_dir: Path) -> PartitionDir:
    return LogDir(log_dir).partition("orders", 0)


def _ranges(tiering: Tiering, tp: TopicPartition = TP) -> list[tuple[int, int]]:
    return [(r.start_offset, r.end_offset) for r in tiering.finished(tp)]


def _nominal(partition: PartitionDir) -> list[tuple[int, int]]:
    """Each rolled segment's range by the names: its base offset to the next one's, exclusive."""
    segments = partition.segments()
    return [(s.base_offset, n.base_offset - 1) for s, n in itertools.pairwise(segments)]


def _patch(path: Path, position: int, data: bytes) -> None:
    content = bytearray(path.read_bytes())
    content[position : position + len(data)] = data
    path.write_bytes(bytes(content))


# -- damages of the .log ------------------------------------------------------------------------


def _truncate_mid_batch(segment: Segment) -> int:
    last = list(segment.headers())[-1]
    with segment.log_path.open("r+b") as out:
        out.truncate(last.position + last.size // 2)
    return last.position


def _truncate_at_a_batch(segment: Segment) -> int:
    headers = list(segment.headers())
    with segment.log_path.open("r+b") as out:
        out.truncate(headers[-3].position)
    return headers[-3].position  # whole batches, but the last offsets are gone


def _empty(segment: Segment) -> int:
    segment.log_path.write_bytes(b"")
    return 0


def _swapped(segment: Segment) -> int:
    following = Segment(segment.directory, _next_base(segment))
    mine, theirs = segment.log_path.read_bytes(), following.log_path.read_bytes()
    segment.log_path.write_bytes(theirs)
    following.log_path.write_bytes(mine)
    return 0


def _huge_length(segment: Segment) -> int:
    # The batch the last offset-index entry points at: the copier once took the segment's end from it.
    entry = OffsetIndex.load(segment.index_path, segment.base_offset).last_entry
    _patch(segment.log_path, entry.position + 8, struct.pack(">i", 2**31 - 1))
    return entry.position


def _backwards(segment: Segment) -> int:
    headers = [h for h in segment.headers() if h.magic == 2]
    batch = headers[len(headers) // 2]
    _patch(segment.log_path, batch.position, struct.pack(">q", batch.base_offset - 4))  # not in the CRC
    return batch.position


def _bad_crc(segment: Segment) -> int:
    batch = list(segment.headers())[1]
    _patch(segment.log_path, batch.position + batch.size - 3, b"\x5a")
    return batch.position


def _next_base(segment: Segment) -> int:
    bases = sorted(int(p.stem) for p in segment.directory.glob("*.log"))
    return bases[bases.index(segment.base_offset) + 1]


LOG_DAMAGES: dict[str, Callable[[Segment], int]] = {
    "truncated mid-batch": _truncate_mid_batch,
    "truncated at a batch boundary": _truncate_at_a_batch,
    "empty": _empty,
    "swapped with the next segment": _swapped,
    "huge length in the last indexed batch": _huge_length,
    "offsets going backwards": _backwards,
    "bad CRC": _bad_crc,
}


@pytest.mark.parametrize("damage", list(LOG_DAMAGES))
def test_a_segment_that_cannot_be_copied_stops_copying_there_until_repaired(
    damage: str,
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    partition = _orders(log_dir)
    nominal = _nominal(partition)
    broken = partition.segments()[2]
    original = {p: p.read_bytes() for p in log_dir.glob("orders-0/*.log")}
    # Only the first five segments are replicated yet: the lag grows as the high watermark moves.
    set_high_watermarks(log_dir, {TP: nominal[4][1] + 1})
    position = LOG_DAMAGES[damage](broken)
    tiering = tiering_factory(sqlite_fs, log_dir)

    with caplog.at_level(logging.ERROR, logger="rlm.copier"):
        outcomes = {o.topic_partition: o for o in tiering.copier().run_once()}

    outcome = outcomes[TP]
    assert isinstance(outcome.error, SegmentNotCopiedError)
    assert str(broken.log_path) in str(outcome.error) and f"position {position}" in str(outcome.error)
    assert f"rlm copy skip orders 0 --from-offset {nominal[2][0]} --to-offset {nominal[2][1]}" in str(
        outcome.error
    )
    assert str(broken.log_path) in caplog.text
    assert _ranges(tiering) == nominal[:2]  # contiguous from the start, nothing past the damage
    assert [r.state for r in tiering.segments(TP)] == [SegmentState.COPY_SEGMENT_FINISHED] * 2
    assert outcome.lag_segments == 3
    assert tiering.registry.get_sample_value("rlm_copy_lag_segments", LABELS) == 3
    assert tiering.registry.get_sample_value("rlm_copy_blocked", LABELS) == 1
    assert tiering.registry.get_sample_value("rlm_copy_errors_total", LABELS) == 1
    clicks = outcomes[TopicPartition("clicks", 0)]
    assert clicks.error is None and clicks.copied_segments > 0  # the other partition carries on

    set_high_watermarks(log_dir, {TP: nominal[-1][1] + 1})
    again = tiering.copier().run_once([partition])[0]
    assert isinstance(again.error, SegmentNotCopiedError)
    assert again.lag_segments == len(nominal) - 2  # the lag keeps growing while it is stuck
    assert tiering.registry.get_sample_value("rlm_copy_errors_total", LABELS) == 2
    assert _ranges(tiering) == nominal[:2]

    for path, data in original.items():
        path.write_bytes(data)
    repaired = tiering.copier().run_once([partition])[0]
    assert repaired.error is None and repaired.lag_segments == 0
    assert _ranges(tiering) == nominal
    assert tiering.registry.get_sample_value("rlm_copy_blocked", LABELS) == 0
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered={TopicPartition("clicks", 0)})


# -- damages of the local index -----------------------------------------------------------------


def _entry_past_the_log(segment: Segment) -> None:
    index = segment.index_path.read_bytes()
    segment.index_path.write_bytes(index[:-4] + struct.pack(">i", 30000))


def _entry_mid_batch(segment: Segment) -> None:
    index = segment.index_path.read_bytes()
    (position,) = struct.unpack(">i", index[-4:])
    segment.index_path.write_bytes(index[:-4] + struct.pack(">i", position + 7))


def _entry_wrong_offset(segment: Segment) -> None:
    index = bytearray(segment.index_path.read_bytes())
    (relative,) = struct.unpack(">i", index[-8:-4])
    index[-8:-4] = struct.pack(">i", relative + 40)
    segment.index_path.write_bytes(bytes(index))


INDEX_DAMAGES: dict[str, Callable[[Segment], object]] = {
    "last entry past the end of the log": _entry_past_the_log,
    "last entry inside a batch": _entry_mid_batch,
    "last entry naming another offset": _entry_wrong_offset,
    "partial entry": lambda s: s.index_path.write_bytes(s.index_path.read_bytes() + b"\x01\x02\x03"),
    "missing": lambda s: s.index_path.unlink(),
    "time index garbage": lambda s: s.time_index_path.write_bytes(b"\x7f" * 36),
}


@pytest.mark.parametrize("damage", list(INDEX_DAMAGES))
def test_a_damaged_local_index_changes_nothing_the_copier_tiers(
    damage: str,
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _orders(log_dir)
    damaged = partition.segments()[1]
    rebuilt = rebuild_segment_indexes(damaged, tracker=initial_tracker(damaged))
    INDEX_DAMAGES[damage](damaged)
    tiering = tiering_factory(sqlite_fs, log_dir)

    (outcome,) = tiering.copier().run_once([partition])

    assert outcome.error is None
    assert _ranges(tiering) == _nominal(partition)
    (row,) = [r for r in tiering.finished(TP) if r.start_offset == damaged.base_offset]
    for kind, expected in (
        (IndexType.OFFSET, rebuilt.offset_index),
        (IndexType.TIMESTAMP, rebuilt.time_index),
    ):
        byte_range = row.layout.index_range(kind)
        assert byte_range is not None
        uploaded = tiering.storage.read_range(row.layout.index_key, byte_range.position, byte_range.size)
        assert uploaded == expected.to_bytes()
    assert row.max_timestamp_ms == rebuilt.max_timestamp
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered={TopicPartition("clicks", 0)})


# -- what the local log no longer holds ---------------------------------------------------------


def _delete_segment(segment: Segment) -> None:
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        segment.path(suffix).unlink(missing_ok=True)


@pytest.mark.parametrize("log_start_moved", [False, True], ids=["local-only", "log-start-moved"])
def test_offsets_deleted_before_they_were_tiered_are_recorded_not_jumped(
    log_start_moved: bool,
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    partition = _orders(log_dir)
    nominal = _nominal(partition)
    segments = partition.segments()
    set_high_watermarks(log_dir, {TP: nominal[1][1] + 1})
    tiering = tiering_factory(sqlite_fs, log_dir)
    tiering.copier().run_once([partition])
    assert _ranges(tiering) == nominal[:2]
    # rlm was away; the broker's retention deleted segments 0-3, two of them never tiered.
    for segment in segments[:4]:
        _delete_segment(segment)
    if log_start_moved:
        set_log_start_offsets(log_dir, {TP: segments[4].base_offset})
    set_high_watermarks(log_dir, {TP: nominal[-1][1] + 1})

    with caplog.at_level(logging.WARNING, logger="rlm.copier"):
        (outcome,) = tiering.copier().run_once([_orders(log_dir)])

    assert outcome.error is None
    assert _ranges(tiering) == nominal[:2] + nominal[4:]
    (skipped,) = tiering.store.list_skipped_ranges(TP)
    assert (skipped.start_offset, skipped.end_offset) == (nominal[2][0], nominal[3][1])
    assert skipped.kind is SkipKind.NOT_IN_LOCAL_LOG
    words = "below the broker's log start offset" if log_start_moved else "not in the local log"
    assert words in skipped.reason
    assert f"offsets {nominal[2][0]}..{nominal[3][1]} were never tiered" in caplog.text
    assert tiering.registry.get_sample_value("rlm_copy_gaps_total", LABELS) == 1
    overview = Overview(tiering.store, (LogDir(log_dir),)).partitions("orders")
    assert overview[0].skipped_ranges == (skipped,) and overview[0].copy_lag_segments == 0
    # Nothing more to record on the next pass.
    tiering.copier().run_once([_orders(log_dir)])
    assert tiering.store.list_skipped_ranges(TP) == [skipped]


# -- an operator skips what cannot be repaired --------------------------------------------------


def test_an_operator_skips_a_segment_that_cannot_be_repaired(
    sqlite_fs: Backend,
    log_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    partition = _orders(log_dir)
    nominal = _nominal(partition)
    _truncate_mid_batch(partition.segments()[2])
    settings = ["--log-dirs", str(log_dir), "--metadata-url", sqlite_fs.metadata_url]
    copy = ["copy", "--once", "--quiet", *settings, "--remote-url", sqlite_fs.remote_url]

    assert main(copy) == 1
    assert "copying stops at segment" in capsys.readouterr().err
    start, end = nominal[2]
    skip = ["copy", "skip", "orders", "0", "--from-offset", str(start), "--to-offset", str(end)]
    assert main([*skip, "--reason", "disk error, no replica has it", *settings]) == 0
    assert f"orders-0: offsets {start}..{end} skipped" in capsys.readouterr().out
    # A range overlapping what is skipped (or copied) now is refused, saying why.
    first_start, first_end = nominal[0]
    again = ["copy", "skip", "orders", "0", "--from-offset", str(first_start), "--to-offset", str(first_end)]
    assert main([*again, "--reason", "x", *settings]) == 1
    assert "offsets up to" in capsys.readouterr().err
    # So is a part of a segment: the copier would tier it all the same.
    part = ["copy", "skip", "orders", "0", "--from-offset", str(start + 1), "--to-offset", str(end)]
    assert main([*part, "--reason", "x", *settings]) == 1
    assert "a skip covers whole segments" in capsys.readouterr().err
    part = ["copy", "skip", "orders", "0", "--from-offset", str(start), "--to-offset", str(end - 1)]
    assert main([*part, "--reason", "x", *settings]) == 1
    assert f"segments of {partition.path} start at {start}, {end + 1}" in capsys.readouterr().err
    assert main(copy) == 0
    capsys.readouterr()

    settings_object = sqlite_fs.settings(
        log_dir, auth_enabled=False, remote_log_index_cache_dir=tmp_path / "cache"
    )
    store = sqlite_fs.open_store(FakeClock())
    try:
        finished = [(r.start_offset, r.end_offset) for r in store.list_segments(TP, states=[FINISHED])]
        assert finished == nominal[:2] + nominal[3:]
    finally:
        store.close()
    assert main(["copy", "skipped", *settings]) == 0
    assert f"orders-0: offsets {start}..{end} skipped" in capsys.readouterr().out
    with TestClient(create_app(settings_object)) as client:
        topics = client.get("/v1/topics", params={"topic": "orders"}).json()
        (skipped,) = topics["topics"][0]["partitions"][0]["skipped_ranges"]
        assert skipped["start_offset"] == start and skipped["end_offset"] == end
        assert skipped["kind"] == "OPERATOR" and skipped["reason"] == "disk error, no replica has it"
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        message = partitions_response(runtime.overview.partitions("orders"))
    assert [(r.start_offset, r.end_offset, r.kind) for r in message.partitions[0].skipped_ranges] == [
        (start, end, "OPERATOR")
    ]


def test_a_segment_changed_after_its_check_is_not_tiered(
    backend: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    # The upload must send the bytes that were checked: a change in between (here, a flipped
    # byte once the copy started) fails the copy, which is rolled back and tried again.
    partition = _orders(log_dir)
    target = partition.segments()[1]
    original = target.log_path.read_bytes()
    seen = []

    def change_the_file(step: str) -> None:
        seen.append(step)
        if step == "copy_started" and seen.count("copy_started") == 2:
            _patch(target.log_path, len(original) // 2, bytes([original[len(original) // 2] ^ 0xFF]))

    tiering = tiering_factory(backend, log_dir)
    (outcome,) = tiering.copier(step=change_the_file).run_once([partition])

    assert isinstance(outcome.error, ChecksumMismatchError)
    assert _ranges(tiering) == _nominal(partition)[:1]
    assert not any(r.state is SegmentState.COPY_SEGMENT_STARTED for r in tiering.segments(TP))
    target.log_path.write_bytes(original)
    (again,) = tiering.copier().run_once([partition])
    assert again.error is None and _ranges(tiering) == _nominal(partition)
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered={TopicPartition("clicks", 0)})
