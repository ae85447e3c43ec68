"""Remote copies of a log that an unclean leader election truncated, on SQLite + filesystem and
PostgreSQL + S3.

The old leader led epoch 5 from offset 20 and its copier tiered offsets 0..39. The new leader,
elected from outside the in-sync replicas, never had epoch 5: its log holds the same records up to
19, then its own, written in epoch 6. Kafka truncates every replica to the new leader's log; the
remote tier must not keep answering the old leader's records for offsets 20..39, nor leave the new
leader's untiered below the highest copied offset.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlm.errors import CorruptDataError, SegmentNotCopiedError, StorageUnavailableError
from rlm.log.batches import decode_batch
from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import PARTITION_METADATA, LogDir
from rlm.log.model import ControlType, Record
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, RemoteSegment, SegmentState
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.protocol import STREAM_PIECE_BYTES
from rlm.storage.range_source import read_index
from tests.retired_support import FailingMarks, SlowMarks, rebuilt_from_objects, retirements
from tests.tiering_support import (
    WRITER_NOW_MS,
    Backend,
    Tiering,
    assert_invariants,
    set_log_start_offsets,
)
from tests.unclean_election_support import (
    TP,
    drop_local_segments_below,
    elected_past_the_cut,
    fetched,
    new_leaders_from,
    partition_path,
    spans,
    write_log,
)

LABELS = {"topic": "orders", "partition": "0"}
TieringFactory = Callable[..., Tiering]


class CountedReads(DelegatingStorage):
    """Counts the streamed reads of whole objects."""

    streamed = 0

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = STREAM_PIECE_BYTES
    ) -> Iterator[bytes]:
        self.streamed += 1
        return self.inner.stream_range(key, start, length, piece_bytes=piece_bytes)


def elected_with_segments_from_25(
    tiering: Tiering, log_dir: Path, caplog: pytest.LogCaptureFixture, *new_leader: tuple[int, ...]
) -> list[tuple[object, int]]:
    """The new leader's log written, its segments below 25 deleted (local retention: 20..24 are
    then only in the old copy), and two copier passes; their errors and copies."""
    write_log(log_dir, *new_leader)
    drop_local_segments_below(log_dir, 25)
    with caplog.at_level(logging.WARNING, logger="rlm.copier"):
        outcomes = [tiering.copier().run_once()[0] for _ in range(2)]
    return [(o.error, o.copied_segments) for o in outcomes]


def records_of(data: bytes) -> list[Record]:
    return [record for header in iter_headers(BytesSource(data)) for record in decode_batch(data, header)]


OLD_LEADER = (4, 4, 5, 5)
NEW_LEADER = (4, 4, 6, 6, 6)


@pytest.fixture
def tiered(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> tuple[Tiering, Path]:
    """The old leader's offsets 0..39 tiered, then its log replaced by the new leader's."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, *OLD_LEADER)
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 4
    write_log(log_dir, *NEW_LEADER)
    return tiering, log_dir


def test_the_old_leaders_copies_are_replaced_by_the_new_leaders_log(tiered: tuple[Tiering, Path]) -> None:
    tiering, log_dir = tiered
    old = {s.segment_id for s in tiering.finished(TP) if s.start_offset >= 20}

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 3)
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]
    # The pass that retired the old leader's copies deleted their objects.
    assert {s.segment_id for s in tiering.segments(TP, SegmentState.DELETE_SEGMENT_FINISHED)} == old
    assert outcome.cleaned_segments == 2
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 2
    found = tiering.store.segment_for_offset(TP, 25)
    assert found is not None and found.segment_id not in old
    # Every finished copy is byte for byte the new leader's segment, and nothing else is left.
    assert_invariants(tiering.store, tiering.storage, [log_dir])

    # The old leader's replica, back before it truncates its log, replaces nothing.
    write_log(log_dir, *OLD_LEADER)
    assert tiering.copier().run_once()[0].error is None
    assert spans(tiering)[2:] == [(20, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 2


NEW_LEADERS_SPANS = [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]


def retired_marks(tiering: Tiering) -> dict[int, bool]:
    """Per finished copy's start offset, whether its index object is marked retired."""
    return {start: mark is not None for start, mark in retirements(tiering, TP).items()}


def crash_at_marks(step: str) -> None:
    if step == "copies_marked":
        raise OSError("the sidecar died")


def test_a_copier_that_dies_after_marking_the_old_leaders_copies_retired_leaves_them_out_of_a_rebuild(
    tiered: tuple[Tiering, Path],
    tiering_factory: TieringFactory,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copies' objects are marked retired before the store retires them: a store rebuilt from
    the objects while the copier is down never makes them rows again, whatever the broker's log
    holds by then, so their offsets never answer the old leader's records."""
    tiering, log_dir = tiered
    before = spans(tiering)

    assert isinstance(tiering.copier(step=crash_at_marks).run_once()[0].error, OSError)
    assert spans(tiering) == before  # marked only: the store still reads them
    assert retired_marks(tiering) == {0: False, 10: False, 20: True, 30: True}

    rebuilt, report = rebuilt_from_objects(
        tiering, tiering_factory, log_dir, sqlite_template, tmp_path / "rebuilt", monkeypatch
    )
    assert spans(rebuilt) == before[:2]
    assert sorted(o.reason.split(": ", 1)[1] for o in report.orphans) == [
        f"segment {s.segment_id} was retired at {tiering.clock()} (epoch ms): the broker's log "
        "diverged from its records (an unclean leader election)"
        for s in sorted(tiering.finished(TP), key=lambda s: str(s.segment_id))
        if s.start_offset >= 20
    ]
    assert all(o.deletable and not o.deleted for o in report.orphans)
    assert fetched(rebuilt, log_dir, [25])[25][0] == "local"  # the new leader's record

    # The copier's own store: the next pass retires them (marking them again) and goes on.
    outcome = tiering.copier().run_once()[0]
    assert (outcome.error, outcome.cleaned_segments, outcome.copied_segments) == (None, 2, 3)
    assert spans(tiering) == NEW_LEADERS_SPANS
    assert not any(retired_marks(tiering).values())
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    # The rebuilt store's copier tiers the new leader's log from 20 as well.
    assert rebuilt.copier().run_once()[0].copied_segments == 3
    assert spans(rebuilt) == NEW_LEADERS_SPANS


def test_a_trimmed_copy_is_marked_retired_only_once_its_replacement_finished(
    backend: Backend,
    tiering_factory: TieringFactory,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The diverged copy of 20..39 holds 20..24, which the broker deleted. A pass that fails after
    marking the copies from the cut on, before its trim's swap, deletes the trim's copy. A store
    rebuilt then still reads 20..24 from the diverged copy: it was not marked."""
    tiering, log_dir = elected_past_the_cut(backend, tiering_factory, tmp_path)
    before = fetched(tiering, log_dir, [20, 24])
    assert {o: tier for o, (tier, _, _) in before.items()} == {20: "remote", 24: "remote"}
    [past_the_cut] = [s.layout for s in tiering.finished(TP) if s.start_offset == 40]

    assert isinstance(tiering.copier(step=crash_at_marks).run_once()[0].error, OSError)
    assert retired_marks(tiering) == {0: False, 10: False, 20: False, 40: True}
    # The pass that failed deleted the trim's copy (a sidecar killed there leaves it to the next).
    assert not tiering.segments(TP, SegmentState.COPY_SEGMENT_STARTED)

    rebuilt, report = rebuilt_from_objects(
        tiering, tiering_factory, log_dir, sqlite_template, tmp_path / "rebuilt", monkeypatch
    )
    retired = [o.keys for o in report.orphans if "was retired" in o.reason]
    assert retired == [(past_the_cut.log_key, past_the_cut.index_key)]
    assert fetched(rebuilt, log_dir, [20, 24]) == before
    assert (20, 39, (5,)) in spans(rebuilt)

    # The next pass trims it, and deletes it with the copies from the cut on.
    assert tiering.copier().run_once()[0].error is None
    assert not tiering.segments(TP, SegmentState.DELETE_SEGMENT_STARTED)
    assert spans(tiering)[2] == (20, 29, (5,))


def test_copies_whose_objects_cannot_be_marked_retired_are_not_retired(tiered: tuple[Tiering, Path]) -> None:
    tiering, _ = tiered
    before = spans(tiering)
    store = tiering.storage
    tiering.storage = FailingMarks(store)

    outcome = tiering.copier().run_once()[0]

    assert isinstance(outcome.error, StorageUnavailableError) and "throttled" in str(outcome.error)
    assert spans(tiering) == before
    assert not tiering.segments(TP, SegmentState.DELETE_SEGMENT_STARTED)
    tiering.storage = store
    assert tiering.copier().run_once()[0].copied_segments == 3
    assert spans(tiering) == NEW_LEADERS_SPANS


def test_marking_the_old_leaders_copies_keeps_the_lease_by_renewing_it_between_marks(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, _ = tiered
    slow = SlowMarks(tiering, TP)
    tiering.storage = slow

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 3)
    assert spans(tiering) == NEW_LEADERS_SPANS
    assert slow.refused == [True, True]


def test_a_copy_whose_offsets_the_brokers_files_still_hold_is_replaced_below_its_log_start(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    # DeleteRecords: the log starts at 25, inside its segment of 20..29, which the broker keeps.
    set_log_start_offsets(log_dir, {TP: 25})
    assert LogDir(log_dir).partition(TP.topic, TP.partition).log_start_offset() == 25

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 3)
    assert spans(tiering)[2:] == [(20, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 0


def test_a_copy_holding_offsets_the_brokers_files_no_longer_hold_is_trimmed_to_them(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = tmp_path / "logs"
    # The old leader led epoch 5 from offset 25; the new one, epoch 6 from 25, rolled there.
    write_log(log_dir, (10, 4), (10, 4), (10, 4, 5), (10, 5))
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 4
    diverged = tiering.store.segment_for_offset(TP, 25)
    assert diverged is not None and diverged.start_offset == 20
    old_bytes = tiering.storage.read_range(diverged.layout.log_key, 0, diverged.size_bytes)

    outcomes = elected_with_segments_from_25(
        tiering, log_dir, caplog, (10, 4), (10, 4), (5, 4), (5, 6), (10, 6), (10, 6)
    )

    assert outcomes == [(None, 3), (None, 0)]
    assert spans(tiering) == [
        (0, 9, (4,)),
        (10, 19, (4,)),
        (20, 24, (4,)),
        (25, 29, (6,)),
        (30, 39, (6,)),
        (40, 49, (6,)),
    ]
    trimmed = tiering.store.segment_for_offset(TP, 22)
    assert trimmed is not None and trimmed.segment_id != diverged.segment_id
    # Byte for byte the old copy's batches below 25; as old as it; the broker's producer state at 25.
    kept = tiering.storage.read_range(trimmed.layout.log_key, 0, trimmed.size_bytes + 1)
    assert 0 < len(kept) == trimmed.size_bytes < len(old_bytes) and old_bytes.startswith(kept)
    assert trimmed.event_time_ms == diverged.event_time_ms
    assert trimmed.max_timestamp_ms == max(r.timestamp for r in records_of(kept))
    assert [r.offset for r in records_of(kept)] == list(range(20, 25))
    snapshot = read_index(tiering.storage, trimmed.layout, IndexType.PRODUCER_SNAPSHOT)
    assert snapshot == (partition_path(log_dir) / "00000000000000000025.snapshot").read_bytes()
    found = tiering.store.segment_for_offset(TP, 27)
    assert found is not None and [e.epoch for e in found.leader_epochs] == [6]
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 0
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 2
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("trimmed to 20..24 and" in m and "tiered again from offset 25" in m for m in warned)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # The old copy's objects went as any retired copy's do; the copies of 25 on are the broker's.
    assert tiering.storage.object_size(diverged.layout.log_key) is None
    for row in tiering.finished(TP):
        if row.start_offset >= 25:
            local = partition_path(log_dir) / f"{row.start_offset:020d}.log"
            assert tiering.storage.read_range(row.layout.log_key, 0, row.size_bytes) == local.read_bytes()


def test_a_trim_that_fails_before_the_swap_leaves_the_old_copy_answering(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (10, 4, 5), (10, 5))
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    write_log(log_dir, (10, 4), (10, 4), (5, 4), (5, 6), (10, 6), (10, 6))
    drop_local_segments_below(log_dir, 25)
    before = spans(tiering)

    def crash(step: str) -> None:
        if step == "indexes_uploaded":
            raise OSError("the sidecar died")

    outcome = tiering.copier(step=crash).run_once()[0]

    assert isinstance(outcome.error, OSError)
    assert spans(tiering) == before  # nothing swapped, the trimmed copy's row and objects gone
    assert not tiering.segments(TP, SegmentState.COPY_SEGMENT_STARTED)
    assert tiering.copier().run_once()[0].copied_segments == 3
    assert spans(tiering)[2:4] == [(20, 24, (4,)), (25, 29, (6,))]


def test_a_batch_holding_offsets_on_both_sides_of_the_cut_is_kept_whole_and_the_brokers_copy_answers_past_it(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (20, 5), (10, 5), batch_records=10)  # batches 20..29, 30..39
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 4

    outcomes = elected_with_segments_from_25(
        tiering, log_dir, caplog, (10, 4), (10, 4), (5, 6), (10, 6), (10, 6), (10, 6)
    )

    assert outcomes == [(None, 3), (None, 0)]  # 20..24 were only in the old copy's batch of 20..29
    assert spans(tiering) == [
        (0, 9, (4,)),
        (10, 19, (4,)),
        (20, 29, (5,)),
        (25, 34, (6,)),
        (35, 44, (6,)),
        (45, 54, (6,)),
    ]
    # The broker's copy from 25 reaches past the trimmed one: reads answer from it from 25 on.
    for offset, epoch in ((22, 5), (24, 5), (25, 6), (29, 6)):
        found = tiering.store.segment_for_offset(TP, offset)
        assert found is not None and found.leader_epochs[-1].epoch == epoch, offset
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "trimmed to 20..29 (its batch holding offset 25 whole)" in m
        and "tiered again from offset 25 in one remote segment reaching past offset 29" in m
        for m in warned
    )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def elected_with_the_batch_at_the_cut_last(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> tuple[Tiering, Path]:
    """The old leader's 0..39 tiered in batches of 10 (epoch 5 from 20), then the new leader's log
    (epoch 6 from 20, rolled at 25 and 30) with its segments below 25 deleted: 20..24 are only
    in the old copy of 20..29, whose one batch holds offsets on both sides of 25."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (10, 5), (10, 5), batch_records=10)
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    kept = tiering.store.segment_for_offset(TP, 25)
    assert kept is not None and (kept.start_offset, kept.end_offset) == (20, 29)
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (5, 6), (10, 6), (10, 6))
    drop_local_segments_below(log_dir, 25)
    return tiering, log_dir


def test_a_copy_whose_batch_at_the_brokers_first_offset_is_its_last_is_kept_and_the_log_tiered_past_it(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiering, log_dir = elected_with_the_batch_at_the_cut_last(backend, tiering_factory, tmp_path)

    reads = CountedReads(tiering.storage)
    tiering.storage = reads
    copier = tiering.copier()  # one sidecar's, pass after pass
    with caplog.at_level(logging.WARNING, logger="rlm.copier"):
        outcomes = [copier.run_once()[0] for _ in range(3)]

    # The copy of 20..29 is kept as it is; the broker's segments of 25..29 and 30..39 are tiered as
    # one copy, which reaches past it and answers from 25 on; 40..49 as any segment.
    assert [(o.error, o.copied_segments) for o in outcomes] == [(None, 2), (None, 0), (None, 0)]
    assert reads.streamed == 1  # it was read once to find it cannot be cut
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,)), (25, 39, (6,)), (40, 49, (6,))]
    assert_epochs_read(tiering, {20: 5, 24: 5, 25: 6, 29: 6, 30: 6, 39: 6, 40: 6})
    assert_joined_copy(tiering, log_dir, 25, [25, 30])
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 0
    assert tiering.registry.get_sample_value("rlm_diverged_copies_replaced_total", LABELS) == 1
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    kept = [m for m in warned if "is kept as it is" in m]
    assert len(kept) == 1 and "holds offsets up to its last, 29" in kept[0]
    assert "tiered again from offset 25 in one remote segment reaching past offset 29" in kept[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_copy_whose_bytes_fail_the_checks_is_kept_as_it_is_and_the_log_tiered_past_it(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The old leader's copy of 20..39 (epoch 5) has a damaged batch of 20..29, so it cannot be
    trimmed at 25 (the broker's first local offset): it is kept as it is, said as an error, and
    the broker's log is tiered from 25 past it, so that once the broker deletes its segments the
    old leader's records past 25 do not answer for the log's."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (20, 5), (10, 5), batch_records=10)  # batches 20..29, 30..39
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    old = tiering.store.segment_for_offset(TP, 25)
    assert old is not None and (old.start_offset, old.end_offset) == (20, 39)
    key = old.layout.log_key
    data = bytearray(tiering.storage.read_range(key, 0, old.size_bytes))
    first_batch = int.from_bytes(data[8:12], "big") + 12
    data[first_batch - 1] ^= 0xFF  # a record of 20..29: the batch fails its CRC
    tiering.storage.put_object(key, bytes(data), metadata=tiering.storage.object_metadata(key))
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (10, 6), (10, 6), (10, 6))  # rolled at 25, 35, 45
    drop_local_segments_below(log_dir, 25)

    copier = tiering.copier()
    with caplog.at_level(logging.WARNING, logger="rlm.copier"):
        outcomes = [copier.run_once()[0] for _ in range(2)]

    # The broker's 25..34 and 35..44 are tiered as one copy reaching past the kept one; 45..54 next.
    assert [(o.error, o.copied_segments) for o in outcomes] == [(None, 2), (None, 0)]
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 39, (5,)), (25, 44, (6,)), (45, 54, (6,))]
    assert_epochs_read(tiering, {20: 5, 24: 5, 25: 6, 39: 6, 44: 6})
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and f"is kept as it is ({key}, position 0: CRC mismatch" in errors[0]
    assert "tiered again from offset 25 in one remote segment reaching past offset 39" in errors[0]

    drop_local_segments_below(log_dir, 45)  # the broker's local retention: 25.. answer remotely
    answers = fetched(tiering, log_dir, [25, 30])
    assert answers[25] == ("remote", 45, new_leaders_from(25, 44))
    assert answers[30] == ("remote", 45, new_leaders_from(30, 44))
    with pytest.raises(CorruptDataError, match=key):  # held nowhere else, and damaged
        fetched(tiering, log_dir, [20])


def test_a_copy_past_the_cut_that_fails_before_it_finishes_is_made_again_by_the_next_pass(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering, _ = elected_with_the_batch_at_the_cut_last(backend, tiering_factory, tmp_path)

    def crash(step: str) -> None:
        if step == "indexes_uploaded":
            raise OSError("the sidecar died")

    outcome = tiering.copier(step=crash).run_once()[0]

    assert isinstance(outcome.error, OSError)
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,))]  # 30..39 retired
    assert not tiering.segments(TP, SegmentState.COPY_SEGMENT_STARTED)
    assert tiering.copier().run_once()[0].copied_segments == 2
    assert spans(tiering)[3:] == [(25, 39, (6,)), (40, 49, (6,))]
    assert_epochs_read(tiering, {24: 5, 25: 6, 29: 6})


def test_a_copy_past_the_cut_of_a_segment_failing_the_checks_stops_copying_there(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiering, log_dir = elected_with_the_batch_at_the_cut_last(backend, tiering_factory, tmp_path)
    damaged = partition_path(log_dir) / f"{30:020d}.log"
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0xFF  # a record's byte: its batch's CRC fails
    damaged.write_bytes(bytes(data))

    with caplog.at_level(logging.ERROR, logger="rlm.copier"):
        outcome = tiering.copier().run_once()[0]

    assert isinstance(outcome.error, SegmentNotCopiedError) and outcome.copied_segments == 0
    assert outcome.error.path == str(damaged)
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,))]  # nothing from the cut on
    assert not tiering.segments(TP, SegmentState.COPY_SEGMENT_STARTED)
    assert tiering.registry.get_sample_value("rlm_copy_blocked", LABELS) == 1
    assert tiering.registry.get_sample_value("rlm_copy_errors_total", LABELS) == 1  # counted once
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


def elected_with_segments_inside_the_kept_batch(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> tuple[Tiering, Path]:
    """The old leader's 0..39 tiered in batches of 10 (epoch 5 from 20), then the new leader's log
    (epoch 6 from 20), rolled at 25, 28 and 35, with its segments below 25 deleted: its segment of
    25..27 lies inside the old copy's batch of 20..29."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (20, 5), (10, 5), batch_records=10)
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 4
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (3, 6), (7, 6), (10, 6), (10, 6))
    drop_local_segments_below(log_dir, 25)
    return tiering, log_dir


def test_the_brokers_first_segments_smaller_than_the_batch_kept_across_the_cut_are_tiered_as_one_copy(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering, log_dir = elected_with_segments_inside_the_kept_batch(backend, tiering_factory, tmp_path)

    outcomes = [tiering.copier().run_once()[0] for _ in range(2)]

    assert [(o.error, o.copied_segments) for o in outcomes] == [(None, 3), (None, 0)]
    assert spans(tiering) == [
        (0, 9, (4,)),
        (10, 19, (4,)),
        (20, 29, (5,)),
        (25, 34, (6,)),
        (35, 44, (6,)),
        (45, 54, (6,)),
    ]
    assert_epochs_read(tiering, {24: 5, 25: 6, 27: 6, 28: 6, 29: 6, 34: 6})
    assert_joined_copy(tiering, log_dir, 25, [25, 28])
    assert tiering.registry.get_sample_value("rlm_copies_diverged", LABELS) == 0


def test_a_copy_past_the_cut_waits_until_the_brokers_rolled_segments_reach_past_the_kept_one(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiering, log_dir = elected_past_the_cut(backend, tiering_factory, tmp_path)
    copier = tiering.copier()

    with caplog.at_level(logging.WARNING, logger="rlm.copier"):
        waiting = [copier.run_once()[0] for _ in range(2)]

    for outcome in waiting:
        assert (outcome.error, outcome.copied_segments) == (None, 0)
        assert (
            outcome.skipped is not None
            and "from offset 25 in one remote segment reaching past" in outcome.skipped
        )
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,))]
    # Logged once: the trim, then nothing while it waits.
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1

    # An export meanwhile reads the old leader's records up to 29, which the trimmed copy answers.
    record = tiering.store.get_partition(TP)
    assert record is not None
    assert tiering.store.record_export_offsets("file:///out", {TP: 30}, lineages={TP: record.lineage}) == {}
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (3, 6), (7, 6))  # rolled at 35
    drop_local_segments_below(log_dir, 25)

    assert copier.run_once()[0].copied_segments == 1
    assert spans(tiering)[3:] == [(25, 34, (6,))]
    assert_epochs_read(tiering, {24: 5, 25: 6, 29: 6})
    assert tiering.store.export_offsets("file:///out") == {TP: 25}  # the broker's records from 25 next


def assert_epochs_read(tiering: Tiering, epochs: dict[int, int]) -> None:
    """The leader epoch of the copy reads of each offset answer from."""
    for offset, epoch in epochs.items():
        found = tiering.store.segment_for_offset(TP, offset)
        assert found is not None and epoch_for(found, offset) == epoch, offset


def epoch_for(segment: RemoteSegment, offset: int) -> int:
    return [e.epoch for e in segment.leader_epochs if e.start_offset <= offset][-1]


def assert_joined_copy(tiering: Tiering, log_dir: Path, start: int, bases: list[int]) -> None:
    """The copy starting at ``start`` is the broker's segments at ``bases``, byte for byte, with
    the broker's producer snapshot at the next segment."""
    joined = [s for s in tiering.finished(TP) if s.start_offset == start]
    assert len(joined) == 1
    local = b"".join((partition_path(log_dir) / f"{base:020d}.log").read_bytes() for base in bases)
    assert tiering.storage.read_range(joined[0].layout.log_key, 0, joined[0].size_bytes) == local
    assert [r.offset for r in records_of(local)] == list(range(start, joined[0].end_offset + 1))
    snapshot = read_index(tiering.storage, joined[0].layout, IndexType.PRODUCER_SNAPSHOT)
    next_snapshot = partition_path(log_dir) / f"{joined[0].end_offset + 1:020d}.snapshot"
    assert snapshot == (next_snapshot.read_bytes() if next_snapshot.exists() else None)


def test_a_replica_that_has_not_truncated_yet_tiers_none_of_its_old_records(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    assert tiering.copier().run_once()[0].copied_segments == 3  # the new leader's log, up to 49
    new_leader = spans(tiering)
    # The old leader's replica, back before it truncates its log, holds more of epoch 5 than the
    # remote tier holds: none of it is the partition's log.
    write_log(log_dir, *OLD_LEADER, 5, 5, 5)

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 0)
    assert outcome.skipped is not None and "leader epoch" in outcome.skipped
    assert spans(tiering) == new_leader


def write_transactional_log(log_dir: Path, *, new_leader: bool) -> None:
    """Offsets 10..19 hold a transaction of producer 7 aborted at 13 (epoch 4, both leaders); the
    old leader then aborted one of producer 8 at 23 (epoch 5), the new one wrote plain records
    from 20 (epoch 6), in a segment of its own."""
    metadata = partition_path(log_dir) / PARTITION_METADATA
    topic_id = metadata.read_bytes() if metadata.exists() else None
    if log_dir.exists():
        shutil.rmtree(log_dir)
    writer = LogDirWriter(
        log_dir, clock=lambda: WRITER_NOW_MS, default_config=TopicConfig(segment_bytes=1 << 30)
    )
    log = writer.partition(TP.topic, TP.partition, leader_epoch=4)

    def records(first: int, end: int) -> list[ProducerRecord]:
        return [ProducerRecord(WRITER_NOW_MS - 100 + i, None, b"value %d" % i) for i in range(first, end)]

    def aborted(producer_id: int, first: int) -> None:
        log.append(
            records(first, first + 3),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        log.append_control(ControlType.ABORT, producer_id=producer_id, producer_epoch=0)

    log.append(records(0, 10))
    log.roll()
    aborted(7, 10)
    log.append(records(14, 20))
    if new_leader:
        log.roll()
        log.leader_epoch = 6
        log.append(records(20, 30))
    else:
        log.leader_epoch = 5
        aborted(8, 20)
        log.append(records(24, 30))
    log.roll()
    log.append(records(30, 40))
    log.roll()
    log.append(records(40, 42))
    writer.close()
    if topic_id is not None:
        metadata.write_bytes(topic_id)


def test_a_trimmed_copy_keeps_the_aborted_transactions_whose_markers_it_keeps(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    write_transactional_log(log_dir, new_leader=False)
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 3
    diverged = tiering.store.segment_for_offset(TP, 20)
    assert diverged is not None and (diverged.start_offset, diverged.end_offset) == (10, 29)
    indexed = aborted_transactions(tiering, diverged)
    assert [t.producer_id for t in indexed] == [7, 8]
    write_transactional_log(log_dir, new_leader=True)
    drop_local_segments_below(log_dir, 20)

    assert tiering.copier().run_once()[0].copied_segments == 2

    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (6,)), (30, 39, (6,))]
    trimmed = tiering.store.segment_for_offset(TP, 15)
    assert trimmed is not None and not trimmed.txn_index_empty
    kept = aborted_transactions(tiering, trimmed)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in kept] == [(7, 10, 13)]
    assert kept == indexed[:1]  # as the broker indexed it
    assert aborted_transactions(tiering, tiering.store.segment_for_offset(TP, 25)) == []


def aborted_transactions(tiering: Tiering, segment: RemoteSegment | None) -> list[AbortedTxn]:
    assert segment is not None
    data = read_index(tiering.storage, segment.layout, IndexType.TRANSACTION)
    return [] if data is None else list(TransactionIndex.from_bytes(segment.start_offset, data).entries())


def test_a_copy_joined_past_a_kept_one_that_diverges_again_is_tiered_again_past_the_kept_one(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering, log_dir = elected_with_segments_inside_the_kept_batch(backend, tiering_factory, tmp_path)
    copier = tiering.copier()
    for _ in range(2):
        assert copier.run_once()[0].error is None
    assert spans(tiering)[2:] == [(20, 29, (5,)), (25, 34, (6,)), (35, 44, (6,)), (45, 54, (6,))]

    # A second unclean election: the next leader holds epoch 6's records up to 27 only, then its own.
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (3, 6), (7, 7), (10, 7), (10, 7))
    drop_local_segments_below(log_dir, 25)
    copier = tiering.copier()  # another sidecar's: it finds the kept copy cannot be cut at 25
    outcome = copier.run_once()[0]
    assert (outcome.error, outcome.copied_segments) == (None, 3)
    # The broker's local retention deletes what the remote tier holds since.
    drop_local_segments_below(log_dir, 28)
    assert copier.run_once()[0].error is None

    # The copy kept past 25 answers 20..24 only; the broker's records from 25 on are tiered again,
    # its segments of 25..27 and 28..34 as one copy reaching past it.
    assert spans(tiering)[2:] == [(20, 29, (5,)), (25, 34, (6, 7)), (35, 44, (7,)), (45, 54, (7,))]
    assert_epochs_read(tiering, {24: 5, 25: 6, 27: 6, 28: 7, 34: 7, 35: 7})
    answers = fetched(tiering, log_dir, [25])
    assert answers[25][2][:3] == [(25, 6), (26, 6), (27, 6)]
