"""Remote retention after an unclean leader election: the old leader's copies the broker's log
diverged from stay until the copier tiered the new leader's log again, and take only their own
records when they expire."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.log.logdir import LogDir
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.service import LookupService
from rlm.timestamps import SpecialTimestamp
from tests.clock import FakeClock
from tests.integration.test_retention import HOUR, TP, TieringFactory, with_topic
from tests.tiering_support import WRITER_NOW_MS, Backend, Tiering, assert_invariants, set_high_watermarks
from tests.unclean_election_support import drop_local_segments_below, spans, write_log


@pytest.fixture
def elected(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> tuple[Tiering, Path]:
    """The old leader's log tiered (epoch 5 from 20, its copies expired three hours from now), then
    the new leader's (epoch 6 from 20, an hour old from 20) with its segments below 25 deleted."""
    log_dir = tmp_path / "logs"
    now = WRITER_NOW_MS
    old = {0: now - 6 * HOUR, 1: now - 5 * HOUR, 2: now - 4 * HOUR, 3: now - 4 * HOUR}
    write_log(log_dir, (10, 4), (10, 4), (20, 5), (10, 5), batch_records=10, peaks=old)
    tiering = tiering_factory(backend, log_dir, FakeClock(now))
    tiering.copier().run_once()
    new = {0: now - 6 * HOUR, 1: now - 5 * HOUR, **{i: now - HOUR for i in range(2, 6)}}
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (10, 6), (10, 6), (10, 6), peaks=new)
    drop_local_segments_below(log_dir, 25)
    return tiering, log_dir


def _earliest_after_local_retention(tiering: Tiering, log_dir: Path, tmp_path: Path) -> int:
    """The earliest offset a lookup answers once the broker deleted its first two local segments
    (tiered)."""
    for local in LogDir(log_dir).partition(TP.topic, TP.partition).segments()[:2]:
        local.log_path.unlink()
    cache = RemoteIndexCache(tmp_path / "cache", tiering.storage, tiering.metrics)
    lookups = LookupService(tiering.store, tiering.storage, cache, (log_dir,), clock=FakeClock(100.0))
    try:
        return lookups.find(TP, SpecialTimestamp.EARLIEST).offset
    finally:
        cache.close()


def test_a_copy_kept_past_the_cut_takes_only_its_own_records_when_it_expires(
    elected: tuple[Tiering, Path], tmp_path: Path
) -> None:
    """After an unclean election the old leader's copy of 20..29 is kept (only it holds 20..24) and
    the new leader's log is tiered from 25 in a copy reaching past it, which answers from 25 on.
    When the old copy expires, the new leader's records 25..29, an hour old, stay readable."""
    tiering, log_dir = elected
    assert [tiering.copier().run_once()[0].error for _ in range(2)] == [None, None]
    assert spans(tiering)[2:4] == [(20, 29, (5,)), (25, 34, (6,))]
    three_hours = with_topic(tiering.settings, retention_ms=3 * HOUR)

    (outcome,) = tiering.retention(settings=three_hours).run_once()

    assert (outcome.error, outcome.deleted_segments, outcome.log_start_offset) == (None, 3, 25)
    record = tiering.store.get_partition(TP)
    assert record is not None and record.remote_log_start_offset == 25
    assert [s[:2] for s in spans(tiering)] == [(25, 34), (35, 44), (45, 54)]
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert _earliest_after_local_retention(tiering, log_dir, tmp_path) == 25


def test_a_copy_kept_past_the_cut_stays_until_the_log_is_tiered_from_the_cut(
    elected: tuple[Tiering, Path], tmp_path: Path
) -> None:
    """As above, but the old copy expires while the new leader's log waits to be tiered from 25
    (its segment of 25..34 is not below the high watermark yet): the old copy, whose 25..29 the
    broker's log diverged from, stays until that segment is tiered; the new leader's records
    25..29, an hour old, stay the log's."""
    tiering, log_dir = elected
    set_high_watermarks(log_dir, {TP: 30})  # 25..34 is not fully replicated yet
    (waiting,) = tiering.copier().run_once()
    assert (waiting.error, waiting.copied_segments) == (None, 0)
    assert spans(tiering)[2:] == [(20, 29, (5,))]  # trimmed; the log waits to be tiered from 25
    three_hours = tiering.retention(settings=with_topic(tiering.settings, retention_ms=3 * HOUR))

    (outcome,) = three_hours.run_once()

    assert (outcome.error, outcome.deleted_segments, outcome.log_start_offset) == (None, 2, 20)
    set_high_watermarks(log_dir, {TP: 55})
    assert tiering.copier().run_once()[0].error is None
    (later,) = three_hours.run_once()
    assert (later.error, later.deleted_segments, later.log_start_offset) == (None, 1, 25)
    assert [s[:2] for s in spans(tiering)][:2] == [(25, 34), (35, 44)]
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert _earliest_after_local_retention(tiering, log_dir, tmp_path) == 25


def test_copies_expiring_before_the_copier_saw_the_log_diverge_stay_until_it_tiers_the_log_again(
    elected: tuple[Tiering, Path], tmp_path: Path
) -> None:
    """The old leader's copies of 20..49 expire before the copier compared them with the new
    leader's log. Deleted then, 20..49 would count as tiered, and the new leader's records from 25,
    an hour old, would never be: they stay until the copier tiered the log again from 25."""
    tiering, log_dir = elected
    three_hours = tiering.retention(settings=with_topic(tiering.settings, retention_ms=3 * HOUR))

    (outcome,) = three_hours.run_once()

    assert (outcome.error, outcome.deleted_segments, outcome.log_start_offset) == (None, 2, 20)
    assert [tiering.copier().run_once()[0].error for _ in range(2)] == [None, None]
    (later,) = three_hours.run_once()
    assert (later.error, later.log_start_offset) == (None, 25)
    assert [s[:2] for s in spans(tiering)][:2] == [(25, 34), (35, 44)]
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert _earliest_after_local_retention(tiering, log_dir, tmp_path) == 25
