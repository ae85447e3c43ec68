"""``rlm spark rebuild-metadata --delete-orphans`` never deletes what may be the last copy of offsets.

A compaction's output whose description cannot be read (a damaged filesystem sidecar) is rebuilt
from its bytes, and its ``pending`` mark is lost with the description: it cannot be told from a
swapped-in output, nor from a segment the copier wrote. The segments it would replace are the
data of record while its job may have died before its swap, so nothing is deleted on its word:
when they hold its whole range they are chosen and it is kept; when they do not, it is chosen and
they are kept.

Each test copies a tier's objects into a directory store of its own and rebuilds in this process
into a fresh SQLite database. The compaction tier holds keyed records a compaction rewrote: one
output per partition covering the partition's segments (all but the last of ``users-1``), its job
killed before its swap.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from metadata.store import SqlMetadataStore
from rlm.metastore.model import ByteRange, IndexType, LeaderEpochEntry, RemoteSegment, TopicPartition
from rlm.pipeline.rebuild.job import Candidate, Orphan, choose
from rlm.pipeline.rebuild.objects import ObjectSet, object_sets
from rlm.storage.description import Description
from rlm.storage.filesystem import META_SUFFIX
from tests.pipeline.compact.support import write_keyed_log
from tests.pipeline.conftest import make_tier
from tests.pipeline.test_rebuild import _finished, _lookups
from tests.pipeline.test_rebuild_compaction import _compact
from tests.pipeline.test_rebuild_faults import (
    _database,
    _directory_store,
    _rebuild_here,
)
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")


@dataclass(frozen=True)
class Compacted:
    tier: Tier
    originals: list[RemoteSegment]
    """The segments the copier wrote, by partition and start offset."""


def _compacted(request: pytest.FixtureRequest, directory: Path, *, die_at_swap: bool) -> Compacted:
    tier = make_tier("sqlite-fs", request, directory, lambda logs: write_keyed_log(logs, seed=5))
    originals = sorted(_finished(tier.open_store()), key=lambda r: (r.topic_partition, r.start_offset))
    with pytest.MonkeyPatch.context() as patch:
        _compact(tier, patch, die_at_swap=die_at_swap)
    return Compacted(tier, originals)


@pytest.fixture(scope="module")
def killed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Compacted:
    """A compaction killed before its swap: its outputs uploaded, marked pending."""
    return _compacted(request, tmp_path_factory.mktemp("killed"), die_at_swap=True)


def _outputs(keys: Iterable[str], originals: Sequence[RemoteSegment]) -> dict[TopicPartition, ObjectSet]:
    """The compaction's output of each partition, among the object sets of ``keys``."""
    ids = {r.segment_id for r in originals}
    sets, _ = object_sets(keys)
    found = {s.topic_partition: s for s in sets if s.segment_id not in ids}
    assert len(found) == len([s for s in sets if s.segment_id not in ids])  # one per partition
    return found


def _keys(rows: Iterable[RemoteSegment]) -> tuple[str, ...]:
    return tuple(k for r in rows for k in (r.layout.log_key, r.layout.index_key))


def _unreadable(root: Path, objects: ObjectSet) -> None:
    """Empty the sidecar of the set's index object, as a crash can leave it: its description and
    its compaction mark are lost."""
    assert objects.index_key is not None
    (root / (objects.index_key + META_SUFFIX)).write_bytes(b"")


def _by_keys(orphans: Iterable[Orphan]) -> dict[tuple[str, ...], Orphan]:
    return {o.keys: o for o in orphans}


def _candidate(tp: TopicPartition, start: int, end: int, *, size: int, segment_id: uuid.UUID) -> Candidate:
    """A set rebuilt from its bytes with no compaction mark (of unknown state)."""
    keys = ObjectSet(tp, None, start, segment_id, None, None).both_keys()
    objects = ObjectSet(tp, None, start, segment_id, *keys)
    description = Description(
        end_offset=end,
        max_timestamp_ms=0,
        size_bytes=size,
        leader_epochs=(LeaderEpochEntry(0, start),),
        index_ranges=((IndexType.OFFSET, ByteRange(0, 8)),),
        txn_index_empty=True,
        broker_id=-1,
        event_time_ms=1,
    )
    return Candidate(objects, description, from_description=False)


# -- a compaction's output whose description cannot be read ----------------------------------------


def test_an_unreadable_pending_output_leaves_its_originals_chosen_and_nothing_deleted(
    killed: Compacted, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier, originals = killed.tier, killed.originals
    storage, spec, keys = _directory_store(tier, tmp_path / "remote")
    outputs = _outputs(keys, originals)
    for objects in outputs.values():
        _unreadable(tmp_path / "remote", objects)
    url = _database(request, tmp_path / "db")
    report = _rebuild_here(storage, spec, url)
    assert sorted(storage.list_keys()) == keys  # the originals above all: they hold what it dropped
    # The rebuilt database holds the originals, as the original database does.
    assert {r.segment_id for r in _finished(tier.open_store())} == {r.segment_id for r in originals}
    assert {r.segment_id for r in _finished(SqlMetadataStore.open(url))} == {r.segment_id for r in originals}
    assert _lookups(tier, url) == _lookups(tier, tier.settings.metadata_url)
    orphans = _by_keys(report.orphans)
    assert set(orphans) == {tuple(o.keys) for o in outputs.values()}
    for orphan in orphans.values():
        assert "compaction state could not be read" in orphan.reason
        assert not orphan.deletable and not orphan.deleted
        assert "compaction state could not be read" in str(orphan.kept)
    assert {p.keys for p in report.problems} == set(orphans)  # read from their bytes


def test_the_sets_inside_an_unreadable_output_it_must_be_chosen_for_are_kept(
    killed: Compacted, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier, originals = killed.tier, killed.originals
    storage, spec, keys = _directory_store(tier, tmp_path / "remote")
    outputs = _outputs(keys, originals)
    tp = TopicPartition("users", 0)
    output = outputs[tp]
    _unreadable(tmp_path / "remote", output)
    first, *rest = [r for r in originals if r.topic_partition == tp]
    storage.delete_objects(list(_keys([first])))  # its first original gone: no longer held whole
    url = _database(request, tmp_path / "db")
    report = _rebuild_here(storage, spec, url)
    rebuilt = {r.segment_id for r in _finished(SqlMetadataStore.open(url))}
    assert output.segment_id in rebuilt and not rebuilt & {r.segment_id for r in rest}
    other = outputs[TopicPartition("users", 1)]
    assert sorted(storage.list_keys()) == sorted(set(keys) - set(_keys([first])) - set(other.keys))
    orphans = _by_keys(report.orphans)
    for row in rest:
        orphan = orphans[_keys([row])]
        assert str(output.segment_id) in orphan.reason and "could not be read" in orphan.reason
        assert not orphan.deletable and not orphan.deleted
        assert f"segment {output.segment_id}'s description could not be read" in str(orphan.kept)
    # The other partition's output, described and pending, is an orphan deleted as before.
    assert orphans[tuple(other.keys)].reason.startswith("a compaction's output never swapped in")
    assert orphans[tuple(other.keys)].deleted


def test_a_second_copy_differing_from_a_chosen_set_of_unknown_state_is_kept() -> None:
    tp = TopicPartition("users", 0)
    # A segment copied before descriptions existed, a compaction's output of the same range (its
    # last batch kept) whose description could not be read, and a second copy of that output:
    # none says what it is.
    original = _candidate(tp, 0, 99, size=4000, segment_id=uuid.UUID(int=1))
    output = _candidate(tp, 0, 99, size=2500, segment_id=uuid.UUID(int=3))
    copy = _candidate(tp, 0, 99, size=2500, segment_id=uuid.UUID(int=2))
    chosen, orphans = choose([original, output, copy])
    assert chosen == [output]  # the highest segment id, as before
    found = _by_keys(orphans)
    kept = found[tuple(original.objects.keys)]
    assert kept.reason.startswith("a second copy") and not kept.deletable
    assert f"differs in size from segment {output.objects.segment_id}'s" in str(kept.kept)
    assert found[tuple(copy.objects.keys)].deletable  # as long as the chosen one: a second copy
    # A set of unknown state holding no other set's range is chosen as any other.
    alone = _candidate(tp, 100, 199, size=4000, segment_id=uuid.UUID(int=4))
    assert choose([alone]) == ([alone], [])
