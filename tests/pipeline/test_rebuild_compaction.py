"""``rlm spark rebuild-metadata`` of a tier a compaction job left at each step of its life.

A compaction uploads its outputs marked pending, swaps them in (one transaction), marks them
swapped, and deletes the segments they replaced once ``remote.compaction.delete.delay.ms`` has
passed. A job killed after its upload and before its swap leaves outputs whose ranges hold the
original segments' ranges: the original database holds the originals, and so must the rebuilt one.
Once the replaced segments are deleted, the outputs are the partition's, marked or not.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from pyspark.sql import SparkSession

from metadata.store import SqlMetadataStore
from rlm.errors import StorageError
from rlm.metastore.model import RemoteSegment
from rlm.pipeline.compact import job as compact_job
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, cleanup, compact
from rlm.pipeline.storage import StorageSpec
from rlm.storage.description import COMPACTION_KEY, PENDING, SWAPPED
from tests.pipeline.compact.support import WRITTEN_AT, compacting, write_keyed_log
from tests.pipeline.conftest import BACKENDS, make_tier
from tests.pipeline.test_rebuild import _empty_database, _finished, _lookups, _rebuild
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")

#: When the compaction runs: its inputs are past the topic's lags.
COMPACTED_AT = WRITTEN_AT + 3_600_000
#: Far past every replaced segment's delete delay.
LATER = COMPACTED_AT + 10 * 86_400_000


class _KilledError(Exception):
    """The compaction job killed at its swap."""


@pytest.fixture
def keyed_tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    """A tier of keyed records a compaction rewrites, on the backend pair the test names."""
    return make_tier(request.param, request, tmp_path / "tier", lambda logs: write_keyed_log(logs, seed=5))


def _compact(tier: Tier, monkeypatch: pytest.MonkeyPatch, *, die_at_swap: bool = False) -> None:
    """Run a compaction job over the tier, or one killed at its swap (the outputs uploaded)."""
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store, contextlib.ExitStack() as died:
            if die_at_swap:

                def killed(*args: Any, **kwargs: Any) -> bool:
                    raise _KilledError("killed before the swap")

                monkeypatch.setattr(store, "swap_compacted", killed)
                died.enter_context(pytest.raises(_KilledError))
            engine = InProcessEngine(spec)
            compact(store, storage, spec, engine, settings, CompactOptions(), now_ms=COMPACTED_AT)
    finally:
        storage.close()


def _delete_replaced(tier: Tier) -> None:
    """What the next compaction job's cleanup does once the delay has passed."""
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            for record in store.list_partitions():
                cleanup(store, storage, record.topic_partition, now_ms=LATER, delay_ms=0)
    finally:
        storage.close()


def _segment_keys(tier: Tier) -> set[str]:
    storage = tier.open_storage()
    try:
        return {k for k in storage.list_keys() if k.endswith((".log", ".indexes"))}
    finally:
        storage.close()


def _keys(rows: Any) -> set[str]:
    return {k for row in rows for k in (row.layout.log_key, row.layout.index_key)}


def _compaction_marks(tier: Tier, rows: list[RemoteSegment]) -> set[str | None]:
    storage = tier.open_storage()
    try:
        return {(storage.object_metadata(r.layout.index_key) or {}).get(COMPACTION_KEY) for r in rows}
    finally:
        storage.close()


def _rebuilt(
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest, tier: Tier, directory: Path
) -> tuple[str, set[UUID], dict[str, Any]]:
    """Rebuild into a new database: its URL, its finished segments' ids and the report."""
    url = _empty_database(request, directory)
    report = _rebuild(capsys, tier, url)
    return url, {r.segment_id for r in _finished(SqlMetadataStore.open(url))}, report


@pytest.mark.parametrize("keyed_tier", BACKENDS, indirect=True)
def test_a_compaction_killed_before_its_swap_leaves_the_originals_chosen_and_its_outputs_orphans(
    spark: SparkSession,
    keyed_tier: Tier,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tier = keyed_tier
    originals = _finished(tier.open_store())
    _compact(tier, monkeypatch, die_at_swap=True)
    assert {r.segment_id for r in _finished(tier.open_store())} == {r.segment_id for r in originals}
    leftovers = _segment_keys(tier) - _keys(originals)
    assert leftovers  # the outputs were uploaded, and overlap the originals' ranges

    url, rebuilt, report = _rebuilt(capsys, request, tier, tmp_path / "db")
    assert rebuilt == {r.segment_id for r in originals}
    assert {key for o in report["orphans"] for key in o["keys"]} == leftovers
    assert all(o["reason"].startswith("a compaction's output never swapped in") for o in report["orphans"])
    assert _lookups(tier, url) == _lookups(tier, tier.settings.metadata_url)


@pytest.mark.parametrize("keyed_tier", BACKENDS, indirect=True)
@pytest.mark.parametrize("marked", [True, False], ids=["marked", "never-marked"])
def test_after_the_swap_and_the_deletion_of_the_replaced_segments_the_outputs_are_chosen(
    spark: SparkSession,
    keyed_tier: Tier,
    marked: bool,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tier = keyed_tier
    originals = {r.segment_id for r in _finished(tier.open_store())}
    if not marked:

        def unmarked(*args: Any, **kwargs: Any) -> None:
            raise StorageError("the store refused the put")

        # The job died (or the store failed) between its swap and marking the outputs swapped.
        monkeypatch.setattr(compact_job, "mark_swapped", unmarked)
    _compact(tier, monkeypatch)
    after = _finished(tier.open_store())
    outputs = [r for r in after if r.segment_id not in originals]
    assert outputs and _compaction_marks(tier, outputs) == {SWAPPED if marked else PENDING}
    if not marked:
        # While the replaced segments last they hold every offset: the rebuild chooses them
        # (the same offsets, not compacted), and the outputs are orphans.
        _, rebuilt, report = _rebuilt(capsys, request, tier, tmp_path / "db-before")
        assert rebuilt == originals
        assert {key for o in report["orphans"] for key in o["keys"]} == _keys(outputs)
    _delete_replaced(tier)
    assert _segment_keys(tier) == _keys(after)  # the replaced segments' objects are gone

    url, rebuilt, report = _rebuilt(capsys, request, tier, tmp_path / "db")
    assert rebuilt == {r.segment_id for r in after}
    assert report["orphans"] == []
    assert _lookups(tier, url) == _lookups(tier, tier.settings.metadata_url)
