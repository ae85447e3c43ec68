"""The aborted transactions a read_committed range stream leaves out, where a diverged copy is kept
past the offset another copy answers from (:func:`rlm.stream.plan._aborted`).

The old leader's copy answers up to the offset before the copy that reaches past it starts
(:mod:`rlm.lookup.answer_end`); its transaction index also names transactions it aborted past
there, which the log may have committed. Those are none of the log's, nor may an entry of them
(its last stable offset) end the search before the copy that follows is read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prometheus_client import CollectorRegistry

from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.service import LookupService
from rlm.metastore.model import IndexType, ObjectLayout, RemoteSegment
from rlm.metrics import Metrics
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.layout import IndexBlob
from rlm.stream.plan import _aborted
from tests.clock import FakeClock
from tests.metadata_support import TP, add_finished, open_store, segment, sqlite_copy

PRODUCER = 7
BELOW = AbortedTxn(PRODUCER, 5, 8, 5)
"""Aborted below the offset the old copy answers to: the log's."""
PAST = AbortedTxn(PRODUCER, 25, 27, 40)
"""Aborted by the old leader past it, where the log may hold other records; its last stable
offset lies past the range."""
NEWER = AbortedTxn(9, 30, 31, 30)
"""Aborted in the copy that reaches past the old one."""


def _copy(storage: FilesystemStorage, start: int, end: int, *aborted: AbortedTxn) -> RemoteSegment:
    """A finished copy of ``[start, end]`` whose index object holds ``aborted``'s transaction index."""
    index = TransactionIndex(start)
    for txn in aborted:
        index.append(txn)
    blob = IndexBlob.build({IndexType.TRANSACTION: index.to_bytes()})
    row = segment(start, end)
    key = f"orders-0/{start:020d}-{row.segment_id}.indexes"
    storage.put_object(key, blob.data)
    layout = ObjectLayout(log_key=key.replace(".indexes", ".log"), index_key=key, index_ranges=blob.ranges)
    return dataclasses.replace(row, layout=layout, txn_index_empty=False)


def test_a_diverged_copys_aborts_past_where_it_answers_are_left_out(
    sqlite_template: Path, tmp_path: Path
) -> None:
    store = open_store(sqlite_copy(sqlite_template, tmp_path), FakeClock())
    storage = FilesystemStorage(tmp_path / "remote")
    cache = RemoteIndexCache(tmp_path / "cache", storage, Metrics(CollectorRegistry()))
    try:
        old = _copy(storage, 0, 29, BELOW, PAST)  # the old leader's: answers 0..19
        new = _copy(storage, 20, 39, NEWER)  # the new leader's, from 20
        add_finished(store, old, new)
        lookups = LookupService(store, storage, cache, ())  # a query tier: the remote tier alone

        assert sorted(_aborted(lookups, cache, TP, None, 0, 40)) == [BELOW, NEWER]
    finally:
        cache.close()
        store.close()
