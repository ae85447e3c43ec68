"""Object sets on the remote tier and the metadata rows they stand for.

An *object set* is what one copy attempt wrote: the ``.log`` and ``.indexes`` objects of one
segment id. Their keys give the topic, partition, topic id, start offset and segment id; the rest
of the row comes from the index object's description (:mod:`rlm.storage.description`: one HEAD)
or, for sets copied before descriptions existed (or whose description did not fit), from reading
the objects: the ``.log`` gives the end offset, the size, and the offset and time indexes Kafka's
recovery builds (which the copier uploads, so they locate the first two files of the index
object); the transaction index holds one 34-byte entry per abort marker of the log; a producer
snapshot says its own length; the leader-epoch checkpoint is the rest and gives the epochs.

A set is *complete* when both objects exist and agree with what describes them; only complete
sets become rows. Describing a set has one of five outcomes (:class:`Outcome`). A set whose index
object is marked retired (:mod:`rlm.storage.description`) is an orphan a rebuild may delete: the
copier retired it, and a copier that died before deleting its objects left them. Only a missing
object makes a set *incomplete*, another such orphan: a description that cannot be read
(a damaged filesystem sidecar, JSON rlm cannot parse) or that disagrees with the objects is set
aside and the set is read instead, as if it had none; a set whose bytes do not give a row either is
*undescribable* and kept for an operator to look at; a store that fails (throttled after its
retries, access denied) tells nothing of the set, and the rebuild fails without writing or
deleting anything, to be run again. A described set also carries what its index object's metadata
says beyond the description: a compaction output's state, and the copy a trim's copy replaces
(:mod:`rlm.storage.description`), by which :mod:`rlm.pipeline.rebuild.job` chooses.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import pyarrow as pa

from rlm.errors import CorruptDataError, CorruptIndexError, CorruptRecordError, RlmError
from rlm.log.batches import crc_valid
from rlm.log.checkpoints import decode_leader_epoch_checkpoint, topic_id_to_uuid
from rlm.log.recovery import IndexRebuilder
from rlm.log.snapshot import ENTRY_SIZE as SNAPSHOT_ENTRY_SIZE
from rlm.log.snapshot import HEADER_SIZE as SNAPSHOT_HEADER_SIZE
from rlm.log.snapshot import SNAPSHOT_VERSION
from rlm.log.txnindex import ENTRY_SIZE as TXN_ENTRY_SIZE
from rlm.log.txnindex import VERSION as TXN_VERSION
from rlm.log.txnindex import AbortedTxn, decode_entry
from rlm.metastore.model import (
    UNKNOWN_BROKER,
    ByteRange,
    IndexType,
    LeaderEpochEntry,
    ObjectLayout,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)
from rlm.pipeline.reader import iter_batches, read_chunks
from rlm.pipeline.stage import Stage, arrow_schema, batch_of
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.description import (
    DIVERGED,
    TOPIC_DELETED,
    Description,
    read_compaction,
    read_description,
    read_replaces,
    read_retired,
)
from rlm.storage.layout import (
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    ZERO_TOPIC_ID,
    ParsedKey,
    parse_segment_key,
    segment_keys,
)
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.prepare import epochs_of_segment


@dataclass(frozen=True)
class ObjectSet:
    """The objects one copy attempt wrote (either may be missing)."""

    topic_partition: TopicPartition
    topic_id: uuid.UUID | None
    start_offset: int
    segment_id: uuid.UUID
    log_key: str | None
    index_key: str | None

    @property
    def keys(self) -> list[str]:
        """The keys of the objects that exist."""
        return [k for k in (self.log_key, self.index_key) if k is not None]

    def both_keys(self) -> tuple[str, str]:
        """The keys of both objects, whether they exist or not."""
        keys = segment_keys(
            self.topic_partition.topic,
            self.topic_id,
            self.topic_partition.partition,
            self.start_offset,
            self.segment_id,
        )
        return keys.log_key, keys.indexes_key

    def provisional(self) -> SegmentSummary:
        """The set as a stage's task takes it: a summary of a provisional row naming the keys
        (its other fields are what the task finds out)."""
        log_key, index_key = self.both_keys()
        row = RemoteSegment(
            segment_id=self.segment_id,
            topic_partition=self.topic_partition,
            topic_id=self.topic_id,
            start_offset=self.start_offset,
            end_offset=self.start_offset,
            max_timestamp_ms=-1,
            size_bytes=0,
            broker_id=UNKNOWN_BROKER,
            event_time_ms=0,
            leader_epochs=(LeaderEpochEntry(0, self.start_offset),),
            layout=ObjectLayout(log_key, index_key, ()),
            txn_index_empty=True,
        )
        return SegmentSummary(row, read_from=self.start_offset, read_to=self.start_offset - 1)

    def row(self, d: Description, state: SegmentState = SegmentState.COPY_SEGMENT_STARTED) -> RemoteSegment:
        """The metadata row of the set, as described."""
        log_key, index_key = self.both_keys()
        return RemoteSegment(
            segment_id=self.segment_id,
            topic_partition=self.topic_partition,
            topic_id=self.topic_id,
            start_offset=self.start_offset,
            end_offset=d.end_offset,
            max_timestamp_ms=d.max_timestamp_ms,
            size_bytes=d.size_bytes,
            broker_id=d.broker_id,
            event_time_ms=d.event_time_ms,
            leader_epochs=d.leader_epochs,
            layout=ObjectLayout(log_key, index_key, d.index_ranges),
            txn_index_empty=d.txn_index_empty,
            state=state,
        )


def object_sets(keys: Iterable[str], topics: Iterable[str] = ()) -> tuple[list[ObjectSet], list[str]]:
    """Group segment object keys by copy attempt; the other keys are returned apart.

    Only sets of ``topics`` are kept when some are given (other topics' keys are neither).
    """
    chosen = set(topics)
    parsed_of: dict[uuid.UUID, ParsedKey] = {}
    keys_of: dict[uuid.UUID, dict[str, str]] = {}
    foreign: list[str] = []
    for key in keys:
        parsed = parse_segment_key(key)
        if parsed is None:
            foreign.append(key)
            continue
        if chosen and parsed.topic not in chosen:
            continue
        parsed_of.setdefault(parsed.segment_id, parsed)
        keys_of.setdefault(parsed.segment_id, {})[parsed.suffix] = key
    sets = [
        ObjectSet(
            TopicPartition(p.topic, p.partition),
            None if p.topic_id == ZERO_TOPIC_ID else topic_id_to_uuid(p.topic_id),
            p.start_offset,
            segment_id,
            keys_of[segment_id].get(LOG_SUFFIX),
            keys_of[segment_id].get(INDEXES_SUFFIX),
        )
        for segment_id, p in parsed_of.items()
    ]
    sets.sort(key=lambda s: (s.topic_partition, s.start_offset, str(s.segment_id)))
    return sets, foreign


class Described(NamedTuple):
    """What describes a set."""

    description: Description
    from_description: bool
    """Whether that came from its description (else from its bytes)."""
    compaction: str | None
    """A compaction output's state (:func:`rlm.storage.description.read_compaction`)."""
    replaces: uuid.UUID | None = None
    """Of a trim's copy, the copy it replaces (:func:`rlm.storage.description.read_replaces`)."""


class Outcome(enum.Enum):
    """What describing a set found."""

    DESCRIBED = "described"
    """Both objects are there and give the row (from the description, or from their bytes when
    the description was missing, unreadable or wrong: ``problem`` then says what was wrong)."""
    RETIRED = "retired"
    """The copier retired the copy (the broker's log diverged from it, or its topic was deleted)
    and was to delete its objects: an orphan to delete."""
    INCOMPLETE = "incomplete"
    """An object of the set is missing: a copy that never finished, an orphan to delete."""
    UNDESCRIBABLE = "undescribable"
    """Both objects are there, but neither a description nor their bytes give a row: kept."""
    FAILED = "failed"
    """The store failed; nothing is known of the set, and the rebuild must not go on."""


#: Why a copy was retired, as a rebuild's orphan says it.
_RETIRED_BECAUSE = {
    DIVERGED: "the broker's log diverged from its records (an unclean leader election)",
    TOPIC_DELETED: "its topic was deleted (the partition holds a topic created again under its name)",
}


class Finding(NamedTuple):
    """The outcome of describing a set."""

    outcome: Outcome
    described: Described | None = None
    """What describes the set, when :attr:`Outcome.DESCRIBED`."""
    problem: str | None = None
    """What was wrong, naming the object."""
    missing: tuple[str, ...] = ()
    """The keys found missing, when :attr:`Outcome.INCOMPLETE`."""
    retriable: bool = False
    """Whether the store's failure may pass, when :attr:`Outcome.FAILED`."""


def examine(storage: RemoteStorage, objects: ObjectSet, now_ms: int) -> Finding:
    """Describe a set, and say what could not be.

    Never raises :class:`~rlm.errors.RlmError`: a failing store is :attr:`Outcome.FAILED`.
    """
    log_key, index_key = objects.both_keys()
    try:
        return _examine(storage, objects, now_ms)
    except CorruptDataError as exc:  # a description or bytes _examine did not expect to fail
        return Finding(Outcome.UNDESCRIBABLE, problem=str(exc))
    except RlmError as exc:
        key = getattr(exc, "key", None) or getattr(exc, "path", None) or f"{log_key}, {index_key}"
        text = str(exc)
        return Finding(
            Outcome.FAILED,
            problem=text if key in text else f"{key}: {text}",
            retriable=exc.retriable,
        )


def _examine(storage: RemoteStorage, objects: ObjectSet, now_ms: int) -> Finding:
    log_key, index_key = objects.both_keys()
    log_size = storage.object_size(log_key)
    damaged: str | None = None
    metadata: dict[str, str] | None
    try:
        metadata = storage.object_metadata(index_key)
    except CorruptDataError as exc:  # the object may be whole: only its metadata is unreadable
        damaged = str(exc)
        metadata = {} if storage.object_size(index_key) is not None else None
    missing = tuple(key for key, found in ((log_key, log_size), (index_key, metadata)) if found is None)
    if missing:
        return _incomplete(objects, missing)
    assert log_size is not None and metadata is not None
    retired = read_retired(metadata)
    if retired is not None:
        when = f" at {retired.at_ms} (epoch ms)" if retired.at_ms >= 0 else ""
        why = _RETIRED_BECAUSE.get(retired.why, f"the copier said {retired.why!r}")
        return Finding(
            Outcome.RETIRED, problem=f"{index_key}: segment {objects.segment_id} was retired{when}: {why}"
        )
    compaction, replaces = read_compaction(metadata), read_replaces(metadata)
    description: Description | None = None
    if damaged is None:
        try:
            description = read_description(metadata, index_key)
        except CorruptDataError as exc:
            damaged = str(exc)
    if description is not None:
        index_size = storage.object_size(index_key)
        if index_size is None:
            return _incomplete(objects, (index_key,))  # deleted since its HEAD
        damaged = _disagreement(description, log_key, log_size, index_key, index_size)
        if damaged is None:
            return Finding(Outcome.DESCRIBED, Described(description, True, compaction, replaces))
    try:
        read = _read(storage, objects, log_size, now_ms)
    except CorruptDataError as exc:
        return Finding(Outcome.UNDESCRIBABLE, problem="; ".join(p for p in (damaged, str(exc)) if p))
    problem = None if damaged is None else f"{damaged}; rebuilt from its objects"
    return Finding(Outcome.DESCRIBED, Described(read, False, compaction, replaces), problem)


def _incomplete(objects: ObjectSet, missing: tuple[str, ...]) -> Finding:
    problem = f"{', '.join(missing)}: the object is missing: segment {objects.segment_id} is incomplete"
    return Finding(Outcome.INCOMPLETE, problem=problem, missing=missing)


def _disagreement(d: Description, log_key: str, log_size: int, index_key: str, index_size: int) -> str | None:
    """How the objects' sizes disagree with their description; ``None`` when they agree."""
    index_expected = max((r.end for _, r in d.index_ranges), default=0)
    if log_size != d.size_bytes:
        return f"{log_key}: the .log object holds {log_size} bytes, its description says {d.size_bytes}"
    if index_size != index_expected:
        says = f"its description says {index_expected}"
        return f"{index_key}: the index object holds {index_size} bytes, {says}"
    return None


def _txn_entries(data: bytes, position: int, markers: Sequence[AbortedTxn]) -> int:
    """How many transaction-index entries the index object holds from ``position``, of the ABORT
    markers of its ``.log`` (``markers``, in order, each as the entry it would have).

    With the transactions open at the set's start unknown, which markers have an entry cannot be
    told from the ``.log``: an abort whose transaction wrote nothing to the partition has none (as
    in the broker's index), one ending a transaction begun before the segment has. So the entries
    are read: one is a marker's when it is of version 0 and names the marker's producer id and
    offset. What follows them, a producer snapshot (version 1) or a leader-epoch checkpoint (text),
    never is."""
    count = 0
    for marker in markers:
        at = position + count * TXN_ENTRY_SIZE
        entry = data[at : at + TXN_ENTRY_SIZE]
        if len(entry) < TXN_ENTRY_SIZE:
            break
        version, txn = decode_entry(entry)
        if (version, txn.producer_id, txn.last_offset) == (
            TXN_VERSION,
            marker.producer_id,
            marker.last_offset,
        ):
            count += 1
    return count


def _read(storage: RemoteStorage, objects: ObjectSet, log_size: int, now_ms: int) -> Description:
    """Describe a set by reading it (module docstring)."""
    log_key, index_key = objects.both_keys()
    rebuilder = IndexRebuilder(objects.start_offset)
    for raw in iter_batches(read_chunks(storage, log_key, log_size), log_key, log_size):
        if not crc_valid(raw.data, raw.local_header):
            raise CorruptRecordError("CRC mismatch", path=log_key, position=raw.header.position)
        rebuilder.add(raw.header, raw.data, log_key)
    rebuilt = rebuilder.finish()
    if rebuilt.next_offset == objects.start_offset:
        raise CorruptRecordError("the .log object holds no batch", path=log_key, position=0)
    end = rebuilt.next_offset - 1
    index_size = storage.object_size(index_key) or 0
    data = storage.read_range(index_key, 0, index_size)
    ranges: list[tuple[IndexType, ByteRange]] = []
    position = 0

    def take(kind: IndexType, size: int, expected: bytes | None = None) -> bytes:
        nonlocal position
        piece = data[position : position + size]
        if len(piece) != size or (expected is not None and piece != expected):
            raise CorruptIndexError(
                f"the {kind.value} index is not the one the .log gives (Kafka's recovery)",
                path=index_key,
                position=position,
            )
        ranges.append((kind, ByteRange(position, size)))
        position += size
        return piece

    for kind, built in ((IndexType.OFFSET, rebuilt.offset_index), (IndexType.TIMESTAMP, rebuilt.time_index)):
        expected = built.to_bytes()
        take(kind, len(expected), expected)
    txn_entries = _txn_entries(data, position, rebuilt.txn_entries_if_unknown_start())
    if txn_entries:
        take(IndexType.TRANSACTION, TXN_ENTRY_SIZE * txn_entries)
    rest = data[position:]
    if len(rest) >= SNAPSHOT_HEADER_SIZE and int.from_bytes(rest[:2], "big") == SNAPSHOT_VERSION:
        count = int.from_bytes(rest[6:10], "big", signed=True)
        take(IndexType.PRODUCER_SNAPSHOT, SNAPSHOT_HEADER_SIZE + SNAPSHOT_ENTRY_SIZE * max(count, 0))
    epochs = list(rebuilt.epochs)
    if position < len(data):
        checkpoint = take(IndexType.LEADER_EPOCH, len(data) - position)
        epochs = decode_leader_epoch_checkpoint(checkpoint, path=index_key)
    return Description(
        end_offset=end,
        max_timestamp_ms=rebuilt.max_timestamp,
        size_bytes=log_size,
        leader_epochs=epochs_of_segment(epochs, objects.start_offset, end, own=rebuilt.epochs),
        index_ranges=tuple(ranges),
        txn_index_empty=not txn_entries,
        broker_id=UNKNOWN_BROKER,
        event_time_ms=now_ms,
    )


# -- the stage ------------------------------------------------------------------------------------

EPOCH_TYPE = pa.struct([pa.field("epoch", pa.int32()), pa.field("start_offset", pa.int64())])
RANGE_TYPE = pa.struct(
    [pa.field("kind", pa.string()), pa.field("position", pa.int64()), pa.field("size", pa.int64())]
)
DESCRIBED_SCHEMA = arrow_schema(
    pa.field("segment_id", pa.string()),
    pa.field("outcome", pa.string()),
    pa.field("problem", pa.string()),
    pa.field("missing", pa.list_(pa.string())),
    pa.field("retriable", pa.bool_()),
    pa.field("from_description", pa.bool_()),
    pa.field("end_offset", pa.int64()),
    pa.field("max_timestamp_ms", pa.int64()),
    pa.field("size_bytes", pa.int64()),
    pa.field("leader_epochs", pa.list_(EPOCH_TYPE)),
    pa.field("index_ranges", pa.list_(RANGE_TYPE)),
    pa.field("txn_index_empty", pa.bool_()),
    pa.field("broker_id", pa.int32()),
    pa.field("event_time_ms", pa.int64()),
    pa.field("compaction", pa.string()),
    pa.field("replaces", pa.string()),
)


def describe_task(now_ms: int, storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
    """The stage task: one row describing the set the provisional summary names (:func:`examine`).

    A failing store is a row too (:attr:`Outcome.FAILED`), so that the driver, on Spark as in
    process, stops the rebuild with an error naming the objects."""
    row = summary.segment
    objects = ObjectSet(
        row.topic_partition,
        row.topic_id,
        row.start_offset,
        row.segment_id,
        row.layout.log_key,
        row.layout.index_key,
    )
    finding = examine(storage, objects, now_ms)
    out: dict[str, object] = {
        "segment_id": str(row.segment_id),
        "outcome": finding.outcome.value,
        "problem": finding.problem,
        "missing": list(finding.missing),
        "retriable": finding.retriable,
    }
    if finding.described is not None:
        d, from_description, compaction, replaces = finding.described
        out.update(
            from_description=from_description,
            end_offset=d.end_offset,
            max_timestamp_ms=d.max_timestamp_ms,
            size_bytes=d.size_bytes,
            leader_epochs=[e._asdict() for e in d.leader_epochs],
            index_ranges=[
                {"kind": k.value, "position": r.position, "size": r.size} for k, r in d.index_ranges
            ],
            txn_index_empty=d.txn_index_empty,
            broker_id=d.broker_id,
            event_time_ms=d.event_time_ms,
            compaction=compaction,
            replaces=None if replaces is None else str(replaces),
        )
    yield batch_of(DESCRIBED_SCHEMA, [out])


def description_of(row: dict[str, object]) -> Description:
    """A stage row of a described set (:attr:`Outcome.DESCRIBED`) as a description."""
    epochs = row["leader_epochs"]
    ranges = row["index_ranges"]
    assert isinstance(epochs, list) and isinstance(ranges, list)
    return Description(
        int(str(row["end_offset"])),
        int(str(row["max_timestamp_ms"])),
        int(str(row["size_bytes"])),
        tuple(LeaderEpochEntry(e["epoch"], e["start_offset"]) for e in epochs),
        tuple((IndexType(r["kind"]), ByteRange(r["position"], r["size"])) for r in ranges),
        bool(row["txn_index_empty"]),
        int(str(row["broker_id"])),
        int(str(row["event_time_ms"])),
    )


def describe_stage(storage: StorageSpec, now_ms: int) -> Stage:
    """The stage that describes object sets (given as :meth:`ObjectSet.provisional` summaries)."""
    return Stage("describe objects", DESCRIBED_SCHEMA, partial(describe_task, now_ms), storage)
