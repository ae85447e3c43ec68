"""A segment whose ABORT markers end no transaction the segment holds, verified, and described
from its bytes (its index object's description lost, as for objects copied before descriptions
existed).

One marker ends a transaction that wrote nothing to the partition: no entry in the broker's
transaction index, nor in the one the copier uploads. Another ends a transaction begun in the
segment before: an entry. Read without the transactions open at the segment's start, the two
markers look alike; the rebuild tells them apart by reading the index object's entries, so that
the sections after them (producer snapshot, leader-epoch checkpoint) are found where they are.
An index object holding an entry for both (as copies once did) is read as well. A verification
that does not know the transactions open at the start takes either marker's entry as optional.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import ControlType
from rlm.log.txnindex import AbortedTxn, TransactionIndex, encode_aborted_txn
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, RemoteSegment, TopicPartition
from rlm.pipeline.rebuild.objects import Outcome, examine, object_sets
from rlm.pipeline.verify.segment import check_segment
from rlm.remote_tier.read_plan import plan_partition
from rlm.storage.protocol import RemoteStorage
from tests.clock import FakeClock
from tests.tiering_support import Backend, Tiering, set_high_watermarks

TP = TopicPartition("payments", 0)
T0 = 1_700_000_000_000
BEGUN, EMPTY = 7, 9
"""The producer whose transaction began in the segment before, the one that wrote nothing."""


def write_log(logs: Path) -> None:
    """0 BEGUN's first record | roll | 1 EMPTY's ABORT, 2 BEGUN's ABORT, 3 plain | roll | 4 plain."""
    clock = FakeClock(T0)
    with LogDirWriter(logs, clock=clock, default_config=TopicConfig()) as writer:
        log = writer.partition(TP.topic, TP.partition)
        log.append(
            [ProducerRecord(T0, b"k", b"txn")],
            producer_id=BEGUN,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        log.roll()
        log.append_control(ControlType.ABORT, producer_id=EMPTY, producer_epoch=0)
        log.append_control(ControlType.ABORT, producer_id=BEGUN, producer_epoch=0)
        log.append([ProducerRecord(T0 + 3, b"k", b"plain")])
        log.roll()
        log.append([ProducerRecord(T0 + 4, b"k", b"active")])
    set_high_watermarks(logs, {TP: 5})


def strip(storage: RemoteStorage, key: str, data: bytes | None = None) -> None:
    """Store the object again without its metadata (and with ``data`` when given)."""
    if data is None:
        size = storage.object_size(key)
        assert size is not None
        data = storage.read_range(key, 0, size)
    storage.put_object(key, data)


def described(storage: RemoteStorage, row: RemoteSegment) -> tuple[object, ...]:
    [objects] = [s for s in object_sets(storage.list_keys())[0] if s.segment_id == row.segment_id]
    finding = examine(storage, objects, T0)
    assert finding.outcome is Outcome.DESCRIBED and finding.described is not None, finding.problem
    assert not finding.described.from_description
    d = finding.described.description
    return (d.end_offset, d.index_ranges, d.txn_index_empty, d.leader_epochs)


def tiered(backend: Backend, tiering_factory: Callable[..., Tiering], tmp_path: Path) -> Tiering:
    logs = tmp_path / "logs"
    write_log(logs)
    tiering = tiering_factory(backend, logs)
    assert tiering.copier().run_once()[0].copied_segments == 2
    return tiering


def test_a_segment_whose_aborts_end_no_transaction_it_holds_verifies_clean(
    backend: Backend, tiering_factory: Callable[..., Tiering], tmp_path: Path
) -> None:
    tiering = tiered(backend, tiering_factory, tmp_path)
    record = tiering.store.get_partition(TP)
    assert record is not None
    summaries = list(plan_partition(tiering.store, record).segments)
    [summary] = [s for s in summaries if s.segment.start_offset == 1]
    assert summary.start_state_known
    for known in (summary, dataclasses.replace(summary, previous_snapshot=None)):
        assert check_segment(tiering.storage, known, deep=True, chunk_bytes=1 << 20).problems == []


def test_a_set_read_from_its_bytes_finds_the_sections_after_its_transaction_entries(
    backend: Backend, tiering_factory: Callable[..., Tiering], tmp_path: Path
) -> None:
    tiering = tiered(backend, tiering_factory, tmp_path)
    row = tiering.store.segment_for_offset(TP, 2)
    assert row is not None and (row.start_offset, row.end_offset) == (1, 3)
    storage = tiering.storage
    ranges = dict(row.layout.index_ranges)
    assert {IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT, IndexType.LEADER_EPOCH} <= set(ranges)
    size = storage.object_size(row.layout.index_key)
    assert size is not None
    data = storage.read_range(row.layout.index_key, 0, size)
    txn = ranges[IndexType.TRANSACTION]
    entries = TransactionIndex.from_bytes(1, data[txn.position : txn.position + txn.size]).entries()
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in entries] == [(BEGUN, 0, 2)]
    want = (row.end_offset, row.layout.index_ranges, False, row.leader_epochs)

    strip(storage, row.layout.index_key)
    assert described(storage, row) == want

    # An entry for the empty transaction's marker too, as copies once had: one section longer.
    lone = encode_aborted_txn(AbortedTxn(EMPTY, 1, 1, 0))
    strip(storage, row.layout.index_key, data[: txn.position] + lone + data[txn.position :])
    shifted = tuple(
        (kind, r._replace(size=r.size + len(lone)) if kind is IndexType.TRANSACTION else r)
        if r.position <= txn.position
        else (kind, r._replace(position=r.position + len(lone)))
        for kind, r in row.layout.index_ranges
    )
    assert described(storage, row) == (row.end_offset, shifted, False, row.leader_epochs)
