"""``--from``/``--to`` bounds of a partition whose remote tier holds a diverged copy kept past its
cut (an unclean leader election, :mod:`rlm.lookup.answer_end`): the time search answers as a
consumer's offsets-for-times would, from the records the export reads (the new leader's copy past
the cut), never from the old leader's records there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.pipeline.export.bounds import NO_END, Range, partition_range
from rlm.remote_tier.read_plan import PartitionPlan, plan_partition, select_partitions
from tests.integration.test_reads_across_a_cut import OLD_PEAK, elected_past_a_peak, joined_past_the_cut
from tests.tiering_support import Tiering, make_backend
from tests.unclean_election_support import TP, spans


@pytest.fixture
def tiering(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Tiering, Path]]:
    """The old leader's copy of 20..29 (its 25, past the cut, holds :data:`OLD_PEAK`, above every
    record of the log) kept beside the new leader's copy of 25..34."""
    backend = make_backend("sqlite-fs", request, tmp_path)
    opened: list[Tiering] = []

    def factory(backend_: object, log_dir: Path) -> Tiering:
        opened.append(Tiering.open(backend, log_dir))
        return opened[-1]

    tiering, log_dir = elected_past_a_peak(backend, factory, tmp_path, {})
    joined_past_the_cut(tiering, log_dir)
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,)), (25, 34, (6,))]
    yield tiering, log_dir
    for harness in opened:
        harness.close()


def _plan(tiering: Tiering) -> PartitionPlan:
    (record,) = select_partitions(tiering.store, [TP.topic])
    return plan_partition(tiering.store, record)


def test_no_record_the_export_reads_reaches_the_old_leaders_peak(tiering: tuple[Tiering, Path]) -> None:
    """The lookups answer no offset for :data:`OLD_PEAK`: the export's ``--from`` selects nothing
    and its ``--to`` keeps every record (not the new leader's 25.. cut off by the old leader's)."""
    harness, _ = tiering
    plan = _plan(harness)
    assert [(s.read_from, s.read_to) for s in plan.segments] == [(0, 9), (10, 19), (20, 24), (25, 34)]
    assert partition_range(harness.storage, plan, from_ms=OLD_PEAK).empty
    assert partition_range(harness.storage, plan, to_ms=OLD_PEAK) == Range(0, NO_END)
    # Below the cut the old leader's 20 (OLD_PEAK - 1) is the log's and is found.
    assert partition_range(harness.storage, plan, from_ms=OLD_PEAK - 1).start == 20
