"""A metadata store rebuilt from the objects while a trim after an unclean leader election was half
done, on SQLite + filesystem and PostgreSQL + S3.

The old leader led epoch 5 from offset 25 and its copier tiered offsets 0..39. The new leader led
epoch 6 from 25; the broker's segments below 25 are deleted since, so the old copy of 20..29 is
trimmed to 20..24, the records only it holds. Its copier dies either after the store's swap, before
the old copy is marked retired, or before the swap, its trim's copy uploaded whole. Either way a
store rebuilt from the objects answers 20..24 from the trim's copy and never the old leader's
records past it, and its copier tiers the broker's log from 25 as after the trim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlm.errors import StorageUnavailableError
from rlm.metastore.model import RemoteSegment, SegmentState
from rlm.pipeline.rebuild.job import RebuildReport
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.description import DIVERGED, read_replaces, read_retired
from tests.retired_support import rebuilt_from_objects, retirements
from tests.tiering_support import Backend, Tiering, set_log_start_offsets
from tests.unclean_election_support import TP, Fetched, drop_local_segments_below, fetched, spans, write_log

TieringFactory = Callable[..., Tiering]
CUT = 25
OFFSETS = [20, 22, 24]
TRIMMED = [(0, 9, (4,)), (10, 19, (4,)), (20, 24, (4,)), (25, 29, (6,)), (30, 39, (6,)), (40, 49, (6,))]
"""The copies once the trim is done and the broker's log tiered from the cut."""


class KeptObjects(DelegatingStorage):
    """Deletes nothing: the objects of a copy that failed stay, as a copier killed there leaves them."""

    def delete_objects(self, keys: Iterable[str]) -> None:
        raise StorageUnavailableError("the sidecar died", key=next(iter(keys), None))


def crash_after_the_swap(step: str) -> None:
    # The trim's copy is the pass's first: its swap is done, the old copy not marked yet.
    if step == "copy_finished":
        raise OSError("the sidecar died")


def crash_before_the_swap(step: str) -> None:
    if step == "indexes_uploaded":
        raise OSError("the sidecar died")


def below_the_cut(answers: dict[int, Fetched]) -> dict[int, tuple[str | None, list[tuple[int, int]]]]:
    """Each fetch's tier and its records below the cut."""
    return {
        offset: (tier, [r for r in records if r[0] < CUT]) for offset, (tier, _, records) in answers.items()
    }


@dataclass(frozen=True)
class Elected:
    """The old leader's copies tiered, the new leader's log written, its segments below the cut
    deleted; nothing trimmed yet."""

    tiering: Tiering
    log_dir: Path
    old: RemoteSegment
    """The old leader's copy of 20..29, to be trimmed."""
    before: dict[int, tuple[str | None, list[tuple[int, int]]]]
    """What fetches at 20, 22 and 24 answer below the cut, from the old copy."""


@pytest.fixture
def elected(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> Elected:
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (10, 4, 5), (10, 5))
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 4
    write_log(log_dir, (10, 4), (10, 4), (5, 4), (5, 6), (10, 6), (10, 6))
    drop_local_segments_below(log_dir, CUT)
    old = tiering.store.segment_for_offset(TP, CUT)
    assert old is not None and (old.start_offset, old.end_offset) == (20, 29)
    before = below_the_cut(fetched(tiering, log_dir, OFFSETS))
    set_log_start_offsets(log_dir, {TP: CUT})  # as the broker's, once fetched
    return Elected(tiering, log_dir, old, before)


Rebuild = Callable[..., tuple[Tiering, RebuildReport]]


@pytest.fixture
def rebuild_of(
    elected: Elected,
    tiering_factory: TieringFactory,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Rebuild:
    """A store rebuilt from the objects of ``elected``, and a harness on it."""

    def rebuild(*, delete_orphans: bool = False, into: str = "rebuilt") -> tuple[Tiering, RebuildReport]:
        directory = tmp_path / into
        return rebuilt_from_objects(
            elected.tiering,
            tiering_factory,
            elected.log_dir,
            sqlite_template,
            directory,
            monkeypatch,
            delete_orphans=delete_orphans,
        )

    return rebuild


def tiers_from_the_cut(rebuilt: Tiering, log_dir: Path) -> None:
    """The rebuilt store's copier tiers the broker's log from the cut, as the trimming pass does."""
    set_log_start_offsets(log_dir, {TP: CUT})
    outcome = rebuilt.copier().run_once()[0]
    assert (outcome.error, outcome.copied_segments) == (None, 3)
    assert spans(rebuilt) == TRIMMED


def test_a_copier_that_dies_after_the_swap_leaves_the_old_copy_out_of_a_rebuild(
    elected: Elected, rebuild_of: Rebuild
) -> None:
    tiering, old = elected.tiering, elected.old

    assert isinstance(tiering.copier(step=crash_after_the_swap).run_once()[0].error, OSError)
    # Swapped in the store; the old copy's objects are there, not marked retired.
    assert spans(tiering)[:3] == TRIMMED[:3]
    assert old.segment_id in {s.segment_id for s in tiering.segments(TP, SegmentState.DELETE_SEGMENT_STARTED)}
    trimmed = tiering.store.segment_for_offset(TP, 22)
    assert trimmed is not None and trimmed.segment_id != old.segment_id
    marks = tiering.storage.object_metadata(old.layout.index_key)
    assert marks is not None and read_retired(marks) is None
    trimmed_marks = tiering.storage.object_metadata(trimmed.layout.index_key)
    assert trimmed_marks is not None and read_replaces(trimmed_marks) == old.segment_id

    rebuilt, report = rebuild_of(delete_orphans=True)

    assert spans(rebuilt) == TRIMMED[:3]
    orphans = {o.keys: o for o in report.orphans}
    replaced = orphans[(old.layout.log_key, old.layout.index_key)]
    assert replaced.reason == (
        f"replaced by a trim after an unclean leader election (segment {trimmed.segment_id} holds its "
        "batches up to offset 24): the broker's log diverged from its later records"
    )
    assert replaced.deleted and replaced.held_by == (trimmed.layout.log_key, trimmed.layout.index_key)
    assert replaced.marked == "marked"  # before it was deleted, in case the delete is kept
    assert tiering.storage.object_size(old.layout.log_key) is None
    assert below_the_cut(fetched(rebuilt, elected.log_dir, OFFSETS)) == elected.before
    tiers_from_the_cut(rebuilt, elected.log_dir)


def test_a_copier_that_dies_before_the_swap_leaves_a_rebuild_the_trims_copy(
    elected: Elected, rebuild_of: Rebuild
) -> None:
    tiering, old = elected.tiering, elected.old
    before_spans = spans(tiering)
    storage = tiering.storage
    tiering.storage = KeptObjects(storage)

    assert isinstance(tiering.copier(step=crash_before_the_swap).run_once()[0].error, OSError)
    tiering.storage = storage
    # Nothing swapped: the store still reads the old copy, and nothing is marked retired.
    assert spans(tiering) == before_spans
    [trimmed] = tiering.segments(TP, SegmentState.COPY_SEGMENT_STARTED)
    assert (trimmed.start_offset, trimmed.end_offset) == (20, 24)
    assert not any(retirements(tiering, TP).values())

    rebuilt, report = rebuild_of()

    # The trim's copy answers 20..24, byte for byte the old copy's batches below the cut; the
    # copy of 30..39 the pass had not marked yet is a row, which the next pass retires.
    assert spans(rebuilt) == [*TRIMMED[:3], (30, 39, (5,))]
    found = rebuilt.store.segment_for_offset(TP, 22)
    assert found is not None and found.segment_id == trimmed.segment_id
    old_bytes = storage.read_range(old.layout.log_key, 0, old.size_bytes)
    assert old_bytes.startswith(storage.read_range(trimmed.layout.log_key, 0, trimmed.size_bytes))
    assert below_the_cut(fetched(rebuilt, elected.log_dir, OFFSETS)) == elected.before
    [replaced] = report.orphans
    assert replaced.keys == (old.layout.log_key, old.layout.index_key)
    assert replaced.reason.startswith(
        f"replaced by a trim after an unclean leader election (segment {trimmed.segment_id}"
    )
    assert replaced.deletable and not replaced.deleted
    assert replaced.marked == "marked" and replaced.to_json()["retired_mark"] == "marked"
    assert retired_why(tiering, old) == DIVERGED
    tiers_from_the_cut(rebuilt, elected.log_dir)


def retired_why(tiering: Tiering, segment: RemoteSegment) -> str | None:
    marks = tiering.storage.object_metadata(segment.layout.index_key)
    assert marks is not None
    mark = read_retired(marks)
    return None if mark is None else mark.why


def test_a_rebuild_marks_the_copy_a_trim_replaced_so_that_later_ones_leave_it_out(
    elected: Elected, rebuild_of: Rebuild
) -> None:
    tiering, old = elected.tiering, elected.old
    assert isinstance(tiering.copier(step=crash_after_the_swap).run_once()[0].error, OSError)
    trimmed = tiering.store.segment_for_offset(TP, 22)
    assert trimmed is not None and trimmed.segment_id != old.segment_id
    assert retired_why(tiering, old) is None

    # Orphans not deleted: the old copy stays on the remote tier, marked retired by the rebuild.
    rebuilt, report = rebuild_of()

    assert spans(rebuilt) == TRIMMED[:3]
    [replaced] = [o for o in report.orphans if o.keys == (old.layout.log_key, old.layout.index_key)]
    assert (replaced.deleted, replaced.marked) == (False, "marked")
    assert retired_why(tiering, old) == DIVERGED

    # Retention deletes the trim's copy (its objects, then the rebuilt store's row); a store
    # rebuilt after that must not bring the old leader's copy back in its place.
    tiering.storage.delete_objects([trimmed.layout.log_key, trimmed.layout.index_key])
    again, report = rebuild_of(into="rebuilt-again")

    assert spans(again) == TRIMMED[:2]
    assert again.store.segment_for_offset(TP, 22) is None
    [retired] = [o for o in report.orphans if o.keys == (old.layout.log_key, old.layout.index_key)]
    assert f"segment {old.segment_id} was retired" in retired.reason
    assert retired.marked is None  # not a trim's replaced copy any more: nothing names it
