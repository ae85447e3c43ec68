"""What ``rlm spark rebuild-metadata`` chooses (:func:`rlm.pipeline.rebuild.job.choose`) against a
model of how a partition's remote objects come about, stated apart from the rules.

A drawn history of one partition: the copier's copies (some redone after a crash that left the
first attempt's objects, some written before descriptions existed), a takeover's copy starting
inside the last one, compactions of runs of segments (killed before their swap, swapped, or
swapped with the mark still ``pending``), retention deleting the oldest segment, the compaction
delay expiring, a trim after an unclean election (of any segment; its copy names the one it
replaces; the retired copies' objects deleted in the same pass, or left by a copier that died after
the swap, or the trim's copy left whole by one that died before it), the topic deleted and created
again under its name (the old topic's segments retired the same way), and sidecars lost (a set then
of unknown state, naming no copy it replaces). The model keeps which rows the lost database held
and which records each set holds at each offset.

Whatever the history, once the orphans the rebuild calls deletable are deleted, every offset a
row of the lost database held is still held by a set that stays, with the records of one such row
or a superset of them (a compaction's inputs hold every record its output holds), and every orphan
names only sets that stay as the ones holding its range. A set a trim's copy found whole names is
never a row: its records past that copy's end, in any row they make (it, or a compaction's output of
it), are the exception, which a trim takes from the remote tier (the broker's from its first local
segment on, then the old leader's), whether the copier died before its swap or after it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import given, note, settings
from hypothesis import strategies as st

from rlm.metastore.model import ByteRange, IndexType, LeaderEpochEntry, TopicPartition
from rlm.pipeline.rebuild.job import Candidate, choose
from rlm.pipeline.rebuild.objects import ObjectSet
from rlm.storage.description import PENDING, SWAPPED, Description

TP = TopicPartition("orders", 0)

#: The event time of a set rebuilt from its bytes: the rebuild's own.
REBUILD_TIME = 1_000_000
Records = tuple[object, ...]
"""The records a set holds at an offset: ``("log", topic, lineage)``, or ``("compacted", output
id, the records it was compacted from)``."""


@dataclass
class ModelSet:
    """One copy attempt's objects, and the lost database's row of it."""

    sid: int
    segment_id: uuid.UUID
    """Random, as the copier's: the last tie-break between sets of one range."""
    start: int
    end: int
    records: dict[int, Records]
    time: int
    topic: int
    """Which topic of the name (one deleted and created again has another topic id)."""
    described: bool = True
    """Its description is read. A compaction's output not described (its description too long)
    still has its mark; a set whose sidecar was lost has neither."""
    compaction: str | None = None
    live: bool = True
    """Its row was ``COPY_SEGMENT_FINISHED`` in the lost database."""
    present: bool = True
    """Its objects are in the store."""
    replaces: ModelSet | None = None
    """Of a trim's copy, the set it replaces, named in its metadata (lost with a sidecar)."""

    def leader_epochs(self) -> tuple[LeaderEpochEntry, ...]:
        """The epoch of each offset is its records' lineage (a compaction keeps its inputs')."""
        entries: list[LeaderEpochEntry] = []
        for offset in range(self.start, self.end + 1):
            records = self.records[offset]
            while records[0] == "compacted":
                records = records[2]  # type: ignore[assignment]
            epoch = records[2]
            assert isinstance(epoch, int)
            if not entries or entries[-1].epoch != epoch:
                entries.append(LeaderEpochEntry(epoch, offset))
        return tuple(entries)

    def candidate(self) -> Candidate:
        topic_id = uuid.UUID(int=self.topic + 1)
        objects = ObjectSet(TP, topic_id, self.start, self.segment_id, None, None)
        objects = ObjectSet(TP, topic_id, self.start, self.segment_id, *objects.both_keys())
        description = Description(
            end_offset=self.end,
            max_timestamp_ms=0,
            size_bytes=sum(_size(self.records[o]) for o in range(self.start, self.end + 1)),
            leader_epochs=self.leader_epochs(),
            index_ranges=((IndexType.OFFSET, ByteRange(0, 8)),),
            txn_index_empty=True,
            broker_id=1,
            event_time_ms=self.time if self.described else REBUILD_TIME,
        )
        return Candidate(
            objects,
            description,
            from_description=self.described,
            compaction=self.compaction,
            replaces=None if self.replaces is None else self.replaces.segment_id,
        )


@dataclass
class Partition:
    sets: list[ModelSet] = field(default_factory=list)
    next_offset: int = 0
    lineage: int = 0
    topic: int = 0
    clock: int = 0

    def add(
        self, data: st.DataObject, start: int, end: int, records: dict[int, Records], **fields: object
    ) -> ModelSet:
        self.clock += 1
        sid = len(self.sets) + 1
        segment_id = uuid.UUID(int=data.draw(st.integers(0, 2**64)) << 16 | sid)  # unique
        made = ModelSet(sid, segment_id, start, end, records, self.clock, self.topic, **fields)  # type: ignore[arg-type]
        self.sets.append(made)
        return made

    def live(self) -> list[ModelSet]:
        return sorted((s for s in self.sets if s.live), key=lambda s: (s.start, s.end))

    def log_records(self, start: int, end: int) -> dict[int, Records]:
        return {o: ("log", self.topic, self.lineage) for o in range(start, end + 1)}


def _size(records: Records) -> int:
    """The bytes of a set's records at an offset: each compaction keeps fewer (one that drops
    nothing leaves the same records, which a model of records that differ leaves out)."""
    return 100 if records[0] == "log" else _size(records[2]) * 3 // 5  # type: ignore[arg-type]


def holds(kept: Records, wanted: Records) -> bool:
    """Whether a set holding ``kept`` at an offset holds every record of ``wanted`` there."""
    while True:
        if kept == wanted:
            return True
        if wanted[0] != "compacted":
            return False
        wanted = wanted[2]  # type: ignore[assignment]


OPERATIONS = (
    "copy",
    "copy",
    "copy",
    "redo",
    "takeover",
    "compact",
    "retention",
    "delay",
    "trim",
    "lose",
    "recreate",
)


def apply(p: Partition, op: str, data: st.DataObject) -> None:
    live = p.live()
    if op in ("copy", "redo"):
        end = p.next_offset + data.draw(st.integers(0, 7))
        records = p.log_records(p.next_offset, end)
        described = data.draw(st.booleans())
        if op == "redo":  # a copy that crashed after its upload: its objects stay, its row went
            p.add(data, p.next_offset, end, records, live=False, described=described)
        p.add(data, p.next_offset, end, dict(records), described=described)
        p.next_offset = end + 1
    elif op == "takeover" and live and live[-1].start < p.next_offset - 1:
        # Another broker's sidecar copies from its own segment's start, inside the last copy.
        start = data.draw(st.integers(live[-1].start + 1, p.next_offset - 1))
        end = p.next_offset + data.draw(st.integers(0, 5))
        records = p.log_records(start, end)
        p.add(data, start, end, records)
        p.next_offset = end + 1
    elif op == "compact" and live:
        first = data.draw(st.integers(0, len(live) - 1))
        run = [live[first]]
        for s in live[first + 1 :]:
            if s.start != run[-1].end + 1 or len(run) >= data.draw(st.integers(1, 4)):
                break
            run.append(s)
        start, end = run[0].start, run[-1].end
        if any(s.live and s not in run and s.start <= end and s.end >= start for s in p.sets):
            return  # compaction takes runs of segments no other copy overlaps
        sid = len(p.sets) + 1
        records = {o: ("compacted", sid, s.records[o]) for s in run for o in range(s.start, s.end + 1)}
        outcome = data.draw(st.sampled_from(["killed", "swapped", "swapped, mark not written"]))
        swapped = outcome != "killed"
        mark = SWAPPED if outcome == "swapped" else PENDING
        p.add(data, start, end, records, compaction=mark, live=swapped, described=data.draw(st.booleans()))
        for s in run:
            s.live = s.live and not swapped  # replaced: objects kept for the delay
    elif op == "retention" and live:
        oldest = live[0]
        oldest.live, oldest.present = False, False
    elif op == "delay":
        for s in p.sets:
            replaced = (
                not s.live
                and s.present
                and any(
                    o.live and o.compaction is not None and o.start <= s.start and s.end <= o.end
                    for o in p.sets
                )
            )
            if replaced:
                s.present = False
    elif op == "trim":
        copies = [s for s in live if s.end > s.start]
        if not copies:
            return
        diverged = data.draw(st.sampled_from(copies))
        kept_end = data.draw(st.integers(diverged.start, diverged.end - 1))
        cut = data.draw(st.integers(diverged.start + 1, kept_end + 1))
        crash = data.draw(st.sampled_from(["none", "after the swap", "before the swap"]))
        kept = {o: diverged.records[o] for o in range(diverged.start, kept_end + 1)}
        if crash == "before the swap":  # the trim's copy whole, before the copies from the cut were marked
            p.add(data, diverged.start, kept_end, kept, live=False, replaces=diverged)
            return
        for s in live:
            if s is diverged or s.start >= cut:  # their objects left when it died before deleting them
                s.live, s.present = False, crash == "after the swap"
        p.add(data, diverged.start, kept_end, kept, replaces=diverged)
        p.next_offset, p.lineage = cut, p.lineage + 1
    elif op == "recreate":
        # The topic deleted and created again: the copier retires the old topic's segments and
        # deletes their objects (unless it dies first); the new topic starts at offset 0, epoch 0.
        died = data.draw(st.booleans())
        for s in live:
            s.live, s.present = False, died
        p.topic, p.lineage, p.next_offset = p.topic + 1, 0, 0
    elif op == "lose":
        present = [s for s in p.sets if s.present]
        if present:
            lost = data.draw(st.sampled_from(present))
            lost.described, lost.compaction, lost.replaces = False, None, None


@settings(max_examples=6000)
@given(st.data())
def test_deleting_the_orphans_of_a_rebuild_loses_no_offset_the_database_held(data: st.DataObject) -> None:
    p = Partition()
    steps = data.draw(st.lists(st.sampled_from(OPERATIONS), min_size=1, max_size=14))
    for op in steps:
        apply(p, op, data)
    present = [s for s in p.sets if s.present]
    candidates = [s.candidate() for s in present]
    chosen, orphans = choose(candidates)
    for s in p.sets:
        note(
            f"{s.sid}: {s.start}..{s.end} epochs {[tuple(e) for e in s.leader_epochs()]} {s.compaction} "
            f"{'live' if s.live else '-'} {'present' if s.present else 'gone'} "
            f"{'described' if s.described else 'undescribed'} id {s.segment_id}"
            f"{'' if s.replaces is None else f' replaces {s.replaces.sid}'}"
        )
    note(f"chosen {[c.objects.segment_id for c in chosen]}")
    for o in orphans:
        note(f"orphan {o.keys[0]}: {o.reason} (deletable: {o.deletable})")

    deleted = {key for o in orphans if o.deletable for key in o.keys}
    staying = [s for s, c in zip(present, candidates, strict=True) if not set(c.objects.keys) & deleted]
    staying_keys = {key for s in staying for key in s.candidate().objects.keys}
    assert {key for c in chosen for key in c.objects.keys} <= staying_keys
    for orphan in orphans:
        assert set(orphan.held_by) <= staying_keys, orphan
    trims = [(t, t.replaces) for t in present if t.replaces is not None and t.replaces.present]
    # The set a trim's copy found whole replaced is never a row: the old leader's records past the
    # cut never answer again.
    assert not {o.segment_id for _, o in trims} & {c.objects.segment_id for c in chosen}
    for offset in range(max(s.end for s in p.sets) + 1 if p.sets else 0):
        rows = [
            s
            for s in p.sets
            if s.live
            and s.start <= offset <= s.end
            and not any(
                t.end < offset <= o.end and holds(o.records[offset], s.records[offset]) for t, o in trims
            )
        ]
        if not rows:
            continue
        assert any(
            holds(s.records[offset], row.records[offset])
            for s in staying
            if s.start <= offset <= s.end
            for row in rows
        ), offset
