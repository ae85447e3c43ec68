"""``rlm spark rebuild-metadata``, the driver's side: list, describe (a stage), choose, write.

The driver lists the keys under the store's root and groups them into object sets; executors
describe each set (one HEAD when it carries a description, else a read of its objects); the
driver chooses one set per offset range and writes its row, ``COPY_SEGMENT_FINISHED``, into an
empty, migrated metadata database.

Where sets cover the same range (a copy that crashed after its upload and was done again), the
complete one is chosen: one whose objects are both there and agree with what describes them;
a compaction's output marked pending loses to a set of the same range; then the set of the latest
leader epoch (after an unclean leader election, a copy of the old leader's a copier that died
left before deleting it is not the log's), one with a description, the latest copy time (of
outputs marked pending, the largest, then the earliest: a later compaction of the range read from
it), and the highest segment id. A set whose range lies wholly inside a compaction output's is one
the compaction replaced (the output is chosen), unless it holds a later leader epoch than the
output (a copy of the log after an unclean election: both stay), or that output is still marked
pending (its job died before its swap) and the sets inside it hold its whole range: then those
are chosen and the output is an orphan. The others, incomplete sets, replaced sets and keys that
are no segment's are listed as orphans, deleted only with ``delete_orphans``. Sets of another
topic id than others of the partition (a topic deleted and created again under the same name,
whose old segments a copier that died left) are none of the others' copies nor inputs: they are
rows beside them, which the copier retires at its next pass, as in the original database.
Overlapping sets of different ranges (a takeover's copy) are all kept, as the copier left them,
and so is a set inside the range of a copy the copier wrote (an older copy inside a takeover's).

A trim's copy (:mod:`rlm.tiering.trim`: a diverged copy's first batches, which replaces it after an
unclean leader election) is written whole, naming the copy it replaces (``rlm-replaces``), before
the store's swap; the copy it replaces is marked retired only after the swap. Wherever the copier
died between the two, a rebuild that finds the trim's copy complete chooses it, and the copy it
names is an orphan: the rebuild marks it retired, as the copier would have, and deletes it with
``delete_orphans`` while the trim's copy is still there. The old leader's records past the cut
never answer again, in a later rebuild neither (once retention deleted the trim's copy, the mark
alone keeps the old copy out). A trim's copy that names none (written before
trims' copies did, or whose metadata could not be read) stays beside the copy it replaced, and the
next copier pass trims that one again.

A set rebuilt from its bytes with no compaction mark read (its description could not be read, as
a damaged sidecar, or it has none) may be a compaction's output still pending: its state is
unknown, and the originals it would replace are the data of record until shown otherwise. When
the sets inside its range hold the whole range, those are chosen, as for a pending output, and it
is an orphan never deleted; when they do not (so it is chosen), the sets inside it are orphans
never deleted. So are the sets inside an output marked pending that is chosen because they no
longer hold its whole range (retention, or a cleanup cut short, took some): its compaction was
never swapped in, and they may hold records it dropped. A second copy of a range whose chosen
set is of unknown state and whose ``.log`` differs in size is not a copy of it, and is never
deleted either. An unknown set that holds no other set's range is chosen as any other.

A set marked retired (the copier retired it after an unclean leader election and died before
deleting its objects) is an orphan, deleted with ``delete_orphans``: it never becomes a row, so
the old leader's records it holds never answer again. Only a missing object makes a set
incomplete (:class:`~rlm.pipeline.rebuild.objects.Outcome`).
A set whose description could not be used is rebuilt from its bytes and listed among the
report's problems; one whose bytes do not give a row either is an orphan that is never deleted
(an operator decides). A store that failed while a set was described says nothing of the set:
the rebuild raises, naming its objects, before it writes or deletes anything, so that it can be
run again. Before deleting an orphan, the rebuild looks again: an incomplete set whose missing
object is there by then is kept, and so is a second copy, a replaced set or a pending output when
an object of the chosen sets that hold its range is gone by then (it may be the last copy of
those offsets); an orphan the store cannot tell about is kept, and so is a set a row of the
database names (a sidecar copying into it since the rebuild found it empty: :func:`keep_named`).
The report says why.

The remote log start offset comes from the marker retention writes beside a partition's
segments (:mod:`rlm.storage.log_start`; a partition retention never cut has none and starts at
its first segment, as in the original). What the objects cannot tell stays at its default: for
sets without a description, the broker that copied them (``-1``) and the copy time (the
rebuild's).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from rlm.errors import ConfigError, RlmError, StorageError, StorageUnavailableError
from rlm.metastore.model import RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.pipeline.rebuild.objects import (
    ObjectSet,
    Outcome,
    describe_stage,
    description_of,
    object_sets,
)
from rlm.pipeline.stage import Collect
from rlm.pipeline.storage import StorageSpec
from rlm.storage.description import DIVERGED, PENDING, Description
from rlm.storage.layout import parse_segment_key
from rlm.storage.log_start import marker_partition, marker_topic_id, read_marker
from rlm.storage.marks import mark_retired
from rlm.storage.protocol import RemoteStorage

#: Markers (remote log start offsets) read at once.
MARKER_THREADS = 16
#: Why a key that is no segment's object is an orphan (never deleted: rlm did not write it).
FOREIGN = "not a segment object rlm writes"


@dataclass(frozen=True)
class RebuildOptions:
    topics: tuple[str, ...] = ()
    """Only these topics' objects (all when empty)."""
    delete_orphans: bool = False


@dataclass(frozen=True)
class Orphan:
    """Objects no rebuilt row references, and why."""

    keys: tuple[str, ...]
    reason: str
    deletable: bool = True
    """Whether ``delete_orphans`` deletes them: not keys rlm did not write, nor a set that may be
    whole (undescribable), nor one that may hold records the chosen sets do not (a set of unknown
    compaction state holding others' range, or inside the range of one)."""
    missing: tuple[str, ...] = ()
    """Of an incomplete set, the keys found missing: looked at again before deleting the rest."""
    held_by: tuple[str, ...] = ()
    """Of a set whose range other sets hold (a second copy, a replaced set, a compaction's output
    never swapped in), the keys of those that stay (chosen, or orphans never deleted): looked at
    again before deleting it, which is kept when one is gone."""
    deleted: bool = False
    kept: str | None = None
    """Why they were not deleted, when deleting orphans was asked."""
    retire: RemoteSegment | None = field(default=None, repr=False)
    """Of a copy a trim replaced, its row: the rebuild marks it retired (module docstring)."""
    marked: str | None = None
    """Of such a copy, how its retired mark went: ``marked``, or why it could not be marked."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"keys": list(self.keys), "reason": self.reason, "deleted": self.deleted}
        if self.kept is not None:
            out["kept"] = self.kept
        if self.marked is not None:
            out["retired_mark"] = self.marked
        return out


@dataclass(frozen=True)
class Problem:
    """A set rebuilt from its bytes because its description could not be used, and why."""

    keys: tuple[str, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "reason": self.reason}


@dataclass(frozen=True)
class RebuildReport:
    partitions: int
    segments: int
    """Rows written."""
    from_descriptions: int
    """Of those, rows whose objects described themselves (the others were read)."""
    seconds: float
    orphans: list[Orphan] = field(default_factory=list)
    deleted_orphans: bool = False
    """Whether deleting orphans was asked (each orphan says whether it was deleted)."""
    problems: list[Problem] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "segments": self.segments,
            "from_descriptions": self.from_descriptions,
            "read": self.segments - self.from_descriptions,
            "seconds": round(self.seconds, 3),
            "deleted_orphans": self.deleted_orphans,
            "orphans": [o.to_json() for o in self.orphans],
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass(frozen=True)
class Candidate:
    objects: ObjectSet
    description: Description
    from_description: bool
    compaction: str | None = None
    """A compaction output's state: ``pending`` until its swap, ``swapped`` after."""
    replaces: UUID | None = None
    """Of a trim's copy, the segment id of the diverged copy it replaces."""

    @property
    def pending(self) -> bool:
        """A compaction's output not (known to be) swapped in."""
        return self.compaction == PENDING

    @property
    def copied(self) -> bool:
        """Described as a segment the copier wrote: no compaction's output (they are marked)."""
        return self.from_description and self.compaction is None

    @property
    def unknown(self) -> bool:
        """Rebuilt from its bytes with no compaction mark read: a compaction's output never
        swapped in cannot be told from a segment the copier wrote (module docstring)."""
        return not self.from_description and self.compaction is None

    @property
    def log(self) -> tuple[TopicPartition, str]:
        """The partition and its topic id: a topic deleted and created again under the same name
        has another id, and its sets and the new topic's are never copies of each other."""
        return (self.objects.topic_partition, str(self.objects.topic_id))

    def slot(self) -> tuple[TopicPartition, str, int, int]:
        return (*self.log, self.objects.start_offset, self.description.end_offset)

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch of its records."""
        return max((e.epoch for e in self.description.leader_epochs), default=-1)

    def later_leader(self, other: Candidate) -> bool:
        """Whether it holds a later leader's log than ``other`` (of the same topic id) does:
        after an unclean leader election, where they differ, its records are the partition's."""
        return self.latest_epoch > other.latest_epoch

    def preference(self) -> tuple[bool, int, int, int, str]:
        """Of the sets of one range, the one chosen is the greatest. Of a compaction's outputs
        not known to be swapped in, the largest, then the earliest: a later compaction of the
        same range read from it (or from what it read), and holds no record it does not."""
        d = self.description
        order = (
            (d.size_bytes, -d.event_time_ms)
            if self.pending
            else (int(self.from_description), d.event_time_ms)
        )
        return (not self.pending, self.latest_epoch, *order, str(self.objects.segment_id))


def _covered(output: Candidate, others: Sequence[Candidate]) -> list[Candidate] | None:
    """The sets among ``others`` (of no pending output) that hold every offset of ``output``'s
    range between them, each wholly inside it; ``None`` when some offset is held by none."""
    log, start, end = output.log, output.objects.start_offset, output.description.end_offset
    inside = sorted(
        (
            c
            for c in others
            if c is not output
            and not c.pending
            and c.log == log
            and start <= c.objects.start_offset
            and c.description.end_offset <= end
        ),
        key=lambda c: (c.objects.start_offset, -c.description.end_offset),
    )
    reached = start - 1
    for c in inside:
        if c.objects.start_offset > reached + 1:
            return None
        reached = max(reached, c.description.end_offset)
    return inside if reached >= end else None


def choose(candidates: Sequence[Candidate]) -> tuple[list[Candidate], list[Orphan]]:
    """One complete set per (partition, topic id, start offset, end offset), and none lying
    wholly inside the range of another chosen set that may be a compaction's output; the others
    as orphans, each naming the keys of the sets that hold its range once orphans are deleted
    (:attr:`Orphan.held_by`).

    A set inside a compaction output's range is one the compaction replaced (its output covers the
    inputs' offsets, and is kept while the inputs wait for ``remote.compaction.delete.delay.ms``):
    the original database holds the output alone as finished. A set a complete trim's copy names
    (:attr:`Candidate.replaces`) is an orphan that copy holds, wherever the copier died around the
    swap (module docstring), and no pending output: the copier trimmed it as the partition's
    segment. As a compaction's output it still replaces the sets inside it, but for the trim's copy.
    Any other set inside the range of a copy the copier wrote (:attr:`Candidate.copied`) stays
    beside it, as the copier left them: a trim's copy naming no copy, inside the diverged one it
    replaced (the next copier pass trims that again), or an older copy inside a takeover's.
    But an output still marked pending is one whose job died before its swap (or before marking it
    swapped): while the segments it would replace hold its whole range, the original database holds
    those, and the output is the orphan; once some are gone (deleted after the swap), the output is
    the partition's. A set of unknown compaction state (:attr:`Candidate.unknown`) may be such an
    output: it is chosen or not as a pending one, and what it would replace is never deleted on its word.
    """
    best: dict[tuple[TopicPartition, str, int, int], Candidate] = {}
    for c in candidates:
        if c.slot() not in best or c.preference() > best[c.slot()].preference():
            best[c.slot()] = c
    chosen = {id(c) for c in best.values()}
    # Of the trim's copies naming a set, the chosen sets of their ranges (a second copy of one
    # holds the same batches).
    trims = {
        old: list({id(best[t.slot()]): best[t.slot()] for t in copies}.values())
        for old, copies in _trims(candidates).items()
    }
    held_by: dict[int, list[Candidate]] = {}
    found: list[tuple[Candidate, Orphan]] = []
    for c in candidates:
        if id(c) not in chosen:
            kept = best[c.slot()]
            held_by[id(c)] = [kept]
            diverged = kept.later_leader(c)
            if diverged:
                reason = (
                    f"a copy of the range segment {kept.objects.segment_id} holds, of an earlier "
                    "leader epoch: the log diverged from it (an unclean leader election)"
                )
            elif c.pending and not kept.pending:
                reason = (
                    f"a compaction's output never swapped in: segment {kept.objects.segment_id} "
                    "holds its range"
                )
            else:
                reason = f"a second copy of the range segment {kept.objects.segment_id} holds"
            orphan = Orphan(tuple(c.objects.keys), reason)
            if not diverged and kept.unknown and kept.description.size_bytes != c.description.size_bytes:
                orphan = replace(
                    orphan,
                    deletable=False,
                    kept=f"its .log differs in size from segment {kept.objects.segment_id}'s, whose "
                    "compaction state could not be read: that may be a compaction's output never "
                    "swapped in, holding fewer records",
                )
            found.append((c, orphan))
    survivors = list(best.values())
    for c in list(survivors):
        inputs = _covered(c, survivors) if (c.pending or c.unknown) and id(c) not in trims else None
        if inputs is not None:
            survivors.remove(c)
            held_by[id(c)] = inputs
            held = ", ".join(str(i.objects.segment_id) for i in inputs)
            keys = tuple(c.objects.keys)
            if c.pending:
                reason = f"a compaction's output never swapped in: segments {held} hold its range"
                found.append((c, Orphan(keys, reason)))
            else:
                reason = f"its compaction state could not be read, and segments {held} hold its range"
                kept_why = (
                    "its compaction state could not be read: whether it is a compaction's output "
                    "never swapped in is for an operator to decide"
                )
                found.append((c, Orphan(keys, reason, deletable=False, kept=kept_why)))
    # By partition and topic id, start offset, then the longest range first: a set is inside an
    # earlier one's range when it ends no later than the furthest end so far.
    ordered = sorted(
        survivors,
        key=lambda c: (c.log, c.objects.start_offset, -c.description.end_offset),
    )
    kept_sets: list[Candidate] = []
    cover: Candidate | None = None  # of the sets that may be a compaction's output, kept or
    # trimmed, the one reaching furthest so far in the partition (inside a copy the copier wrote,
    # a set stays)
    firsts: set[int] = set()  # the trims' copies of the cover's first batches, and theirs
    for c in ordered:
        if cover is not None and cover.log != c.log:
            cover, firsts = None, set()
        inside = cover is not None and c.description.end_offset <= cover.description.end_offset
        # Inside, yet no set the cover replaced: a trim's copy of the cover's first batches (or of
        # such a copy's), or a copy of a later leader epoch than the cover holds (a compaction's
        # inputs hold no epoch its output does not): the log after an unclean election, inside
        # the range of a diverged copy a copier that died left. It stays; the cover still reaches
        # further.
        own = inside and cover is not None and (id(c) in firsts or c.later_leader(cover))
        if inside and cover is not None and not own:
            held_by[id(c)] = [cover]
            found.append((c, _inside(c, cover)))
            continue
        if id(c) in trims:
            held_by[id(c)] = trims[id(c)]
            found.append((c, _trimmed(c, trims[id(c)])))
            if inside:
                firsts.update(id(t) for t in trims[id(c)])
        else:
            kept_sets.append(c)
        if not inside and not c.copied:
            cover, firsts = c, {id(t) for t in trims.get(id(c), ())}
    # What holds an orphan's range once deleting is done: the sets it defers to when they stay
    # (chosen, or orphans never deleted), else what holds theirs (each step leads inward or to a
    # chosen set, so it ends).
    stays = {id(c) for c in kept_sets} | {id(c) for c, o in found if not o.deletable}

    def holders(c: Candidate) -> list[Candidate]:
        return [h for d in held_by[id(c)] for h in ([d] if id(d) in stays else holders(d))]

    orphans = []
    for c, orphan in found:
        held_keys = dict.fromkeys(key for h in holders(c) for key in h.objects.keys)
        orphans.append(replace(orphan, held_by=tuple(held_keys)))
    return kept_sets, orphans


def _trims(candidates: Sequence[Candidate]) -> dict[int, list[Candidate]]:
    """Per set (by ``id``) a trim's copy among ``candidates`` names as the copy it replaces, the
    copies naming it. A name is taken only from a copy of the same partition and topic id that
    starts where the named set starts and ends before it ends, as a trim's copy does."""
    by_id = {c.objects.segment_id: c for c in candidates}
    trims: dict[int, list[Candidate]] = {}
    for c in candidates:
        old = None if c.replaces is None else by_id.get(c.replaces)
        if (
            old is not None
            and old.log == c.log
            and old.objects.start_offset == c.objects.start_offset
            and c.description.end_offset < old.description.end_offset
        ):
            trims.setdefault(id(old), []).append(c)
    return trims


def _trimmed(c: Candidate, trims: Sequence[Candidate]) -> Orphan:
    """The orphan of ``c``, replaced by the trim's copies ``trims`` (module docstring)."""
    held = "; ".join(
        f"segment {t.objects.segment_id} holds its batches up to offset {t.description.end_offset}"
        for t in trims
    )
    reason = (
        f"replaced by a trim after an unclean leader election ({held}): the broker's log diverged "
        "from its later records"
    )
    return Orphan(tuple(c.objects.keys), reason, retire=c.objects.row(c.description))


def _inside(c: Candidate, cover: Candidate) -> Orphan:
    """The orphan of ``c``, wholly inside the range of the chosen ``cover``: deletable only when
    ``cover`` is a compaction's output known to be swapped in (module docstring)."""
    keys, cover_id = tuple(c.objects.keys), cover.objects.segment_id
    if not (cover.unknown or cover.pending):
        return Orphan(
            keys, f"replaced by segment {cover_id}, which holds its whole range (a compaction's output)"
        )
    if cover.unknown:
        why = "chosen though its compaction state could not be read (a compaction's output, if swapped in)"
        kept = (
            f"segment {cover_id}'s description could not be read: it may be a compaction's output "
            "never swapped in, without records this set holds"
        )
    else:
        why = (
            "a compaction's output never swapped in, chosen as the segments it would replace no "
            "longer hold its range"
        )
        kept = (
            f"segment {cover_id} was never swapped in: this set holds records of the range it may "
            "not, which the original database holds"
        )
    return Orphan(keys, f"inside the range of segment {cover_id}, {why}", deletable=False, kept=kept)


def read_log_starts(
    storage: RemoteStorage, markers: Mapping[str, TopicPartition], topics: Sequence[str]
) -> list[tuple[str, TopicPartition, int]]:
    """What each marker says (of ``topics`` only, when some are given): its key, partition and
    offset, by partition; a marker gone since it was listed is left out. They are read
    :data:`MARKER_THREADS` at a time, before a row is written: a marker that cannot be read stops
    the rebuild while the database is still empty, so that it can be run again.

    Raises:
        CorruptDataError: A marker is not one rlm wrote; names it.
        StorageError: A read failed.
    """
    wanted = sorted(
        ((key, tp) for key, tp in markers.items() if not topics or tp.topic in topics),
        key=lambda item: item[1],
    )
    with ThreadPoolExecutor(max(1, min(MARKER_THREADS, len(wanted))), "rlm-rebuild-markers") as pool:
        offsets = list(pool.map(lambda item: read_marker(storage, item[0]), wanted))
    return [
        (key, tp, offset) for (key, tp), offset in zip(wanted, offsets, strict=True) if offset is not None
    ]


def apply_log_starts(
    store: MetadataStore, log_starts: Sequence[tuple[str, TopicPartition, int]], *, now_ms: int
) -> None:
    """Advance each partition's remote log start offset to what its marker says
    (:func:`read_log_starts`). A marker written under another topic id than the partition's
    segments have (a deleted topic of the same name) is passed over. A partition with a marker
    and no segment left is recorded too, under the topic id the marker was written for (its
    first marker's): a topic deleted and created again under the name, whose sidecar adopts
    another id, then starts from none of the deleted topic's log start, as in the original
    database (else that offset would hide the new topic's segments below it, and retention
    delete them). A partition whose segments name two topics (the deleted one's not deleted yet,
    beside its successor's) records no id until a sidecar adopts the broker's: a marker then says
    only that its own topic's offsets below it are gone, and moves the log start no further than
    the first segment of the other topic."""
    for key, tp, marked in log_starts:
        record = store.get_partition(tp)
        own = None if record is None else record.topic_id
        written_for = marker_topic_id(key)
        if own is not None and written_for is not None and written_for != own:
            continue  # a deleted topic's of the same name: not this topic's log start
        offset = marked
        if record is None and written_for is not None:
            store.adopt_topic_id(tp, written_for, event_time_ms=now_ms)
        elif record is not None and own is None and written_for is not None:
            offset = min([marked, *_other_topic_starts(store, tp, written_for)])
        store.advance_log_start_offset(tp, offset)


def _other_topic_starts(store: MetadataStore, tp: TopicPartition, topic_id: UUID) -> list[int]:
    """The start offsets of the finished segments of ``tp`` of a topic id other than ``topic_id``."""
    finished = store.list_segments(tp, states=(SegmentState.COPY_SEGMENT_FINISHED,))
    return [s.start_offset for s in finished if s.topic_id is not None and s.topic_id != topic_id]


def restore_log_starts(
    store: MetadataStore,
    storage: RemoteStorage,
    markers: Mapping[str, TopicPartition],
    topics: Sequence[str],
    *,
    now_ms: int,
) -> None:
    """Read the markers and advance the log start offsets they give
    (:func:`read_log_starts`, :func:`apply_log_starts`)."""
    apply_log_starts(store, read_log_starts(storage, markers, topics), now_ms=now_ms)


def _raise_failures(failed: Sequence[tuple[ObjectSet, dict[str, Any]]]) -> None:
    """Stop the rebuild when the store failed while some set was described (nothing is written
    or deleted yet).

    Raises:
        StorageUnavailableError: Every failure may pass (throttling, 5xx, timeouts).
        StorageError: Some failure will not (access denied, ...).
    """
    if not failed:
        return
    first = failed[0][1]["problem"]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    message = (
        f"the store failed while segment objects were described, so nothing was written or "
        f"deleted; run the rebuild again: {first}{more}"
    )
    key = failed[0][0].keys[0] if failed[0][0].keys else None
    if all(row["retriable"] for _, row in failed):
        raise StorageUnavailableError(message, key=key)
    raise StorageError(message, key=key, retriable=False)


def mark_replaced(storage: RemoteStorage, orphans: Sequence[Orphan], now_ms: int) -> list[Orphan]:
    """Mark retired the copies trims replaced (:attr:`Orphan.retire`), as the copier does after a
    trim's swap; the orphans, each such saying how its mark went. A mark that fails is reported,
    not raised: the rows are written by then, and the copy is still an orphan of this rebuild.
    """
    done: list[Orphan] = []
    for o in orphans:
        if o.retire is None:
            done.append(o)
            continue
        try:
            found = mark_retired(storage, o.retire, now_ms=now_ms, why=DIVERGED)
        except RlmError as exc:
            done.append(replace(o, marked=f"could not be marked retired: {exc}"))
            continue
        done.append(replace(o, marked="marked" if found else "its index object is gone: not marked"))
    return done


def keep_named(store: MetadataStore, orphans: Sequence[Orphan]) -> list[Orphan]:
    """The orphans, each deletable one a row of ``store`` names kept: a sidecar copying into the
    database since the rebuild found it empty adds a segment's row before it uploads the objects,
    so a set it names may be a copy still under way (its missing object on its way after it was
    looked at again), whose row is to be finished."""
    kept = "a row of the metadata database names it: a copy under way"
    done: list[Orphan] = []
    for o in orphans:
        ids = {parsed.segment_id for key in o.keys if (parsed := parse_segment_key(key)) is not None}
        named = o.deletable and any(store.get_segment(i) is not None for i in ids)
        done.append(replace(o, deletable=False, kept=kept) if named else o)
    return done


def delete_orphans(storage: RemoteStorage, orphans: Sequence[Orphan]) -> list[Orphan]:
    """Delete the deletable orphans; the orphans, each saying whether it was deleted or why not.

    Each is looked at again first (one size query per key): an incomplete set is kept when its
    missing object is there by now (a copy still under way, or a store that answered wrongly); a
    set whose range chosen sets hold (:attr:`Orphan.held_by`) is kept when an object of theirs is
    gone by now (deleted by another process or an operator: this may be the last copy of those
    offsets); either is kept when the store cannot tell.

    Raises:
        StorageError: The store failed a delete.
    """
    done: list[Orphan] = []
    for o in orphans:
        if not o.deletable:
            done.append(replace(o, kept=o.kept or "rlm does not delete it"))
            continue
        try:
            back = [key for key in o.missing if storage.object_size(key) is not None]
            gone = [key for key in o.held_by if storage.object_size(key) is None]
        except RlmError as exc:
            what = "it is incomplete" if o.missing else "the sets holding its range are still there"
            done.append(replace(o, kept=f"could not look again whether {what}: {exc}"))
            continue
        if back:
            done.append(replace(o, kept=f"{', '.join(back)} is there now: it may be whole"))
        elif gone:
            done.append(
                replace(
                    o,
                    kept=f"{', '.join(gone)}, of the set holding its range, is gone now: "
                    "it may be the last copy of those offsets",
                )
            )
        else:
            done.append(replace(o, deleted=True))
    storage.delete_objects([key for o in done if o.deleted for key in o.keys])
    return done


def rebuild(
    store: MetadataStore,
    storage: RemoteStorage,
    spec: StorageSpec,
    collect: Collect,
    options: RebuildOptions,
    *,
    now_ms: int | None = None,
) -> RebuildReport:
    """Rebuild the rows of the objects under ``storage`` into ``store``, which must be empty.

    Raises:
        ConfigError: The metadata database holds partitions already.
        StorageError: The storage failed while sets were described or markers read; nothing
            was written or deleted (:class:`StorageUnavailableError` when it may pass).
        CorruptDataError: A remote log start marker is not one rlm wrote (named); nothing was
            written or deleted.
        RlmError: The store or the storage failed.
    """
    started = time.monotonic()
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if store.list_partitions():
        raise ConfigError(
            "the metadata database is not empty: rebuild-metadata writes into an empty, migrated "
            "database (`rlm db upgrade` on a new one)"
        )
    sets, others = object_sets(storage.list_keys(), options.topics)
    markers = {key: tp for key in others if (tp := marker_partition(key)) is not None}
    orphans = [Orphan((key,), FOREIGN, deletable=False) for key in others if key not in markers]
    candidates: list[Candidate] = []
    problems: list[Problem] = []
    if sets:
        table = collect(describe_stage(spec, now_ms), [s.provisional() for s in sets])
        found = {row["segment_id"]: row for row in table.to_pylist()}
        rows = [(objects, found[str(objects.segment_id)]) for objects in sets]
        _raise_failures([(objects, row) for objects, row in rows if row["outcome"] == Outcome.FAILED.value])
        for objects, row in rows:
            outcome, problem, keys = Outcome(row["outcome"]), row["problem"], tuple(objects.keys)
            if outcome is Outcome.INCOMPLETE:
                orphans.append(Orphan(keys, f"incomplete: {problem}", missing=tuple(row["missing"])))
            elif outcome is Outcome.RETIRED:
                orphans.append(Orphan(keys, problem))
            elif outcome is Outcome.UNDESCRIBABLE:
                reason = f"undescribable, both objects are there: {problem}"
                orphans.append(Orphan(keys, reason, deletable=False, kept="it may be whole"))
            else:
                replaces = None if row["replaces"] is None else UUID(row["replaces"])
                candidates.append(
                    Candidate(
                        objects,
                        description_of(row),
                        bool(row["from_description"]),
                        row["compaction"],
                        replaces,
                    )
                )
                if problem is not None:
                    problems.append(Problem(keys, problem))
    log_starts = read_log_starts(storage, markers, options.topics)
    chosen, duplicates = choose(candidates)
    orphans += duplicates
    for c in chosen:
        segment: RemoteSegment = c.objects.row(c.description)
        store.add_segment(segment)
        store.update_segment_state(
            segment.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=segment.event_time_ms
        )
    apply_log_starts(store, log_starts, now_ms=now_ms)
    orphans = mark_replaced(storage, orphans, now_ms)
    if options.delete_orphans:
        orphans = delete_orphans(storage, keep_named(store, orphans))
    return RebuildReport(
        partitions=len({c.objects.topic_partition for c in chosen}),
        segments=len(chosen),
        from_descriptions=sum(c.from_description for c in chosen),
        seconds=time.monotonic() - started,
        orphans=orphans,
        deleted_orphans=options.delete_orphans,
        problems=problems,
    )
