"""``rlm spark rebuild-metadata --delete-orphans`` never deletes what may be the last copy of offsets.

A compaction's output whose description cannot be read (a damaged filesystem sidecar) is rebuilt
from its bytes, and its ``pending`` mark is lost with the description: it cannot be told from a
swapped-in output, nor from a segment the copier wrote. The segments it would replace are the
data of record while its job may have died before its swap, so nothing is deleted on its word:
when they hold its whole range they are chosen and it is kept; when they do not, it is chosen and
they are kept. An orphan whose range other sets hold (a second copy, a replaced segment, a
compaction's output never swapped in) is deleted only when those sets' objects are still there
when the rebuild looks again, and kept when the store cannot tell.

Each test copies a tier's objects into a store of its own (a directory, or a moto bucket behind
:class:`~tests.s3_proxy.S3Proxy`) and rebuilds in this process into a fresh SQLite database. The
compaction tiers hold keyed records a compaction rewrote: one output per partition covering the
partition's segments (all but the last of ``users-1``), killed before its swap or swapped in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pytest

from metadata.store import SqlMetadataStore
from rlm.metastore.model import ByteRange, IndexType, LeaderEpochEntry, RemoteSegment, TopicPartition
from rlm.pipeline.rebuild.job import Candidate, Orphan, choose
from rlm.pipeline.rebuild.objects import ObjectSet, object_sets
from rlm.pipeline.stage import Collect, Stage, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.description import PENDING, SWAPPED, Description
from rlm.storage.filesystem import META_SUFFIX
from rlm.storage.protocol import RemoteStorage
from tests.pipeline.compact.support import write_keyed_log
from tests.pipeline.conftest import make_tier
from tests.pipeline.test_rebuild import _finished, _lookups
from tests.pipeline.test_rebuild_compaction import _compact
from tests.pipeline.test_rebuild_faults import (
    _copy,
    _database,
    _directory_store,
    _other_copy,
    _put,
    _rebuild_here,
    _rows,
)
from tests.pipeline.tiers import Tier
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import MotoS3

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


@pytest.fixture(scope="module")
def swapped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Compacted:
    """A compaction swapped in: its outputs marked swapped, the replaced segments kept (the delay)."""
    return _compacted(request, tmp_path_factory.mktemp("swapped"), die_at_swap=False)


@pytest.fixture
def healthy(
    request: pytest.FixtureRequest, healthy_tiers: Callable[[str, pytest.FixtureRequest], Tier]
) -> Tier:
    return healthy_tiers("sqlite-fs", request)


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


def _then_delete(storage: RemoteStorage, keys: Sequence[str]) -> Collect:
    """Describe the sets, then delete ``keys`` (another process, or an operator, while the rebuild
    chooses)."""

    def collect(stage: Stage, summaries: Sequence[SegmentSummary]) -> pa.Table:
        table = run_in_process(stage, summaries)
        storage.delete_objects(list(keys))
        return table

    return collect


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


@pytest.mark.parametrize("mark", ["unreadable", "pending"])
def test_the_sets_inside_an_output_it_must_choose_unswapped_or_unknown_are_kept(
    mark: str, killed: Compacted, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # An output of a compaction killed before its swap: its pending mark read, or lost with its
    # sidecar. Its first original is gone (retention took it), so the output must be chosen; the
    # other originals inside its range may hold records it dropped, and are kept.
    tier, originals = killed.tier, killed.originals
    storage, spec, keys = _directory_store(tier, tmp_path / "remote")
    outputs = _outputs(keys, originals)
    tp = TopicPartition("users", 0)
    output = outputs[tp]
    if mark == "unreadable":
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
        assert str(output.segment_id) in orphan.reason
        assert not orphan.deletable and not orphan.deleted
        if mark == "unreadable":
            assert "could not be read" in orphan.reason
            assert f"segment {output.segment_id}'s description could not be read" in str(orphan.kept)
        else:
            assert "a compaction's output never swapped in" in orphan.reason
            assert f"segment {output.segment_id} was never swapped in" in str(orphan.kept)
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


def test_a_set_inside_a_copy_the_copier_wrote_stays_and_one_inside_a_swapped_output_goes() -> None:
    tp = TopicPartition("orders", 0)
    # A trim's copy of 20..29 inside the diverged copy of 20..39 it replaced, whose objects a
    # copier that died before deleting them left: described, neither a compaction's output.
    diverged = replace(_candidate(tp, 20, 39, size=2000, segment_id=uuid.UUID(int=1)), from_description=True)
    trimmed = replace(_candidate(tp, 20, 29, size=1000, segment_id=uuid.UUID(int=2)), from_description=True)
    after = replace(_candidate(tp, 30, 49, size=2000, segment_id=uuid.UUID(int=3)), from_description=True)
    chosen, orphans = choose([diverged, trimmed, after])
    assert sorted(c.objects.segment_id.int for c in chosen) == [1, 2, 3] and orphans == []
    # Inside a compaction's output swapped in, the same set is one the compaction replaced.
    output = replace(diverged, compaction=SWAPPED)
    chosen, orphans = choose([output, trimmed, after])
    assert sorted(c.objects.segment_id.int for c in chosen) == [1, 3]
    [replaced] = orphans
    assert replaced.keys == tuple(trimmed.objects.keys) and replaced.deletable
    assert replaced.held_by == tuple(output.objects.keys)
    # A set inside that output is replaced whatever copy reaching further began before it (a
    # takeover's, from 25 on).
    takeover = replace(_candidate(tp, 25, 59, size=3000, segment_id=uuid.UUID(int=4)), from_description=True)
    inner = replace(_candidate(tp, 30, 35, size=500, segment_id=uuid.UUID(int=5)), from_description=True)
    chosen, orphans = choose([output, takeover, inner])
    assert sorted(c.objects.segment_id.int for c in chosen) == [1, 4]
    assert [(o.keys, o.held_by) for o in orphans] == [(tuple(inner.objects.keys), tuple(output.objects.keys))]


def test_a_copy_a_trims_copy_names_is_an_orphan_the_trims_copy_holds() -> None:
    tp = TopicPartition("orders", 0)
    # The diverged copy of 20..39, the trim's copy of its batches up to 24 naming it (its copier
    # died after the store's swap, before marking the old copy retired, or before the swap), and
    # the copy after them.
    diverged = replace(_candidate(tp, 20, 39, size=2000, segment_id=uuid.UUID(int=1)), from_description=True)
    trimmed = replace(
        _candidate(tp, 20, 24, size=500, segment_id=uuid.UUID(int=2)),
        from_description=True,
        replaces=diverged.objects.segment_id,
    )
    after = replace(_candidate(tp, 40, 49, size=1000, segment_id=uuid.UUID(int=3)), from_description=True)
    chosen, orphans = choose([diverged, trimmed, after])
    assert sorted(c.objects.segment_id.int for c in chosen) == [2, 3]
    [old] = orphans
    assert (old.keys, old.deletable, old.held_by) == (
        tuple(diverged.objects.keys),
        True,
        tuple(trimmed.objects.keys),
    )
    assert old.reason == (
        f"replaced by a trim after an unclean leader election (segment {trimmed.objects.segment_id} "
        "holds its batches up to offset 24): the broker's log diverged from its later records"
    )
    # Read from its bytes (a description too long), the trim's copy still names it.
    assert choose([diverged, replace(trimmed, from_description=False), after])[0] == [
        replace(trimmed, from_description=False),
        after,
    ]
    # A name no trim's copy could give (another start, or no shorter range) is passed over.
    for start, end in ((25, 29), (20, 39)):
        other = replace(
            _candidate(tp, start, end, size=500, segment_id=uuid.UUID(int=4)), from_description=True
        )
        other = replace(other, replaces=diverged.objects.segment_id)
        assert len(choose([diverged, other])[0]) == (2 if start == 25 else 1)
        assert not [o for o in choose([diverged, other])[1] if "trim" in o.reason]


def test_a_trimmed_compaction_output_still_replaces_its_inputs_but_not_the_trims_copy() -> None:
    tp = TopicPartition("orders", 0)
    # A compaction's output of 20..39 swapped in (its inputs kept for the delay), then trimmed to
    # 20..24 after an unclean election; the copier died before deleting it.
    output = replace(
        _candidate(tp, 20, 39, size=1200, segment_id=uuid.UUID(int=1)),
        from_description=True,
        compaction=SWAPPED,
    )
    inputs = [
        replace(_candidate(tp, s, s + 9, size=1000, segment_id=uuid.UUID(int=n)), from_description=True)
        for n, s in ((2, 20), (3, 30))
    ]
    trimmed = replace(
        _candidate(tp, 20, 24, size=300, segment_id=uuid.UUID(int=4)),
        from_description=True,
        replaces=output.objects.segment_id,
    )
    for compaction in (SWAPPED, PENDING):  # swapped, its mark still pending
        chosen, orphans = choose([replace(output, compaction=compaction), *inputs, trimmed])
        assert chosen == [trimmed]
        found = _by_keys(orphans)
        assert found[tuple(output.objects.keys)].reason.startswith("replaced by a trim")
        for i in inputs:
            orphan = found[tuple(i.objects.keys)]
            assert f"segment {output.objects.segment_id}" in orphan.reason
            assert orphan.held_by == tuple(trimmed.objects.keys)
            assert orphan.deletable == (compaction == SWAPPED)


def _epochs(c: Candidate, *entries: tuple[int, int], described: bool = True) -> Candidate:
    """``c`` with the leader epochs ``(epoch, start offset)``."""
    epochs = tuple(LeaderEpochEntry(e, o) for e, o in entries)
    return replace(c, description=c.description._replace(leader_epochs=epochs), from_description=described)


def test_of_two_sets_of_one_range_the_later_leaders_is_chosen_described_or_not() -> None:
    tp = TopicPartition("orders", 0)
    # The old leader's copy of 20..29, retired after an unclean election, left by a copier that
    # died before deleting it; the new leader's copy of the same range, whose description could
    # not be read. Preferring the described set chose the old leader's records.
    old = _epochs(_candidate(tp, 20, 29, size=1000, segment_id=uuid.UUID(int=1)), (5, 20))
    new = _candidate(tp, 20, 29, size=1000, segment_id=uuid.UUID(int=2))
    new = _epochs(new, (5, 20), (6, 25), described=False)
    chosen, orphans = choose([old, new])
    assert chosen == [new]
    [diverged] = orphans
    assert diverged.keys == tuple(old.objects.keys) and diverged.deletable
    assert diverged.held_by == tuple(new.objects.keys) and "earlier leader epoch" in diverged.reason


def test_a_later_leaders_copy_inside_a_diverged_compaction_output_stays() -> None:
    tp = TopicPartition("orders", 0)
    # A compaction's output of 20..39 swapped in, then retired by an unclean election from 25 on
    # and left by a copier that died; the new leader's copy of 25..34 lies inside its range but
    # is no set the compaction replaced. One of the output's inputs, of epoch 5, is.
    output = replace(
        _epochs(_candidate(tp, 20, 39, size=1200, segment_id=uuid.UUID(int=1)), (5, 20)), compaction=SWAPPED
    )
    new = _epochs(_candidate(tp, 25, 34, size=1000, segment_id=uuid.UUID(int=2)), (6, 25))
    replaced = _epochs(_candidate(tp, 30, 39, size=1000, segment_id=uuid.UUID(int=3)), (5, 30))
    chosen, orphans = choose([output, new, replaced])
    assert sorted(c.objects.segment_id.int for c in chosen) == [1, 2]
    assert [(o.keys, o.deletable) for o in orphans] == [(tuple(replaced.objects.keys), True)]


def test_sets_of_a_deleted_topic_are_no_copies_of_its_successors() -> None:
    tp = TopicPartition("orders", 0)

    # The topic deleted and created again under its name: the old topic's copy of 0..9 (epoch 7)
    # and compaction output of 10..29, which a copier that died left, beside the new topic's
    # copies of 0..9 (epoch 0, its description unreadable) and 12..19. Choosing between them as
    # copies of one range deleted the new topic's.
    def of(topic: int, start: int, end: int, n: int, epoch: int, *, described: bool = True) -> Candidate:
        c = _epochs(_candidate(tp, start, end, size=100, segment_id=uuid.UUID(int=n)), (epoch, start))
        topic_id, segment_id = uuid.UUID(int=topic), c.objects.segment_id
        keys = ObjectSet(tp, topic_id, start, segment_id, None, None).both_keys()
        return replace(
            c, objects=ObjectSet(tp, topic_id, start, segment_id, *keys), from_description=described
        )

    old, old_output = of(1, 0, 9, 1, 7), replace(of(1, 10, 29, 2, 7), compaction=SWAPPED)
    new, inside = of(2, 0, 9, 3, 0, described=False), of(2, 12, 19, 4, 0)
    chosen, orphans = choose([old, old_output, new, inside])
    assert sorted(c.objects.segment_id.int for c in chosen) == [1, 2, 3, 4] and orphans == []


def test_of_two_outputs_of_one_range_never_swapped_in_the_earlier_is_chosen() -> None:
    tp = TopicPartition("orders", 0)

    # One compaction swapped in but killed before marking its output swapped; a later one of
    # the same range, which read that output, killed before its swap. The earlier holds every
    # record the later does (and the lost database named it).
    def output(n: int, time: int, size: int, *, described: bool = True) -> Candidate:
        c = _candidate(tp, 0, 99, size=size, segment_id=uuid.UUID(int=n))
        c = _epochs(c, (0, 0), described=described)
        return replace(c, compaction=PENDING, description=c.description._replace(event_time_ms=time))

    earlier, later = output(9, 10, 600), output(1, 20, 360)
    assert choose([earlier, later])[0] == [earlier]
    # Rebuilt from their bytes, both have the rebuild's time: the larger holds more records.
    earlier, later = output(1, 50, 600, described=False), output(9, 50, 360, described=False)
    assert choose([earlier, later])[0] == [earlier]


# -- looking again at what holds an orphan's range -------------------------------------------------


def test_a_second_copy_is_kept_when_the_set_it_defers_to_is_gone(
    healthy: Tier, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    storage, spec, keys = _directory_store(healthy, tmp_path / "remote")
    rows = _rows(healthy)
    vanishing, staying = rows[0], rows[3]
    copies = {}
    for row in (vanishing, staying):
        copies[row.segment_id] = _other_copy(row)  # no description: the described set is chosen
        _put(storage, row.layout.log_key, copies[row.segment_id][0])
        _put(storage, row.layout.index_key, copies[row.segment_id][1])
    collect = _then_delete(storage, _keys([vanishing]))
    report = _rebuild_here(storage, spec, _database(request, tmp_path / "db"), collect)
    orphans = _by_keys(report.orphans)
    assert set(orphans) == set(copies.values())
    last = orphans[copies[vanishing.segment_id]]
    assert last.reason.startswith("a second copy") and last.held_by == _keys([vanishing])
    assert not last.deleted and vanishing.layout.log_key in str(last.kept) and "gone" in str(last.kept)
    assert orphans[copies[staying.segment_id]].deleted
    expected = (set(keys) - set(_keys([vanishing]))) | set(copies[vanishing.segment_id])
    assert sorted(storage.list_keys()) == sorted(expected)


def test_replaced_segments_are_kept_when_the_output_holding_them_is_gone(
    swapped: Compacted, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier, originals = swapped.tier, swapped.originals
    storage, spec, keys = _directory_store(tier, tmp_path / "remote")
    outputs = _outputs(keys, originals)
    gone = outputs[TopicPartition("users", 0)]
    collect = _then_delete(storage, gone.keys)
    report = _rebuild_here(storage, spec, _database(request, tmp_path / "db"), collect)
    orphans = _by_keys(report.orphans)
    swapped_in = {r.segment_id for r in _finished(tier.open_store())}
    replaced = [r for r in originals if r.segment_id not in swapped_in]
    assert {r.topic_partition for r in replaced} == set(outputs)
    assert set(orphans) == {_keys([r]) for r in replaced}
    for row in replaced:
        orphan = orphans[_keys([row])]
        assert orphan.reason.startswith("replaced by segment")
        if row.topic_partition == gone.topic_partition:
            assert orphan.held_by == tuple(gone.keys) and not orphan.deleted
            assert gone.log_key is not None and gone.log_key in str(orphan.kept)
        else:
            assert orphan.deleted
    kept = [r for r in replaced if r.topic_partition == gone.topic_partition]
    expected = set(keys) - set(gone.keys) - set(_keys(replaced)) | set(_keys(kept))
    assert sorted(storage.list_keys()) == sorted(expected)


def test_a_pending_output_is_kept_when_a_segment_holding_its_range_is_gone(
    killed: Compacted, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier, originals = killed.tier, killed.originals
    storage, spec, keys = _directory_store(tier, tmp_path / "remote")
    outputs = _outputs(keys, originals)
    tp = TopicPartition("users", 0)
    first = next(r for r in originals if r.topic_partition == tp)
    collect = _then_delete(storage, _keys([first]))
    report = _rebuild_here(storage, spec, _database(request, tmp_path / "db"), collect)
    orphans = _by_keys(report.orphans)
    assert set(orphans) == {tuple(o.keys) for o in outputs.values()}
    held = orphans[tuple(outputs[tp].keys)]
    assert held.reason.startswith("a compaction's output never swapped in")
    assert set(held.held_by) == set(_keys(r for r in originals if r.topic_partition == tp))
    assert not held.deleted and first.layout.log_key in str(held.kept)
    assert orphans[tuple(outputs[TopicPartition("users", 1)].keys)].deleted
    assert set(outputs[tp].keys) <= set(storage.list_keys())


def test_an_orphan_is_kept_when_the_store_cannot_say_whether_what_holds_its_range_is_there(
    healthy: Tier, moto_s3: MotoS3, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bucket = moto_s3.new_bucket()
    row = _rows(healthy)[0]
    copy = _other_copy(row)
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        storage = moto_s3.storage(bucket, endpoint_url=proxy.endpoint_url)
        keys = _copy(healthy, storage)
        _put(storage, row.layout.log_key, copy[0])
        _put(storage, row.layout.index_key, copy[1])

        def described_then_refused(stage: Stage, summaries: Sequence[SegmentSummary]) -> pa.Table:
            table = run_in_process(stage, summaries)
            proxy.inject(ProxyFault.NOT_IMPLEMENTED, "HeadObject")  # refused at once, not retried
            return table

        spec = StorageSpec(f"s3://{bucket}", proxy.endpoint_url)
        report = _rebuild_here(storage, spec, _database(request, tmp_path / "db"), described_then_refused)
        assert proxy.exchanges_of("HeadObject")
        proxy.clear()
        (orphan,) = report.orphans
        assert orphan.keys == copy and orphan.held_by == _keys([row])
        assert not orphan.deleted
        assert "could not look again whether the sets holding its range are still there" in str(orphan.kept)
        assert sorted(storage.list_keys()) == sorted([*keys, *copy])
