"""Which records compaction keeps: KIP-280's winner per key and Kafka's cleaner rules, as plain
functions of one partition's records (no Spark, no I/O).

Every record of the compacted range is described by a :class:`Fact` (what the first stage of the
Spark job emits per record). :func:`decide` is the reference compaction: it applies every rule
to a partition's facts in one process. The Spark job applies the same rules with shuffles
(:mod:`rlm.pipeline.spark.compact`), and both hand their :class:`Decisions` to the same rewriter.

The rules (issue §3):

* Only batches wholly at or below the *compactable end* are touched: the offset before the first
  record younger than ``min.compaction.lag.ms`` or of a transaction whose marker is not tiered
  yet (Kafka's first uncleanable offset and last stable offset). Batches after it are kept as
  they are, and their records supersede nothing.
* *Held* records stay as they are although they lie at or below the end: those of legacy (v0/v1)
  batches, which are copied byte for byte, and those of segments read only in part (the remote
  log start offset inside them, or a later copy overlapping them), which are never rewritten
  (:func:`~rlm.pipeline.compact.segment.group_segments`). They are never listed as kept or
  removed, but they count as surviving: a held record competes for its key, and a held
  transactional record keeps its transaction's marker.
* Winner per key: :func:`order_key` (``offset``, ``timestamp`` or ``header``); records without a
  key and records of aborted transactions are removed.
* The record at the highest tiered offset is always kept.
* A tombstone whose batch's delete horizon has passed is removed, unless a held record of its key
  stays below it (removing it would bring that record's value back); a kept tombstone's batch is
  stamped with a horizon when it has none.
* Each producer's last data batch stays, empty when its records go (Kafka's cleaner keeps it for
  the producer's sequence and epoch: ``isBatchLastRecordOfProducer``). It is the last batch of
  records, not a marker after it: a transactional producer's last batch is a marker, and Kafka's
  ``lastDataOffset`` is the last data batch before it. Batches emptied by an earlier run are
  facts too (:attr:`Kind.EMPTY`, one per batch): they may be that batch, and one that no longer
  is goes (Kafka's ``DELETE_EMPTY``).
* A transaction marker is removed when no batch of its transaction stays (one with a record kept
  or held, the producer's last data batch, one past the end) and its delete horizon has passed (a
  transactional batch without its marker opens a transaction that nothing closes, to a reader
  rebuilding producer state from the log); a kept marker of an emptied transaction gets a horizon.
* A producer with no data batch in the tiered range (retention took them, the markers stayed)
  keeps its last marker: it is the only batch left with the producer's epoch, which fences its
  older incarnations (Kafka's cleaner keeps such a producer's markers of its last epoch, emptied
  once their horizon passed: ``isBatchLastRecordOfProducer`` without a ``lastDataOffset``). Here
  the marker stays whole, with a horizon: it closes no transaction, so a reader sees nothing of it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from rlm.config import TopicSettings
from rlm.errors import ConfigError
from rlm.log.model import Header

_LONG = struct.Struct(">q")


class Strategy(NamedTuple):
    """``compaction.strategy`` with its header name (blank for the other strategies)."""

    kind: str = "offset"
    header: str = ""

    @classmethod
    def of(cls, topic: str, settings: TopicSettings) -> Strategy:
        """The strategy of ``topic``; ``header`` with a blank header name falls back to ``offset``.

        Raises:
            ConfigError: The topic's ``cleanup.policy`` has no ``compact``.
        """
        if "compact" not in settings.cleanup_policy.split(","):
            raise ConfigError(
                f"topic {topic!r} has cleanup.policy={settings.cleanup_policy}: only topics whose "
                "cleanup.policy has compact (compact or compact,delete) are compacted"
            )
        kind = settings.compaction_strategy
        header = settings.compaction_strategy_header.strip() if kind == "header" else ""
        if kind == "header" and not header:
            kind = "offset"
        return cls(kind, header)


def header_value(headers: Iterable[Header], name: str) -> int | None:
    """The value of the last header called ``name`` as a big-endian signed long; ``None`` when
    there is none or its value is not exactly 8 bytes (the record then counts as having none)."""
    found: bytes | None = None
    present = False
    for key, value in headers:
        if key == name:
            present, found = True, value
    if not present or found is None or len(found) != 8:
        return None
    number: int = _LONG.unpack(found)[0]
    return number


def order_key(
    strategy: Strategy, offset: int, timestamp: int, headers: Iterable[Header]
) -> tuple[int, int, int]:
    """What orders records of one key: the highest wins.

    ``offset``: the offset. ``timestamp``: the record timestamp, then the offset. ``header``: a
    record with the header beats one without, then the higher value, then the higher offset.
    """
    if strategy.kind == "timestamp":
        return (timestamp, 0, offset)
    if strategy.kind == "header":
        value = header_value(headers, strategy.header)
        return (0, 0, offset) if value is None else (1, value, offset)
    return (0, 0, offset)


class Kind(enum.IntEnum):
    """What a record is, for the rules."""

    DATA = 0
    CONTROL = 1
    LEGACY = 2
    """A record of a v0/v1 batch: held (kept as it is)."""
    EMPTY = 3
    """An empty v2 data batch with a producer id (one an earlier compaction emptied and kept): one
    fact per batch, at its last offset, with no key. It stays while it is its producer's last data
    batch (then it holds the producer's state and keeps its transaction's marker), else goes."""


class Fact(NamedTuple):
    """What the rules need of one record (one row of the first stage)."""

    offset: int
    batch_last: int
    """Last offset of the record's batch."""
    kind: int
    key: bytes | None
    order: tuple[int, int, int]
    tombstone: bool
    aborted: bool
    producer_id: int
    """-1 when the batch has none."""
    transactional: bool
    horizon_passed: bool
    """The batch has a delete horizon and it is at or before now."""
    has_horizon: bool
    young: bool
    """Younger than ``min.compaction.lag.ms`` (a record without a timestamp: its segment is)."""
    held: bool = False
    """The record stays as it is whatever the rules decide: its segment is read only in part, so
    it is never rewritten (legacy records are held whatever this says)."""

    @property
    def is_held(self) -> bool:
        """Held: a legacy record, or one of a segment read only in part."""
        return self.held or self.kind == Kind.LEGACY


@dataclass(frozen=True)
class Decisions:
    """What compaction keeps of one partition's compactable range."""

    end: int
    """The compactable end: batches ending above it are kept as they are."""
    last: int
    """The highest tiered offset (always kept)."""
    kept: frozenset[int]
    """Offsets of kept records (data and control) in batches ending at or below ``end``; held
    records are not listed (they stay whatever the rules decide)."""
    empty_markers: frozenset[int]
    """Offsets of kept control records whose transaction has no kept record (their batch gets a
    delete horizon)."""
    last_batches: frozenset[int]
    """Last offset of each producer's last data batch in the tiered range (an emptied batch there
    is kept empty, to keep the producer's sequence and epoch; see :func:`last_data_batches`)."""


def compactable_end(facts: Sequence[Fact], last: int) -> int:
    """The offset before the first young record or record of an undecided transaction; ``last``
    when there is none. ``facts`` in offset order."""
    end = last
    young = [f.offset for f in facts if f.young]
    if young:
        end = min(end, young[0] - 1)
    open_first: dict[int, int] = {}
    for f in facts:
        if f.kind == Kind.CONTROL:
            open_first.pop(f.producer_id, None)
        elif f.kind == Kind.DATA and f.transactional:
            open_first.setdefault(f.producer_id, f.offset)
    if open_first:
        end = min(end, min(open_first.values()) - 1)
    return end


def last_data_batches(facts: Iterable[Fact]) -> dict[int, int]:
    """Producer id → last offset of its last data batch (records or empty; markers are not data
    batches: Kafka's ``lastDataOffset``)."""
    lasts: dict[int, int] = {}
    for f in facts:
        if f.producer_id >= 0 and f.kind in (Kind.DATA, Kind.EMPTY):
            lasts[f.producer_id] = max(lasts.get(f.producer_id, -1), f.batch_last)
    return lasts


def last_markers(facts: Iterable[Fact], lasts: Mapping[int, int]) -> frozenset[int]:
    """Offsets of the last marker of each producer that has no data batch (``lasts``: its last
    data batch per producer, :func:`last_data_batches`)."""
    markers: dict[int, int] = {}
    for f in facts:
        if f.kind == Kind.CONTROL and f.producer_id >= 0 and f.producer_id not in lasts:
            markers[f.producer_id] = max(markers.get(f.producer_id, -1), f.offset)
    return frozenset(markers.values())


def decide(facts: Sequence[Fact], last: int) -> Decisions:
    """The reference compaction of one partition: ``facts`` of every record of the tiered range,
    in offset order; ``last`` the highest tiered offset."""
    end = compactable_end(facts, last)
    winners: dict[bytes, Fact] = {}
    held_keys: set[bytes] = set()
    for f in facts:
        if f.kind in (Kind.DATA, Kind.LEGACY) and f.batch_last <= end and f.key is not None and not f.aborted:
            if f.is_held:
                held_keys.add(f.key)
            best = winners.get(f.key)
            if best is None or f.order > best.order:
                winners[f.key] = f
    winning = {f.offset for f in winners.values()}
    kept: set[int] = set()
    for f in facts:
        if f.kind != Kind.DATA or f.batch_last > end or f.is_held:
            continue
        # a held record of the key stays below the winner: its tombstone must stay too
        gone = f.tombstone and f.horizon_passed and f.key not in held_keys
        if f.offset == last or (f.offset in winning and not gone):
            kept.add(f.offset)
    lasts = last_data_batches(facts)
    last_batches = frozenset(lasts.values())
    # a producer's epoch lives on in its last marker when no data batch of it is left
    fencing = last_markers(facts, lasts)
    # Each transactional batch belongs to the next marker of its producer.
    live: set[int] = set()
    pending: dict[int, bool] = {}
    empty: set[int] = set()
    for f in facts:
        if f.kind in (Kind.DATA, Kind.EMPTY) and f.transactional:
            # the producer's last data batch stays (empty when its records go)
            alive = f.batch_last > end or f.is_held or f.offset in kept or f.batch_last in last_batches
            pending[f.producer_id] = pending.get(f.producer_id, False) or alive
        elif f.kind == Kind.CONTROL:
            if pending.pop(f.producer_id, False):
                live.add(f.offset)
            if f.batch_last > end or f.is_held:
                continue
            if f.offset in live:
                kept.add(f.offset)
            elif f.offset == last or f.offset in fencing or not f.horizon_passed:
                kept.add(f.offset)
                empty.add(f.offset)
    return Decisions(end, last, frozenset(kept), frozenset(empty), last_batches)
