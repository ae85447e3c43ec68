"""The reference compaction (:func:`rlm.pipeline.compact.rules.decide`) against what compaction
must leave of any log, stated apart from how the rules are written: drawn logs of plain and
transactional batches, tombstones, horizons stamped or passed, and markers that close nothing.

What a reader of the compacted log must still see: each key's latest committed value (unless it
is a tombstone past its horizon), nothing older and nothing aborted; each producer's last data
batch (its sequence and epoch) and, with no data batch, its last marker (its epoch); a marker for
every transactional batch left, so that no transaction is left open to a reader rebuilding producer
state from the log; no marker gone before its horizon. And a second run at the same time, over
what the first one left, removes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.pipeline.compact.rules import Decisions, Fact, Kind, decide

KEYS = (b"a", b"b", b"c", None)
PRODUCERS = (7, 8)
"""Transactional producers."""
IDEMPOTENT = (5, 6)
"""Producers of non-transactional batches with a producer id."""


@dataclass
class Drawn:
    """A drawn log as facts, with the batches of each producer's transactions."""

    facts: list[Fact] = field(default_factory=list)
    transactions: list[tuple[int, list[int], int]] = field(default_factory=list)
    """(producer id, last offsets of its transaction's data batches, its marker's offset)."""


@st.composite
def logs(draw: st.DrawFn) -> Drawn:
    drawn = Drawn()
    offset = 0
    open_batches: dict[int, list[tuple[int, int]]] = {}  # producer → (first, last) of its open batches
    pending: list[Fact] = []  # transactional facts whose marker is not drawn yet

    def flags() -> tuple[bool, bool]:
        passed = draw(st.booleans())
        return passed, passed or draw(st.booleans())

    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["plain", "idempotent", "transactional", "marker"]))
        producer = draw(st.sampled_from(PRODUCERS))
        passed, stamped = flags()
        if kind == "marker":
            # a marker may close nothing: its transaction's batches went with the log's start
            batches = open_batches.pop(producer, [])
            abort = draw(st.booleans())
            for f in pending:
                if f.producer_id == producer:
                    drawn.facts.append(f._replace(aborted=abort))
            pending = [f for f in pending if f.producer_id != producer]
            drawn.transactions.append((producer, [last for _, last in batches], offset))
            drawn.facts.append(_marker(offset, producer, passed, stamped))
            offset += 1
            continue
        count = draw(st.integers(1, 3))
        transactional = kind == "transactional"
        if kind == "plain":
            pid = -1
        elif kind == "idempotent":
            pid = draw(st.sampled_from(IDEMPOTENT))
        else:
            pid = producer
        for i in range(count):
            key = draw(st.sampled_from(KEYS))
            fact = Fact(
                offset + i,
                offset + count - 1,
                Kind.DATA,
                key,
                (0, 0, offset + i),
                key is not None and draw(st.booleans()),
                False,
                pid,
                transactional,
                passed,
                stamped,
                False,
            )
            (pending if transactional else drawn.facts).append(fact)
        if transactional:
            open_batches.setdefault(producer, []).append((offset, offset + count - 1))
        offset += count
    for producer in sorted(open_batches):  # every transaction decided: the whole log is compactable
        batches = open_batches[producer]
        drawn.facts += [f for f in pending if f.producer_id == producer]
        drawn.transactions.append((producer, [last for _, last in batches], offset))
        drawn.facts.append(_marker(offset, producer, False, False))
        offset += 1
    # the highest offset, always kept: a key of its own, so that it supersedes nothing
    drawn.facts.append(
        Fact(offset, offset, Kind.DATA, b"last", (0, 0, offset), False, False, -1, False, False, False, False)
    )
    drawn.facts.sort(key=lambda f: f.offset)
    return drawn


def _marker(offset: int, producer: int, passed: bool, stamped: bool) -> Fact:
    return Fact(
        offset,
        offset,
        Kind.CONTROL,
        None,
        (0, 0, offset),
        False,
        False,
        producer,
        True,
        passed,
        stamped,
        False,
    )


def survivors(facts: Sequence[Fact], decided: Decisions) -> list[Fact]:
    """What a run leaves, as the next run's facts: kept records (a kept tombstone and a kept marker
    of an emptied transaction stamped with a horizon that has not passed yet), and an empty batch
    for each producer's last data batch whose records all went."""
    left = []
    emptied: dict[int, Fact] = {}
    for f in facts:
        if f.offset in decided.kept:
            stamp = f.tombstone or f.offset in decided.empty_markers
            left.append(f._replace(has_horizon=True) if stamp and not f.has_horizon else f)
        elif f.kind == Kind.DATA and f.batch_last in decided.last_batches:
            emptied[f.batch_last] = f
    kept_batches = {f.batch_last for f in left}
    for last, f in emptied.items():
        if last not in kept_batches:
            left.append(
                Fact(last, last, Kind.EMPTY, None, (0, 0, last), False, f.aborted, f.producer_id,
                     f.transactional, f.horizon_passed, f.has_horizon, False)
            )  # fmt: skip
    return sorted(left, key=lambda f: f.offset)


@settings(max_examples=400, deadline=None)
@given(logs())
def test_compaction_leaves_what_readers_need_and_nothing_superseded(drawn: Drawn) -> None:
    facts = drawn.facts
    last = facts[-1].offset
    decided = decide(facts, last)
    kept = decided.kept
    assert decided.end == last  # nothing young, every transaction decided
    data = [f for f in facts if f.kind == Kind.DATA]
    latest: dict[bytes, Fact] = {}
    for f in data:
        if f.key is not None and not f.aborted:
            latest[f.key] = f  # offset order: the last one wins
    for key, f in latest.items():
        if not (f.tombstone and f.horizon_passed):
            assert f.offset in kept, f"the latest value of {key!r} at {f.offset} went"
    for f in data:
        if f.offset in kept and f.offset != last:
            assert f.key is not None and latest[f.key] is f, f"{f.offset} is superseded or aborted"
    lasts: dict[int, int] = {}
    for f in data:
        if f.producer_id >= 0:
            lasts[f.producer_id] = max(lasts.get(f.producer_id, -1), f.batch_last)
    assert decided.last_batches == frozenset(lasts.values())
    markers = {f.offset: f for f in facts if f.kind == Kind.CONTROL}
    for offset, control in markers.items():
        if not control.horizon_passed:
            assert offset in kept, f"the marker at {offset} went before its horizon"
    for _, batches, marker in drawn.transactions:
        stays = [
            b
            for b in batches
            if b in decided.last_batches or any(f.offset in kept for f in data if f.batch_last == b)
        ]
        if stays:
            assert marker in kept and marker not in decided.empty_markers, f"{stays} left open"
        elif marker in kept:
            assert marker in decided.empty_markers  # its horizon is stamped
    for producer in PRODUCERS:
        own = [o for o, m in markers.items() if m.producer_id == producer]
        if own and producer not in lasts:
            assert max(own) in kept, f"producer {producer}'s epoch went with its last marker"
    again = survivors(facts, decided)
    redecided = decide(again, last)
    assert redecided.kept == {f.offset for f in again if f.kind != Kind.EMPTY}
    assert redecided.last_batches == decided.last_batches
